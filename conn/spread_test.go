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
// it again after spreadHold without one, under a load that asks for it; a
// refused switch is given up.
func TestSpreader(t *testing.T) {
	g := &fakeSpread{on: true}
	t0 := time.Unix(1000, 0)
	sp := newSpreader(g, 1, 2, slog.New(slog.DiscardHandler), t0)
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
	sp.work(1, time.Duration(spreadAt*float64(spreadHold))) // the connection loop is busy
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

// TestSpreaderFollowsLoad: connection packets spread over every socket
// once a connection loop is busy for spreadAt of a span of at least
// lookEvery, never under a lighter load or within spreadHold of a
// handshake backlog, and are kept to the connection sockets again once
// the loops together have stayed under keepAt of a connection loop's time
// for spreadHold. Switches for load are not a flood's.
func TestSpreaderFollowsLoad(t *testing.T) {
	g := &fakeSpread{}
	t0 := time.Unix(1000, 0)
	// Four loops: two handshake sockets', two connection sockets'.
	sp := newSpreader(g, 2, 4, slog.New(slog.DiscardHandler), t0)
	now := t0
	// step moves the clock by d after the loops worked busy[i] of it.
	step := func(d time.Duration, busy ...float64) {
		for i, b := range busy {
			sp.work(i, time.Duration(b*float64(d)))
		}
		now = now.Add(d)
		sp.check(now)
	}
	for range 20 {
		step(spreadHold/5, 0.9, 0.9, 0.59, 0.59) // busy handshake loops do not count
	}
	if g.on {
		t.Fatal("spread while no connection loop was busy for spreadAt of the time")
	}
	sp.lastFlood.Store(now.UnixNano())
	step(lookEvery/2, 0, 0, 0, 1) // too short a span to tell
	step(spreadHold-lookEvery/2-time.Millisecond, 0, 0, 0, 0.7)
	if g.on {
		t.Fatal("spread within spreadHold of a handshake backlog")
	}
	step(lookEvery, 0, 0, 0, spreadAt)
	if !g.on {
		t.Fatal("not spread while a connection loop was busy for spreadAt of the time")
	}
	// Spread, the loops share the load: 4 × 0.16 over 2 connection loops
	// is 0.32, at least keepAt.
	for range 20 {
		step(spreadHold/5, 0.16, 0.16, 0.16, 0.16)
	}
	if !g.on {
		t.Fatal("spreading stopped while the loops were busy for keepAt of the connection loops' time")
	}
	step(spreadHold/2, 0.14, 0.14, 0.14, 0.14) // 0.28: light
	step(spreadHold/2-lookEvery, 0.14, 0.14, 0.14, 0.14)
	if !g.on {
		t.Fatal("spreading stopped before spreadHold of a light load")
	}
	step(lookEvery, 0.14, 0.14, 0.14, 0.14)
	if g.on || g.switches != 2 || sp.flooded.Load() {
		t.Fatalf("after spreadHold of a light load: spreading %v after %d switches, flooded %v; want false, 2, false",
			g.on, g.switches, sp.flooded.Load())
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
	spread := func(what string) {
		t.Helper()
		if !loadUntilSpread(s, clk.Advance, &logged, g.Spreading) {
			t.Fatal(what)
		}
	}
	spread("not spreading spreadHold after the start under a load")
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
		busy(s) // the players play on: only the flood may stop the spreading
		for range 64 {
			for _, p := range peers {
				p.send(p.handshakePacket(protocol.TypeInitial, nil))
				sent++
			}
		}
	}
	if !s.spread.flooded.Load() {
		t.Fatal("the spreading stopped, but not for the flood")
	}
	t.Logf("spreading stopped after %d Initials", sent)
	// The flood's tail may back the handshake socket up a while longer:
	// the clock moves on past it under the load.
	spread("not spreading again after the flood")
}

// busy tells s's spreader, as its connection loops would, that they were
// busy for spreadHold: more than the time between two looks of
// housekeeping's, whatever the clock does meanwhile.
func busy(s *Server) {
	for i := s.spread.loops; i < len(s.spread.busy); i++ {
		s.spread.work(i, spreadHold)
	}
}

// loadUntilSpread keeps s's connection loops busy (busy), moving the clock
// by lookEvery (advance) each time, until done (awaited on sig) or 10 s
// pass.
func loadUntilSpread(s *Server, advance func(time.Duration), sig *conntest.Signal, done func() bool) bool {
	deadline := time.Now().Add(10 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			return false
		}
		busy(s)
		advance(lookEvery)
		sig.Await(50*time.Millisecond, done)
	}
	return true
}
