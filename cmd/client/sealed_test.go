package main

import (
	"context"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/udpgate/udpgate/cmd/internal/sealflag"
	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/token"
)

const testProtocolID = 0x1122334455667788

// sealedServer is a sealed echo server that records who connected.
type sealedServer struct {
	echoServer
	mu  sync.Mutex
	ids []conn.Identity
}

func (s *sealedServer) OnConnect(c *conn.Conn) {
	id, ok := c.Identity()
	if !ok {
		panic("a connection of a sealed server has no identity")
	}
	s.mu.Lock()
	s.ids = append(s.ids, id)
	s.mu.Unlock()
}

func (s *sealedServer) identities() []conn.Identity {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]conn.Identity(nil), s.ids...)
}

// startSealed starts a sealed echo server on loopback with the test key.
func startSealed(t *testing.T, public []netip.AddrPort) (*conn.Server, *sealedServer) {
	t.Helper()
	h := &sealedServer{}
	srv, err := conn.Listen("127.0.0.1:0", conn.Config{
		Handler: h, SweepInterval: 10 * time.Millisecond, NetworkVersion: 1,
		PrivateKey: testPrivateKey(t), ProtocolID: testProtocolID, PublicAddresses: public,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, h
}

// testPrivateKey returns testKeyHex read as the client reads a key.
func testPrivateKey(t *testing.T) *[token.KeyBytes]byte {
	t.Helper()
	k, err := sealflag.ParseKey(testKeyHex)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// makeToken runs client token with the test key and protocol id for
// server, plus args, and returns the token file.
func makeToken(t *testing.T, server string, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(testKeyHex+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "token")
	args = append([]string{"token", "-protocol-id", "0x1122334455667788", "-private-key-file", keyFile,
		"-server", server, "-client-id", "42", "-out", out}, args...)
	if code, _, stderr := runCmd(t, "", args...); code != exitOK {
		t.Fatalf("client %q: status %d\n%s", args, code, stderr)
	}
	return out
}

// TestConnectToken: client token, then client connect -token: the server
// admits the client with the token's id and user data, lines are echoed
// through sealed packets, and the command exits 0.
func TestConnectToken(t *testing.T) {
	srv, h := startSealed(t, nil)
	tok := makeToken(t, srv.Addr().String(), "-user-data", "c0ffee")
	code, out, errb := runCmd(t, "alpha\nbeta\n", "connect", "-token", tok)
	if code != exitOK {
		t.Fatalf("status %d; stderr:\n%s", code, errb)
	}
	if out != "alpha\nbeta\n" || !strings.Contains(errb, "(sealed)") {
		t.Errorf("stdout %q, stderr:\n%s", out, errb)
	}
	ids := h.identities()
	if len(ids) != 1 || ids[0].ClientID != 42 || ids[0].UserData[0] != 0xc0 || ids[0].UserData[2] != 0xee || ids[0].UserData[3] != 0 {
		t.Errorf("the server saw %+v, want client 42 with user data c0ffee", ids)
	}
	if r, remote := h.waitEnd(t); r != conn.ReasonClosed || !remote {
		t.Errorf("the server saw the end as %v (remote %v), want closed by the client", r, remote)
	}
}

// TestConnectTokenRefused: each refusal exits 1 with its reason in words.
func TestConnectTokenRefused(t *testing.T) {
	srv, _ := startSealed(t, nil)
	addr := srv.Addr().String()

	// A token made with the right key but expired an hour ago.
	expired := filepath.Join(t.TempDir(), "expired")
	tok, err := token.Generate(testPrivateKey(t), &token.Params{
		ProtocolID: testProtocolID, ClientID: 1, ServerAddresses: []netip.AddrPort{srv.Addr()},
		Expire: time.Minute, Timeout: 5 * time.Second,
		Now: func() time.Time { return time.Now().Add(-time.Hour) },
	})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := tok.MarshalBinary()
	if err := os.WriteFile(expired, b, 0o600); err != nil {
		t.Fatal(err)
	}

	// A token under another key.
	otherKey := writeTestFile(t, "other.key", strings.Repeat("5a", 32))
	wrongKey := filepath.Join(t.TempDir(), "wrongkey")
	if code, _, errb := runCmd(t, "", "token", "-protocol-id", "0x1122334455667788", "-private-key-file", otherKey,
		"-server", addr, "-client-id", "1", "-out", wrongKey); code != exitOK {
		t.Fatal(errb)
	}

	// A server whose public address is another one than the token's.
	foreignSrv, _ := startSealed(t, []netip.AddrPort{netip.MustParseAddrPort("127.0.0.2:7777")})

	for _, c := range []struct {
		name, token, want string
	}{
		{"expired", expired, "refused: token expired"},
		{"wrong key", wrongKey, "refused: token invalid (wrong key or protocol id)"},
		{"wrong protocol id", makeToken(t, addr, "-protocol-id", "0x1122334455667789"), "refused: token invalid (wrong key or protocol id)"},
		{"foreign server", makeToken(t, foreignSrv.Addr().String()), "refused: this server is not in the token"},
	} {
		code, out, errb := runCmd(t, "never sent\n", "connect", "-token", c.token, "-timeout", "5s")
		if code != exitFailure || !strings.Contains(errb, c.want) || out != "" {
			t.Errorf("%s: status %d, stdout %q, stderr:\n%s\nwant status 1 and %q", c.name, code, out, errb, c.want)
		}
	}
}

// TestConnectWithoutToken: connect without -token against a sealed server
// exits 1 within 2 s, saying that the server needs a connect token, with
// lines to send or none.
func TestConnectWithoutToken(t *testing.T) {
	srv, _ := startSealed(t, nil)
	for _, input := range []string{"", "hello\n"} {
		start := time.Now()
		code, out, errb := runCmd(t, input, "connect", "-server", srv.Addr().String())
		took := time.Since(start)
		if code != exitFailure || !strings.Contains(errb, "needs a connect token") || !strings.Contains(errb, "-token") || out != "" {
			t.Errorf("input %q: status %d, stdout %q, stderr:\n%s\nwant status 1 and the missing token", input, code, out, errb)
		}
		if took > 2*time.Second {
			t.Errorf("input %q: took %v, want under 2 s", input, took)
		}
	}
}

// TestConnectTokenInUse: a token proven from one address is refused from
// another, with the reason.
func TestConnectTokenInUse(t *testing.T) {
	srv, _ := startSealed(t, nil)
	path := makeToken(t, srv.Addr().String())
	tok, _ := readToken(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := conn.DialToken(ctx, tok, conn.Config{NetworkVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	code, _, errb := runCmd(t, "", "connect", "-token", path)
	if code != exitFailure || !strings.Contains(errb, "refused: token in use from another address") {
		t.Errorf("status %d, stderr:\n%s\nwant status 1 and the token in use", code, errb)
	}
}

// TestConnectTokenTimesOut: a token for a server that does not run sealed
// mode gets no sealed answer: timed out, with what to check.
func TestConnectTokenTimesOut(t *testing.T) {
	srv, _ := startServer(t, conn.Config{NetworkVersion: 1})
	path := makeToken(t, srv.Addr().String())
	code, _, errb := runCmd(t, "", "connect", "-token", path, "-timeout", "300ms")
	if code != exitFailure || !strings.Contains(errb, "timed out: no answer from "+srv.Addr().String()+" within 300ms each") ||
		!strings.Contains(errb, "sealed mode") {
		t.Errorf("status %d, stderr:\n%s", code, errb)
	}
}

// TestConnectTokenUsage: -token's mistakes are usage errors, before any
// packet is sent.
func TestConnectTokenUsage(t *testing.T) {
	good := makeToken(t, "127.0.0.1:7777")
	remote := makeToken(t, "127.0.0.1:7777,192.0.2.1:7777")
	short := writeTestFile(t, "short", "not a token")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-token", good, "-server", "127.0.0.1:7777"}, "-server and -token: the token names the servers"},
		{[]string{"-token", remote}, "lists server 192.0.2.1:7777, not a loopback address"},
		{[]string{"-token", short}, "not a connect token"},
		{[]string{"-token", filepath.Join(t.TempDir(), "none")}, "-token: open "},
	} {
		code, _, errb := runCmd(t, "", append([]string{"connect"}, c.args...)...)
		if code != exitUsage || !strings.Contains(errb, c.want) {
			t.Errorf("connect %q: status %d, stderr:\n%s\nwant status 2 and %q", c.args, code, errb, c.want)
		}
	}
}

// TestConnectWithoutTokenStdinOpen: with standard input left open (a
// user at a terminal who has typed nothing), connect without -token
// against a sealed server still exits 1 within 2 s naming the token, and
// never says it connected: the server's Ack says it is sealed, so the
// dial itself fails.
func TestConnectWithoutTokenStdinOpen(t *testing.T) {
	srv, _ := startSealed(t, nil)
	stdin, w := io.Pipe()
	defer w.Close()
	var out, errb conntest.SyncBuffer
	done := make(chan int, 1)
	start := time.Now()
	go func() { done <- run([]string{"connect", "-server", srv.Addr().String()}, stdin, &out, &errb) }()
	select {
	case code := <-done:
		took := time.Since(start)
		if code != exitFailure || !strings.Contains(errb.String(), "needs a connect token") || out.String() != "" {
			t.Errorf("status %d, stdout %q, stderr:\n%s\nwant status 1 and the missing token", code, out.String(), errb.String())
		}
		if strings.Contains(errb.String(), "connected") {
			t.Errorf("it said it connected:\n%s", errb.String())
		}
		if took > 2*time.Second {
			t.Errorf("took %v, want under 2 s", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still running after 10 s with standard input open; stderr:\n%s", errb.String())
	}
}
