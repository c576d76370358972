package ratelimit

import (
	crand "crypto/rand"
	"encoding/binary"
	"math"
	"math/bits"
	"net/netip"
	"sync/atomic"

	"github.com/udpgate/udpgate/shard"
)

// defaultLimiterEntries sizes each table: 16 B an entry, so 256 KiB
// per table. A server keeps five per loop: per source for Challenge,
// RestartHandshake and VersionUpgrade, and per IP and per prefix for
// Challenge, so 1.25 MiB per loop (a sixth, per source for proofs, in
// sealed mode).
// A source's entry matters only until its bucket is full again,
// Burst/Rate = 2 s for the defaults; legitimate sources handshaking on
// one loop within 2 s are far fewer than 16384, so they rarely meet. To
// evict a victim's entry a flood must hit its slot, about 16384 spoofed
// packets per eviction, which buys the victim's address one more burst.
const defaultLimiterEntries = 1 << 14

// maxLimiterEntries keeps the index bits below the 32 tag bits.
const maxLimiterEntries = 1 << 30

// Unlimited, as a Limit's Rate, turns the limit off. It is the one spelling
// of "no limit" from the command line (-1) through conn.Config down to
// here: any negative rate means the same.
const Unlimited = -1

// Limit is a token bucket: Rate tokens per second, at most Burst at once; a
// reply spends one token. A negative Rate (Unlimited) means no limit. In a
// ServerConfig a zero Rate takes the default and a zero Burst is twice the
// Rate; in a bucket, a Rate of 0 (or NaN) and a Burst below 1 allow
// nothing.
type Limit struct{ Rate, Burst float64 }

// or returns l completed the way a ServerConfig's budgets are: def when
// Rate is 0, and a Burst of 0 as twice the Rate.
func (l Limit) Or(def Limit) Limit {
	if l.Rate == 0 {
		l = def
	}
	if l.Burst == 0 && l.Rate > 0 {
		l.Burst = 2 * l.Rate
	}
	return l
}

// divide returns the share of l that each of n receive loops enforces so
// that together they allow about l: Rate/n, and Burst/n but at least 1 (a
// Burst below 1, which allows nothing, stays as it is).
// Every loop keeps its own tables, and the kernel spreads one host's source
// ports over the loops that receive handshakes, so per-loop budgets add up:
// with n such loops a host can get n times a loop's budget. A host's
// legitimate clients are spread the same way, so each loop's share of them
// fits its share of the budget. Unlimited stays unlimited.
func (l Limit) Divide(n int) Limit {
	if n <= 1 || !(l.Rate > 0) || l.Burst < 1 {
		return l // unlimited, or allowing nothing: the same for every share
	}
	return Limit{Rate: l.Rate / float64(n), Burst: max(l.Burst/float64(n), 1)}
}

// gcra is a Limit in the form of the generic cell rate algorithm: instead of
// a token count that must be refilled, a bucket keeps one time, when it will
// be full again. This needs no refill arithmetic that could lose small
// increments, and a clock that steps back cannot mint tokens: it only makes
// the bucket look emptier until time catches up.
type gcra struct {
	interval  float64 // seconds per token; 0 means unlimited
	tolerance float64 // how far ahead of now the full time may be: (Burst − 1) tokens
}

// denyAll is the rule of a Limit that allows nothing ever: check's
// comparison fails for every time, NaN included.
var denyAll = gcra{interval: math.Inf(1), tolerance: -1}

func newGCRA(l Limit) gcra {
	switch {
	case l.Rate < 0:
		return gcra{}
	case !(l.Rate > 0): // 0 or NaN: fail closed
		return denyAll
	}
	t := 1 / l.Rate
	return gcra{interval: t, tolerance: (l.Burst - 1) * t}
}

// check reports whether the bucket whose full time is full has a token now,
// and the full time once it is spent.
func (g gcra) check(full, now float64) (next float64, ok bool) {
	t := full
	if now > t {
		t = now
	}
	// Negated so that a NaN clock denies.
	if !(t-now <= g.tolerance) {
		return 0, false
	}
	return t + g.interval, true
}

// LimitKey says what one bucket of a Limiter stands for.
type LimitKey uint8

