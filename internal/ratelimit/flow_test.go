package ratelimit

import (
	"testing"
	"time"
)

const flowT0 = int64(1_700_000_000) * 1e9

// flowCount is how many packets of n bytes f lets through s at now, up to
// limit.
func flowCount(f *Flow, s *FlowState, n int, now int64, limit int) int {
	k := 0
	for k < limit && f.Allow(s, n, now) {
		k++
	}
	return k
}

// TestFlow: each bucket holds its burst and refills at its rate; the
// packet budget binds for small packets, the byte budget for large ones, and
// a packet refused by one bucket spends nothing from the other.
func TestFlow(t *testing.T) {
	// 1000 packets/s and 100 kB/s, bursts of 100 ms: 100 packets or 10 kB.
	f := NewFlow(1000, 100_000, 0.1, 1200)
	t.Run("packets", func(t *testing.T) {
		s := NewFlowState(flowT0)
		if n := flowCount(&f, &s, 10, flowT0, 1e6); n != 100 {
			t.Fatalf("burst of 10-byte packets: %d, want 100", n)
		}
		// 1 s later: 1000 more would have come in, the bucket holds 100.
		if n := flowCount(&f, &s, 10, flowT0+1e9, 1e6); n != 100 {
			t.Fatalf("after 1 s: %d, want the burst, 100", n)
		}
		// 25 ms later: 25.
		if n := flowCount(&f, &s, 10, flowT0+1e9+25e6, 1e6); n != 25 {
			t.Fatalf("after 25 ms: %d, want 25", n)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		s := NewFlowState(flowT0)
		// 1000-byte packets: the byte bucket (10 kB) binds at 10.
		if n := flowCount(&f, &s, 1000, flowT0, 1e6); n != 10 {
			t.Fatalf("burst of 1000-byte packets: %d, want 10", n)
		}
		// 50 ms later the byte bucket has 5 kB again: five more.
		if n := flowCount(&f, &s, 1000, flowT0+50e6, 1e6); n != 5 {
			t.Fatalf("after 50 ms: %d, want 5", n)
		}
	})
	t.Run("steady", func(t *testing.T) {
		// A sender at 3000 packets/s for 10 s after the burst: 100 + 10 000
		// pass (every millisecond one), to within one.
		s := NewFlowState(flowT0)
		pass := 0
		for i := range 30_000 {
			if f.Allow(&s, 10, flowT0+int64(i)*1e9/3000) {
				pass++
			}
		}
		if pass < 10_099 || pass > 10_100 {
			t.Fatalf("10 s at 3000/s: %d passed, want 100 + 10 000 (the burst, then 1000/s)", pass)
		}
	})
	t.Run("clock back", func(t *testing.T) {
		s := NewFlowState(flowT0)
		flowCount(&f, &s, 10, flowT0, 1e6)
		// The clock steps back an hour: empty for one window (100 ms), not
		// for the hour.
		back := flowT0 - int64(time.Hour)
		if n := flowCount(&f, &s, 10, back, 1e6); n != 0 {
			t.Fatalf("just after the step: %d, want 0", n)
		}
		if n := flowCount(&f, &s, 10, back+200e6, 1e6); n != 100 {
			t.Fatalf("200 ms after the step: %d, want the burst, 100", n)
		}
	})
	t.Run("silent for minutes", func(t *testing.T) {
		// After 300 s (past the 214 s a time is told apart in) and after
		// 429 s (a whole turn of the ticks), a stream finds its bucket
		// full, or empty for one window at worst.
		for _, gap := range []time.Duration{300 * time.Second, (1 << 32) * flowUnit, time.Hour} {
			s := NewFlowState(flowT0)
			flowCount(&f, &s, 10, flowT0, 1e6)
			at := flowT0 + int64(gap)
			n := flowCount(&f, &s, 10, at, 1e6)
			if n != 100 && n != 0 {
				t.Fatalf("after %v: %d, want 100 or 0", gap, n)
			}
			if n := flowCount(&f, &s, 10, at+int64(200*time.Millisecond), 1e6); n != 100 {
				t.Fatalf("after %v and 200 ms: %d, want the burst, 100", gap, n)
			}
		}
	})
	t.Run("ticks wrap", func(t *testing.T) {
		// Across the moment the uint32 of ticks wraps, as anywhere.
		wrap := (int64(1)<<32)*flowUnit*3 - 50e6 // 50 ms before a wrap
		s := NewFlowState(wrap)
		pass := 0
		for i := range 3000 {
			if f.Allow(&s, 10, wrap+int64(i)*1e9/3000) {
				pass++
			}
		}
		if pass < 1099 || pass > 1100 {
			t.Fatalf("1 s at 3000/s across a wrap: %d, want 100 + 1000", pass)
		}
	})
	t.Run("unlimited", func(t *testing.T) {
		s := NewFlowState(flowT0)
		for _, u := range []Flow{NewFlow(Unlimited, Unlimited, 1, 1200), {}} {
			if n := flowCount(&u, &s, 1200, flowT0, 1e5); n != 1e5 {
				t.Fatalf("unlimited: %d of 100000", n)
			}
		}
		// Bytes unlimited: the packet bucket alone.
		p := NewFlow(1000, Unlimited, 0.1, 1200)
		if n := flowCount(&p, &s, 1200, flowT0, 1e6); n != 100 {
			t.Fatalf("packets only: %d, want 100", n)
		}
	})
	t.Run("one packet at least", func(t *testing.T) {
		// A burst below one packet still holds one (a datagram of
		// maxPacket bytes too).
		s := NewFlowState(flowT0)
		g := NewFlow(1, 100, 0.001, 1200)
		if n := flowCount(&g, &s, 1200, flowT0, 1e6); n != 1 {
			t.Fatalf("tiny burst: %d, want 1", n)
		}
	})
}

// TestFlowAllocs: Allow allocates nothing.
func TestFlowAllocs(t *testing.T) {
	f := NewFlow(1000, 1e6, 0.1, 1200)
	s := NewFlowState(flowT0)
	now := flowT0
	if a := testing.AllocsPerRun(1000, func() { f.Allow(&s, 100, now); now += 1e5 }); a != 0 {
		t.Fatalf("%v allocations per Allow", a)
	}
}

// BenchmarkFlowAllow times Allow within budget (the cost every packet of a
// connection pays) and over it (the cost of a drop).
func BenchmarkFlowAllow(b *testing.B) {
	f := NewFlow(10_000, 16<<20, 0.1, 1200)
	b.Run("within", func(b *testing.B) {
		s := NewFlowState(flowT0)
		now := flowT0
		for b.Loop() {
			f.Allow(&s, 100, now)
			now += 1e6
		}
	})
	b.Run("over", func(b *testing.B) {
		s := NewFlowState(flowT0)
		for b.Loop() {
			f.Allow(&s, 100, flowT0)
		}
	})
}
