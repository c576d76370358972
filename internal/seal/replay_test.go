package seal

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// netcodeReplay is netcode.c's replay protection as written there: a ring of
// 256 u64 counters, all-ones meaning empty. It is the oracle for Replay.
type netcodeReplay struct {
	mostRecent uint64
	received   [256]uint64
}

func newNetcodeReplay() *netcodeReplay {
	r := &netcodeReplay{}
	for i := range r.received {
		r.received[i] = math.MaxUint64
	}
	return r
}

func (r *netcodeReplay) alreadyReceived(seq uint64) bool {
	if seq+256 <= r.mostRecent {
		return true
	}
	i := seq % 256
	if r.received[i] == math.MaxUint64 {
		return false
	}
	return r.received[i] >= seq
}

func (r *netcodeReplay) advance(seq uint64) {
	if seq > r.mostRecent {
		r.mostRecent = seq
	}
	r.received[seq%256] = seq
}

// checkAgainstNetcode feeds both the same counters; a counter that passes is
// "authenticated" (marked) unless forged says otherwise.
func checkAgainstNetcode(t *testing.T, counters []uint64, forged func(int) bool) {
	t.Helper()
	var got Replay
	want := newNetcodeReplay()
	for i, c := range counters {
		g, w := got.Seen(c), want.alreadyReceived(c)
		if g != w {
			t.Fatalf("step %d, counter %d (newest %d): Seen %v, netcode %v", i, c, got.last, g, w)
		}
		if !g && !forged(i) {
			got.Mark(c)
			want.advance(c)
		}
	}
}

func TestReplayMatchesNetcode(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for run := range 200 {
		var counters []uint64
		next := uint64(r.IntN(3)) * uint64(r.IntN(1000))
		for range 2000 {
			switch k := r.IntN(10); {
			case k < 5: // in order
				next++
				counters = append(counters, next)
			case k < 7: // late, around the window's edge
				back := uint64(r.IntN(300))
				counters = append(counters, next-min(back, next))
			case k < 8: // duplicate of a recent one
				counters = append(counters, next-min(uint64(r.IntN(4)), next))
			case k < 9: // a jump ahead
				next += uint64(r.IntN(1100))
				counters = append(counters, next)
			default: // far ahead, not yet the newest
				counters = append(counters, next+uint64(r.IntN(600)))
			}
		}
		checkAgainstNetcode(t, counters, func(i int) bool { return (i+run)%13 == 0 })
	}
}

func TestReplayEdges(t *testing.T) {
	var r Replay
	step := func(c uint64, seen bool) {
		t.Helper()
		if got := r.Seen(c); got != seen {
			t.Fatalf("Seen(%d) = %v with newest %d", c, got, r.last)
		}
		if !seen {
			r.Mark(c)
		}
	}
	step(0, false) // the first counter, 0, is new once
	step(0, true)
	step(1, false)
	step(300, false)
	step(44, true)  // 300 − 256: too old
	step(45, false) // the oldest still in the window
	step(45, true)
	step(299, false)
	step(300, true)
	step(301, false)
	step(301+63, false) // within the same and the next 64-bit words
	step(1_000_000, false)
	step(1_000_000-256, true)
	step(1_000_000-255, false)
	step(301, true)
	step(1_000_000+64*8, false) // exactly one ring ahead
	step(1_000_000+64*8-1, false)
	step(1_000_000, true)
	step(math.MaxUint64-1, false)
	step(math.MaxUint64, false)
	step(math.MaxUint64, true)
	step(math.MaxUint64-256, true)
	step(math.MaxUint64-255, false)

	// Mark of a counter too old is ignored, not set in a reused word.
	r = Replay{}
	r.Mark(1000)
	r.Mark(1000 - 512)
	if r.Seen(1000 + 1) {
		t.Fatal("marking an old counter poisoned a newer one")
	}
}

// FuzzReplay runs Replay against netcode's algorithm on counter streams the
// fuzzer chooses: each 3 bytes are a signed step from the newest counter and
// whether the packet authenticates.
func FuzzReplay(f *testing.F) {
	f.Add([]byte{1, 0, 0, 1, 0, 0, 0xff, 0xff, 0})
	f.Add([]byte{0, 1, 0, 0, 0x80, 1, 0x00, 0xff, 0, 3, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		var counters []uint64
		var forged []bool
		base := uint64(1 << 20)
		for len(b) >= 3 {
			d := int64(int16(binary.LittleEndian.Uint16(b)))
			c := uint64(int64(base) + d)
			counters = append(counters, c)
			forged = append(forged, b[2]&1 == 1)
			if d > 0 && b[2]&1 == 0 {
				base = c
			}
			b = b[3:]
		}
		checkAgainstNetcode(t, counters, func(i int) bool { return forged[i] })
	})
}
