package shard

import (
	"net/netip"
)

// cookieMeta returns the meta word of the cookie-index slot for a cookie
// whose last key word is w2 and whose hash is h.
func cookieMeta(w2, h uint64) uint64 {
	return w2<<cookieW2Shift | h&cookieHashMask
}

// Map is a concurrent map of connections indexed both by address and by a
// 20-byte cookie: a connection is found by the address a datagram came from
// and, when a client's address changes (NAT rebinding, migration), by the
// cookie it proves itself with, and then moved to its new address.
//
// Each index is sharded and read without locks as in AddrMap, with its own
// seed. Every entry is in both indexes, and the indexes always agree: the
// entry at address a has cookie c if and only if cookie c's entry is at a,
// and both hold the same value. Each slot of one index carries the entry's
// key in the other, so either side finds its twin without a search.
//
// Consistency. Every operation is linearizable. A mutation locks every shard
// (of either index) it changes and holds all of them in a write section
// (sequence numbers odd) from its first change to its last, and a lookup
// accepts only a read of its one shard that no write section overlapped; so
// no Get or GetByCookie can observe a state in which one index has an entry
// the other lacks, or a value the other does not have. Locks are taken in
// one global order, all address shards before any cookie shard and by index
// within each index, so the map cannot deadlock. An operation that starts from
// a cookie (Move) first reads the cookie's address without locking, then
// locks in order and retries if the entry moved meanwhile.
//
// Values are non-nil pointers, so a nil result means "none". Lookups never
// allocate; neither do mutations, except when a table is rebuilt (see
// AddrMap). Tables never shrink.
//
// The zero Map is not usable; call NewMap.
type Map[T any] struct {
	seedA, seedC uint64
	addrs        []shard[T] // ext: the entry's cookie words
	cookies      []shard[T] // ext: the entry's address key
	zones        zoneTable
}

// NewMap returns an empty map with shards shards per index, rounded up to a
// power of two; 0 means DefaultShards. It panics if shards is negative or
// above MaxShards.
func NewMap[T any](shards int) *Map[T] {
	n := shardCount(shards)
	m := &Map[T]{
		seedA:   newSeed(),
		seedC:   newSeed(),
		addrs:   make([]shard[T], n),
		cookies: make([]shard[T], n),
	}
	for i := range n {
		m.addrs[i].init(true)
		m.cookies[i].init(true)
	}
	return m
}

// aloc and cloc are an entry's place in the address and the cookie index:
// its slot's meta word, key words, shard and shard index.
type aloc[T any] struct {
	k    addrKey
	meta uint64
	s    *shard[T]
	i    int
}

type cloc[T any] struct {
	w    [extWords]uint64 // cookieKey
	meta uint64
	s    *shard[T]
	i    int
}

func (m *Map[T]) addrLoc(k addrKey) aloc[T] {
	h := hashAddr(m.seedA, &k)
	i := shardIndex(h, len(m.addrs))
	return aloc[T]{k, addrMeta(&k, h), &m.addrs[i], i}
}

func (m *Map[T]) cookieLoc(w [extWords]uint64) cloc[T] {
	h := hashCookie(m.seedC, w[0], w[1], w[2])
	i := shardIndex(h, len(m.cookies))
	return cloc[T]{w, cookieMeta(w[2], h), &m.cookies[i], i}
}

func (m *Map[T]) cookieLocOf(c *[20]byte) cloc[T] {
	w0, w1, w2 := cookieKey(c)
	return m.cookieLoc([extWords]uint64{w0, w1, w2})
}

// find returns the entry's index in its shard's current table, or -1.
func (l *aloc[T]) find() int { return l.s.t().find(l.meta, l.k.hi, l.k.lo) }
func (l *cloc[T]) find() int { return l.s.t().find(l.meta, l.w[0], l.w[1]) }

// words returns k as extension words for the cookie index.
func (k *addrKey) words() [extWords]uint64 { return [extWords]uint64{k.hi, k.lo, k.meta} }

func keyFromWords(x [extWords]uint64) addrKey { return addrKey{x[0], x[1], x[2]} }

func inconsistent() {
	panic("shard: Map indexes disagree (bug in package shard)")
}

// Get returns the value of the entry at address a.
func (m *Map[T]) Get(a netip.AddrPort) (*T, bool) {
	return getAddr(&m.zones, m.seedA, m.addrs, a)
}

// GetBatch looks up every address in addrs, storing each entry's value (or
// nil) at the same index of out, which must be at least as long. For a batch
// of datagrams it is faster than a Get per address when the map is larger
// than the CPU's caches: it overlaps the lookups' cache misses.
func (m *Map[T]) GetBatch(addrs []netip.AddrPort, out []*T) {
	getAddrs(&m.zones, m.seedA, m.addrs, addrs, out)
}

