package conn

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/udpgate/udpgate/batchio"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
)

// fakeSpread is a spreadGroup that records its switches.
type fakeSpread struct {
	on       bool
	switches int
	err      error
}

func (f *fakeSpread) SetSpread(on bool) error {
	if f.err != nil {
		return f.err
	}
	if f.on != on {
		f.switches++
	}
	f.on = on
	return nil
}

func (f *fakeSpread) Spreading() bool { return f.on }

// TestSpreader: only a handshake loop's batch at least half full, less than
// half of it accepted connection packets, stops the spreading; housekeeping starts
// it again after spreadHold without one; a refused switch is given up.
func TestSpreader(t *testing.T) {
	g := &fakeSpread{on: true}
	sp := &spreader{g: g, loops: 1, log: slog.New(slog.DiscardHandler)}
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		idx, n, accepted int
	}{
		{1, 64, 0},  // a connection socket's loop
		{0, 31, 0},  // less than half a batch: no backlog
		{0, 64, 32}, // half of it players
		{0, 64, 64}, // all players
	} {
		sp.observe(tc.idx == 0, tc.n, tc.accepted, 0, 64, t0)
		if !g.on {
			t.Fatalf("loop %d, %d datagrams, %d accepted: spreading stopped", tc.idx, tc.n, tc.accepted)
		}
	}
	sp.observe(true, 32, 15, 0, 64, t0)
	if g.on {
		t.Fatal("a half-full batch, 15 of 32 accepted: still spreading")
	}
	sp.check(t0.Add(spreadHold - time.Millisecond))
	if g.on {
		t.Fatal("spreading again before spreadHold passed")
	}
	sp.observe(true, 64, 0, 0, 64, t0.Add(spreadHold/2)) // the flood goes on
	sp.check(t0.Add(spreadHold + time.Millisecond))
	if g.on {
		t.Fatal("spreading again spreadHold after the first backlog, though the flood went on")
	}
	sp.check(t0.Add(spreadHold/2 + spreadHold))
	if !g.on || g.switches != 2 {
		t.Fatalf("spreading %v after %d switches, want true after 2", g.on, g.switches)
	}
	g.err = errors.New("refused")
	sp.observe(true, 64, 0, 0, 64, t0.Add(3*spreadHold))
	sp.observe(true, 64, 0, 0, 64, t0.Add(3*spreadHold))
	if !sp.broken.Load() || !g.on {
		t.Fatalf("after a refused switch: broken %v, spreading %v; want true, true", sp.broken.Load(), g.on)
	}
}

// TestSpreaderStorm: a login storm is on (and connection loops share the
// handshake sockets' backlog while the classes are apart) for spreadHold
// after a batch from a handshake socket proved a client in at least one of
// stormShare of its datagrams: a storm's batch, not a flood's.
func TestSpreaderStorm(t *testing.T) {
	g := &fakeSpread{}
	sp := &spreader{g: g, loops: 1, log: slog.New(slog.DiscardHandler)}
	t0 := time.Unix(1000, 0)
	sp.lastStorm.Store(t0.Add(-spreadHold).UnixNano())
	for _, tc := range []struct {
		hs        bool
		n, proven int
		want      bool
		what      string
	}{
		{true, 64, 0, false, "a flood of Initials"},
		{true, 64, 64/stormShare - 1, false, "a flood with a few logins in it"},
		{false, 64, 32, false, "a batch from a connection socket"},
		{true, 64, 64 / stormShare, true, "logins in one of stormShare datagrams"},
	} {
		sp.observe(tc.hs, tc.n, 0, tc.proven, 64, t0)
		if got := sp.storming(t0); got != tc.want {
			t.Fatalf("%s: storming %v, want %v", tc.what, got, tc.want)
		}
	}
	if !sp.storming(t0.Add(spreadHold - time.Nanosecond)) {
		t.Fatal("the storm ended before spreadHold passed")
	}
	if sp.storming(t0.Add(spreadHold)) {
		t.Fatal("still storming spreadHold after the storm's last batch")
	}
	// The busy spell began with the first batch, the flood's; a storm's
	// batch within spreadHold of the last goes on with it, a small batch
	// that proves no one is no part of it, and a storm's batch after
	// spreadHold begins another.
	if got := sp.busySince.Load(); got != t0.UnixNano() {
		t.Fatalf("the spell began at %d, want %d", got, t0.UnixNano())
	}
	t1 := t0.Add(spreadHold - time.Nanosecond)
	sp.observe(true, 64, 0, 32, 64, t1)
	if got := sp.busySince.Load(); got != t0.UnixNano() {
		t.Fatalf("a batch within spreadHold of the last began a spell at %d", got)
	}
	t2 := t1.Add(spreadHold)
	sp.observe(true, 4, 0, 0, 64, t2)
	if got := sp.busySince.Load(); got != t0.UnixNano() {
		t.Fatalf("a small batch that proves no one began a spell at %d", got)
	}
	sp.observe(true, 64, 0, 32, 64, t2)
	if got := sp.busySince.Load(); got != t2.UnixNano() {
		t.Fatalf("a storm's batch spreadHold after the last: the spell began at %d, want %d", got, t2.UnixNano())
	}
}

// TestSpreadUnderFlood, on real sockets: a steered server starts with the
// classes apart and spreads connection packets over every socket after
// spreadHold; a flood of Initials that backs up
// its handshake socket stops that, and it spreads again once the flood has
// been over for spreadHold.
func TestSpreadUnderFlood(t *testing.T) {
	clk := &clock{}
	var logged conntest.Signal
	s := listen(t, Config{Sockets: 2, Now: clk.Now, ChallengeRate: -1, Logger: slog.New(logSignal{&logged})})
	g, ok := s.group.(*batchio.Group)
	if !ok || !g.Steered() {
		t.Skip("the group is not steered here")
	}
	if g.Spreading() || s.spread == nil {
		t.Fatalf("new steered server: spreading %v, spreader %v; want false, true", g.Spreading(), s.spread != nil)
	}
	clk.Advance(spreadHold + time.Second)
	if !logged.Await(10*time.Second, g.Spreading) {
		t.Fatal("not spreading spreadHold after the start")
	}
	deadline := time.Now().Add(10 * time.Second)
	peers := make([]*rawPeer, 8)
	for i := range peers {
		peers[i] = newRawPeer(t, s, fmt.Sprintf("127.0.3.%d:0", 1+i))
	}
	sent := 0
	for g.Spreading() {
		if time.Now().After(deadline) || sent > 2_000_000 {
			t.Fatalf("still spreading after %d Initials", sent)
		}
		for range 64 {
			for _, p := range peers {
				p.send(p.handshakePacket(protocol.TypeInitial, nil))
				sent++
			}
		}
	}
	t.Logf("spreading stopped after %d Initials", sent)
	clk.Advance(spreadHold + time.Second)
	if !logged.Await(10*time.Second, g.Spreading) {
		t.Fatal("not spreading again after the flood")
	}
}
