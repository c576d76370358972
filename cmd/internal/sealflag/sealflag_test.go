package sealflag

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/udpgate/udpgate/token"
)

const goodHex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

func goodKey() *[token.KeyBytes]byte {
	var k [token.KeyBytes]byte
	for i := range k {
		k[i] = byte(i)
	}
	return &k
}

func TestParseKey(t *testing.T) {
	for _, c := range []struct {
		name, in string
		err      string // "" when the key is goodKey
	}{
		{"plain", goodHex, ""},
		{"upper case", strings.ToUpper(goodHex), ""},
		{"surrounding whitespace", " \t\n" + goodHex + "\r\n\n", ""},
		{"0x prefix", "0x" + goodHex, ""},
		{"0X prefix", "0X" + goodHex, ""},
		{"empty", "", "is empty"},
		{"only whitespace", " \n", "is empty"},
		{"short", goodHex[:62], "is 62 hex characters, want 64"},
		{"long", goodHex + "00", "is 66 hex characters, want 64"},
		{"16-byte key", goodHex[:32], "is 32 hex characters, want 64"},
		{"not hex", goodHex[:10] + "g" + goodHex[11:], `"g" at character 11, which is not a hex digit`},
		{"base64", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", "not a hex digit"},
		{"wrapped like xxd -p", goodHex[:60] + "\n" + goodHex[60:], "whitespace inside it (at character 61)"},
		{"space inside", goodHex[:32] + " " + goodHex[32:], "whitespace inside"},
		{"0x only", "0x", "is empty"},
		{"all zeros", strings.Repeat("0", 64), "all zeros"},
	} {
		k, err := ParseKey(c.in)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err == "" && *k != *goodKey():
			t.Errorf("%s: key %x", c.name, *k)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
		}
		// Every message says how to do it right, and never echoes the key.
		if err != nil && len(c.in) >= 20 && strings.Contains(err.Error(), strings.TrimSpace(c.in)[:20]) {
			t.Errorf("%s: the error repeats the key: %v", c.name, err)
		}
	}
}

func writeKeyFile(t *testing.T, content []byte, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(p, content, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadKeyFile(t *testing.T) {
	raw := goodKey()
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		path string
		err  string
	}{
		{"as xxd -p -c 64 writes it", writeKeyFile(t, []byte(goodHex+"\n"), 0o600), ""},
		{"raw bytes", writeKeyFile(t, raw[:], 0o600), "holds 32 raw bytes, not hex text: the key file must hold the key as 64 hex characters; convert it with: xxd -p -c 64"},
		{"missing", filepath.Join(dir, "nope"), "does not exist: check the path, or make a key with: head -c 32 /dev/urandom | xxd -p -c 64 > "},
		{"directory", dir, "give the path of a file holding the key"},
		{"huge", writeKeyFile(t, []byte(strings.Repeat("a", 5000)), 0o600), "larger than 4096 bytes"},
		{"short", writeKeyFile(t, []byte(goodHex[:40]+"\n"), 0o600), "is 40 hex characters, want 64"},
	} {
		k, err := ReadKeyFile(c.path)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err == "" && *k != *raw:
			t.Errorf("%s: key %x", c.name, *k)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
		}
	}
	if os.Geteuid() != 0 { // root reads any file
		p := writeKeyFile(t, []byte(goodHex), 0o000)
		if _, err := ReadKeyFile(p); err == nil || !strings.Contains(err.Error(), "permission denied") || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("unreadable file: %v", err)
		}
	}
}

func TestKeyID(t *testing.T) {
	a, b := goodKey(), goodKey()
	b[31] ^= 1
	if KeyID(a) == KeyID(b) || len(KeyID(a)) != 8 || strings.Contains(goodHex, KeyID(a)) {
		t.Errorf("KeyID %s and %s", KeyID(a), KeyID(b))
	}
}

