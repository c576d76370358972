package fastpath

import (
	crand "crypto/rand"
	"encoding/binary"
	"math/bits"
	"net/netip"

	"github.com/cespare/xxhash/v2"
)

// Reply rate limits (PROTOCOL.md §5). They bound what a spoofed source can
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
	// DefaultVersionUpgradeTotal caps VersionUpgrade replies from one loop,
	// whatever their source: 512 per 300 s.
	DefaultVersionUpgradeTotal = Limit{Rate: 512.0 / 300, Burst: 512}
)

// DefaultLimiterEntries sizes each per-source table: 16 B an entry, so
// 256 KiB per table (the server keeps one per limited reply type per loop).
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
	t := *full
	if now > t {
		t = now
	}
	// Negated so that a NaN clock denies.
	if !(t-now <= g.tolerance) {
		return false
	}
	*full = t + g.interval
	return true
}

// Limiter keeps a token bucket per source (address and port, so players
// behind one NAT are limited apart) in a fixed table: memory does not grow
// with the number of sources, and Allow never allocates. One per receive
// loop: it is not safe for concurrent use.
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
}

type slot struct {
	full float64 // when this source's bucket is full again, Unix seconds
	tag  uint32
}

// NewLimiter makes a table of entries slots, rounded up to a power of two
// (DefaultLimiterEntries when ≤ 0). key seeds the hash; 0 draws one from
// crypto/rand. An unlimited Limit keeps no table.
func NewLimiter(entries int, limit Limit, key uint64) *Limiter {
	l := &Limiter{key: key, rule: newGCRA(limit)}
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
	if l.rule.interval == 0 {
		return true
	}
	h := l.hash(src)
	i := h & l.mask &^ 1
	a, b := &l.slots[i], &l.slots[i+1]
	tag := uint32(h >> 32)
	var s *slot
	switch {
	case a.tag == tag:
		s = a
	case b.tag == tag:
		s = b
	default:
		s = a
		if b.full < a.full { // b is the fuller bucket
			s = b
		}
		*s = slot{tag: tag} // full time 0: a full bucket
	}
	return l.rule.allow(&s.full, now)
}

// Entries returns the table's size: fixed at construction, 0 when unlimited.
func (l *Limiter) Entries() int { return len(l.slots) }

// hash is xxhash64 of key ‖ 16-byte address ‖ port. xxhash is not a MAC, but
// its output never leaves the server; an attacker sees only which of its
// packets are answered.
func (l *Limiter) hash(src netip.AddrPort) uint64 {
	var b [8 + 16 + 2]byte
	binary.LittleEndian.PutUint64(b[0:8], l.key)
	a := src.Addr().As16()
	copy(b[8:24], a[:])
	binary.LittleEndian.PutUint16(b[24:26], src.Port())
	return xxhash.Sum64(b[:])
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
