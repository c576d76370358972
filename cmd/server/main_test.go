package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/udpgate/udpgate/conn"
)

// syncBuffer is a bytes.Buffer safe for the server's logger and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logged waits for a log line matching re and returns its first group.
func logged(t *testing.T, out *syncBuffer, re string) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := rx.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no log line matching %s in:\n%s", re, out.String())
	return ""
}

// TestRunWithMetrics starts the command as main does (flags, environment,
// file), serves a client, scrapes the metrics endpoint it opened and stops
// it as a signal would.
func TestRunWithMetrics(t *testing.T) {
	path := writeFile(t, "max-clients = 10\nsummary = \"50ms\"\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-config", path, "-listen", "127.0.0.1:0"},
			env("UDPGATE_METRICS", "127.0.0.1:0"), io.Discard, &stderr)
	}()
	udp := logged(t, &stderr, `msg=listening addr=(\S+)`)
	web := logged(t, &stderr, `msg="serving metrics and pprof" addr=(\S+)`)

	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	cl, err := conn.Dial(dctx, udp, conn.Config{NetworkVersion: 1}) // the server's default
	dcancel()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Send([]byte("hello")); err != nil {
		t.Fatal(err)
	}

	var body string
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(body, "udpgate_connections 1\n") && time.Now().Before(deadline) {
		resp, err := http.Get("http://" + web + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		time.Sleep(10 * time.Millisecond)
	}
	for _, w := range []string{"udpgate_connections 1\n", "udpgate_max_clients 10\n", `udpgate_handshake_sent_total{type="challenge"} 1`} {
		if !strings.Contains(body, w) {
			t.Errorf("/metrics lacks %q", w)
		}
	}
	logged(t, &stderr, `msg=summary connections=(1)`)

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its context ended")
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-metrics", "127.0.0.1:0"}, env(), io.Discard, &stderr)
	}()
	web := logged(t, &stderr, `msg="serving metrics and pprof" addr=(\S+)`)
	err := run(context.Background(), []string{"-listen", "127.0.0.1:0", "-metrics", web}, env(), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-metrics "+`"`+web+`"`) || !strings.Contains(err.Error(), "free address") {
		t.Errorf("second server on metrics address %s: %v, want an error naming -metrics", web, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
