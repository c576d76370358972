package shard

import (
	"math/bits"
	"net/netip"
	"sync"
	"sync/atomic"
	"unsafe"
)

// A table is a Swiss table (the design of Abseil's flat_hash_map and of Go's
// own maps) whose control words live in an array of their own:
//
//   - Slots come in groups of 8, each group with one 8-byte control word
//     holding a byte per slot: empty, deleted, or full with 7 bits of the
//     entry's hash (h2). One load and a few ALU operations (SWAR) find the
//     slots of a group that may hold a key, and whether the group has an
//     empty slot.
//   - A hit reads the home group's control word and one slot; a miss
//     usually ends at the control word. The control words take one byte per
//     32-byte slot, so they stay cached far longer than the slots (at 100 k
//     entries 128 KiB against 4 MiB; Go's maps interleave control words with
//     their slots, a cache line each), which is what makes misses cheap.
//   - Groups are probed in triangular order, which visits every group once
//     when their number is a power of two.
//   - Deletion marks the slot empty if its group has an empty slot (then no
//     probe has ever gone past the group) and deleted otherwise. A table
//     that has used up its never-used slots is rebuilt: at the same size if
//     most of them were deleted, else at double the size. Entries never
//     move within a table, so a sweep visits each exactly once however it
//     deletes.
//
// Hash bits: 0–23 choose the home group, 24–30 are h2, 32–47 choose the shard
// (see shardIndex), so the three choices are independent. A slot's meta word
// keeps bits 0–31 (0–30 for cookies), so rebuilding never rehashes a key.
const (
	groupSize   = 8
	ctrlEmpty   = 0x80
	ctrlDeleted = 0xFE
	bitsetLSB   = 0x0101010101010101
	bitsetMSB   = 0x8080808080808080

	h2Shift   = 24
	maxGroups = 1 << h2Shift

	addrHashMask   = 1<<32 - 1
	cookieHashMask = 1<<31 - 1
	cookieW2Shift  = 31

	// extWords is the width of a slot's extension in Map's tables: the key
	// of the same entry in the other index (cookie words in the address
	// index, address words in the cookie index).
	extWords = 3
)

// matchH2 returns a bitset (bit 7 of byte j) of the slots of control word c
// whose tag is h2 (given as h2 * bitsetLSB). It may report a false positive
// next to a true match (see Go's internal/runtime/maps), which the key
// comparison rejects; it never reports an empty or deleted slot.
func matchH2(c, h2x8 uint64) uint64 {
	v := c ^ h2x8
	return (v - bitsetLSB) &^ v & bitsetMSB
}

// matchEmpty returns the empty slots of control word c: bit 7 set, bit 1
// clear (a deleted byte has both).
func matchEmpty(c uint64) uint64 { return c &^ (c << 6) & bitsetMSB }

// matchFree returns the empty or deleted slots of control word c.
func matchFree(c uint64) uint64 { return c & bitsetMSB }

// matchFull returns the full slots of control word c.
func matchFull(c uint64) uint64 { return ^c & bitsetMSB }

// slotSize is the size of a slot[T] for every T (its value is a pointer).
const slotSize = uint64(unsafe.Sizeof(slot[struct{}]{}))

// slot is one cell of a table, 32 bytes: two to a cache line. Every field is
// accessed atomically because lookups read tables while writers change them;
// see shard.
type slot[T any] struct {
	meta   atomic.Uint64 // key bits and hash bits; see addrMeta, cookieMeta
	w0, w1 atomic.Uint64 // the key's words
	val    atomic.Pointer[T]
}

// addrKey returns the key that slot sl of an address index holds.
func (sl *slot[T]) addrKey() addrKey {
	return addrKey{sl.w0.Load(), sl.w1.Load(), sl.meta.Load() &^ addrHashMask}
}

// table is one shard's hash table. Its size never changes; growing builds a
// new table.
type table[T any] struct {
	gmask uint64          // number of groups - 1
	ctrl  []atomic.Uint64 // one control word per group
	slots []slot[T]       // groupSize per group
	ext   []atomic.Uint64 // extWords per slot, or none

	// Guarded by the shard's lock.
	free    int // never-used slots that may still be filled before a rebuild
	deleted int // slots marked deleted
}

