package shard

// Test hooks: operations the tests use that no user of the package needs.

import "net/netip"

// InsertNew stores v at address a under cookie c only if neither a nor c is
// in the map, and reports whether it did: Insert refusing both kinds of
// conflict. It panics if v is nil.
func (m *Map[T]) InsertNew(a netip.AddrPort, c [20]byte, v *T) bool {
	_, ok := m.insert(a, &c, v, false)
	return ok
}

// Delete removes the entry at address a from both indexes and returns its
// value.
func (m *Map[T]) Delete(a netip.AddrPort) (*T, bool) {
	v := m.delete(a, nil)
	return v, v != nil
}

// DeleteByCookie removes the entry with cookie c, wherever it is, and
// returns its value and address. It starts from the cookie, like Move, so
// the tests use it to exercise that lock order against every other writer.
func (m *Map[T]) DeleteByCookie(c *[20]byte) (*T, netip.AddrPort, bool) {
	cl := m.cookieLocOf(c)
	for {
		_, x, found := cl.s.get(cl.meta, cl.w[0], cl.w[1], true)
		if !found {
			return nil, netip.AddrPort{}, false
		}
		al := m.addrLoc(keyFromWords(x))
		al.s.mu.Lock()
		cl.s.mu.Lock()
		ic := cl.find()
		if ic < 0 || cl.s.t().extAt(ic) != x {
			cl.s.mu.Unlock()
			al.s.mu.Unlock()
			if ic < 0 {
				return nil, netip.AddrPort{}, false
			}
			continue
		}
		ia := al.find()
		if ia < 0 {
			inconsistent()
		}
		v := al.s.t().slots[ia].val.Load()
		al.s.beginWrite()
		cl.s.beginWrite()
		cl.s.removeAt(ic)
		al.s.removeAt(ia)
		cl.s.endWrite()
		al.s.endWrite()
		cl.s.mu.Unlock()
		al.s.mu.Unlock()
		return v, al.k.addrPort(&m.zones), true
	}
}

// Len returns the number of entries. It locks the address shards one at a
// time, so under concurrent writes it is a sum of per-shard snapshots.
func (m *Map[T]) Len() int { return countShards(m.addrs) }

// CompareAndDelete removes a only if its value is old, and reports whether
// it did. This is how an owner deletes "this value, if it is still the one at
// a" without racing a concurrent Set.
func (m *AddrMap[T]) CompareAndDelete(a netip.AddrPort, old *T) bool {
	return old != nil && m.delete(a, old) != nil
}

// Len returns the number of entries. It locks the shards one at a time, so
// under concurrent writes it is a sum of per-shard snapshots, not one
// snapshot of the whole map.
func (m *AddrMap[T]) Len() int { return countShards(m.shards) }

// countShards sums the shards' counts, locking one shard at a time.
func countShards[T any](shards []shard[T]) int {
	n := 0
	for i := range shards {
		s := &shards[i]
		s.mu.Lock()
		n += s.count
		s.mu.Unlock()
	}
	return n
}