// GetByCookie returns the value and address of the entry with cookie c.
func (m *Map[T]) GetByCookie(c *[20]byte) (*T, netip.AddrPort, bool) {
	w0, w1, w2 := cookieKey(c)
	h := hashCookie(m.seedC, w0, w1, w2)
	v, x, ok := m.cookies[shardIndex(h, len(m.cookies))].get(cookieMeta(w2, h), w0, w1, true)
	if !ok {
		return nil, netip.AddrPort{}, false
	}
	return v, keyFromWords(x).addrPort(&m.zones), true
}

// Insert stores v at address a under cookie c. It panics if v is nil.
//
// An entry already at a is replaced: it leaves both indexes (its cookie stops
// resolving, unless it was c) and is returned as old. If c already belongs to
// an entry at another address, Insert changes nothing and returns ok false:
// a cookie names one connection, and re-pointing it would orphan that
// connection's address entry.
func (m *Map[T]) Insert(a netip.AddrPort, c [20]byte, v *T) (old *T, ok bool) {
	return m.insert(a, &c, v, true)
}

func (m *Map[T]) insert(a netip.AddrPort, c *[20]byte, v *T, replace bool) (old *T, ok bool) {
	if v == nil {
		panic("shard: nil value")
	}
	k, _ := m.zones.key(a, true)
	al := m.addrLoc(k)
	cl := m.cookieLocOf(c)
	xa, xc := k.words(), cl.w

	al.s.mu.Lock()
	defer al.s.mu.Unlock()
	ia := al.find()
	if ia >= 0 && !replace {
		return nil, false
	}
	ol := cl // the replaced entry's cookie
	if ia >= 0 {
		ol = m.cookieLoc(al.s.t().extAt(ia))
	}
	lockOrdered(cl.s, ol.s, cl.i, ol.i)
	defer unlockOrdered(cl.s, ol.s, cl.i, ol.i)

	ic := cl.find()
	if ic >= 0 {
		if ia < 0 || cl.s.t().extAt(ic) != xa {
			return nil, false // c names a connection at another address
		}
		// Same address, same cookie: only the value changes.
		old = al.s.t().slots[ia].val.Load()
		al.s.beginWrite()
		cl.s.beginWrite()
		al.s.t().slots[ia].val.Store(v)
		cl.s.t().slots[ic].val.Store(v)
		cl.s.endWrite()
		al.s.endWrite()
		return old, true
	}
	cl.s.reserve()
	if ia < 0 {
		al.s.reserve()
		al.s.beginWrite()
		cl.s.beginWrite()
		al.s.insert(al.meta, k.hi, k.lo, v, &xc)
		cl.s.insert(cl.meta, xc[0], xc[1], v, &xa)
		cl.s.endWrite()
		al.s.endWrite()
		return nil, true
	}
	// Same address, new cookie. The old cookie leaves first, so the cookie
	// index never holds two entries for a.
	old = al.s.t().slots[ia].val.Load()
	io := ol.find()
	if io < 0 {
		inconsistent()
	}
	al.s.beginWrite()
	cl.s.beginWrite()
	if ol.s != cl.s {
		ol.s.beginWrite()
	}
	ol.s.removeAt(io)
	al.s.t().set(ia, al.meta, k.hi, k.lo, v, &xc)
	cl.s.insert(cl.meta, xc[0], xc[1], v, &xa)
	if ol.s != cl.s {
		ol.s.endWrite()
	}
	cl.s.endWrite()
	al.s.endWrite()
	return old, true
}