func newTable[T any](groups int, ext bool) *table[T] {
	t := &table[T]{
		gmask: uint64(groups - 1),
		ctrl:  make([]atomic.Uint64, groups),
		slots: make([]slot[T], groups*groupSize),
	}
	for i := range t.ctrl {
		t.ctrl[i].Store(bitsetMSB) // all empty
	}
	if ext {
		t.ext = make([]atomic.Uint64, groups*groupSize*extWords)
	}
	// At most 7/8 of the slots are ever used, so every probe meets a group
	// with an empty slot and ends.
	t.free = groups * groupSize * 7 / 8
	return t
}

// find returns the index of the entry with meta word want (which carries the
// hash bits) and key words w0, w1, or -1. It is safe to run concurrently
// with writers: it reads every field atomically and visits each group at
// most once, so it always terminates, but its answer is only meaningful if
// the shard's sequence number shows that no write overlapped it.
func (t *table[T]) find(want, w0, w1 uint64) int {
	h2x8 := bitsetLSB * (want >> h2Shift & 0x7f)
	g := want & t.gmask
	for step := uint64(0); step <= t.gmask; step++ {
		c := t.ctrl[g].Load()
		for m := matchH2(c, h2x8); m != 0; m &= m - 1 {
			i := g*groupSize + uint64(bits.TrailingZeros64(m))>>3
			s := &t.slots[i]
			if s.meta.Load() == want && s.w0.Load() == w0 && s.w1.Load() == w1 {
				return int(i)
			}
		}
		if matchEmpty(c) != 0 {
			return -1
		}
		g = (g + step + 1) & t.gmask
	}
	return -1
}

func (t *table[T]) extAt(i int) (x [extWords]uint64) {
	if t.ext != nil {
		e := t.ext[i*extWords : i*extWords+extWords]
		x[0], x[1], x[2] = e[0].Load(), e[1].Load(), e[2].Load()
	}
	return x
}

func (t *table[T]) setExt(i int, x *[extWords]uint64) {
	if t.ext != nil {
		e := t.ext[i*extWords : i*extWords+extWords]
		e[0].Store(x[0])
		e[1].Store(x[1])
		e[2].Store(x[2])
	}
}

// set writes slot i's contents; its control byte is the caller's business.
func (t *table[T]) set(i int, meta, w0, w1 uint64, v *T, x *[extWords]uint64) {
	s := &t.slots[i]
	s.meta.Store(meta)
	s.w0.Store(w0)
	s.w1.Store(w1)
	s.val.Store(v)
	t.setExt(i, x)
}

// withCtrl returns control word c with byte j set to b.
func withCtrl(c uint64, j int, b uint64) uint64 {
	return c&^(0xff<<(8*j)) | b<<(8*j)
}

// insert adds an entry whose key is absent, in the first free slot of its
// probe sequence, where find meets it first. The table must have room
// (free > 0).
func (t *table[T]) insert(meta, w0, w1 uint64, v *T, x *[extWords]uint64) {
	g := meta & t.gmask
	for step := uint64(0); ; step++ {
		c := t.ctrl[g].Load()
		if m := matchFree(c); m != 0 {
			j := bits.TrailingZeros64(m) >> 3
			if c>>(8*j)&0xff == ctrlEmpty {
				t.free--
			} else {
				t.deleted--
			}
			t.set(int(g)*groupSize+j, meta, w0, w1, v, x)
			t.ctrl[g].Store(withCtrl(c, j, meta>>h2Shift&0x7f))
			return
		}
		g = (g + step + 1) & t.gmask
	}
}

// removeAt deletes entry i. If i's group has an empty slot, no probe has
// gone past the group, so i can be empty again; otherwise it becomes a
// tombstone that probes step over. The slot is zeroed so that the garbage
// collector does not keep its value alive.
func (t *table[T]) removeAt(i int) {
	g, j := i/groupSize, i%groupSize
	c := t.ctrl[g].Load()
	b := uint64(ctrlDeleted)
	if matchEmpty(c) != 0 {
		b = ctrlEmpty
		t.free++
	} else {
		t.deleted++
	}
	t.ctrl[g].Store(withCtrl(c, j, b))
	var zero [extWords]uint64
	t.set(i, 0, 0, 0, nil, &zero)
}

