package conn

import (
	"math"
	"testing"
	"time"
)

// TestConnLoopSharesHandshakes: while a login storm keeps the classes
// apart, a steered server's connection loop takes handshake datagrams from
// the handshake socket whenever its own socket is empty. Only the connection loop runs
// here, so every login goes through it: without the sharing no client
// would get a Challenge.
func TestConnLoopSharesHandshakes(t *testing.T) {
	s, err := listenStopped("127.0.0.1:0", Config{Sockets: 2, SweepInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if s.spread == nil {
		t.Skip("kernel steering is not available here")
	}
	// Housekeeping spreads connection packets once spreadHold has passed
	// without a backlog since lastFlood, and sharing ends spreadHold after
	// lastStorm: never, here.
	s.spread.lastFlood.Store(math.MaxInt64 / 2)
	s.spread.lastStorm.Store(math.MaxInt64 / 2)
	var run []*loop
	for _, l := range s.loops {
		if l.shared != nil {
			run = append(run, l)
		}
	}
	if len(run) != 1 {
		t.Fatalf("%d loops share a handshake socket, want the one connection loop", len(run))
	}
	s.start(run)
	const clients = 3
	for range clients {
		c := dial(t, s, Config{})
		defer c.Close()
	}
	st := s.Stats()
	if st.Accepted != clients || st.Shared < 2*clients {
		t.Fatalf("accepted %d, shared %d datagrams; want %d and at least %d (each client's Initial and Response)",
			st.Accepted, st.Shared, clients, 2*clients)
	}
	if s.spread.g.Spreading() {
		t.Fatal("the classes were spread during the test")
	}
}
