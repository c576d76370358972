package conn

import (
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
)

// TestConnLoopSharesHandshakes: while a login storm keeps the classes
// apart, a steered server's connection loop takes handshake datagrams from
// the handshake socket whenever its own socket is empty. Only the connection loop runs
// here, so every login goes through it: without the sharing no client
// would get a Challenge.
func TestConnLoopSharesHandshakes(t *testing.T) {
	// The server's clock stands still, so that however slow the machine
	// the clients stay newcomers, not players (playerAge).
	t0 := time.Now()
	s, l := stormingServer(t, Config{SweepInterval: 10 * time.Millisecond, Now: func() time.Time { return t0 }})
	s.start([]*loop{l})
	const clients = 3
	for range clients {
		c := dial(t, s, Config{})
		defer c.Close()
	}
	// The loop publishes its counters after the batch that sent the last
	// Ack, which the client may hear first: wait for them.
	conntest.Eventually(t, "the loop's counters", func() bool {
		st := s.Stats()
		return st.Accepted == clients && st.Shared >= 2*clients
	})
	if s.spread.g.Spreading() {
		t.Fatal("the classes were spread during the test")
	}
}

// TestConnLoopWithPlayersKeepsToItsSocket: a connection loop takes no
// share of a login storm for spreadHold after its socket brings a player's
// packet, so that players' packets never wait for its time slice behind a
// storm's; the storm's own clients, younger than playerAge, are no
// players. The server's clock moves only when the test moves it.
func TestConnLoopWithPlayersKeepsToItsSocket(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	rec := newRecorder(false)
	s, l := stormingServer(t, Config{Handler: rec, KeepAlive: time.Hour, Timeout: 2 * time.Hour,
		Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	s.start([]*loop{l})
	// Only the connection loop runs: each handshake goes through a share.
	sent := func(c *Client, n int) {
		t.Helper()
		if _, err := c.Send([]byte("move")); err != nil {
			t.Fatal(err)
		}
		rec.await(t, "the client's packet", func() bool {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			return len(rec.pkts) >= n
		})
	}
	first := dial(t, s, Config{})
	sent(first, 1)
	// A newcomer's packet leaves the loop sharing: the next client gets
	// in through it.
	dial(t, s, Config{})
	// playerAge later the first client is a player. (The logins set
	// lastStorm to the clock's time: the storm goes on.)
	clock.Add(int64(playerAge))
	s.spread.lastStorm.Store(math.MaxInt64 / 2)
	sent(first, 2)
	s.Close() // the loop has finished its batch: its fields are ours
	if s.spread.g.Spreading() || !s.spread.storming(s.st.Now()) {
		t.Fatal("the storm ended or the classes spread during the test")
	}
	if l.sharing() {
		t.Fatal("a loop whose socket has just brought a player's packet shares the storm")
	}
	l.lastPlay = l.lastPlay.Add(-spreadHold)
	if !l.sharing() {
		t.Fatal("spreadHold after its last player's packet the loop does not share the storm")
	}
}

// TestPlayerPackets: which accepted connection packets are a player's
// (loop.connIn): a connection's challenged spreadHold or more before the
// busy spell began, or playerAge after its handshake; not one challenged in
// the spell's first spreadHold (a storm's first small batches), never a
// dropped packet, and none while the loop does not watch (it cannot share,
// or no storm is on).
func TestPlayerPackets(t *testing.T) {
	s, err := listenStopped("127.0.0.1:0", Config{Sockets: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	l := s.loops[0]
	age, hold := playerAge.Seconds(), spreadHold.Seconds()
	for _, tc := range []struct {
		what                  string
		challenged, busy, now float64
		dropped, unwatched    bool
		want                  bool
	}{
		{"the storm's own client", 100, 99, 100.1, false, false, false},
		{"challenged before the storm", 100, 100 + hold + 0.01, 101, false, false, true},
		{"challenged in the storm's first batches", 100, 100 + hold - 0.01, 101, false, false, false},
		{"playerAge after its handshake", 100, 99, 100 + age, false, false, true},
		{"not yet playerAge after it", 100, 99, 100 + age - 0.01, false, false, false},
		{"a dropped packet", 100, 102, 100 + age, true, false, false},
		{"a loop that does not watch", 100, 102, 100 + age, false, true, false},
	} {
		l.played, l.watch, l.playedBy, l.nowSec = false, !tc.unwatched, tc.busy-hold, tc.now
		r := protocol.DropNone
		if tc.dropped {
			r = protocol.DropBadSize
		}
		l.connIn(r, &Conn{cookieTS: tc.challenged})
		if l.played != tc.want {
			t.Errorf("%s: a player's packet %v, want %v", tc.what, l.played, tc.want)
		}
	}
}

// stormingServer starts a steered server of two sockets with cfg, its loops
// not running, in a login storm that never ends unless the test says so
// (lastStorm), with the classes kept apart (lastFlood); it returns the
// server and its one connection loop, which shares the handshake socket.
func stormingServer(t *testing.T, cfg Config) (*Server, *loop) {
	t.Helper()
	cfg.Sockets = 2
	s, err := listenStopped("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if s.spread == nil {
		t.Skip("kernel steering is not available here")
	}
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
	return s, run[0]
}
