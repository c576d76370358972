package conntest

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// Eventually waits, up to 10 s, for cond to hold, checking every 5 ms, and
// fails the test naming what it waited for. It is for conditions that
// depend on real sockets and goroutines; tests over a Network step the
// server instead and need no waiting.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Listen starts a server on a free loopback port with listen (conn.Listen)
// and closes it when the test ends:
//
//	srv := conntest.Listen(t, conn.Listen, conn.Config{Handler: echo{}})
func Listen[S interface{ Close() error }, C any](t testing.TB, listen func(string, C) (S, error), cfg C) S {
	t.Helper()
	s, err := listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Echo is a handler that sends every Data payload back on its connection;
// instantiate it with conn's types, conntest.Echo[*conn.Conn,
// conn.DisconnectReason], and embed it to record more.
type Echo[C interface {
	Send([]byte) (uint16, error)
}, R any] struct{}

// OnConnect does nothing.
func (Echo[C, R]) OnConnect(C) {}

// OnPacket echoes p.
func (Echo[C, R]) OnPacket(c C, p []byte) { _, _ = c.Send(p) }

// OnDisconnect does nothing.
func (Echo[C, R]) OnDisconnect(C, R, bool) {}

// Signal lets a test wait for a condition that other goroutines change
// (handler callbacks, a command's output): they call Fire after each
// change, and Await checks the condition again at each Fire, so nothing
// polls. The zero Signal is ready to use.
type Signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// Fire wakes the goroutines in Await.
func (s *Signal) Fire() {
	s.mu.Lock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
	s.mu.Unlock()
}

// Await waits for cond to hold, checking it now and after each Fire, for at
// most d (on the bubble's clock inside a synctest bubble), and reports
// whether it held.
func (s *Signal) Await(d time.Duration, cond func() bool) bool {
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for {
		s.mu.Lock()
		if s.ch == nil {
			s.ch = make(chan struct{})
		}
		ch := s.ch
		s.mu.Unlock()
		if cond() {
			return true
		}
		select {
		case <-ch:
		case <-timeout.C:
			return false
		}
	}
}

// SyncBuffer is a bytes.Buffer safe for concurrent use, for a logger or a
// command's output that the test reads while goroutines write.
type SyncBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	signal Signal
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	n, err := s.b.Write(p)
	s.mu.Unlock()
	s.signal.Fire()
	return n, err
}

// Await waits, up to d, until cond holds for what was written so far, and
// reports whether it did.
func (s *SyncBuffer) Await(d time.Duration, cond func(text string) bool) bool {
	return s.signal.Await(d, func() bool { return cond(s.String()) })
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