const (
	// PerSource: an address and port, so players behind one NAT are
	// limited apart.
	PerSource LimitKey = iota
	// PerIP: an address, all its ports together.
	PerIP
	// PerPrefix: an IPv4 /24 or an IPv6 /64, the unit an attacker pays
	// for (an IPv6 host usually owns a whole /64).
	PerPrefix
)

// Limiter keeps a token bucket per source (address and port, so players
// behind one NAT are limited apart; or per IP or prefix, see LimitKey) in a
// fixed table: memory does not grow with the number of sources, and Allow
// never allocates. One per receive loop: it is not safe for concurrent use.
//
// A source's slot is chosen by a keyed hash, so an attacker who does not know
// the key cannot aim its sources at a victim's slot. The table is 2-way set
// associative and each slot holds a 32-bit tag from the rest of the hash, so
// colliding sources get buckets of their own instead of sharing one (sharing
// would let a flood drain a real client's budget and block its handshake).
// A source new to a full set evicts the fuller of the two entries: that
// entry loses nothing it would not get back (a new source starts full), and
// a source being limited keeps its drained bucket, so two sources that
// collide cannot refill each other by taking turns. What remains is that
// three or more sources taking turns in one set can Grant an evicted one
// a fresh burst; replies are never larger than requests either way.
type Limiter struct {
	slots []slot
	mask  uint64
	key   uint64
	rule  gcra
	by    LimitKey
}

type slot struct {
	full float64 // when this source's bucket is full again, Unix seconds
	tag  uint32
}

// NewLimiter makes a table of entries slots, rounded up to a power of two
// (defaultLimiterEntries when ≤ 0), with a bucket per what by names. key
// seeds the hash; 0 draws one from crypto/rand. An unlimited Limit keeps
// no table.
func NewLimiter(by LimitKey, entries int, limit Limit, key uint64) *Limiter {
	l := &Limiter{key: key, rule: newGCRA(limit), by: by}
	if l.rule.interval == 0 {
		return l
	}
	if entries <= 0 {
		entries = defaultLimiterEntries
	}
	n := max(2, 1<<bits.Len(uint(min(entries, maxLimiterEntries)-1))) // a set is two slots
	if key == 0 {
		var b [8]byte
		crand.Read(b[:])
		l.key = binary.LittleEndian.Uint64(b[:])
	}
	l.slots = make([]slot, n)
	l.mask = uint64(n - 1)
	return l
}

// Allow reports whether src may have a reply now, and if so spends its token.
func (l *Limiter) Allow(src netip.AddrPort, now float64) bool {
	g, ok := l.Reserve(src, now)
	g.Spend()
	return ok
}

// Grant is a token found by reserve and not yet spent.
type Grant struct {
	full *float64 // nil: unlimited, or nothing to spend
	next float64
}

// spend takes the token: the bucket's full time moves on.
func (g Grant) Spend() {
	if g.full != nil {
		*g.full = g.next
	}
}

// reserve reports whether src's bucket has a token now, without spending
// it: a reply that needs several budgets (source, IP, prefix, total) spends
// from all of them or from none, so a budget that refuses does not drain
// the others.
func (l *Limiter) Reserve(src netip.AddrPort, now float64) (Grant, bool) {
	if l.rule.interval == 0 {
		return Grant{}, true
	}
	s := l.entry(l.hash(src))
	next, ok := l.rule.check(s.full, now)
	if !ok {
		return Grant{}, false
	}
	return Grant{full: &s.full, next: next}, true
}

// entry returns the slot of the key whose hash is h, claiming one of its
// set's two slots for a key new to the set.
func (l *Limiter) entry(h uint64) *slot {
	i := h & l.mask &^ 1
	a, b := &l.slots[i], &l.slots[i+1]
	tag := uint32(h >> 32)
	switch {
	case a.tag == tag:
		return a
	case b.tag == tag:
		return b
	}
	s := a
	if b.full < a.full { // b is the fuller bucket
		s = b
	}
	*s = slot{tag: tag} // full time 0: a full bucket
	return s
}

// Entries returns the table's size: fixed at construction, 0 when unlimited.
func (l *Limiter) entries() int { return len(l.slots) }

