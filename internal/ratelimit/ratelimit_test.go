package ratelimit

import (
	"math"
	"net/netip"
	"testing"
	"unsafe"
)

const rlKey = 0x9e3779b97f4a7c15

var (
	rlSrc  = netip.MustParseAddrPort("192.0.2.1:7777")
	rlTime = 1795000000.0
)

// rlDrain counts the replies src gets at now, up to limit.
func rlDrain(l *Limiter, src netip.AddrPort, now float64, limit int) int {
	n := 0
	for n < limit && l.Allow(src, now) {
		n++
	}
	return n
}

// challengeRate is the server's default per-source Challenge rate
// (handshake.DefaultChallengeRate), the realistic budget these tests use.
const challengeRate = 32

func TestLimiterBurstRefill(t *testing.T) {
	l := NewLimiter(PerSource, 0, Limit{Rate: 4, Burst: 8}, rlKey)
	for _, step := range []struct {
		dt   float64
		want int
	}{
		{0, 8},     // a new source starts full
		{0.1, 0},   // 0.4 tokens
		{0.25, 1},  // one token per 0.25 s
		{1.25, 4},  // 1 s later: 4 more
		{100, 8},   // idle: no more than the burst
		{100.5, 2}, // 0.5 s
	} {
		if got := rlDrain(l, rlSrc, rlTime+step.dt, 100); got != step.want {
			t.Errorf("at +%v s: %d replies, want %d", step.dt, got, step.want)
		}
	}
}

func TestLimiterSourcesIndependent(t *testing.T) {
	l := NewLimiter(PerSource, 0, Limit{Rate: 4, Burst: 8}, rlKey)
	if n := rlDrain(l, rlSrc, rlTime, 100); n != 8 {
		t.Fatalf("first source: %d", n)
	}
	for _, src := range []string{
		"192.0.2.1:7778",        // same address, other port: another player behind the NAT
		"192.0.2.2:7777",        // other address
		"[2001:db8::1]:7777",    // IPv6
		"[::ffff:192.0.2.3]:80", // mapped IPv4
	} {
		if n := rlDrain(l, netip.MustParseAddrPort(src), rlTime, 100); n != 8 {
			t.Errorf("%s: %d replies after another source was drained, want 8", src, n)
		}
	}
	if n := rlDrain(l, rlSrc, rlTime, 100); n != 0 {
		t.Errorf("drained source got %d more", n)
	}
}

// An IPv4 source is the same source in its mapped form: it is the same
// client, as the cookie input also says.
func TestLimiterMappedIPv4(t *testing.T) {
	l := NewLimiter(PerSource, 0, Limit{Rate: 4, Burst: 8}, rlKey)
	rlDrain(l, rlSrc, rlTime, 100)
	if n := rlDrain(l, netip.MustParseAddrPort("[::ffff:192.0.2.1]:7777"), rlTime, 100); n != 0 {
		t.Errorf("mapped form of a drained IPv4 source got %d", n)
	}
}

// TestLimiterCollisions: with one set (two slots) every source collides.
// Two sources each keep a bucket of their own, so taking turns refills
// neither; a third evicts the fuller entry, not a drained one.
func TestLimiterCollisions(t *testing.T) {
	l := NewLimiter(PerSource, 2, Limit{Rate: 4, Burst: 8}, rlKey)
	other := netip.MustParseAddrPort("198.51.100.7:9")
	third := netip.MustParseAddrPort("203.0.113.9:9")
	if n := rlDrain(l, rlSrc, rlTime, 100); n != 8 {
		t.Fatalf("first source: %d", n)
	}
	if n := rlDrain(l, other, rlTime, 100); n != 8 {
		t.Errorf("colliding source: %d replies, want its own burst of 8", n)
	}
	// Taking turns: neither gets more than its own budget.
	got := 0
	for i := range 200 {
		src := rlSrc
		if i%2 == 1 {
			src = other
		}
		if l.Allow(src, rlTime) {
			got++
		}
	}
	if got != 0 {
		t.Errorf("alternating drained sources got %d replies, want 0", got)
	}
	// A third source evicts one entry (both are equally drained, so the
	// first slot's, rlSrc); the source left keeps its drained bucket and
	// gets only what half a second refilled (2 tokens at 4/s).
	if n := rlDrain(l, third, rlTime+0.5, 100); n != 8 {
		t.Errorf("third source: %d, want a fresh burst of 8", n)
	}
	if n := rlDrain(l, other, rlTime+0.5, 100); n != 2 {
		t.Errorf("the source left in the set got %d, want its 2 refilled tokens", n)
	}
}