// full reports whether slot i holds an entry.
func (t *table[T]) full(i int) bool {
	return t.ctrl[i/groupSize].Load()>>(8*(i%groupSize))&ctrlEmpty == 0
}

// rebuilt returns a copy of t without tombstones, with twice the groups if
// the count live entries fill 7/16 of t or more (so the copy is at most 7/16
// full after doubling, and has room for 7/16 of its size either way).
func (t *table[T]) rebuilt(count int) *table[T] {
	groups := len(t.ctrl)
	if count >= groups*groupSize*7/16 {
		if groups >= maxGroups {
			panic("shard: table too large")
		}
		groups *= 2
	}
	n := newTable[T](groups, t.ext != nil)
	for g := range t.ctrl {
		for m := matchFull(t.ctrl[g].Load()); m != 0; m &= m - 1 {
			i := g*groupSize + bits.TrailingZeros64(m)>>3
			s := &t.slots[i]
			x := t.extAt(i)
			n.insert(s.meta.Load(), s.w0.Load(), s.w1.Load(), s.val.Load(), &x)
		}
	}
	return n
}

// shardPad fills a shard to a whole cache line. A shard's size does not
// depend on T, so it is computed from this non-generic mirror of it.
const shardPad = 64 - unsafe.Sizeof(struct {
	mu    sync.Mutex
	seq   atomic.Uint64
	tab   unsafe.Pointer
	gmask atomic.Uint64
	ctrl  unsafe.Pointer
	slots unsafe.Pointer
	count int
}{})%64

// shard is one lock domain of a map: a table and its writer lock and
// sequence number, alone on a cache line (no false sharing between shards).
//
// Lookups take no lock and write no shared memory: they are optimistic
// reads validated by the sequence number (a seqlock). A writer holds mu,
// makes seq odd, changes the table, and makes seq even again; a reader loads
// seq, probes, and accepts its answer only if seq was even and has not
// changed. Every field a reader loads is loaded atomically, so the race
// detector sees no race, and a reader that overlaps a write may see stale
// words but never leaves valid memory. Against a sync.Mutex or
// sync.RWMutex per shard this saves two atomic read-modify-writes per lookup
// and, under parallel lookups, the bouncing of the lock's cache line between
// cores (see the package documentation for measurements).
//
// The price is that values are pointers: a reader must load a value in one
// atomic operation, which an arbitrary type cannot be.
//
// A rebuild builds the new table while readers keep using the old one and
// publishes it in a write section only a few stores long, so readers never
// wait for a rehash. Holding mu without entering a write section (as
// RangeShard does between removals) blocks writers only.
//
// Besides tab, the shard carries copies of the current table's group mask
// and the addresses of its control words and slots, which the address lookup
// (getAddr) reads from this one cache line instead of following tab: a
// dependent load fewer on every lookup. They are published with the mask
// last and read with the mask first; tables never shrink, so whatever arrays
// a reader pairs with the mask it loaded are at least that large, and its
// indexes stay inside them even when a concurrent rebuild makes it mix two
// tables (which the sequence number then rejects).
type shard[T any] struct {
	mu    sync.Mutex
	seq   atomic.Uint64
	tab   atomic.Pointer[table[T]]
	gmask atomic.Uint64
	ctrl  atomic.Pointer[atomic.Uint64] // &tab.ctrl[0]
	slots atomic.Pointer[slot[T]]       // &tab.slots[0]
	count int                           // guarded by mu
	_     [shardPad]byte
}

func (s *shard[T]) init(ext bool) {
	s.publish(newTable[T](1, ext))
}

// publish makes t the shard's table; see shard for the order.
func (s *shard[T]) publish(t *table[T]) {
	s.tab.Store(t)
	s.ctrl.Store(&t.ctrl[0])
	s.slots.Store(&t.slots[0])
	s.gmask.Store(t.gmask)
}