// hash is shard.HashAddr, the seeded XXH64 the connection maps place
// addresses by, of src with the port zeroed for PerIP, and with the port
// zeroed and the address masked to its /24 (IPv4, also in its IPv4-mapped
// form, so a dual-stack socket's view of it counts with the plain one) or
// /64 (IPv6) for PerPrefix. XXH64 is not a MAC, but its output never leaves
// the server; an attacker sees only which of its packets are answered.
func (l *Limiter) hash(src netip.AddrPort) uint64 {
	switch l.by {
	case PerIP:
		src = netip.AddrPortFrom(src.Addr(), 0)
	case PerPrefix:
		ip := src.Addr().Unmap()
		bits := 64
		if ip.Is4() {
			bits = 24
		}
		p, _ := ip.Prefix(bits) // fails for no address of either family
		src = netip.AddrPortFrom(p.Addr(), 0)
	}
	return shard.HashAddr(l.key, src)
}

// Bucket is a single token bucket, for a budget shared by all sources: the
// loop's own VersionUpgrade total, or the Challenge cap of overload control
// (Shed.Challenges). The zero Bucket is unlimited. Not safe for concurrent
// use.
type Bucket struct {
	rule gcra
	full float64
}

// NewBucket returns a full bucket.
func NewBucket(limit Limit, now float64) Bucket {
	return Bucket{rule: newGCRA(limit), full: now}
}

// SetLimit changes the bucket's Limit at now. The tokens it holds carry
// over, up to the new Burst; a bucket that was unlimited starts empty and
// fills at the new Rate. Setting the Limit it has already changes nothing,
// so a caller may set it on every batch.
func (b *Bucket) SetLimit(limit Limit, now float64) {
	r := newGCRA(limit)
	if r == b.rule {
		return
	}
	var tokens float64
	if b.rule.interval != 0 && b.rule != denyAll {
		tokens = b.tokens(now)
	}
	b.rule = r
	b.full = now
	if r.interval != 0 && r != denyAll {
		// Full when the missing tokens have come in.
		burst := r.tolerance/r.interval + 1
		b.full = now + (burst-min(tokens, burst))*r.interval
	}
}

// tokens is how many tokens a limited bucket holds at now.
func (b *Bucket) tokens(now float64) float64 {
	burst := b.rule.tolerance/b.rule.interval + 1
	return max(0, burst-max(0, b.full-now)/b.rule.interval)
}

// Allow reports whether a reply may be sent now, and if so spends a token.
func (b *Bucket) Allow(now float64) bool {
	g, ok := b.Reserve(now)
	g.Spend()
	return ok
}

// reserve reports whether the bucket has a token now without spending it,
// like Limiter.reserve. A nil Bucket is unlimited.
func (b *Bucket) Reserve(now float64) (Grant, bool) {
	if b == nil || b.rule.interval == 0 {
		return Grant{}, true
	}
	next, ok := b.rule.check(b.full, now)
	if !ok {
		return Grant{}, false
	}
	return Grant{full: &b.full, next: next}, true
}

// SharedBucket is a single token bucket that several receive loops spend
// from at once: the one VersionUpgrade budget of a server (docs/protocol.md
// §5, 512 per 300 s), which per-loop Buckets would multiply by the number
// of loops. Allow is lock-free and never allocates: the bucket is one word,
// its full time, moved by compare-and-swap. While the bucket is empty,
// Allow only reads that word, so a flood that the budget refuses does not
// make the loops fight over its cache line.
type SharedBucket struct {
	rule gcra
	full atomic.Uint64 // math.Float64bits of the full time
}

// NewSharedBucket returns a full bucket.
func NewSharedBucket(limit Limit, now float64) *SharedBucket {
	b := &SharedBucket{rule: newGCRA(limit)}
	b.full.Store(math.Float64bits(now))
	return b
}

// Allow reports whether a reply may be sent now, and if so spends a token.
// It is safe for concurrent use.
func (b *SharedBucket) Allow(now float64) bool {
	if b.rule.interval == 0 {
		return true
	}
	for {
		old := b.full.Load()
		next, ok := b.rule.check(math.Float64frombits(old), now)
		if !ok {
			return false
		}
		if b.full.CompareAndSwap(old, math.Float64bits(next)) {
			return true
		}
	}
}
