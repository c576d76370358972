package conn

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/shard"
)

// table owns a server's connections as a set: the map (by address, and by
// authorised cookie), how many entries it holds, the per-address limits,
// and what is remembered of addresses whose connection closed. It alone
// adds (admit), moves (move) and removes (remove, forget) entries, so the
// count, the limits and the memory of closed addresses change together
// with the map. Admissions, a check-then-insert, are serialised per network
// prefix (/24, /64) by one of adm's locks, the shard addrLimits counts the
// prefix in: everything an admission decides from is keyed by its address
// (its connection, its spent cookie, its IP's and prefix's counts), so
// admissions of different networks run in parallel and each limit stays
// exact. MaxClients, the one limit across prefixes, is a reservation on
// count (reserve). Lookups take no lock.
//
// A sealed server has no connection before its client's proof checked
// out (loop.prove): every entry is a proven connection.
type table struct {
	conns  *shard.Map[Conn]
	limits *addrLimits
	// recent: per address whose connection closed, until when its stray
	// packets get no RestartHandshake and which cookies are spent.
	recent  *shard.AddrMap[recentClose]
	nRecent atomic.Int64
	// max is MaxClients, which the admin API changes live.
	max atomic.Int64
	// clock reads the server's clock (for when a closed address is
	// forgotten).
	clock func() time.Time

	// count is the map's number of entries, plus the admissions under way
	// that reserved one (reserve). Every promotion writes it: it has a
	// cache line of its own, so that the fields every promotion only reads
	// (max, nRecent, the maps) do not move between cores with it.
	_     [64]byte
	count atomic.Int64
	_     [56]byte

	// adm[i] serialises the admissions of the prefixes in limits' shard i.
	adm [limitShards]admitLock
}

// connShards is the connection map's shard count. A promotion locks two of
// its shards (address and cookie), and a shard's lock is held while its
// table is rebuilt (1/connShards of the connections copied): at the
// default 64, two promoting workers waited for the map's locks often
// enough to leave a core idle (tuning.md, "Issue 21, round 6"). The price
// is an empty map's 256 one-group tables per index, about 240 KiB more per
// server than at 64, and a sweep of leftovers that takes 256 housekeeping
// ticks to go round.
const connShards = 256

// admitLock is one admission lock, alone on its cache line.
type admitLock struct {
	sync.Mutex
	_ [56]byte
}

// recentClose is what the server remembers of an address whose connection
// closed. The entry is immutable once stored.
type recentClose struct {
	exp int64 // Unix ns: forgotten after
	// ts and cookie are the closed connection's cookie: a Response with
	// that cookie, or with an older Timestamp, is a replay. Remembering it
	// for recentlyDisconnected (longer than the 40 s a cookie lives) means
	// no cookie is ever promoted twice, in memory bounded with the table.
	ts     float64
	cookie cookie.Cookie
}

func newTable(st *settings) *table {
	t := &table{
		conns:  shard.NewMap[Conn](connShards),
		limits: newAddrLimits(st.MaxClientsPerIP, st.MaxClientsPerPrefix),
		recent: shard.NewAddrMap[recentClose](0),
		clock:  st.Now,
	}
	t.max.Store(int64(st.MaxClients))
	return t
}

// len counts connections.
func (t *table) len() int64 { return t.count.Load() }

// full reports whether the server holds MaxClients connections.
func (t *table) full() bool { return t.len() >= t.max.Load() }

// admit decides, under its prefix's admission lock, whether proven client p
// becomes a connection, and if so makes it with mk and inserts it. Deciding
// reads the table and changes nothing; only a verdict that admits goes on
// to insert.
func (t *table) admit(p *promotion, mk func() *Conn) verdict {
	sh := t.limits.shardOf(p.addr.Addr())
	mu := &t.adm[sh]
	mu.Lock()
	defer mu.Unlock()
	v, hasOld := t.decide(p)
	if v.ack != nil || v.denied != 0 || v.replay || v.held {
		return v
	}
	return t.insert(p, sh, hasOld, mk)
}

// decide is admit's decision for p, before any change. hasOld reports a
// live connection at p's address that p would replace.
func (t *table) decide(p *promotion) (v verdict, hasOld bool) {
	if c, at, ok := t.conns.GetByCookie((*[20]byte)(&p.cookie)); ok {
		if at == p.addr {
			v.ack = &c.cookie // a duplicate Response raced through
		} else {
			v.replay = true // the client moved on: a replay from its old address
		}
		return v, false
	}
	if t.spent(p) {
		v.replay = true
		return v, false
	}
	old, hasOld := t.conns.Get(p.addr)
	if hasOld && !old.closed.Load() && p.proof {
		// Sealed: a proof replaces the proven connection at its address
		// only for the same token client id (the newest proof wins), and
		// only with a newer cookie; another client id's holds it.
		switch {
		case old.sec == nil || old.sec.id.ClientID != p.tokenClient:
			v.held = true
		case p.ts <= old.cookieTS:
			v.replay = true
		}
		return v, true
	}
	if hasOld && !old.closed.Load() {
		if old.clientID == p.to.ClientID {
			// The same client answered a newer Challenge before its Ack
			// arrived: the connection exists, repeat its Ack.
			v.ack = &old.cookie
			return v, true
		}
		if p.ts < old.cookieTS {
			// A restarted client replaces its connection with a newer
			// handshake only; an older cookie is a replay.
			v.replay = true
			return v, true
		}
	}
	// A replaced connection does not count against capacity.
	if !hasOld && t.full() {
		v.denied = protocol.DeniedServerFull
	}
	return v, hasOld
}