// get returns the value of the entry with meta word want and key words w0,
// w1, and its extension words if ext.
func (s *shard[T]) get(want, w0, w1 uint64, ext bool) (v *T, x [extWords]uint64, ok bool) {
	for {
		seq := s.seq.Load()
		t := s.tab.Load()
		i := t.find(want, w0, w1)
		if i >= 0 {
			v = t.slots[i].val.Load()
			if ext {
				x = t.extAt(i)
			}
		}
		if seq&1 == 0 && s.seq.Load() == seq {
			return v, x, i >= 0
		}
		s.waitWrite(seq)
	}
}

// waitWrite waits, after a read was overlapped by a write, until a retry can
// succeed: at once if the write that changed seq is over, else until seq
// moves. Write sections are a few dozen atomic stores long, so a short spin
// sees most of them end. One that outlasts it has a writer descheduled in
// the middle, by Go's scheduler or by the kernel: the reader then waits for
// mu, which the writer holds through its write section and which parks the
// reader, so that its core goes to the writer. Yielding instead
// (runtime.Gosched) kept a core spinning that a writer descheduled by the
// kernel needed: readers waited up to a tick of the kernel's clock, 4 ms
// here, during login storms (tuning.md, "A player beside a login storm").
// No write section takes a lock, so a writer in one never waits for a reader.
//
//go:noinline
func (s *shard[T]) waitWrite(seq uint64) {
	if seq&1 == 0 {
		return
	}
	for n := 1; s.seq.Load() == seq; n++ {
		if n%64 == 0 {
			s.mu.Lock()
			s.mu.Unlock()
		}
	}
}

// The methods below require s.mu.

// t returns the current table, which only writers change.
func (s *shard[T]) t() *table[T] { return s.tab.Load() }

// reserve makes room for one more entry, rebuilding the table if needed.
// The copy is built outside any write section, so readers keep using the old
// table meanwhile. Indexes found before a reserve are invalid after it.
func (s *shard[T]) reserve() {
	if t := s.t(); t.free == 0 {
		n := t.rebuilt(s.count)
		s.beginWrite()
		s.publish(n)
		s.endWrite()
	}
}

// beginWrite and endWrite bracket changes to the table (a write section):
// readers that overlap it retry.
func (s *shard[T]) beginWrite() { s.seq.Add(1) }
func (s *shard[T]) endWrite()   { s.seq.Add(1) }

// insert adds an absent key; the caller has reserved room and is in a write
// section.
func (s *shard[T]) insert(meta, w0, w1 uint64, v *T, x *[extWords]uint64) {
	s.t().insert(meta, w0, w1, v, x)
	s.count++
}

// removeAt deletes entry i; the caller is in a write section.
func (s *shard[T]) removeAt(i int) {
	s.t().removeAt(i)
	s.count--
}

// sweep locks address shard s and calls fn for every entry exactly once, in
// slot order, with its address (zones holds the zone names) and value. If fn
// returns Remove, remove(i) must delete entry i (in a write section);
// entries never move, so the walk is unaffected.
func (s *shard[T]) sweep(zones *zoneTable, fn func(netip.AddrPort, *T) Action, remove func(i int)) (stopped bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.t()
	for i := range t.slots {
		if !t.full(i) {
			continue
		}
		sl := &t.slots[i]
		act := fn(sl.addrKey().addrPort(zones), sl.val.Load())
		if act&Remove != 0 {
			remove(i)
		}
		if act&Stop != 0 {
			return true
		}
	}
	return false
}

// lockOrdered locks the distinct shards among a and b of one index, lower
// index first; unlockOrdered undoes it. With "address shards before cookie
// shards" this is the lock order of package shard.
func lockOrdered[T any](a, b *shard[T], ia, ib int) {
	switch {
	case ia == ib:
		a.mu.Lock()
	case ia < ib:
		a.mu.Lock()
		b.mu.Lock()
	default:
		b.mu.Lock()
		a.mu.Lock()
	}
}

func unlockOrdered[T any](a, b *shard[T], ia, ib int) {
	a.mu.Unlock()
	if ia != ib {
		b.mu.Unlock()
	}
}
