package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/udpgate/udpgate/cmd/internal/sealflag"
	"github.com/udpgate/udpgate/conn"
)

// testKeyHex is a private key for tests, as a key file holds it; testKey
// is the key, read as the server reads it (nil, failing every test that
// uses it, if it could not be).
const testKeyHex = "8f3c2a61d0b94e7581aa20c3f6d45e9b07e1c8a2b3d4f5061728394a5b6c7d8e"

var testKey, _ = sealflag.ParseKey(testKeyHex)

// writeKey writes a key file into the test's directory.
func writeKey(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "udpgate.key")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSealedSettings: the key from its file or the environment, the
// protocol id, the public addresses and the sealed tunables, each from
// every source, and each mistake named with its fix.
func TestSealedSettings(t *testing.T) {
	good := writeKey(t, "\n  "+testKeyHex+"\r\n", 0o600)
	for _, c := range []struct {
		name   string
		args   []string
		env    []string
		file   string
		want   []string         // in the error; none: it loads
		id     uint64           // when it loads
		public []netip.AddrPort // when it loads
	}{
		{name: "key file", args: []string{"-private-key-file", good, "-protocol-id", "0x1122334455667788"}, id: 0x1122334455667788},
		{name: "key in environment", env: []string{"UDPGATE_PRIVATE_KEY", testKeyHex + "\n", "UDPGATE_PROTOCOL_ID", "abc"}, id: 0xabc},
		{name: "key file from environment", env: []string{"UDPGATE_PRIVATE_KEY_FILE", good, "UDPGATE_PROTOCOL_ID", "0"}},
		{name: "config file", file: "private-key-file = \"" + good + "\"\nprotocol-id = \"0x10\"\npublic-addresses = \"127.0.0.1:7777, [::1]:7777\"\n",
			id: 0x10, public: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:7777"), netip.MustParseAddrPort("[::1]:7777")}},
		{name: "all addresses with agones", args: []string{"-listen", "0.0.0.0:7777", "-agones", "-private-key-file", good, "-protocol-id", "1"},
			id: 1},
		{name: "all addresses with public addresses", args: []string{"-listen", "0.0.0.0:7777", "-private-key-file", good, "-protocol-id", "1", "-public-addresses", "203.0.113.7:7777"},
			id: 1, public: []netip.AddrPort{netip.MustParseAddrPort("203.0.113.7:7777")}},

		{name: "both keys", args: []string{"-private-key-file", good, "-protocol-id", "1"}, env: []string{"UDPGATE_PRIVATE_KEY", testKeyHex},
			want: []string{"-private-key-file", "environment UDPGATE_PRIVATE_KEY both give a private key: keep one"}},
		{name: "key file missing", args: []string{"-private-key-file", "/nonexistent/udpgate.key", "-protocol-id", "1"},
			want: []string{`-private-key-file "/nonexistent/udpgate.key"`, "does not exist", "head -c 32 /dev/urandom | xxd -p -c 64 > /nonexistent/udpgate.key"}},
		{name: "key file short", args: []string{"-private-key-file", writeKey(t, testKeyHex[:60]+"\n", 0o600), "-protocol-id", "1"},
			want: []string{"-private-key-file", "is 60 hex characters, want 64"}},
		{name: "key file not hex", args: []string{"-private-key-file", writeKey(t, "z"+testKeyHex[1:], 0o600), "-protocol-id", "1"},
			want: []string{"-private-key-file", `"z" at character 1, which is not a hex digit`}},
		{name: "key file raw bytes", args: []string{"-private-key-file", writeKey(t, string(testKey[:]), 0o600), "-protocol-id", "1"},
			want: []string{"raw bytes, not hex text", "xxd -p -c 64"}},
		{name: "environment key bad", env: []string{"UDPGATE_PRIVATE_KEY", testKeyHex[:63], "UDPGATE_PROTOCOL_ID", "1"},
			want: []string{"environment UDPGATE_PRIVATE_KEY: the private key is 63 hex characters, want 64", "unset the variable to run unsealed"}},
		{name: "environment key empty", env: []string{"UDPGATE_PRIVATE_KEY", "", "UDPGATE_PROTOCOL_ID", "1"},
			want: []string{"environment UDPGATE_PRIVATE_KEY: the private key is empty"}},
		{name: "no protocol id", args: []string{"-private-key-file", good},
			want: []string{"sealed mode needs the protocol id: give -protocol-id"}},
		{name: "protocol id not hex", args: []string{"-private-key-file", good, "-protocol-id", "0xgg"},
			want: []string{"-protocol-id", `"g" is not a hex digit`}},
		{name: "protocol id too long", env: []string{"UDPGATE_PRIVATE_KEY", testKeyHex, "UDPGATE_PROTOCOL_ID", "11223344556677889"},
			want: []string{`environment UDPGATE_PROTOCOL_ID="11223344556677889"`, "more than 16 hex digits"}},
		{name: "protocol id TOML integer", file: "private-key-file = \"" + good + "\"\nprotocol-id = 0x10\n",
			want: []string{"line 2", `protocol-id: want the id in hex, in quotes, e.g. protocol-id = "0x10"`}},
		{name: "listen 0.0.0.0", args: []string{"-listen", "0.0.0.0:7777", "-private-key-file", good, "-protocol-id", "1"},
			want: []string{`-listen "0.0.0.0:7777"`, "sealed mode needs -public-addresses", "-public-addresses 203.0.113.7:7777"}},
		{name: "listen [::]", args: []string{"-listen", "[::]:7777", "-private-key-file", good, "-protocol-id", "1"},
			want: []string{`-listen "[::]:7777"`, "sealed mode needs -public-addresses"}},
		{name: "listen :7777", args: []string{"-listen", ":7777", "-private-key-file", good, "-protocol-id", "1"},
			want: []string{"sealed mode needs -public-addresses"}},
		{name: "listen host name", args: []string{"-listen", "localhost:7777", "-private-key-file", good, "-protocol-id", "1"},
			want: []string{"sealed mode needs -public-addresses"}},
		{name: "public addresses host name", args: []string{"-private-key-file", good, "-protocol-id", "1", "-public-addresses", "game.example:7777"},
			want: []string{`-public-addresses "game.example:7777"`, "IP addresses, not host names"}},
		{name: "public addresses unspecified", args: []string{"-private-key-file", good, "-protocol-id", "1", "-public-addresses", "0.0.0.0:7777"},
			want: []string{"unspecified address"}},
		{name: "protocol id without key", args: []string{"-protocol-id", "1"},
			want: []string{"-protocol-id 0x1", "sealed mode is off: give the private key (-private-key-file, or UDPGATE_PRIVATE_KEY)"}},
		{name: "public addresses without key", file: "public-addresses = \"127.0.0.1:7777\"\n",
			want: []string{`public-addresses = "127.0.0.1:7777"`, "sealed mode is off"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"-listen", "127.0.0.1:7777"}, c.args...)
			if c.file != "" {
				args = append(args, "-config", writeFile(t, c.file))
			}
			o, err := load(args, env(c.env...), io.Discard)
			if len(c.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if o.privateKey == nil || *o.privateKey != *testKey {
					t.Errorf("private key %v, want the test key", o.privateKey)
				}
				if uint64(o.protocolID) != c.id {
					t.Errorf("protocol id %#x, want %#x", uint64(o.protocolID), c.id)
				}
				if !slices.Equal(o.publicAddrs, c.public) {
					t.Errorf("public addresses %v, want %v", o.publicAddrs, c.public)
				}
				return
			}
			if err == nil {
				t.Fatalf("loaded; want an error with %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\ndoes not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), testKeyHex[:16]) {
				t.Errorf("the error shows the key: %v", err)
			}
		})
	}
}

