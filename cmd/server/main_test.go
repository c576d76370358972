package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
)

// logged waits for a log line matching re and returns its first group.
func logged(t *testing.T, out *conntest.SyncBuffer, re string) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	if !out.Await(10*time.Second, func(s string) bool { m = rx.FindStringSubmatch(s); return m != nil }) {
		t.Fatalf("no log line matching %s in:\n%s", re, out.String())
	}
	return m[1]
}

// running is a server started by serve, with signals the test sends.
type running struct {
	sigs   chan os.Signal
	done   chan error
	stderr *conntest.SyncBuffer
	udp    string // the UDP address
	web    string // the metrics address, "" without -metrics
	cancel context.CancelFunc
}

// start runs the server with args (plus -listen on loopback, no summary)
// until the test ends.
func start(t *testing.T, args []string, environment environ) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{sigs: make(chan os.Signal, 4), done: make(chan error, 1), stderr: &conntest.SyncBuffer{}, cancel: cancel}
	args = append([]string{"-listen", "127.0.0.1:0", "-summary", "0"}, args...)
	go func() {
		r.done <- serve(ctx, args, environment, io.Discard, r.stderr, r.sigs, func() {})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(15 * time.Second):
			t.Error("the server did not stop")
		}
	})
	r.udp = logged(t, r.stderr, `(?:msg=listening addr=|"msg":"listening","addr":")([^"\s]+)`)
	if slices.Contains(args, "-metrics") {
		r.web = logged(t, r.stderr, `msg="serving metrics and health checks" addr=(\S+)`)
	}
	return r
}

// wait returns run's result.
func (r *running) wait(t *testing.T, within time.Duration) error {
	t.Helper()
	err := stopped(t, r.done, within, "the server:\n"+r.stderr.String())
	r.done <- err // for the cleanup
	return err
}

// stopped waits up to within for done's error, failing the test, with
// what in the message, if none comes.
func stopped(t *testing.T, done <-chan error, within time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		t.Fatalf("did not stop within %v: %s", within, what)
		return nil
	}
}

// get fetches a path of the metrics endpoint: status code and body.
func (r *running) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + r.web + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// echoes counts the Data a client receives.
type echoes struct {
	conn.NopHandler
	n  atomic.Int64
	ev conntest.Signal
}

func (e *echoes) OnPacket(*conn.Conn, []byte) { e.n.Add(1); e.ev.Fire() }

func dial(t *testing.T, addr string, h conn.Handler) (*conn.Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := conn.Dial(ctx, addr, conn.Config{NetworkVersion: 1, Handler: h})
	if err == nil {
		t.Cleanup(func() { cl.Close() })
	}
	return cl, err
}

