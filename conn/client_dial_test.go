package conn

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDialUnreachable: dialling a loopback port where nothing listens fails
// within a second, naming the cause, instead of after the 10 s connect
// timeout (issue 14 item 7).
func TestDialUnreachable(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("ICMP errors reach an unconnected UDP socket only on Linux (IP_RECVERR)")
	}
	for _, network := range []string{"127.0.0.1:0", "[::1]:0"} {
		pc, err := net.ListenPacket("udp", network)
		if err != nil {
			t.Logf("%s: %v (skipped)", network, err)
			continue
		}
		addr := pc.LocalAddr().String()
		pc.Close() // now nothing listens there
		start := time.Now()
		_, err = Dial(context.Background(), addr, Config{})
		took := time.Since(start)
		var ue *UnreachableError
		if !errors.As(err, &ue) {
			t.Fatalf("%s: Dial = %v after %v, want an *UnreachableError", addr, err, took)
		}
		if took > time.Second {
			t.Errorf("%s: Dial took %v, want under 1 s", addr, took)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || ue.Addr.String() != addr ||
			!strings.Contains(err.Error(), "nothing listens") || !strings.Contains(err.Error(), "check the address") {
			t.Errorf("%s: error %q (addr %v) does not name the cause and the fix", addr, err, ue.Addr)
		}
		t.Logf("%s: failed in %v: %v", addr, took, err)
	}
}

// TestDialUnreachableAfterServerAnswered: once the server has answered, an
// ICMP error (forgeable by anyone who knows the client's port) no longer
// ends anything: a connected client survives its server's port going dark
// for a moment.
func TestDialUnreachableAfterServerAnswered(t *testing.T) {
	s := listen(t, Config{})
	c := dial(t, s, Config{Timeout: 30 * time.Second})
	c.mu.Lock()
	c.refusedLocked(&net.OpError{Op: "read", Net: "udp", Err: syscall.ECONNREFUSED})
	dialed, conn := c.dialed, c.conn
	c.mu.Unlock()
	if !dialed || conn == nil || c.Err() != nil {
		t.Fatalf("connected client after an ICMP error: dialed %v conn %v err %v", dialed, conn, c.Err())
	}
}
