package shard

import (
	"math/rand/v2"
	"testing"
)

func TestMatch(t *testing.T) {
	// Bytes, low to high: full 0x05, empty, full 0x05, deleted, full 0x7f,
	// full 0x00, full 0x06, empty.
	c := uint64(0x80_06_00_7f_fe_05_80_05)
	if got, want := matchH2(c, bitsetLSB*0x05), uint64(0x80_00_80); got&want != want || got&^want&^(0x80<<48) != 0 {
		// The only false positive the SWAR match may add is next to a
		// true one; here byte 6 (0x06) follows no match, so none.
		t.Errorf("matchH2(0x05) = %#x", got)
	}
	if got := matchH2(c, bitsetLSB*0x11); got != 0 {
		t.Errorf("matchH2(0x11) = %#x, want 0", got)
	}
	if got, want := matchEmpty(c), uint64(0x80_00_00_00_00_00_80_00); got != want {
		t.Errorf("matchEmpty = %#x, want %#x", got, want)
	}
	if got, want := matchFree(c), uint64(0x80_00_00_00_80_00_80_00); got != want {
		t.Errorf("matchFree = %#x, want %#x", got, want)
	}
	if got, want := matchFull(c), uint64(0x00_80_80_80_00_80_00_80); got != want {
		t.Errorf("matchFull = %#x, want %#x", got, want)
	}
	// No match ever reports an empty or deleted byte.
	for h2 := range uint64(128) {
		if m := matchH2(bitsetMSB, bitsetLSB*h2); m != 0 {
			t.Fatalf("matchH2 on an empty group: %#x", m)
		}
		if m := matchH2(0xfefefefefefefefe, bitsetLSB*h2); m != 0 {
			t.Fatalf("matchH2 on a deleted group: %#x", m)
		}
	}
}

// TestTableRandom drives one shard with random inserts and deletes against
// a Go map, with hashes confined to few bits so that groups fill, probes
// chain, tombstones appear and rebuilds happen at both sizes.
func TestTableRandom(t *testing.T) {
	for _, hashBits := range []uint{3, 6, 12, 32} {
		r := rand.New(rand.NewPCG(11, uint64(hashBits)))
		var s shard[int]
		s.init(true)
		ref := map[uint64]*int{}
		vals := make([]int, 512)
		meta := func(k uint64) uint64 {
			// Key k in w0; the hash is a mix of k cut to hashBits bits,
			// its h2 from the bits above the group bits.
			h := (k * 0x9e3779b97f4a7c15) >> (64 - hashBits)
			h2 := (k * 0xc2b2ae3d27d4eb4f) >> 57
			return h&(1<<h2Shift-1) | h2<<h2Shift | 1<<40 // a key bit, as addresses have
		}
		for op := range 20000 {
			k := uint64(r.IntN(len(vals)))
			s.mu.Lock()
			i := s.t().find(meta(k), k, ^k)
			_, present := ref[k]
			if (i >= 0) != present {
				t.Fatalf("bits %d op %d: key %d found %v, present %v", hashBits, op, k, i >= 0, present)
			}
			switch {
			case present && r.IntN(2) == 0:
				s.beginWrite()
				s.removeAt(i)
				s.endWrite()
				delete(ref, k)
			case !present:
				s.reserve()
				s.beginWrite()
				s.insert(meta(k), k, ^k, &vals[k], &[extWords]uint64{k, k + 1, k + 2})
				s.endWrite()
				ref[k] = &vals[k]
			}
			s.mu.Unlock()
			if op%997 == 0 || op == 19999 {
				s.mu.Lock()
				err := checkTable(&s, 0, 1, func(i int) uint64 { return s.t().slots[i].meta.Load() })
				for k, v := range ref {
					i := s.t().find(meta(k), k, ^k)
					if i < 0 || s.t().slots[i].val.Load() != v || s.t().extAt(i) != [extWords]uint64{k, k + 1, k + 2} {
						t.Fatalf("bits %d: key %d lost", hashBits, k)
					}
				}
				s.mu.Unlock()
				if err != nil {
					t.Fatalf("bits %d op %d: %v", hashBits, op, err)
				}
			}
		}
	}
}

// TestTableRebuild checks the growth policy: a table doubles when live
// entries fill 7/16 of it, and is rebuilt at its size when tombstones are
// what used it up.
func TestTableRebuild(t *testing.T) {
	t.Run("grow", func(t *testing.T) {
		var s shard[int]
		s.init(false)
		v := 1
		sizes := []int{}
		for k := range uint64(1000) {
			s.reserve()
			s.insert(k*0x9e3779b97f4a7c15&addrHashMask, k, 0, &v, nil)
			if n := len(s.t().slots); len(sizes) == 0 || sizes[len(sizes)-1] != n {
				sizes = append(sizes, n)
			}
		}
		for i, n := range sizes {
			if n != groupSize<<i {
				t.Fatalf("sizes %v: not doubling from one group", sizes)
			}
		}
		if n := len(s.t().slots); 1000 > n*7/8 || 1000 < n*7/16 {
			t.Fatalf("1000 entries in %d slots", n)
		}
	})
}

func TestTableTombstones(t *testing.T) {
	// Two groups; keys all homed in group 0 overflow into group 1, so group
	// 0 fills completely and deletions there leave tombstones.
	var s shard[int]
	s.mu.Lock()
	defer s.mu.Unlock()
	s.publish(newTable[int](2, false))
	v := 1
	for k := range uint64(12) {
		s.insert(k<<h2Shift, k, 0, &v, nil) // group 0 by hash
	}
	if c := s.t().ctrl[0].Load(); matchFree(c) != 0 {
		t.Fatalf("group 0 not full: %#x", c)
	}
	for k := range uint64(6) {
		s.removeAt(s.t().find(k<<h2Shift, k, 0))
	}
	if s.t().deleted != 6 {
		t.Fatalf("deleted = %d, want 6 tombstones", s.t().deleted)
	}
	// Keys that overflowed into group 1 are still found across the
	// tombstones.
	for k := uint64(6); k < 12; k++ {
		if s.t().find(k<<h2Shift, k, 0) < 0 {
			t.Fatalf("key %d lost behind tombstones", k)
		}
	}
	if err := checkTable(&s, 0, 1, func(i int) uint64 { return s.t().slots[i].meta.Load() }); err != nil {
		t.Fatal(err)
	}
	// 6 live entries of 16 slots: the rebuild drops the tombstones and
	// keeps the size.
	n := s.t().rebuilt(s.count)
	if len(n.ctrl) != 2 || n.deleted != 0 || n.free != 14-6 {
		t.Fatalf("rebuild: %d groups, %d deleted, %d free", len(n.ctrl), n.deleted, n.free)
	}
	// A new key reuses a tombstone, the first free slot of its probe.
	s.insert(99<<h2Shift&(0x7f<<h2Shift), 99, 0, &v, nil)
	if s.t().deleted != 5 {
		t.Fatalf("deleted = %d after reuse, want 5", s.t().deleted)
	}
	// Deleting in a group that has an empty slot leaves no tombstone.
	s.removeAt(s.t().find(11<<h2Shift, 11, 0))
	if s.t().deleted != 5 {
		t.Fatalf("deleted = %d after a delete in group 1, want 5", s.t().deleted)
	}
	if err := checkTable(&s, 0, 1, func(i int) uint64 { return s.t().slots[i].meta.Load() }); err != nil {
		t.Fatal(err)
	}
}
