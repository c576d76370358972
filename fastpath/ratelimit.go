package fastpath

import (
	crand "crypto/rand"
	"encoding/binary"
	"math"
	"math/bits"
	"net/netip"
	"sync/atomic"

	"github.com/udpgate/udpgate/shard"
)

// Reply rate limits (docs/protocol.md §5). They bound what a spoofed source can
// make the server send to one address: replies to an unproven address are
// never larger than their requests, so these caps are what keeps the server
// from being a useful reflector.
var (
	// DefaultRestartLimit caps RestartHandshake replies per source.
	DefaultRestartLimit = Limit{Rate: 4, Burst: 8}
	// DefaultVersionUpgradeLimit caps VersionUpgrade replies per source.
	DefaultVersionUpgradeLimit = Limit{Rate: 4, Burst: 8}
	// DefaultChallengeLimit caps Challenge replies per source. A real client
	// resends its Initial once a second, so this only ever stops floods.
	DefaultChallengeLimit = Limit{Rate: 32, Burst: 64}
	// DefaultChallengeIPLimit caps Challenge replies per IP address, all
	// its ports together, and DefaultChallengePrefixLimit per /24 (IPv4)
	// or /64 (IPv6) network. The per-source cap alone let a spoofer draw a
	// host's whole port range: 1,000 ports of one host pulled 38,300
	// Challenges/s toward it. These bound what one host, or one network,
	// receives whatever its port count: 64/s (about 3.6 KB/s of 56-byte
	// Challenges) after a burst of 128, per receive loop.
	//
	// Players behind one NAT share these budgets, and each needs one
	// Challenge per attempt (a client resends its Initial once a second
	// until it gets one): 128 players starting in the same second all get
	// theirs at once, and 256 (conn's default cap of connections per IP)
	// within 2 s more. A network's 1024 (conn's cap per prefix) take about
	// 2 s at 256/s after a burst of 512.
	DefaultChallengeIPLimit     = Limit{Rate: 64, Burst: 128}
	DefaultChallengePrefixLimit = Limit{Rate: 256, Burst: 512}
	// DefaultVersionUpgradeTotal caps VersionUpgrade replies, whatever their
	// source: 512 per 300 s, for the whole server when its loops share one
	// SharedBucket (ServerConfig.VersionUpgradeShared), else per loop.
	DefaultVersionUpgradeTotal = Limit{Rate: 512.0 / 300, Burst: 512}
)

// DefaultLimiterEntries sizes each table: 16 B an entry, so 256 KiB per
// table. A server keeps five per loop: per source for Challenge,
// RestartHandshake and VersionUpgrade, and per IP and per prefix for
// Challenge, so 1.25 MiB per loop.
// A source's entry matters only until its bucket is full again, Burst/Rate =
// 2 s for the defaults; legitimate sources handshaking on one loop within 2 s
// are far fewer than 16384, so they rarely meet. To evict a victim's entry a
// flood must hit its slot, about 16384 spoofed packets per eviction, which
// buys the victim's address one more burst.
const DefaultLimiterEntries = 1 << 14

// maxLimiterEntries keeps the index bits below the 32 tag bits.
const maxLimiterEntries = 1 << 30

// Limit is a token bucket: Rate tokens per second, at most Burst at once; a
// reply spends one token. Rate ≤ 0 means unlimited; Burst below 1 allows
// nothing.
type Limit struct{ Rate, Burst float64 }

// Divide returns the share of l that each of n receive loops enforces so
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

func newGCRA(l Limit) gcra {
	if !(l.Rate > 0) {
		return gcra{}
	}
	t := 1 / l.Rate
	return gcra{interval: t, tolerance: (l.Burst - 1) * t}
}

// allow spends a token from the bucket whose full time is *full.
func (g gcra) allow(full *float64, now float64) bool {
	next, ok := g.check(*full, now)
	if ok {
		*full = next
	}
	return ok
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
// three or more sources taking turns in one set can grant an evicted one
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
// (DefaultLimiterEntries when ≤ 0), with a bucket per source. key seeds the
// hash; 0 draws one from crypto/rand. An unlimited Limit keeps no table.
func NewLimiter(entries int, limit Limit, key uint64) *Limiter {
	return NewLimiterBy(PerSource, entries, limit, key)
}

// NewLimiterBy is NewLimiter with a bucket per what by names.
func NewLimiterBy(by LimitKey, entries int, limit Limit, key uint64) *Limiter {
	l := &Limiter{key: key, rule: newGCRA(limit), by: by}
	if l.rule.interval == 0 {
		return l
	}
	if entries <= 0 {
		entries = DefaultLimiterEntries
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
	g, ok := l.reserve(src, now)
	g.spend()
	return ok
}

// grant is a token found by reserve and not yet spent.
type grant struct {
	full *float64 // nil: unlimited, or nothing to spend
	next float64
}

// spend takes the token: the bucket's full time moves on.
func (g grant) spend() {
	if g.full != nil {
		*g.full = g.next
	}
}

// reserve reports whether src's bucket has a token now, without spending
// it: a reply that needs several budgets (source, IP, prefix, total) spends
// from all of them or from none, so a budget that refuses does not drain
// the others.
func (l *Limiter) reserve(src netip.AddrPort, now float64) (grant, bool) {
	if l.rule.interval == 0 {
		return grant{}, true
	}
	s := l.entry(l.hash(src))
	next, ok := l.rule.check(s.full, now)
	if !ok {
		return grant{}, false
	}
	return grant{full: &s.full, next: next}, true
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
func (l *Limiter) Entries() int { return len(l.slots) }

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

// Bucket is a single token bucket, for a budget shared by all sources such as
// DefaultVersionUpgradeTotal. Not safe for concurrent use.
type Bucket struct {
	rule gcra
	full float64
}

// NewBucket returns a full bucket.
func NewBucket(limit Limit, now float64) Bucket {
	return Bucket{rule: newGCRA(limit), full: now}
}

// Allow reports whether a reply may be sent now, and if so spends a token.
func (b *Bucket) Allow(now float64) bool {
	if b.rule.interval == 0 {
		return true
	}
	return b.rule.allow(&b.full, now)
}

// SharedBucket is a single token bucket that several receive loops spend
// from at once: the one VersionUpgrade budget of a server (docs/protocol.md §5,
// 512 per 300 s), which per-loop Buckets would multiply by the number of
// loops. Allow is lock-free and never allocates: the bucket is one word, its
// full time, moved by compare-and-swap. While the bucket is empty, Allow
// only reads that word, so a flood that the budget refuses does not make the
// loops fight over its cache line.
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
