package shard

import (
	"math/bits"
	"net/netip"
)

// DefaultShards is the shard count used when a constructor is given 0.
//
// Lookups take no lock, so the shard count does not limit read parallelism.
// It bounds write contention (two writers on different cores meet in the
// same shard with probability 1/shards) and the pauses a shard imposes on its
// own writers: a RangeShard sweep and a table rebuild each cover 1/shards of
// the entries (about 16 k per shard at 1 M entries; tuning.md gives the
// time such a rebuild holds the shard's lock). 64 shard headers take 4 KiB
// and stay in L1, and an empty map takes 64 one-group tables (about
// 20 KiB). Maps expected to hold millions of entries and to take many writes
// may pass a larger count.
const DefaultShards = 64

// MaxShards bounds the shard count. Shards are chosen by hash bits 32–47.
const MaxShards = 1 << 16

// Action tells RangeShard what to do with the entry it has just shown its
// callback. Keep is the zero value; Remove and Stop may be combined.
type Action uint8

const (
	// Keep leaves the entry in place and continues the sweep.
	Keep Action = 0
	// Remove deletes the entry (from every index of the map) and continues.
	Remove Action = 1 << 0
	// Stop ends the sweep after this entry (Remove|Stop deletes it first).
	Stop Action = 1 << 1
)

func shardCount(n int) int {
	switch {
	case n == 0:
		return DefaultShards
	case n < 0 || n > MaxShards:
		panic("shard: shard count out of range")
	}
	return 1 << bits.Len(uint(n-1))
}

// shardIndex picks a shard from hash bits 32–47. Tables index with the low
// bits, so the two choices are independent.
func shardIndex(h uint64, nshards int) int {
	return int(h>>32) & (nshards - 1)
}

// addrMeta returns the meta word of the slot for key k with hash h.
func addrMeta(k *addrKey, h uint64) uint64 {
	return k.meta | h&addrHashMask
}

// AddrMap is a concurrent map from netip.AddrPort to *T, split into a power
// of two shards.
//
// An address's shard and its place in the shard's table both come from one
// 64-bit XXH64 of As16 ‖ port, keyed by a seed drawn from crypto/rand for
// each map, so a key is hashed once per operation and no one outside the
// process can aim addresses at one shard or one probe sequence. Each shard is
// a Swiss table of 32-byte slots with its control bytes apart (see table),
// not a Go map, which would hash the key a second time.
//
// Lookups take no lock and write nothing shared: they read optimistically
// and validate with the shard's sequence number (see shard), so they scale
// across cores and never wait for a RangeShard sweep or a table rebuild;
// only a write section that outlasts a short spin makes one wait, on the
// shard's lock (shard.waitWrite).
// Writers take the shard's lock. Because a lookup loads the value in one
// atomic operation, values are pointers (*T); nil values are not allowed, so
// a nil result always means "none".
//
// Keys compare as netip.AddrPort values: 1.2.3.4:5 and [::ffff:1.2.3.4]:5 are
// different keys (which share a shard), as are addresses differing only in
// zone. Zones name local interfaces (fe80::1%eth0), so they are few: a map
// holds addresses of at most 8191 distinct zones, and Set panics beyond.
//
// Get, Set of an existing key and Delete never allocate; adding a key
// allocates only when its shard's table is rebuilt, which doubles it once
// live entries fill 7/16 of it. Tables never shrink: a shard that once held
// N entries keeps room for N, so the next rise in load does not pay for the
// rehash again; drop the map to release the memory.
//
// The zero AddrMap is not usable; call NewAddrMap.
type AddrMap[T any] struct {
	seed   uint64
	shards []shard[T]
	zones  zoneTable
}

// NewAddrMap returns an empty map with shards shards, rounded up to a power of
// two; 0 means DefaultShards. It panics if shards is negative or above
// MaxShards.
func NewAddrMap[T any](shards int) *AddrMap[T] {
	m := &AddrMap[T]{seed: newSeed(), shards: make([]shard[T], shardCount(shards))}
	for i := range m.shards {
		m.shards[i].init(false)
	}
	return m
}

// Get returns the value stored for a.
func (m *AddrMap[T]) Get(a netip.AddrPort) (*T, bool) {
	return getAddr(&m.zones, m.seed, m.shards, a)
}

// locate returns a's key, hash and shard, registering a's zone.
func (m *AddrMap[T]) locate(a netip.AddrPort) (addrKey, uint64, *shard[T]) {
	k, _ := m.zones.key(a, true)
	h := hashAddr(m.seed, &k)
	return k, h, &m.shards[shardIndex(h, len(m.shards))]
}

// Set stores v for a, replacing any value already there. It panics if v is
// nil.
func (m *AddrMap[T]) Set(a netip.AddrPort, v *T) {
	if v == nil {
		panic("shard: nil value")
	}
	k, h, s := m.locate(a)
	meta := addrMeta(&k, h)
	s.mu.Lock()
	if i := s.t().find(meta, k.hi, k.lo); i >= 0 {
		// One atomic store: a reader sees the old or the new value, so no
		// write section is needed.
		s.t().slots[i].val.Store(v)
	} else {
		s.reserve()
		s.beginWrite()
		s.insert(meta, k.hi, k.lo, v, nil)
		s.endWrite()
	}
	s.mu.Unlock()
}

// Delete removes a and returns the value it had.
func (m *AddrMap[T]) Delete(a netip.AddrPort) (*T, bool) {
	v := m.delete(a, nil)
	return v, v != nil
}

func (m *AddrMap[T]) delete(a netip.AddrPort, old *T) *T {
	k, ok := m.zones.key(a, false)
	if !ok {
		return nil
	}
	h := hashAddr(m.seed, &k)
	s := &m.shards[shardIndex(h, len(m.shards))]
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.t().find(addrMeta(&k, h), k.hi, k.lo)
	if i < 0 {
		return nil
	}
	v := s.t().slots[i].val.Load()
	if old != nil && v != old {
		return nil
	}
	s.beginWrite()
	s.removeAt(i)
	s.endWrite()
	return v
}

// NumShards returns the number of shards, the bound for RangeShard's index.
func (m *AddrMap[T]) NumShards() int { return len(m.shards) }

// RangeShard calls fn for every entry of shard i (0 ≤ i < NumShards). A
// periodic sweep (keepalives, timeouts, expiry) visits the map one shard at a
// time, so it never holds up writers of the other shards, and never holds up
// lookups at all: it holds only the shard's writer lock.
//
// fn sees each entry of the shard exactly once, and what it returns decides
// the entry's fate: Keep, Remove (delete it now; this is how a sweep deletes,
// and it allocates nothing), Stop, or Remove|Stop. fn runs with the shard's
// writer lock held: it may call Get, but any other method of m would
// deadlock on that lock, and it should be quick, since writers to the shard
// wait for the whole sweep. RangeShard reports whether fn stopped the sweep.
func (m *AddrMap[T]) RangeShard(i int, fn func(netip.AddrPort, *T) Action) (stopped bool) {
	s := &m.shards[i]
	return s.sweep(&m.zones, fn, func(i int) {
		s.beginWrite()
		s.removeAt(i)
		s.endWrite()
	})
}
