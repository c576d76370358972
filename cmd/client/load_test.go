package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
)

type loadEchoApp = conntest.Echo[*conn.Conn, conn.DisconnectReason]

// watchedEcho echoes Data and fires ev at each connect, disconnect and
// connection's first Data, for a test that waits on the server's state.
type watchedEcho struct {
	loadEchoApp
	ev   conntest.Signal
	mu   sync.Mutex
	sent map[*conn.Conn]bool // connections that sent Data
}

func (w *watchedEcho) OnConnect(*conn.Conn)                                 { w.ev.Fire() }
func (w *watchedEcho) OnDisconnect(*conn.Conn, conn.DisconnectReason, bool) { w.ev.Fire() }

func (w *watchedEcho) OnPacket(c *conn.Conn, p []byte) {
	w.loadEchoApp.OnPacket(c, p)
	w.mu.Lock()
	first := !w.sent[c]
	if first {
		if w.sent == nil {
			w.sent = map[*conn.Conn]bool{}
		}
		w.sent[c] = true
	}
	w.mu.Unlock()
	if first {
		w.ev.Fire()
	}
}

// sending reports how many connections have sent Data.
func (w *watchedEcho) sending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.sent)
}

// awaitLen waits, up to 10 s, until s has n connections (the count drops
// before OnDisconnect and rises before OnConnect).
func (w *watchedEcho) awaitLen(s *conn.Server, cond func(n int) bool) bool {
	return w.ev.Await(10*time.Second, func() bool { return cond(s.Len()) })
}

// loadEchoServer starts an echo server on 127.0.0.1 with a free port.
func loadEchoServer(t *testing.T) (*conn.Server, *watchedEcho) {
	t.Helper()
	h := &watchedEcho{}
	return conntest.Listen(t, conn.Listen, conn.Config{
		Handler:        h,
		NetworkVersion: 1,
		ChallengeRate:  -1,
		Sockets:        1,
	}), h
}

func TestLoadEndToEnd(t *testing.T) {
	s, h := loadEchoServer(t)
	var out, errb strings.Builder
	err := runLoad([]string{"-server", s.Addr().String(), "-clients", "120", "-sources", "40",
		"-rate", "50", "-duration", "600ms", "-disconnect", "2", "-loss-timeout", "1s"}, &out, &errb)
	t.Logf("output:\n%s%s", out.String(), errb.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"120 clients from 40 addresses (127.1.0.1 up) × 3 sockets",
		"handshakes: 120/120 connected",
		"round trips (",
		"latency p50",
		"disconnect: 240 Disconnect packets (2 per client)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Not a terminal: no progress line, no escape sequences.
	if strings.Contains(out.String(), "\r") || strings.Contains(out.String(), "\033") {
		t.Error("progress line written to a non-terminal")
	}
	if !h.awaitLen(s, func(n int) bool { return n == 0 }) {
		t.Errorf("%d connections left after the clients disconnected", s.Len())
	}
}

func TestLoadCountBound(t *testing.T) {
	s, _ := loadEchoServer(t)
	var out strings.Builder
	start := time.Now()
	err := runLoad([]string{"-server", s.Addr().String(), "-clients", "10", "-rate", "0",
		"-count", "500", "-duration", "2s", "-disconnect", "0"}, &out, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "500 sent") && !strings.Contains(out.String(), " sent, ") {
		t.Errorf("output:\n%s", out.String())
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("took %v", time.Since(start))
	}
	if !strings.Contains(out.String(), "disconnect: skipped") {
		t.Errorf("-disconnect 0 not reported:\n%s", out.String())
	}
}

func TestLoadRefusesNonLoopback(t *testing.T) {
	for server, want := range map[string]string{
		"192.0.2.1:7777":         "not a loopback address",
		"[2001:db8::1]:7777":     "not a loopback address",
		"[::ffff:10.0.0.1]:7777": "not a loopback address",
		"[::1]:7777":             "IPv4 loopback",
	} {
		var out, errb strings.Builder
		err := runLoad([]string{"-server", server, "-duration", "100ms"}, &out, &errb)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), want) {
			t.Errorf("-server %s: %v; want a usage error saying %q", server, err, want)
		}
		if out.Len() > 0 {
			t.Errorf("-server %s: printed %q before refusing", server, out.String())
		}
	}
}