// TestUnsealedByDefault: no key, no sealed mode; the sealed tunables at
// their defaults (as -print-config writes them) are no error.
func TestUnsealedByDefault(t *testing.T) {
	o, err := load([]string{"-config", writeFile(t, "protocol-id = \"0x0\"\npublic-addresses = \"\"\n")}, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.privateKey != nil || o.publicAddrs != nil {
		t.Errorf("sealed without a key: %v %v", o.privateKey, o.publicAddrs)
	}
}

// TestPrintConfigSealed: -print-config names the key's file, never the key,
// and what it prints loads back.
func TestPrintConfigSealed(t *testing.T) {
	key := writeKey(t, testKeyHex, 0o600)
	for _, c := range []struct {
		name string
		args []string
		env  []string
	}{
		{"key file", []string{"-private-key-file", key}, nil},
		{"key in environment", nil, []string{"UDPGATE_PRIVATE_KEY", testKeyHex}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"-listen", "127.0.0.1:7777", "-protocol-id", "0xfeedface", "-public-addresses", "127.0.0.1:7777", "-print-config"}, c.args...)
			var out bytes.Buffer
			if err := run(context.Background(), args, env(c.env...), &out, io.Discard); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(strings.ToLower(out.String()), testKeyHex[:16]) {
				t.Fatalf("-print-config shows the key:\n%s", out.String())
			}
			if !strings.Contains(out.String(), "protocol-id = \"0xfeedface\"\n") {
				t.Errorf("-print-config:\n%s", out.String())
			}
			o, err := load([]string{"-config", writeFile(t, out.String())}, env(c.env...), io.Discard)
			if err != nil {
				t.Fatalf("loading the printed config: %v", err)
			}
			if o.privateKey == nil || uint64(o.protocolID) != 0xfeedface {
				t.Errorf("loaded back: key %v, protocol id %v", o.privateKey != nil, o.protocolID)
			}
		})
	}
}

