package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
)

// echoServer echoes Data and records how connections ended.
type echoServer struct {
	conntest.Echo[*conn.Conn, conn.DisconnectReason]
	mu    sync.Mutex
	ends  []conn.DisconnectReason
	wasRm []bool
	ev    conntest.Signal
}

func (e *echoServer) OnConnect(*conn.Conn) { e.ev.Fire() }

func (e *echoServer) OnDisconnect(_ *conn.Conn, r conn.DisconnectReason, remote bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ends = append(e.ends, r)
	e.wasRm = append(e.wasRm, remote)
	e.ev.Fire()
}

// waitEnd waits for the server to see a connection end and returns how.
func (e *echoServer) waitEnd(t *testing.T) (conn.DisconnectReason, bool) {
	t.Helper()
	e.ev.Await(5*time.Second, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.ends) > 0
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.ends) > 0 {
		return e.ends[0], e.wasRm[0]
	}
	t.Fatal("the server saw no disconnect within 5 s")
	return 0, false
}

func startServer(t *testing.T, cfg conn.Config) (*conn.Server, *echoServer) {
	t.Helper()
	h := &echoServer{}
	cfg.Handler = h
	cfg.SweepInterval = 10 * time.Millisecond
	return conntest.Listen(t, conn.Listen, cfg), h
}

// TestConnectEchoesAndClosesCleanly: each line comes back on its own line,
// with its RTT on stderr; at end of input the command exits 0 and the server
// sees a Disconnect from the client.
func TestConnectEchoesAndClosesCleanly(t *testing.T) {
	srv, h := startServer(t, conn.Config{Magic: "101", NetworkVersion: 4})
	in := "alpha\nbeta gamma\n\n" + strings.Repeat("x", 2000) + "\ndelta\r\n"
	code, out, errb := runCmd(t, in, "connect", "-server", srv.Addr().String(), "-magic", "101", "-network-version", "4")
	if code != exitOK {
		t.Fatalf("status %d; stderr:\n%s", code, errb)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	got := map[string]bool{}
	for _, l := range lines {
		got[l] = true
	}
	for _, want := range []string{"alpha", "beta gamma", "delta"} {
		if !got[want] {
			t.Errorf("no echo %q in stdout:\n%s", want, out)
		}
	}
	if len(lines) != 3 {
		t.Errorf("stdout has %d lines; want the 3 echoes:\n%s", len(lines), out)
	}
	for _, want := range []string{"connected from", "rtt ", "line 4 not sent: 2000 bytes", "closed: sent 3, received 3, unanswered 0"} {
		if !strings.Contains(errb, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb)
		}
	}
	if r, remote := h.waitEnd(t); r != conn.ReasonClosed || !remote {
		t.Errorf("server saw the connection end with %v (remote %v); want a Disconnect from the client", r, remote)
	}
	if st := srv.Stats(); st.Accepted != 1 || st.Disconnects[conn.ReasonClosed] != 1 {
		t.Errorf("server stats: accepted %d, disconnects %v", st.Accepted, st.Disconnects)
	}
}

// TestConnectInterrupted: Ctrl-C (the context) closes cleanly too, while
// input is still open.
func TestConnectInterrupted(t *testing.T) {
	srv, h := startServer(t, conn.Config{NetworkVersion: 1})
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithCancel(t.Context())
	var out, errb conntest.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runConnect(ctx, []string{"-server", srv.Addr().String()}, pr, &out, &errb)
	}()
	if _, err := io.WriteString(pw, "ping\n"); err != nil {
		t.Fatal(err)
	}
	out.Await(5*time.Second, func(s string) bool { return strings.Contains(s, "ping") })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("runConnect after Ctrl-C: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("runConnect did not return after Ctrl-C")
	}
	if !strings.Contains(errb.String(), "interrupted: closing") || out.String() != "ping\n" {
		t.Errorf("stdout %q, stderr:\n%s", out.String(), errb.String())
	}
	if r, remote := h.waitEnd(t); r != conn.ReasonClosed || !remote {
		t.Errorf("server saw %v (remote %v); want a Disconnect from the client", r, remote)
	}
}

