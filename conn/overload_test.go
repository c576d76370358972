package conn

import (
	"testing"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
)

func TestOverloadLevels(t *testing.T) {
	o := overload{cfg: OverloadConfig{}.withDefaults()}
	t0 := time.Unix(1000, 0)
	var count uint64
	step := func(perSecond float64, d time.Duration) (OverloadLevel, bool) {
		count += uint64(perSecond * d.Seconds())
		t0 = t0.Add(d)
		_, to, changed := o.update(count, t0)
		if !changed {
			to = OverloadLevel(o.level.Load())
		}
		return to, changed
	}
	step(0, 0) // first sample starts the window
	if l, _ := step(1000, time.Second); l != LevelNormal {
		t.Fatalf("1k/s: %v", l)
	}
	if l, _ := step(10_000, time.Second); l != LevelBurst {
		t.Fatalf("10k/s: %v", l)
	}
	// Straight to the highest level crossed.
	if l, _ := step(300_000, time.Second); l != LevelSevere {
		t.Fatalf("300k/s: %v", l)
	}
	// Calm for less than the cooloff: stays.
	for range 9 {
		if l, _ := step(100, time.Second); l != LevelSevere {
			t.Fatalf("during cooloff: %v", l)
		}
	}
	// Then one level per cooloff.
	if l, ch := step(100, time.Second); l != LevelFlood || !ch {
		t.Fatalf("after cooloff: %v %v", l, ch)
	}
	for range 10 {
		step(100, time.Second)
	}
	if l := OverloadLevel(o.level.Load()); l != LevelBurst {
		t.Fatalf("after two cooloffs: %v", l)
	}
	// A short window is not a rate.
	if _, ch := step(1e9, 10*time.Millisecond); ch {
		t.Fatal("changed on a 10 ms window")
	}
	if o.changes.Load() != 4 {
		t.Fatalf("changes %d", o.changes.Load())
	}
}

// Under LevelFlood a loop answers at most its Challenge budget, and the
// budget refills with time.
func TestOverloadCapsChallenges(t *testing.T) {
	s := listen(t, Config{Sockets: 1, ChallengeRate: -1,
		Overload: OverloadConfig{Enabled: true, ChallengeCaps: [2]float64{100, 10}}})
	s.ov.level.Store(int32(LevelFlood))
	l := newLoop(s, 0, s.socks[0], 64, seconds(time.Now()))
	p := newRawPeer(t, s, "127.0.0.1:0")
	initial := p.handshakePacket(0, nil)
	now := time.Now()
	l.shed(now) // the level's first batch: the budget starts empty
	run := func(at time.Time, n int) uint64 {
		before := l.cnt.local[cReply+1]
		for i := range n {
			m := &l.rb.Msgs[i%64]
			m.N = copy(m.Buf, initial)
			m.Addr = p.addr()
		}
		for n > 0 {
			k := min(n, 64)
			l.batch(k, at)
			n -= k
		}
		return l.cnt.local[cReply+1] - before
	}
	if got := run(now.Add(500*time.Millisecond), 1000); got != 50 {
		t.Fatalf("half a second at 100/s: %d challenges, want 50", got)
	}
	if got := l.cnt.local[cDrop+int(protocol.DropOverload)]; got != 950 {
		t.Fatalf("overload drops %d, want 950", got)
	}
	// A full second refills at most one second's worth.
	if got := run(now.Add(5*time.Second), 1000); got != 100 {
		t.Fatalf("after a long pause: %d, want the cap 100", got)
	}
	// Burst level: no RestartHandshake to strangers' connection packets.
	s.ov.level.Store(int32(LevelBurst))
	var ck [20]byte
	m := &l.rb.Msgs[0]
	m.N = copy(m.Buf, p.connPacket(ck, 0, 1, nil))
	m.Addr = p.addr()
	before := l.cnt.local[cReply+4]
	l.batch(1, now.Add(6*time.Second))
	if l.cnt.local[cReply+4] != before {
		t.Fatal("RestartHandshake sent at LevelBurst")
	}
}