// TestSealedStartupLog: the listening line says whether sealed mode is on
// and, when it is, what a backend must match; the key never appears, only
// its file and fingerprint. A key file every user can read is warned of.
func TestSealedStartupLog(t *testing.T) {
	r := start(t, nil, env())
	logged(t, r.stderr, `msg=listening .* (sealed=false)`)

	key := writeKey(t, testKeyHex+"\n", 0o644)
	r = start(t, []string{"-private-key-file", key, "-protocol-id", "0xfeedface"}, env())
	logged(t, r.stderr, `msg=listening .* (sealed=true protocol_id=0xfeedface public_addresses=127\.0\.0\.1:\d+ key_from=\S+ key_id=[0-9a-f]{8})`)
	logged(t, r.stderr, `level=WARN msg="(the private key file is readable by every user)`)

	r = start(t, []string{"-protocol-id", "1"}, env("UDPGATE_PRIVATE_KEY", testKeyHex))
	logged(t, r.stderr, `msg=listening .* (key_from="environment UDPGATE_PRIVATE_KEY")`)
	if strings.Contains(r.stderr.String(), "WARN") {
		t.Errorf("a warning with the key from the environment:\n%s", r.stderr.String())
	}
	if strings.Contains(r.stderr.String(), testKeyHex[:16]) {
		t.Errorf("the log shows the key:\n%s", r.stderr.String())
	}
}

// TestReloadKey: SIGHUP with a changed key file applies nothing of it and
// says the key needs a restart, without logging either key.
func TestReloadKey(t *testing.T) {
	key := writeKey(t, testKeyHex, 0o600)
	path := writeFile(t, "private-key-file = \""+key+"\"\nprotocol-id = \"0x1\"\n")
	r := start(t, []string{"-config", path}, env())
	logged(t, r.stderr, `msg=listening .* (sealed=true)`)
	newKey := strings.Repeat("5a", 32)
	if err := os.WriteFile(key, []byte(newKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.sigs <- syscall.SIGHUP
	logged(t, r.stderr, `msg="reloaded: some changes need a restart to take effect" .*needs_restart="(private key \(changed; the key is not reloadable live: restart the server to use the new one\))"`)

	// A key file that went bad fails the reload; the server keeps its key.
	if err := os.WriteFile(key, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.sigs <- syscall.SIGHUP
	logged(t, r.stderr, `msg="(reload failed): every setting is kept as it was`)
	out := r.stderr.String()
	if strings.Contains(out, testKeyHex[:16]) || strings.Contains(out, newKey[:16]) {
		t.Errorf("the log shows a key:\n%s", out)
	}
}

// TestSealedServe: a server started with a key admits a client with a token
// for it, echoes through sealed packets, refuses a token of another
// protocol id, and counts that refusal by reason in its summary and
// metrics.
func TestSealedServe(t *testing.T) {
	key := writeKey(t, testKeyHex, 0o600)
	r := start(t, []string{"-private-key-file", key, "-protocol-id", "0x77", "-metrics", "127.0.0.1:0"}, env())
	addr := netip.MustParseAddrPort(r.udp)
	dialToken := func(protocol uint64) (*conn.Client, *echoes, error) { return dialSealedProtocol(t, addr, protocol) }
	cl, h, err := dialToken(0x77)
	if err != nil {
		t.Fatal(err)
	}
	echoed(t, cl, h)
	if _, _, err := dialToken(0x78); !errors.Is(err, conn.ErrTokenInvalid) {
		t.Errorf("a token of another protocol id: %v, want ErrTokenInvalid", err)
	}
	// A client without a token completes the (UE) handshake, but it is
	// not a connection (max-clients counts the one sealed client): the
	// server's sealed Ack tells it so, and its Dial fails.
	plain := &echoes{}
	if _, err := dial(t, r.udp, plain); !errors.Is(err, conn.ErrTokenRequired) {
		t.Errorf("a client without a token: Dial %v, want ErrTokenRequired", err)
	}
	echoed(t, cl, h)
	_, body := r.get(t, "/metrics")
	for _, w := range []string{`udpgate_drops_total{reason="token_wrong_protocol"} 1`, "udpgate_connections 1\n"} {
		if !strings.Contains(body, w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}
	r.sigs <- syscall.SIGTERM
	if err := r.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	logged(t, r.stderr, `msg=final .*drops="[^"]*(token_wrong_protocol=1)`)
	if plain.n.Load() != 0 {
		t.Error("a client without a token was echoed")
	}
}