// TestTrafficFlags: load and flood refuse a setting out of range with a
// usage error that names it (the cases in the order of the flags).
func TestTrafficFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"flood", "-batch", "2000"}, "-batch 2000 is out of range"},
		{[]string{"load", "-clients", "0"}, "-clients"},
		{[]string{"flood", "-count", "0"}, "-count 0 is out of range"},
		{[]string{"flood", "-count", "10000001"}, "-count 10000001 is out of range"},
		{[]string{"load", "-count", "0"}, "-count"},
		{[]string{"flood", "-duration", "3m"}, "-duration 3m0s is out of range"},
		{[]string{"flood", "-duration", "0s"}, "-duration 0s is out of range"},
		{[]string{"load", "-duration", "11m"}, "-duration"},
		{[]string{"load", "-duration", "0s"}, "-duration"},
		{[]string{"flood", "-grace", "1m"}, "-grace 1m0s is out of range"},
		{[]string{"load", "-magic", "102"}, "-magic"},
		{[]string{"flood", "-mix", "initial=1,nuke=2"}, `unknown kind "nuke"`},
		{[]string{"load", "-payload", "5000"}, "-payload"},
		{[]string{"flood", "-rate", "-5"}, "-rate -5 is negative"},
		{[]string{"load", "-rate", "-1"}, "-rate"},
		{[]string{"flood", "-senders", "0"}, "-senders 0 is out of range"},
		{[]string{"flood", "-sources", "0"}, "-sources 0 is out of range"},
		{[]string{"flood", "-sources", "2", "-senders", "3"}, "-senders 3 is out of range"},
		{[]string{"load", "-sources", "1", "-clients", "5000"}, "-sources"},
		{[]string{"load", "stray"}, "unexpected argument"},
	} {
		code, _, errb := runCmd(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(errb, "client "+tc.args[0]+": ") || !strings.Contains(errb, tc.want) {
			t.Errorf("%q: status %d, stderr %q; want a usage error about %q", tc.args, code, errb, tc.want)
		}
	}
}

// TestLoadHelp: -h prints the flags and is no error.
func TestLoadHelp(t *testing.T) {
	var out, errb strings.Builder
	if err := runLoad([]string{"-h"}, &out, &errb); !errors.Is(err, flag.ErrHelp) || !strings.Contains(errb.String(), "-clients") {
		t.Errorf("-h: %v, %q", err, errb.String())
	}
}

func TestLoadNoServer(t *testing.T) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	var out, errb strings.Builder
	err = runLoad([]string{"-server", addr, "-clients", "5", "-connect-timeout", "300ms", "-duration", "100ms"}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "no client connected") {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "0/5 connected") || !strings.Contains(out.String(), "5 failed") {
		t.Errorf("output:\n%s", out.String())
	}
}

// loadServer starts an echo server with cfg's limits on 127.0.0.1.
func loadServer(t *testing.T, cfg conn.Config) (*conn.Server, *watchedEcho) {
	t.Helper()
	h := &watchedEcho{}
	cfg.Handler, cfg.NetworkVersion, cfg.ChallengeRate, cfg.Sockets = h, 1, -1, 1
	s, err := conn.Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, h
}

// TestLoadExitDenied: clients the server denies make the exit status 1,
// and the report says why they ended.
func TestLoadExitDenied(t *testing.T) {
	s, _ := loadServer(t, conn.Config{MaxClients: 4})
	code, out, errb := runCmd(t, "", "load", "-server", s.Addr().String(), "-clients", "10", "-rate", "20",
		"-duration", "300ms", "-disconnect", "1")
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errb)
	if code != exitFailure {
		t.Errorf("exit status %d, want %d", code, exitFailure)
	}
	for _, want := range []string{"handshakes: 4/10 connected", "ended: 6 of 10 clients", "handshake denied: server full:"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	if !strings.Contains(errb, "6 of 10 clients failed or were closed by the server: handshake denied: server full 6") {
		t.Errorf("stderr %q does not give the reason", errb)
	}
}