func TestParseProtocolID(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		err  string
	}{
		{"0x1122334455667788", 0x1122334455667788, ""},
		{"1122334455667788", 0x1122334455667788, ""},
		{"10", 0x10, ""},
		{"0X10", 0x10, ""},
		{"0", 0, ""},
		{"ffffffffffffffff", 1<<64 - 1, ""},
		{"0000000000000000001", 1, ""},
		{" 0xAbC\n", 0xabc, ""},
		{"", 0, "is empty"},
		{"0x", 0, "is empty"},
		{"12g4", 0, `"g" is not a hex digit`},
		{"-1", 0, "is not hex"},
		{"1_000", 0, "is not hex"},
		{"10000000000000000", 0, "more than 16 hex digits"},
	} {
		got, err := ParseProtocolID(c.in)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%q: %#x, %v; want %#x", c.in, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: error %v, want one containing %q", c.in, err, c.err)
		}
		if err == nil {
			if back, err := ParseProtocolID(FormatProtocolID(got)); err != nil || back != got {
				t.Errorf("%q: FormatProtocolID %q reads back as %#x, %v", c.in, FormatProtocolID(got), back, err)
			}
		}
	}
}

func TestParseAddrs(t *testing.T) {
	ap := netip.MustParseAddrPort
	for _, c := range []struct {
		in   string
		want []netip.AddrPort
		err  string
	}{
		{"127.0.0.1:7777", []netip.AddrPort{ap("127.0.0.1:7777")}, ""},
		{"203.0.113.7:7777, [2001:db8::7]:7778", []netip.AddrPort{ap("203.0.113.7:7777"), ap("[2001:db8::7]:7778")}, ""},
		{"[::ffff:10.0.0.1]:7", []netip.AddrPort{ap("10.0.0.1:7")}, ""},
		{"", nil, "no address"},
		{"127.0.0.1:7777,", nil, "an empty address"},
		{"localhost:7777", nil, "IP addresses, not host names"},
		{"127.0.0.1", nil, "is not IP:port"},
		{"127.0.0.1:0", nil, "port 0"},
		{"0.0.0.0:7777", nil, "unspecified address"},
		{"[::]:7777", nil, "unspecified address"},
		{"[fe80::1%eth0]:7777", nil, "has a zone"},
		{"127.0.0.1:1,127.0.0.1:1", nil, "listed twice"},
		{strings.Repeat("127.0.0.1:1,", 33) + "127.0.0.1:2", nil, "at most 32"},
	} {
		got, err := ParseAddrs(c.in)
		switch {
		case c.err == "" && (err != nil || FormatAddrs(got) != FormatAddrs(c.want)):
			t.Errorf("%q: %v, %v; want %v", c.in, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: error %v, want one containing %q", c.in, err, c.err)
		}
	}
}

// FuzzParse: the parsers never panic, and what they accept round-trips.
func FuzzParse(f *testing.F) {
	for _, s := range []string{goodHex, "0x" + goodHex, "10", "0xffffffffffffffff", "127.0.0.1:7777,[::1]:1", "\x00", " "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if k, err := ParseKey(s); err == nil {
			if back, err := ParseKey(strings.ToUpper(strings.TrimPrefix(strings.TrimSpace(s), "0x"))); err != nil || *back != *k {
				t.Errorf("key %q: reading it again gives %v", s, err)
			}
		}
		if id, err := ParseProtocolID(s); err == nil {
			if back, err := ParseProtocolID(FormatProtocolID(id)); err != nil || back != id {
				t.Errorf("protocol id %q: %#x does not round-trip", s, id)
			}
		}
		if addrs, err := ParseAddrs(s); err == nil {
			if len(addrs) == 0 || len(addrs) > token.MaxServerAddresses {
				t.Errorf("addresses %q: %d accepted", s, len(addrs))
			}
			if back, err := ParseAddrs(FormatAddrs(addrs)); err != nil || FormatAddrs(back) != FormatAddrs(addrs) {
				t.Errorf("addresses %q: %v does not round-trip: %v", s, addrs, err)
			}
		}
	})
}
