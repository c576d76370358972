package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/udpgate/udpgate/conn"
)

// loadSealedServer starts a sealed echo server on 127.0.0.1 with the test
// key and protocol id.
func loadSealedServer(t *testing.T) *conn.Server {
	t.Helper()
	s, _ := loadServer(t, conn.Config{PrivateKey: testPrivateKey(t), ProtocolID: testProtocolID})
	return s
}

// TestLoadSealed: with the server's key and protocol id every client
// connects with its own token and exchanges sealed Data.
func TestLoadSealed(t *testing.T) {
	s := loadSealedServer(t)
	key := writeTestFile(t, "key", testKeyHex)
	var out, errb strings.Builder
	err := runLoad([]string{"-server", s.Addr().String(), "-clients", "40", "-sources", "20", "-rate", "50",
		"-duration", "500ms", "-disconnect", "2", "-private-key-file", key, "-protocol-id", "0x1122334455667788"}, &out, &errb)
	t.Logf("output:\n%s%s", out.String(), errb.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{", sealed (protocol id 0x1122334455667788, key ", "handshakes: 40/40 connected", "round trips ("} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestLoadSealedRefused: tokens of another protocol id are refused, and
// the report says so by reason.
func TestLoadSealedRefused(t *testing.T) {
	s := loadSealedServer(t)
	key := writeTestFile(t, "key", testKeyHex)
	var out strings.Builder
	err := runLoad([]string{"-server", s.Addr().String(), "-clients", "5", "-duration", "200ms", "-connect-timeout", "2s",
		"-private-key-file", key, "-protocol-id", "0x99"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "token refused: token invalid (wrong key or protocol id) 5") {
		t.Errorf("error %v, want the five tokens refused as invalid\n%s", err, out.String())
	}
}

func TestLoadSealedFlags(t *testing.T) {
	key := writeTestFile(t, "key", testKeyHex)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-protocol-id", "1"}, "-protocol-id is for sealed mode: give -private-key-file too"},
		{[]string{"-private-key-file", key}, "sealed mode needs -protocol-id too"},
		{[]string{"-private-key-file", key, "-protocol-id", "xyz"}, `-protocol-id: the protocol id "xyz" is not hex`},
		{[]string{"-private-key-file", key, "-protocol-id", "1", "-payload", "1170"}, "-payload 1170 is out of range: use 1 byte up to what fits a 1200-byte datagram, 43 bytes of header and seal"},
	} {
		var out strings.Builder
		err := runLoad(append([]string{"-clients", "1"}, c.args...), &out, &out)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("load %q: %v, want a usage error with %q", c.args, err, c.want)
		}
	}
	var out strings.Builder
	if err := runLoad([]string{"-private-key-file", key + ".missing", "-protocol-id", "1"}, &out, &out); err == nil || !strings.Contains(err.Error(), "-private-key-file: cannot read the private key") {
		t.Errorf("missing key file: %v", err)
	}
}