// Move moves the entry with cookie c to address to, and returns its value
// and the address it had. An entry already at to is removed from both
// indexes and returned as displaced (nil if there was none). If no entry has
// cookie c, Move changes nothing and returns ok false. Moving an entry to its
// own address changes nothing and succeeds.
func (m *Map[T]) Move(c *[20]byte, to netip.AddrPort) (v *T, from netip.AddrPort, displaced *T, ok bool) {
	kt, _ := m.zones.key(to, true)
	tl := m.addrLoc(kt)
	cl := m.cookieLocOf(c)
	xt := kt.words()
	for {
		// Where is the entry now? The address shards must be locked
		// before the cookie shard, so this is only a guess to verify.
		v, x, found := cl.s.get(cl.meta, cl.w[0], cl.w[1], true)
		if !found {
			return nil, netip.AddrPort{}, nil, false
		}
		if x == xt {
			return v, to, nil, true
		}
		fl := m.addrLoc(keyFromWords(x))

		lockOrdered(fl.s, tl.s, fl.i, tl.i)
		it := tl.find()
		dl := cl // the displaced entry's cookie
		if it >= 0 {
			dl = m.cookieLoc(tl.s.t().extAt(it))
		}
		lockOrdered(cl.s, dl.s, cl.i, dl.i)
		if ic := cl.find(); ic < 0 || cl.s.t().extAt(ic) != x {
			unlockOrdered(cl.s, dl.s, cl.i, dl.i)
			unlockOrdered(fl.s, tl.s, fl.i, tl.i)
			if ic < 0 {
				return nil, netip.AddrPort{}, nil, false // deleted meanwhile
			}
			continue // moved meanwhile: try again from where it is now
		}
		if it < 0 {
			tl.s.reserve()
		}
		ifr := fl.find()
		if ifr < 0 {
			inconsistent()
		}
		v = fl.s.t().slots[ifr].val.Load()

		fl.s.beginWrite()
		if tl.s != fl.s {
			tl.s.beginWrite()
		}
		cl.s.beginWrite()
		if dl.s != cl.s {
			dl.s.beginWrite()
		}
		if it >= 0 {
			// Retire the displaced entry's cookie before c's entry takes
			// its address, so no two cookie entries share an address.
			displaced = tl.s.t().slots[it].val.Load()
			id := dl.find()
			if id < 0 {
				inconsistent()
			}
			dl.s.removeAt(id)
			cl.s.t().setExt(cl.find(), &xt) // re-found: removeAt may shift
			tl.s.t().set(it, tl.meta, kt.hi, kt.lo, v, &cl.w)
			fl.s.removeAt(ifr) // after the last use of it: a shift is harmless
		} else {
			cl.s.t().setExt(cl.find(), &xt)
			fl.s.removeAt(ifr)
			tl.s.insert(tl.meta, kt.hi, kt.lo, v, &cl.w)
		}
		if dl.s != cl.s {
			dl.s.endWrite()
		}
		cl.s.endWrite()
		if tl.s != fl.s {
			tl.s.endWrite()
		}
		fl.s.endWrite()
		unlockOrdered(cl.s, dl.s, cl.i, dl.i)
		unlockOrdered(fl.s, tl.s, fl.i, tl.i)
		return v, fl.k.addrPort(&m.zones), displaced, true
	}
}

// CompareAndDelete removes the entry at address a only if its value is old,
// and reports whether it did: "delete this connection, if it is still at this
// address", without racing a concurrent Insert or Move.
func (m *Map[T]) CompareAndDelete(a netip.AddrPort, old *T) bool {
	return old != nil && m.delete(a, old) != nil
}

func (m *Map[T]) delete(a netip.AddrPort, old *T) *T {
	k, ok := m.zones.key(a, false)
	if !ok {
		return nil
	}
	al := m.addrLoc(k)
	al.s.mu.Lock()
	defer al.s.mu.Unlock()
	ia := al.find()
	if ia < 0 {
		return nil
	}
	v := al.s.t().slots[ia].val.Load()
	if old != nil && v != old {
		return nil
	}
	m.removeBoth(al.s, ia)
	return v
}

// removeBoth removes entry i of address shard as, which the caller has
// locked, and its cookie entry.
func (m *Map[T]) removeBoth(as *shard[T], i int) {
	cl := m.cookieLoc(as.t().extAt(i))
	cl.s.mu.Lock()
	ic := cl.find()
	if ic < 0 {
		inconsistent()
	}
	as.beginWrite()
	cl.s.beginWrite()
	cl.s.removeAt(ic)
	as.removeAt(i)
	cl.s.endWrite()
	as.endWrite()
	cl.s.mu.Unlock()
}

// NumShards returns the number of shards per index, the bound for
// RangeShard's index.
func (m *Map[T]) NumShards() int { return len(m.addrs) }

// RangeShard calls fn for every entry whose address falls in address shard i
// (0 ≤ i < NumShards), with the contract of AddrMap.RangeShard: each entry
// exactly once; Keep, Remove, Stop or Remove|Stop; lookups never wait for the
// sweep; fn may call Get and GetByCookie but no other method of m. Remove
// deletes the entry from both indexes before the sweep goes on; the entry's
// cookie shard is locked for just that moment (address shards come before
// cookie shards in the lock order, so this cannot deadlock). While fn runs,
// no other goroutine can change the entry it was given.
func (m *Map[T]) RangeShard(i int, fn func(netip.AddrPort, *T) Action) (stopped bool) {
	as := &m.addrs[i]
	return as.sweep(&m.zones, fn, func(i int) {
		m.removeBoth(as, i)
	})
}
