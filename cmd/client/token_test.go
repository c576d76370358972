package main

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/udpgate/udpgate/token"
)

// testKeyHex is a private key for tests, as a key file holds it.
const testKeyHex = "8f3c2a61d0b94e7581aa20c3f6d45e9b07e1c8a2b3d4f5061728394a5b6c7d8e"

// writeTestFile writes a file into the test's directory.
func writeTestFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// readToken reads a token file as a client does.
func readToken(t *testing.T, path string) (*token.ConnectToken, []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tok token.ConnectToken
	if err := tok.UnmarshalBinary(b); err != nil {
		t.Fatalf("the token file does not read back: %v", err)
	}
	return &tok, b
}

// TestTokenWritesToken: the token has the fields given, its private part
// opens under the key (as a server opens it) and holds the client id and
// user data, and the file is its owner's only.
func TestTokenWritesToken(t *testing.T) {
	keyFile := writeTestFile(t, "key", testKeyHex+"\n")
	out := filepath.Join(t.TempDir(), "player.token")
	before := time.Now().Unix()
	code, stdout, stderr := runCmd(t, "", "token", "-protocol-id", "0x1122334455667788", "-private-key-file", keyFile,
		"-server", "127.0.0.1:7777,[::1]:7778", "-client-id", "42", "-expire", "45s", "-timeout", "7s",
		"-user-data", "00ff7b", "-out", out)
	if code != exitOK {
		t.Fatalf("status %d, stderr:\n%s", code, stderr)
	}
	if stdout != "" || !strings.Contains(stderr, "wrote "+out+": a 2048-byte connect token for client 42") || strings.Contains(stderr, testKeyHex[:16]) {
		t.Errorf("stdout %q, stderr %q", stdout, stderr)
	}
	tok, b := readToken(t, out)
	if len(b) != token.TokenBytes {
		t.Errorf("%d bytes, want %d", len(b), token.TokenBytes)
	}
	want := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:7777"), netip.MustParseAddrPort("[::1]:7778")}
	if tok.ProtocolID != 0x1122334455667788 || tok.TimeoutSeconds != 7 || !slices.Equal(tok.ServerAddresses, want) ||
		tok.ExpireTimestamp-tok.CreateTimestamp != 45 || int64(tok.CreateTimestamp) < before || int64(tok.CreateTimestamp) > time.Now().Unix() {
		t.Errorf("token %+v", tok)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v (%v), want 0600", fi.Mode(), err)
	}

	key := testPrivateKey(t)
	req := tok.Request()
	body, err := req.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	var priv token.Private
	if err := token.NewOpener(key, 0x1122334455667788).OpenRequest(&priv, body, time.Now()); err != nil {
		t.Fatalf("the server cannot open the token: %v", err)
	}
	if priv.ClientID != 42 || priv.TimeoutSeconds != 7 || !bytes.Equal(priv.UserData[:4], []byte{0, 0xff, 0x7b, 0}) ||
		!priv.HasServerAddress(want[1]) || priv.ClientToServerKey != tok.ClientToServerKey || priv.ServerToClientKey != tok.ServerToClientKey {
		t.Errorf("private part %+v", priv)
	}
	// Under another protocol id it does not open.
	if err := token.NewOpener(key, 0x1122334455667789).OpenRequest(&priv, body, time.Now()); err == nil {
		t.Error("the token opens for another protocol id")
	}

	// Written again, the file is replaced and tightened.
	if err := os.Chmod(out, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCmd(t, "", "token", "-protocol-id", "1", "-private-key-file", keyFile, "-client-id", "0", "-out", out); code != exitOK {
		t.Fatalf("second token: status %d, %s", code, stderr)
	}
	tok, _ = readToken(t, out)
	if fi, _ := os.Stat(out); tok.ProtocolID != 1 || fi.Mode().Perm() != 0o600 {
		t.Errorf("rewritten: protocol id %#x, mode %v", tok.ProtocolID, fi.Mode())
	}
	// The defaults: the default server, 30 s to connect, a 5 s timeout.
	if tok.ExpireTimestamp-tok.CreateTimestamp != 30 || tok.TimeoutSeconds != 5 || !slices.Equal(tok.ServerAddresses, []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:7777")}) {
		t.Errorf("defaults: %+v", tok)
	}
}

// TestTokenFlags: every mistake exits non-zero naming the flag and the fix,
// and writes nothing.
func TestTokenFlags(t *testing.T) {
	keyFile := writeTestFile(t, "key", testKeyHex)
	dir := t.TempDir()
	out := filepath.Join(dir, "t")
	base := func(extra ...string) []string {
		args := []string{"token", "-protocol-id", "1", "-private-key-file", keyFile, "-client-id", "1", "-out", out}
		return append(args, extra...)
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"nothing", []string{"token"}, exitUsage, "-protocol-id, -private-key-file, -client-id, -out are required"},
		{"no out", []string{"token", "-protocol-id", "1", "-private-key-file", keyFile, "-client-id", "1"}, exitUsage, "-out is required"},
		{"stray argument", base("extra"), exitUsage, `unexpected argument "extra"`},
		{"protocol id", base("-protocol-id", "0xzz"), exitUsage, `-protocol-id: the protocol id "0xzz" is not hex`},
		{"client id", base("-client-id", "-1"), exitUsage, "-client-id"},
		{"server host name", base("-server", "localhost:7777"), exitUsage, `-server "localhost:7777": "localhost:7777" is not IP:port: a connect token holds IP addresses, not host names`},
		{"server empty entry", base("-server", "127.0.0.1:1,,127.0.0.1:2"), exitUsage, "an empty address"},
		{"server port 0", base("-server", "127.0.0.1:0"), exitUsage, "port 0"},
		{"servers 33", base("-server", strings.TrimSuffix(strings.Repeat("127.0.0.1:1,", 33), ",")), exitUsage, "at most 32"},
		{"expire short", base("-expire", "500ms"), exitUsage, "-expire 500ms: use at least 1s"},
		{"expire fraction", base("-expire", "1500ms"), exitUsage, "-expire 1.5s: a token counts whole seconds; use e.g. 2s"},
		{"timeout 0", base("-timeout", "0s"), exitUsage, "-timeout 0s: use at least 1s"},
		{"timeout huge", base("-timeout", "600000h"), exitUsage, "at most 2147483647 seconds"},
		{"user data odd", base("-user-data", "abc"), exitUsage, "odd number of hex digits (3)"},
		{"user data not hex", base("-user-data", "zz"), exitUsage, `-user-data: 'z' is not a hex digit`},
		{"user data too long", base("-user-data", strings.Repeat("ab", 257)), exitUsage, "-user-data is 257 bytes: a token carries at most 256"},
		{"key file missing", base("-private-key-file", filepath.Join(dir, "nokey")), exitFailure, "-private-key-file: cannot read the private key: " + filepath.Join(dir, "nokey") + " does not exist"},
		{"key file bad", base("-private-key-file", writeTestFile(t, "badkey", testKeyHex[:62])), exitFailure, "is 62 hex characters, want 64"},
		{"out unwritable", append(base(), "-out", filepath.Join(dir, "no", "such", "dir")), exitFailure, "-out: "},
	} {
		code, _, stderr := runCmd(t, "", c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: status %d, stderr:\n%s\nwant status %d and %q", c.name, code, stderr, c.code, c.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%s: a token was written", c.name)
		}
	}
	// The largest user data fits.
	if code, _, stderr := runCmd(t, "", base("-user-data", strings.Repeat("ab", 256))...); code != exitOK {
		t.Errorf("256 bytes of user data: status %d, %s", code, stderr)
	}
}