func TestLimiterEntries(t *testing.T) {
	for _, tc := range []struct{ in, want int }{
		{-1, defaultLimiterEntries}, {0, defaultLimiterEntries},
		{1, 2}, {2, 2}, {3, 4}, {1000, 1024}, {1024, 1024}, {1025, 2048},
	} {
		if got := NewLimiter(PerSource, tc.in, Limit{Rate: 1, Burst: 1}, rlKey).entries(); got != tc.want {
			t.Errorf("NewLimiter(PerSource, %d): %d entries, want %d", tc.in, got, tc.want)
		}
	}
}

// rlSource returns the i-th of many distinct sources, IPv4 and IPv6 mixed.
func rlSource(i int) netip.AddrPort {
	if i%4 == 0 {
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 12: byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)}), 443)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), uint16(i>>24)+1000)
}

func TestLimiterFixedMemory(t *testing.T) {
	l := NewLimiter(PerSource, 1024, Limit{Rate: 4, Burst: 8}, rlKey)
	slots := &l.slots[0]
	i := 0
	allocs := testing.AllocsPerRun(100_000, func() {
		if !l.Allow(rlSource(i), rlTime) {
			t.Fatalf("new source %v refused", rlSource(i))
		}
		i++
	})
	if size := unsafe.Sizeof(slot{}); size != 16 {
		t.Errorf("an entry takes %d bytes; defaultLimiterEntries' memory budget assumes 16", size)
	}
	if allocs != 0 || l.entries() != 1024 || len(l.slots) != 1024 || cap(l.slots) != 1024 || &l.slots[0] != slots {
		t.Errorf("after %d sources: %v allocs per Allow, %d entries, table %d/%d", i, allocs, l.entries(), len(l.slots), cap(l.slots))
	}
}

func TestLimiterAllocs(t *testing.T) {
	l := NewLimiter(PerSource, 0, Limit{Rate: challengeRate, Burst: 2 * challengeRate}, 0)
	now := rlTime
	if n := testing.AllocsPerRun(1000, func() { l.Allow(rlSrc, now); now += 0.001 }); n != 0 {
		t.Errorf("Allow: %v allocs", n)
	}
}

func TestLimiterKeyed(t *testing.T) {
	a, b := NewLimiter(PerSource, 1024, Limit{Rate: challengeRate, Burst: 2 * challengeRate}, 1), NewLimiter(PerSource, 1024, Limit{Rate: challengeRate, Burst: 2 * challengeRate}, 2)
	same := 0
	for i := range 1000 {
		if a.hash(rlSource(i))&a.mask == b.hash(rlSource(i))&b.mask {
			same++
		}
	}
	if same > 10 { // about 1 expected
		t.Errorf("keys 1 and 2 put %d of 1000 sources in the same slot", same)
	}
	if x, y := NewLimiter(PerSource, 0, Limit{Rate: challengeRate, Burst: 2 * challengeRate}, 0), NewLimiter(PerSource, 0, Limit{Rate: challengeRate, Burst: 2 * challengeRate}, 0); x.key == y.key {
		t.Errorf("two random keys are both %#x", x.key)
	}
}

// TestLimiterUnlimited: a negative Rate (Unlimited) is the one spelling of
// no limit; a Rate of 0 or NaN that reaches a bucket fails closed.
func TestLimiterUnlimited(t *testing.T) {
	for _, rate := range []float64{0, math.NaN()} {
		l := NewLimiter(PerSource, 0, Limit{Rate: rate, Burst: 8}, rlKey)
		b := NewBucket(Limit{Rate: rate, Burst: 8}, rlTime)
		if l.Allow(rlSrc, rlTime) || b.Allow(rlTime) || b.Allow(rlTime+1e6) {
			t.Errorf("rate %v: a reply allowed", rate)
		}
	}
	for _, rate := range []float64{Unlimited, -0.5, math.Inf(-1)} {
		l := NewLimiter(PerSource, 0, Limit{Rate: rate}, rlKey)
		if n := rlDrain(l, rlSrc, rlTime, 10_000); n != 10_000 {
			t.Errorf("rate %v: %d of 10000 allowed", rate, n)
		}
		if l.entries() != 0 {
			t.Errorf("rate %v: unlimited Limiter keeps %d entries", rate, l.entries())
		}
		b := NewBucket(Limit{Rate: rate}, rlTime)
		for i := range 10_000 {
			if !b.Allow(rlTime) {
				t.Fatalf("rate %v: bucket refused reply %d", rate, i)
			}
		}
	}
}