// insert makes p's connection and puts it in the table. The admission
// lock of p's shard sh is held.
func (t *table) insert(p *promotion, sh int, hasOld bool, mk func() *Conn) (v verdict) {
	// A new connection reserves its place in the count first. One that
	// replaces another takes that one's place: it is counted once
	// inserted, as an entry of the map.
	reserved := !hasOld
	if reserved && !t.reserve() {
		v.denied = protocol.DeniedServerFull
		return v
	}
	unreserve := func() {
		if reserved {
			t.count.Add(-1)
		}
	}
	c := mk()
	if !t.limits.admitNew(p.addr.Addr(), sh, hasOld, &c.limit) {
		unreserve()
		v.denied = protocol.DeniedAddressLimit
		return v
	}
	// Insert's answer is the truth: a migration may have moved another
	// connection onto this address since decide looked, or moved the
	// old one away; and only a cookie's own address is locked (two
	// addresses sharing a cookie would need a collision of the 160-bit
	// MAC).
	prev, ok := t.conns.Insert(p.addr, p.cookie, c)
	if !ok {
		t.limits.release(&c.limit)
		unreserve()
		return v
	}
	switch {
	case prev != nil && reserved:
		unreserve() // it took prev's entry
	case prev == nil && !reserved:
		t.count.Add(1)
	}
	t.clearRecent(p.addr)
	v.ack, v.made, v.prev = &c.cookie, c, prev
	return v
}

// reserve counts one more entry unless the server holds MaxClients
// connections. The count is the one figure admissions of different
// prefixes share: a reservation is one compare-and-swap, so MaxClients
// holds exactly however many promote at once.
func (t *table) reserve() bool {
	for {
		n := t.count.Load()
		if n >= t.max.Load() {
			return false
		}
		if t.count.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// move moves c to addr. It reports where c was and the connection it
// displaced there (closed by the caller), or false when another move took
// c first.
func (t *table) move(c *Conn, addr netip.AddrPort) (from netip.AddrPort, displaced *Conn, ok bool) {
	_, from, displaced, ok = t.conns.Move((*[20]byte)(&c.cookie), addr)
	if !ok {
		return from, nil, false
	}
	t.limits.move(addr.Addr(), &c.limit)
	t.clearRecent(addr)
	if displaced == c {
		displaced = nil
	}
	if displaced != nil {
		// Its entry is gone: its close will find nothing to remove.
		t.count.Add(-1)
	}
	return from, displaced, true
}

// remove takes closing connection c out of the table, and remembers its
// address as recently closed (its cookie spent), within the memory bound.
// A connection that another took the place of leaves no memory: the
// address is its successor's, whose cookie is newer.
func (t *table) remove(c *Conn) {
	t.limits.release(&c.limit)
	addr, ok := t.forget(c)
	if !ok || t.nRecent.Load() >= maxRecentFactor*t.max.Load() {
		return
	}
	r := &recentClose{
		exp:    t.clock().Add(recentlyDisconnected).UnixNano(),
		ts:     c.cookieTS,
		cookie: c.cookie,
	}
	if _, had := t.recent.Get(addr); !had {
		t.nRecent.Add(1)
	}
	t.recent.Set(addr, r)
}

// forget removes c's entry if it is still there.
func (t *table) forget(c *Conn) (netip.AddrPort, bool) {
	addr := c.RemoteAddr()
	ok := t.conns.CompareAndDelete(addr, c)
	if ok {
		t.count.Add(-1)
	}
	return addr, ok
}

// RecentlyClosed implements handshake.ClosedAddrs: addr's connection
// closed within recentlyDisconnected.
func (t *table) RecentlyClosed(addr netip.AddrPort, now float64) bool {
	if t.nRecent.Load() == 0 {
		return false
	}
	r, ok := t.recent.Get(addr)
	return ok && float64(r.exp)/1e9 > now
}

// spent reports whether p's cookie is one a closed connection at its
// address already used, or older than it.
func (t *table) spent(p *promotion) bool {
	if t.nRecent.Load() == 0 {
		return false
	}
	r, ok := t.recent.Get(p.addr)
	if !ok || r.exp <= t.clock().UnixNano() {
		return false
	}
	return p.ts < r.ts || (p.ts == r.ts && p.cookie == r.cookie)
}

func (t *table) clearRecent(addr netip.AddrPort) {
	if t.nRecent.Load() == 0 {
		return
	}
	if _, ok := t.recent.Delete(addr); ok {
		t.nRecent.Add(-1)
	}
}

// sweep removes, from map shard i, the entries of connections closed
// while moving (see loop.move), and expired memories of closed addresses;
// batch is scratch.
func (t *table) sweep(i int, now time.Time, batch []*Conn) []*Conn {
	batch = batch[:0]
	t.conns.RangeShard(i, func(_ netip.AddrPort, c *Conn) shard.Action {
		if c.closed.Load() {
			batch = append(batch, c)
		}
		return shard.Keep
	})
	for _, c := range batch {
		t.forget(c)
	}
	if t.nRecent.Load() > 0 {
		ns := now.UnixNano()
		t.recent.RangeShard(i%t.recent.NumShards(), func(_ netip.AddrPort, r *recentClose) shard.Action {
			if r.exp <= ns {
				t.nRecent.Add(-1)
				return shard.Remove
			}
			return shard.Keep
		})
	}
	clear(batch)
	return batch
}
