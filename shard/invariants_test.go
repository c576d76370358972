package shard

import (
	"fmt"
	"math/bits"
)

// checkTable verifies one shard's table against its shard: the control
// bytes agree with the slots and with the counters, every entry is found by
// find at its own index (so no probe sequence is broken), and it lies in
// the shard its hash chooses. shardHash recomputes an entry's full hash.
func checkTable[T any](s *shard[T], si, nshards int, shardHash func(i int) uint64) error {
	t := s.t()
	if got, want := s.gmask.Load(), t.gmask; got != want {
		return fmt.Errorf("shard %d: published gmask %d, table %d", si, got, want)
	}
	if s.ctrl.Load() != &t.ctrl[0] || s.slots.Load() != &t.slots[0] {
		return fmt.Errorf("shard %d: published arrays are not the table's", si)
	}
	if s.seq.Load()&1 != 0 {
		return fmt.Errorf("shard %d: left in a write section", si)
	}
	full, deleted := 0, 0
	for g := range t.ctrl {
		c := t.ctrl[g].Load()
		for j := range groupSize {
			i := g*groupSize + j
			sl := &t.slots[i]
			switch b := c >> (8 * j) & 0xff; {
			case b == ctrlEmpty || b == ctrlDeleted:
				if b == ctrlDeleted {
					deleted++
				}
				if sl.meta.Load() != 0 || sl.w0.Load() != 0 || sl.w1.Load() != 0 || sl.val.Load() != nil {
					return fmt.Errorf("shard %d slot %d: free but not zeroed", si, i)
				}
			case b&0x80 != 0:
				return fmt.Errorf("shard %d slot %d: bad control byte %#x", si, i, b)
			default:
				full++
				m := sl.meta.Load()
				if b != m>>h2Shift&0x7f {
					return fmt.Errorf("shard %d slot %d: tag %#x, meta says %#x", si, i, b, m>>h2Shift&0x7f)
				}
				if f := t.find(m, sl.w0.Load(), sl.w1.Load()); f != i {
					return fmt.Errorf("shard %d slot %d: find returns %d", si, i, f)
				}
				if sl.val.Load() == nil {
					return fmt.Errorf("shard %d slot %d: nil value", si, i)
				}
				if h := shardHash(i); shardIndex(h, nshards) != si || h&cookieHashMask != m&cookieHashMask {
					return fmt.Errorf("shard %d slot %d: hash %#x does not belong here", si, i, h)
				}
			}
		}
	}
	if full != s.count {
		return fmt.Errorf("shard %d: %d full slots, count %d", si, full, s.count)
	}
	if deleted != t.deleted {
		return fmt.Errorf("shard %d: %d deleted slots, counter %d", si, deleted, t.deleted)
	}
	if capa := len(t.slots) * 7 / 8; t.free != capa-full-deleted || t.free < 0 {
		return fmt.Errorf("shard %d: free %d, want %d-%d-%d", si, t.free, capa, full, deleted)
	}
	if bits.OnesCount(uint(len(t.ctrl))) != 1 || len(t.slots) != len(t.ctrl)*groupSize {
		return fmt.Errorf("shard %d: bad table geometry", si)
	}
	return nil
}

// check verifies an AddrMap whose writers have all stopped.
func (m *AddrMap[T]) check() error {
	for si := range m.shards {
		s := &m.shards[si]
		s.mu.Lock()
		err := checkTable(s, si, len(m.shards), func(i int) uint64 {
			k := s.t().slots[i].addrKey()
			return hashAddr(m.seed, &k)
		})
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// check verifies both of a Map's indexes and that they agree: every address
// entry's cookie maps back to it with the same value, and the counts match.
// It takes every lock, in the package's lock order.
func (m *Map[T]) check() error {
	for i := range m.addrs {
		m.addrs[i].mu.Lock()
		defer m.addrs[i].mu.Unlock()
	}
	for i := range m.cookies {
		m.cookies[i].mu.Lock()
		defer m.cookies[i].mu.Unlock()
	}
	na, err := checkIndex("address", m.addrs, func(sl *slot[T]) uint64 {
		k := sl.addrKey()
		return hashAddr(m.seedA, &k)
	}, func(si, i int, t *table[T]) error {
		sl := &t.slots[i]
		k := sl.addrKey()
		cl := m.cookieLoc(t.extAt(i))
		ic := cl.find()
		if ic < 0 {
			return fmt.Errorf("address %v: its cookie is not indexed", k.addrPort(&m.zones))
		}
		if x := cl.s.t().extAt(ic); x != k.words() {
			return fmt.Errorf("address %v: its cookie points to %v", k.addrPort(&m.zones), keyFromWords(x).addrPort(&m.zones))
		}
		if cl.s.t().slots[ic].val.Load() != sl.val.Load() {
			return fmt.Errorf("address %v: the indexes hold different values", k.addrPort(&m.zones))
		}
		return nil
	})
	if err != nil {
		return err
	}
	nc, err := checkIndex("cookie", m.cookies, func(sl *slot[T]) uint64 {
		return hashCookie(m.seedC, sl.w0.Load(), sl.w1.Load(), sl.meta.Load()>>cookieW2Shift)
	}, func(si, i int, t *table[T]) error {
		sl := &t.slots[i]
		al := m.addrLoc(keyFromWords(t.extAt(i)))
		ia := al.find()
		if ia < 0 {
			return fmt.Errorf("cookie slot %d/%d: its address is not indexed", si, i)
		}
		if x := al.s.t().extAt(ia); x != [extWords]uint64{sl.w0.Load(), sl.w1.Load(), sl.meta.Load() >> cookieW2Shift} {
			return fmt.Errorf("cookie slot %d/%d: its address has another cookie", si, i)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if na != nc {
		return fmt.Errorf("%d addresses, %d cookies", na, nc)
	}
	return nil
}

// checkIndex runs checkTable on every shard of one of a Map's indexes, its
// entries hashed by hash, and agrees(si, i, table) on every entry i of shard
// si, which checks it against the other index. It returns the index's entry
// count.
func checkIndex[T any](name string, shards []shard[T], hash func(*slot[T]) uint64, agrees func(si, i int, t *table[T]) error) (int, error) {
	n := 0
	for si := range shards {
		s := &shards[si]
		t := s.t()
		if err := checkTable(s, si, len(shards), func(i int) uint64 { return hash(&t.slots[i]) }); err != nil {
			return 0, fmt.Errorf("%s index: %w", name, err)
		}
		n += s.count
		for i := range t.slots {
			if !t.full(i) {
				continue
			}
			if err := agrees(si, i, t); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}