// echoed sends a packet and waits for its echo.
func echoed(t *testing.T, cl *conn.Client, h *echoes) {
	t.Helper()
	want := h.n.Load() + 1
	if _, err := cl.Send([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if !h.ev.Await(10*time.Second, func() bool { return h.n.Load() >= want }) {
		t.Fatal("no echo")
	}
}

// TestRunWithMetrics starts the command as main does (flags, environment,
// file), serves a client, scrapes the metrics endpoint it opened and stops
// it as a signal would.
func TestRunWithMetrics(t *testing.T) {
	path := writeFile(t, "max-clients = 10\nsummary = \"50ms\"\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr conntest.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-config", path, "-listen", "127.0.0.1:0"},
			env("UDPGATE_METRICS", "127.0.0.1:0"), io.Discard, &stderr)
	}()
	udp := logged(t, &stderr, `msg=listening addr=(\S+)`)
	logged(t, &stderr, `msg=listening .* (version=\S+)`)
	web := logged(t, &stderr, `msg="serving metrics and health checks" addr=(\S+)`)

	cl, err := dial(t, udp, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Send([]byte("hello")); err != nil {
		t.Fatal(err)
	}

	// Scrape again at each log line (the summary comes every 50 ms) until
	// the loops have published the handshake's counters.
	var body string
	stderr.Await(10*time.Second, func(string) bool {
		resp, err := http.Get("http://" + web + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		return strings.Contains(body, "udpgate_connections 1\n") &&
			strings.Contains(body, `udpgate_handshake_sent_total{type="challenge"} 1`)
	})
	for _, w := range []string{"udpgate_connections 1\n", "udpgate_max_clients 10\n", "udpgate_draining 0\n",
		"udpgate_inbound_packet_rate 9000\n", "udpgate_inbound_byte_rate 1.6777216e+07\n",
		`udpgate_handshake_sent_total{type="challenge"} 1`, `udpgate_build_info{goversion="go1.`} {
		if !strings.Contains(body, w) {
			t.Errorf("/metrics lacks %q", w)
		}
	}
	logged(t, &stderr, `msg=summary connections=(1)`)

	cancel()
	if err := stopped(t, done, 10*time.Second, "run after its context ended"); err != nil {
		t.Fatalf("run: %v", err)
	}
	// The client was told, and the final summary was logged.
	select {
	case <-cl.Done():
	case <-time.After(5 * time.Second):
		t.Error("the client was not disconnected")
	}
	logged(t, &stderr, `msg=(final)`)
	if _, err := http.Get("http://" + web + "/metrics"); err == nil {
		t.Error("the metrics endpoint still answers after run returned")
	}
}

// TestRunMetricsAddressInUse fails fast, naming the setting.
func TestRunMetricsAddressInUse(t *testing.T) {
	r := start(t, []string{"-metrics", "127.0.0.1:0"}, env())
	err := run(context.Background(), []string{"-listen", "127.0.0.1:0", "-metrics", r.web}, env(), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-metrics "+`"`+r.web+`"`) || !strings.Contains(err.Error(), "free address") {
		t.Errorf("second server on metrics address %s: %v, want an error naming -metrics", r.web, err)
	}
}

// TestDrain: after SIGTERM with -drain-timeout, a connected client keeps
// being served until the timeout while a new one is refused (server full);
// /readyz turns 503 at once and /healthz stays 200; at the timeout the
// connected client is disconnected with reason shutdown.
func TestDrain(t *testing.T) {
	const drainTimeout = 1500 * time.Millisecond
	r := start(t, []string{"-drain-timeout", drainTimeout.String(), "-metrics", "127.0.0.1:0"}, env())
	h := &echoes{}
	a, err := dial(t, r.udp, h)
	if err != nil {
		t.Fatal(err)
	}
	echoed(t, a, h)
	if code, _ := r.get(t, "/readyz"); code != 200 {
		t.Fatalf("/readyz before the signal: %d, want 200", code)
	}

	began := time.Now()
	r.sigs <- syscall.SIGTERM
	logged(t, r.stderr, `msg="(draining)`)
	if code, body := r.get(t, "/readyz"); code != 503 || !strings.Contains(body, "draining") {
		t.Errorf("/readyz while draining: %d %q, want 503 draining", code, body)
	}
	if code, _ := r.get(t, "/healthz"); code != 200 {
		t.Errorf("/healthz while draining: %d, want 200 (the server is alive)", code)
	}
	_, err = dial(t, r.udp, nil)
	var denied *conn.DeniedError
	if !errors.As(err, &denied) || denied.Reason != protocol.DeniedServerFull {
		t.Errorf("a new client while draining: %v, want Denied (server full)", err)
	}
	echoed(t, a, h) // still served

	if err := r.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < drainTimeout {
		t.Errorf("stopped %v after the signal, before the %v drain timeout", took, drainTimeout)
	}
	select {
	case <-a.Done():
		var de *conn.DisconnectedError
		if !errors.As(a.Err(), &de) || de.Reason != conn.ReasonShutdown {
			t.Errorf("the drained client ended with %v, want a shutdown Disconnect", a.Err())
		}
	case <-time.After(5 * time.Second):
		t.Error("the connected client was not disconnected at the timeout")
	}
	logged(t, r.stderr, `msg="(drain timeout)`)
}

// startDraining starts a server with an hour's drain, connects a client
// and sends SIGTERM: the server is draining when it returns.
func startDraining(t *testing.T) (*running, *conn.Client) {
	t.Helper()
	r := start(t, []string{"-drain-timeout", "1h"}, env())
	a, err := dial(t, r.udp, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.sigs <- syscall.SIGTERM
	logged(t, r.stderr, `msg="(draining)`)
	return r, a
}

// TestDrainEndsWhenClientsLeave: the drain ends as soon as the last
// client leaves, long before its timeout.
func TestDrainEndsWhenClientsLeave(t *testing.T) {
	r, a := startDraining(t)
	a.Close()
	if err := r.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	logged(t, r.stderr, `msg="(drained): every client has left"`)
}

// TestDrainSecondSignal: a second signal ends the drain at once.
func TestDrainSecondSignal(t *testing.T) {
	r, a := startDraining(t)
	r.sigs <- os.Interrupt
	if err := r.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	logged(t, r.stderr, `msg="(second signal)`)
	select {
	case <-a.Done():
	case <-time.After(5 * time.Second):
		t.Error("the client was not disconnected")
	}
}

// TestNoDrain: -drain-timeout 0 (the default) disconnects at once, and so
// does a drain with nobody connected.
func TestNoDrain(t *testing.T) {
	for _, args := range [][]string{nil, {"-drain-timeout", "1h"}} {
		r := start(t, args, env())
		if args == nil {
			a, err := dial(t, r.udp, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				select {
				case <-a.Done():
				case <-time.After(5 * time.Second):
					t.Error("the client was not disconnected")
				}
			}()
		}
		r.sigs <- syscall.SIGTERM
		if err := r.wait(t, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(r.stderr.String(), "draining") {
			t.Errorf("%q drained:\n%s", args, r.stderr.String())
		}
	}
}

// TestReload: SIGHUP re-reads the config file, applies max-clients and
// log-level live, names what needs a restart, and keeps everything when
// the file is bad.
func TestReload(t *testing.T) {
	path := writeFile(t, "max-clients = 1\n")
	r := start(t, []string{"-config", path, "-metrics", "127.0.0.1:0"}, env())
	if _, err := dial(t, r.udp, nil); err != nil {
		t.Fatal(err)
	}
	var denied *conn.DeniedError
	if _, err := dial(t, r.udp, nil); !errors.As(err, &denied) {
		t.Fatalf("second client with max-clients 1: %v, want Denied", err)
	}

	if err := os.WriteFile(path, []byte("max-clients = 3\nlog-level = \"debug\"\ntimeout = \"7s\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.sigs <- syscall.SIGHUP
	logged(t, r.stderr, `msg="reloaded: some changes need a restart to take effect" .*(applied="max-clients 1 -> 3, log-level info -> debug")`)
	logged(t, r.stderr, `(needs_restart="timeout \(5s -> 7s\)")`)
	b, err := dial(t, r.udp, nil)
	if err != nil {
		t.Fatalf("a client after max-clients went to 3: %v", err)
	}
	logged(t, r.stderr, `level=DEBUG msg=(connected) remote=127.0.0.1:`+strconv.Itoa(int(b.LocalAddr().Port()))+" ")
	if _, body := r.get(t, "/metrics"); !strings.Contains(body, "udpgate_max_clients 3\n") {
		t.Error("udpgate_max_clients does not show the reloaded value")
	}

	// A file that does not validate changes nothing.
	if err := os.WriteFile(path, []byte("max-clients = 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.sigs <- syscall.SIGHUP
	logged(t, r.stderr, `msg="(reload failed): every setting is kept`)
	if _, err := dial(t, r.udp, nil); err != nil {
		t.Errorf("a third client after a failed reload: %v (max-clients should still be 3)", err)
	}
	// Reloading the same file again changes nothing; the restart-only
	// change is still reported, since it still does not run.
	if err := os.WriteFile(path, []byte("max-clients = 3\nlog-level = \"debug\"\ntimeout = \"7s\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.sigs <- syscall.SIGHUP
	logged(t, r.stderr, `(needs_restart="timeout \(5s -> 7s\)")\n(?s:.*)needs_restart="timeout`)
}

// TestReloadLive: every live setting reaches the running server.
func TestReloadLive(t *testing.T) {
	path := writeFile(t, "")
	r := start(t, []string{"-config", path}, env())
	content := "max-clients = 7\nchallenge-rate = -1\noverload = true\nlog-level = \"warn\"\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	r.sigs <- syscall.SIGHUP
	got := logged(t, r.stderr, `msg=reloaded .*applied="([^"]*)"`)
	want := "max-clients 100000 -> 7, challenge-rate 32 -> -1, overload false -> true, log-level info -> warn"
	if got != want {
		t.Errorf("applied %q, want %q", got, want)
	}
}

// TestReloadRealSignal: the process's own SIGHUP and SIGTERM reach run.
func TestReloadRealSignal(t *testing.T) {
	path := writeFile(t, "max-clients = 1\n")
	var stderr conntest.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), []string{"-config", path, "-listen", "127.0.0.1:0", "-summary", "0"}, env(), io.Discard, &stderr)
	}()
	logged(t, &stderr, `msg=(listening)`)
	if err := os.WriteFile(path, []byte("max-clients = 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	logged(t, &stderr, `msg=reloaded .*(applied="max-clients 1 -> 2")`)
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := stopped(t, done, 10*time.Second, "run after SIGTERM"); err != nil {
		t.Fatal(err)
	}
}

// TestJSONLogs: with -log-format json every line is a JSON object, and at
// debug level each connection is logged as it comes and goes, with its
// address and the reason.
func TestJSONLogs(t *testing.T) {
	r := start(t, []string{"-log-format", "json", "-log-level", "debug"}, env())
	cl, err := dial(t, r.udp, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()
	logged(t, r.stderr, `"msg":"(disconnected)"`)
	r.sigs <- syscall.SIGTERM
	if err := r.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	var connected, disconnected map[string]any
	sc := bufio.NewScanner(strings.NewReader(r.stderr.String()))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		msg, _ := rec["msg"].(string)
		msgs = append(msgs, msg)
		switch msg {
		case "connected":
			connected = rec
		case "disconnected":
			disconnected = rec
		}
	}
	for _, w := range []string{"listening", "connected", "disconnected", "signal: stopping", "shutting down: disconnecting clients", "final"} {
		if !slices.Contains(msgs, w) {
			t.Errorf("no %q record among %q", w, msgs)
		}
	}
	local := "127.0.0.1:" + strconv.Itoa(int(cl.LocalAddr().Port()))
	if connected["level"] != "DEBUG" || connected["remote"] != local {
		t.Errorf("connected record %v, want level DEBUG and remote %s", connected, local)
	}
	if disconnected["remote"] != local || disconnected["reason"] != "closed" || disconnected["by"] != "client" {
		t.Errorf("disconnected record %v, want remote %s, reason closed, by client", disconnected, local)
	}
}

// TestConnLogsOnlyAtDebug: at info level no line per connection.
func TestConnLogsOnlyAtDebug(t *testing.T) {
	r := start(t, nil, env())
	cl, err := dial(t, r.udp, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()
	r.sigs <- syscall.SIGTERM
	if err := r.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if s := r.stderr.String(); strings.Contains(s, "msg=connected") || strings.Contains(s, "msg=disconnected") {
		t.Errorf("connection lines at info level:\n%s", s)
	}
}

func TestLogLimiter(t *testing.T) {
	l := logLimiter{rate: 10, burst: 3, tokens: 3}
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		if ok, n := l.allow(t0); !ok || n != 0 {
			t.Fatalf("line %d of the burst: %v, %d suppressed", i, ok, n)
		}
	}
	for range 5 {
		if ok, _ := l.allow(t0); ok {
			t.Fatal("a line beyond the burst was allowed")
		}
	}
	// 100 ms later one token has come back; the first line says how many
	// were left out.
	if ok, n := l.allow(t0.Add(100 * time.Millisecond)); !ok || n != 5 {
		t.Errorf("after 100ms: %v with %d suppressed, want true with 5", ok, n)
	}
	if ok, _ := l.allow(t0.Add(100 * time.Millisecond)); ok {
		t.Error("a second line on one token")
	}
	// A long pause refills only up to the burst.
	t1 := t0.Add(time.Hour)
	for i := range 4 {
		ok, _ := l.allow(t1)
		if ok != (i < 3) {
			t.Errorf("after an hour, line %d: %v", i, ok)
		}
	}
}

// sidecar follows the Agones SDK's REST endpoints (as in
// cmd/internal/agones's tests) and records the calls.
type sidecar struct {
	mu    sync.Mutex
	ev    conntest.Signal // fired at each call
	calls []string
	// gameServer is GET /gameserver's answer.
	gameServer string
}

func (s *sidecar) log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func (s *sidecar) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	call := r.Method + " " + r.URL.Path
	switch r.URL.Path {
	case "/ready", "/health", "/shutdown":
		_, _ = io.WriteString(w, "{}")
	case "/alpha/player/capacity":
		call += " " + body["count"].(string)
		_, _ = io.WriteString(w, "{}")
	case "/alpha/player/connect", "/alpha/player/disconnect":
		call += " player"
		_, _ = io.WriteString(w, `{"bool":true}`)
	case "/gameserver":
		s.mu.Lock()
		answer := s.gameServer
		s.mu.Unlock()
		_, _ = io.WriteString(w, answer)
	default:
		http.NotFound(w, r)
	}
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.mu.Unlock()
	s.ev.Fire()
}

// TestAgones: with -agones the server says Ready once it listens, reports
// the capacity and each player, and Shutdown as it exits. Against a local
// stand-in of the sidecar, not a real one.
func TestAgones(t *testing.T) {
	sc := &sidecar{}
	hs := httptest.NewServer(sc)
	defer hs.Close()
	port := hs.URL[strings.LastIndex(hs.URL, ":")+1:]
	r := start(t, []string{"-agones", "-max-clients", "50"}, env("AGONES_SDK_HTTP_PORT", port))
	waitCall := func(call string) {
		t.Helper()
		if !sc.ev.Await(10*time.Second, func() bool { return slices.Contains(sc.log(), call) }) {
			t.Fatalf("no %q among %q", call, sc.log())
		}
	}
	waitCall("POST /ready")
	cl, err := dial(t, r.udp, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitCall("POST /alpha/player/connect player")
	cl.Close()
	waitCall("POST /alpha/player/disconnect player")
	r.sigs <- syscall.SIGTERM
	if err := r.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	calls := slices.DeleteFunc(sc.log(), func(c string) bool { return c == "POST /health" })
	want := []string{"POST /ready", "PUT /alpha/player/capacity 50", "POST /alpha/player/connect player",
		"POST /alpha/player/disconnect player", "POST /shutdown"}
	if !slices.Equal(calls, want) {
		t.Errorf("calls (health pings left out) %q, want %q", calls, want)
	}
}

// fastpathInitial is one Initial of a client with the server's default
// wire settings.
func fastpathInitial(t *testing.T) []byte {
	t.Helper()
	hs := handshake.NewClientHandshake(handshake.ClientConfig{NetworkVersion: 1}, 1)
	hs.Start(0)
	out := make([]byte, 2048)
	n, _ := hs.Poll(0, out)
	if n == 0 {
		t.Fatal("the client handshake sent no Initial")
	}
	return out[:n]
}