// TestLoadStopsWhenAllGone: when the server closes every connection, load
// stops at once instead of running out -duration, and fails, naming the
// reason.
func TestLoadStopsWhenAllGone(t *testing.T) {
	s, h := loadServer(t, conn.Config{})
	const clients = 8
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		code, out, errb := runCmd(t, "", "load", "-server", s.Addr().String(), "-clients", "8", "-rate", "20",
			"-duration", "1m", "-disconnect", "0")
		done <- result{code, out, errb}
	}()
	// Every client connected and in the run phase (sending Data), which
	// is where the command notices that every client is gone.
	if !h.ev.Await(10*time.Second, func() bool { return s.Len() == clients && h.sending() == clients }) {
		t.Fatalf("%d of %d clients connected, %d sending", s.Len(), clients, h.sending())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("load did not stop when every client was gone")
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", r.out, r.err)
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("took %v: it waited for -duration", took)
	}
	if r.code != exitFailure {
		t.Errorf("exit status %d, want %d", r.code, exitFailure)
	}
	for _, want := range []string{"every client is gone", "closed by the server: shutdown:"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	// Every client heard the shutdown, except one whose 5 Disconnects were
	// all lost (a busy loopback drops too): that one times out after 5 s of
	// silence, and the reasons say so.
	shutdown, silent := loadEnding(r.err, "closed by the server: shutdown"), loadEnding(r.err, "the server was silent for the connection timeout")
	if shutdown == 0 || shutdown+silent != clients {
		t.Errorf("stderr %q does not give the reasons: %d shutdown, %d silent, want %d in all", r.err, shutdown, silent, clients)
	}
}

// loadEnding is the count stderr gives for ending what ("… what N"), or 0.
func loadEnding(stderr, what string) int {
	_, rest, ok := strings.Cut(stderr, what+" ")
	if !ok {
		return 0
	}
	n := 0
	for _, c := range rest {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// TestLoadJSON: -json prints one JSON object (and nothing else) on
// standard output, for success and for failure.
func TestLoadJSON(t *testing.T) {
	s, h := loadServer(t, conn.Config{MaxClients: 3})
	for _, c := range []struct {
		clients string
		code    int
		ok      bool
	}{{"3", exitOK, true}, {"5", exitFailure, false}} {
		code, out, errb := runCmd(t, "", "load", "-json", "-server", s.Addr().String(), "-clients", c.clients,
			"-rate", "50", "-duration", "300ms", "-disconnect", "2")
		if code != c.code {
			t.Errorf("-clients %s: exit status %d, want %d (stderr %q)", c.clients, code, c.code, errb)
		}
		var rep loadReport
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rep); err != nil {
			t.Fatalf("-clients %s: stdout is not the JSON report: %v\n%s", c.clients, err, out)
		}
		if dec.More() {
			t.Errorf("-clients %s: more than one JSON value on stdout:\n%s", c.clients, out)
		}
		if rep.OK != c.ok || rep.Connect.Connected != 3 || rep.Run == nil || rep.Run.RoundTrips == 0 || rep.DisconnectPackets != 6 {
			t.Errorf("-clients %s: report %+v (run %+v)", c.clients, rep, rep.Run)
		}
		if !c.ok && (rep.Ended != 2 || len(rep.Endings) != 1 || rep.Endings[0].What != "handshake denied: server full" || rep.Error == "") {
			t.Errorf("-clients %s: endings %+v, ended %d, error %q; want 2 denied, server full", c.clients, rep.Endings, rep.Ended, rep.Error)
		}
		// Wait for the server to see the Disconnects before the next run.
		if !h.awaitLen(s, func(n int) bool { return n == 0 }) {
			t.Fatalf("-clients %s: %d connections left", c.clients, s.Len())
		}
	}
}