// TestConnectErrors: each way of not getting in says what to do.
func TestConnectErrors(t *testing.T) {
	t.Run("wrong version", func(t *testing.T) {
		srv, _ := startServer(t, conn.Config{NetworkVersion: 7, NetworkFeatures: 2})
		code, _, errb := runCmd(t, "x\n", "connect", "-server", srv.Addr().String())
		if code != exitFailure || !strings.Contains(errb, "wrong version") ||
			!strings.Contains(errb, "-network-version 7 -network-features 2") {
			t.Errorf("status %d, stderr:\n%s", code, errb)
		}
	})
	t.Run("server full", func(t *testing.T) {
		srv, _ := startServer(t, conn.Config{NetworkVersion: 1, MaxClients: 1})
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		first, err := conn.Dial(ctx, srv.Addr().String(), conn.Config{NetworkVersion: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer first.Close()
		code, _, errb := runCmd(t, "x\n", "connect", "-server", srv.Addr().String())
		if code != exitFailure || !strings.Contains(errb, "denied") || !strings.Contains(errb, "is full") {
			t.Errorf("status %d, stderr:\n%s", code, errb)
		}
	})
	t.Run("refused", func(t *testing.T) {
		srv, _ := startServer(t, conn.Config{NetworkVersion: 1,
			Accept: func(netip.AddrPort) error { return errors.New("banned") }})
		code, _, errb := runCmd(t, "x\n", "connect", "-server", srv.Addr().String())
		if code != exitFailure || !strings.Contains(errb, "refused this client") {
			t.Errorf("status %d, stderr:\n%s", code, errb)
		}
	})
	t.Run("timed out", func(t *testing.T) {
		quiet, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
		if err != nil {
			t.Fatal(err)
		}
		defer quiet.Close()
		start := time.Now()
		code, _, errb := runCmd(t, "x\n", "connect", "-server", quiet.LocalAddr().String(), "-timeout", "300ms")
		if code != exitFailure || !strings.Contains(errb, "timed out") || !strings.Contains(errb, "-magic") {
			t.Errorf("status %d, stderr:\n%s", code, errb)
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Errorf("a 300ms connect timeout took %v", el)
		}
	})
	t.Run("nothing listens", func(t *testing.T) {
		// A port just freed: the kernel answers ICMP port unreachable,
		// and connect gives up at once instead of waiting -timeout.
		pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
		if err != nil {
			t.Fatal(err)
		}
		addr := pc.LocalAddr().String()
		pc.Close()
		start := time.Now()
		code, _, errb := runCmd(t, "x\n", "connect", "-server", addr, "-timeout", "10s")
		if code != exitFailure || !strings.Contains(errb, "unreachable: nothing listens on UDP "+addr) {
			t.Errorf("status %d, stderr:\n%s", code, errb)
		}
		if el := time.Since(start); el >= time.Second {
			t.Errorf("connect to a closed port took %v, want under 1s", el)
		}
	})
	t.Run("server shuts down", func(t *testing.T) {
		srv, h := startServer(t, conn.Config{NetworkVersion: 1})
		pr, pw := io.Pipe()
		defer pw.Close()
		var out, errb conntest.SyncBuffer
		done := make(chan error, 1)
		go func() {
			done <- runConnect(t.Context(), []string{"-server", srv.Addr().String()}, pr, &out, &errb)
		}()
		if !h.ev.Await(5*time.Second, func() bool { return srv.Len() > 0 }) {
			t.Fatal("the client did not connect")
		}
		srv.Close()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "shutting down") {
				t.Errorf("runConnect = %v; want the server's shutdown", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("runConnect did not notice the shutdown")
		}
	})
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"hello world": "hello world",
		"tab\there":   "tab\there",
		"two\nlines":  `"two\nlines"`,
		"\xff\x00":    `"\xff\x00"`,
		"ünïcödé":     "ünïcödé",
	} {
		if got := printable([]byte(in)); got != want {
			t.Errorf("printable(%q) = %s; want %s", in, got, want)
		}
	}
}