func TestLimiterClockBackwards(t *testing.T) {
	l := NewLimiter(PerSource, 0, Limit{Rate: 4, Burst: 8}, rlKey)
	rlDrain(l, rlSrc, rlTime, 100)
	for _, now := range []float64{rlTime - 0.5, rlTime - 1e6, 0, -1, math.Inf(-1), math.NaN(), rlTime} {
		if n := rlDrain(l, rlSrc, now, 100); n != 0 {
			t.Errorf("clock at %v after draining at %v: %d replies", now, rlTime, n)
		}
	}
	if n := rlDrain(l, rlSrc, rlTime+0.25, 100); n != 1 {
		t.Errorf("0.25 s after the drain: %d replies, want 1", n)
	}
}

func TestBucket(t *testing.T) {
	b := NewBucket(Limit{512.0 / 300, 512}, rlTime)
	count := func(now float64) int {
		n := 0
		for n < 10_000 && b.Allow(now) {
			n++
		}
		return n
	}
	for _, step := range []struct {
		now  float64
		want int
	}{
		{rlTime, 512},
		{rlTime + 1, 1},       // 512/300 tokens a second
		{rlTime - 100, 0},     // clock stepped back
		{rlTime + 300, 511},   // full again but for the token spent at +1 s
		{rlTime + 1e4, 512},   // never more than the burst
		{math.NaN(), 0},       // a broken clock mints nothing
		{rlTime + 1e4, 0},     // and spends nothing
		{rlTime + 1e4 + 3, 5}, // 5.12 tokens
	} {
		if got := count(step.now); got != step.want {
			t.Errorf("at %+v: %d, want %d", step.now-rlTime, got, step.want)
		}
	}
}

func BenchmarkLimiterAllow(b *testing.B) { benchLimiterAllow(b, PerSource) }

// BenchmarkLimiterAllowBy is BenchmarkLimiterAllow for each LimitKey, whose
// hashes differ in what they mask.
func BenchmarkLimiterAllowBy(b *testing.B) {
	for _, by := range []struct {
		name string
		key  LimitKey
	}{{"source", PerSource}, {"ip", PerIP}, {"prefix", PerPrefix}} {
		b.Run(by.name, func(b *testing.B) { benchLimiterAllow(b, by.key) })
	}
}

// benchLimiterAllow times Allow for 1024 sources in turn, keyed by key.
func benchLimiterAllow(b *testing.B, key LimitKey) {
	var srcs [1024]netip.AddrPort
	for i := range srcs {
		srcs[i] = rlSource(i)
	}
	l := NewLimiter(key, 0, Limit{Rate: challengeRate, Burst: 2 * challengeRate}, 0)
	now, i := rlTime, 0
	b.ReportAllocs()
	for b.Loop() {
		l.Allow(srcs[i&1023], now)
		i++
		now += 1e-6
	}
}

// TestBucketSetLimit: overload control moves a loop's Challenge cap with the
// level. The zero Bucket is unlimited; under a first cap it starts empty
// and fills at the cap's rate; tokens carry over to a new cap up to its
// burst; setting the cap it has changes nothing.
func TestBucketSetLimit(t *testing.T) {
	var b Bucket
	count := func(now float64) int {
		n := 0
		for n < 10_000 && b.Allow(now) {
			n++
		}
		return n
	}
	if n := count(rlTime); n != 10_000 {
		t.Fatalf("zero Bucket allowed %d, want unlimited", n)
	}
	b.SetLimit(Limit{Rate: 100, Burst: 100}, rlTime)
	if n := count(rlTime); n != 0 {
		t.Fatalf("a first cap: %d at once, want an empty bucket", n)
	}
	b.SetLimit(Limit{Rate: 100, Burst: 100}, rlTime+0.255) // the same cap: no change
	if n := count(rlTime + 0.255); n != 25 {
		t.Fatalf("0.255 s at 100/s: %d, want 25", n)
	}
	// About 70 tokens by now: a cap of 10 keeps 10 of them.
	b.SetLimit(Limit{Rate: 10, Burst: 10}, rlTime+0.955)
	if n := count(rlTime + 0.955); n != 10 {
		t.Fatalf("lowered cap: %d, want its burst 10", n)
	}
	// Raised again: the empty bucket stays empty, then fills at 100/s.
	b.SetLimit(Limit{Rate: 100, Burst: 100}, rlTime+0.955)
	if n := count(rlTime + 0.955); n != 0 {
		t.Fatalf("raised cap: %d at once, want none carried", n)
	}
	if n := count(rlTime + 1.055); n != 10 {
		t.Fatalf("0.1 s at 100/s: %d, want 10", n)
	}
	b.SetLimit(Limit{Rate: Unlimited}, rlTime+2)
	if n := count(rlTime + 2); n != 10_000 {
		t.Fatalf("no cap: %d, want unlimited", n)
	}
}
