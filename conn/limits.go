package conn

import (
	"math/rand/v2"
	"net/netip"
	"sync"

	"github.com/udpgate/udpgate/shard"
)

// addrLimits counts connections per IP and per network prefix (/24 for
// IPv4, /64 for IPv6), so that one host, or one network, cannot take every
// slot: without them a single IP filled 1,000 slots in 58 ms and held them
// with one KeepAlive per slot every few seconds. A prefix is the unit an
// attacker pays for: an IPv6 host usually owns a whole /64, and a rented
// IPv4 block is rarely smaller than a /24.
//
// The counts live in plain maps, sharded by network prefix: a prefix and
// every IP in it belong to one shard (limitShard), so each limit is checked
// and counted under that one shard's mutex and stays exact, while
// admissions from different networks proceed in parallel. The table's
// admission takes the same shard's place (shardOf) for its own lock. The
// counts change once per connection opened, moved or closed, never per
// packet, and hold an entry only for an IP or prefix with a connection, so
// their size is bounded by the connection count.
type addrLimits struct {
	maxIP, maxPrefix int // ≤ 0: unlimited
	disabled         bool
	// seed keys shardOf's hash, so that no one outside the process can
	// aim networks at one shard.
	seed   uint64
	shards [limitShards]limitShard
	// keyMu serialises the reads and writes of connections' limitKeys
	// that may race (a move or a close against a sealed proof's admit),
	// so each is released once. It is never held with a shard's lock.
	keyMu sync.Mutex
}

// limitShards is how many shards the counts, and the table's admission
// locks, are split into: a power of two, many times the cores a promotion
// storm keeps busy. An admission holds its lock for most of a promotion,
// so two workers meet on one about once in limitShards promotions, and the
// one that waits parks: at 64 that still cost two workers a measurable part
// of their rate (tuning.md, "Issue 21, round 6").
const limitShards = 256

// limitShard holds the counts of the prefixes that hash to it, and of
// every IP in them.
type limitShard struct {
	mu     sync.Mutex
	ip     map[[16]byte]int32
	prefix map[[16]byte]int32
	_      [64]byte // a shard's lock alone on its cache lines
}

// limitKey is the IP a connection was counted under, zero when it is not
// counted (no datagram comes from the unspecified address).
type limitKey [16]byte

func (k *limitKey) counted() bool { return *k != limitKey{} }

func newAddrLimits(maxIP, maxPrefix int) *addrLimits {
	l := &addrLimits{
		maxIP: maxIP, maxPrefix: maxPrefix,
		disabled: maxIP <= 0 && maxPrefix <= 0,
		seed:     rand.Uint64(),
	}
	for i := range l.shards {
		l.shards[i].ip = make(map[[16]byte]int32)
		l.shards[i].prefix = make(map[[16]byte]int32)
	}
	return l
}

// shardOf is the shard of addr's prefix: its counts, and the table's
// admission lock for every address in the prefix.
func (l *addrLimits) shardOf(addr netip.Addr) int {
	ip, is4 := ipKey(addr)
	return l.shardOfPrefix(prefixOf(ip, is4))
}

func (l *addrLimits) shardOfPrefix(px [16]byte) int {
	return int(shard.HashAddr(l.seed, netip.AddrPortFrom(netip.AddrFrom16(px), 0)) % limitShards)
}

// prefixOf masks an address to its /24 (IPv4, in its IPv4-mapped form) or
// /64 (IPv6).
func prefixOf(a [16]byte, is4 bool) [16]byte {
	if is4 {
		a[15] = 0
		return a
	}
	clear(a[8:])
	return a
}

func ipKey(a netip.Addr) ([16]byte, bool) {
	a = a.Unmap()
	return a.As16(), a.Is4()
}

// admitNew counts a connection from addr unless its IP or prefix is at
// its limit, and records in k what it counted. force counts it regardless:
// a connection that replaces another at the same address adds nothing once
// its predecessor is released. The connection is one no other goroutine
// can see yet (not in the map), so k is written without keyMu: admissions
// of different networks share no lock. sh is shardOf(addr), which the
// caller knows.
func (l *addrLimits) admitNew(addr netip.Addr, sh int, force bool, k *limitKey) bool {
	ip, ok := l.count(addr, sh, force)
	if ok {
		*k = ip
	}
	return ok
}

// count is admit's check and count, under the prefix's shard lock (i, or
// shardOf(addr) if i < 0). It returns the IP counted, zero when the limits
// are off.
func (l *addrLimits) count(addr netip.Addr, i int, force bool) (limitKey, bool) {
	if l.disabled {
		return limitKey{}, true
	}
	ip, is4 := ipKey(addr)
	px := prefixOf(ip, is4)
	if i < 0 {
		i = l.shardOfPrefix(px)
	}
	sh := &l.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !force {
		if l.maxIP > 0 && int(sh.ip[ip]) >= l.maxIP {
			return limitKey{}, false
		}
		if l.maxPrefix > 0 && int(sh.prefix[px]) >= l.maxPrefix {
			return limitKey{}, false
		}
	}
	sh.ip[ip]++
	sh.prefix[px]++
	return ip, true
}

// move recounts a migrated connection under its new address; a migration
// is never refused (the client proved the connection is its own).
func (l *addrLimits) move(to netip.Addr, k *limitKey) {
	if l.disabled {
		return
	}
	ip, is4 := ipKey(to)
	l.keyMu.Lock()
	old := *k
	if !old.counted() || old == ip {
		l.keyMu.Unlock()
		return
	}
	*k = ip
	l.keyMu.Unlock()
	l.dec(old)
	px := prefixOf(ip, is4)
	sh := &l.shards[l.shardOfPrefix(px)]
	sh.mu.Lock()
	sh.ip[ip]++
	sh.prefix[px]++
	sh.mu.Unlock()
}

// release uncounts a closed connection, once.
func (l *addrLimits) release(k *limitKey) {
	if l.disabled {
		return
	}
	l.keyMu.Lock()
	old := *k
	*k = limitKey{}
	l.keyMu.Unlock()
	if old.counted() {
		l.dec(old)
	}
}

// dec uncounts one connection from ip, under its shard's lock.
func (l *addrLimits) dec(ip limitKey) {
	px := prefixOf(ip, netip.AddrFrom16(ip).Unmap().Is4())
	sh := &l.shards[l.shardOfPrefix(px)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if n := sh.ip[ip] - 1; n > 0 {
		sh.ip[ip] = n
	} else {
		delete(sh.ip, ip)
	}
	if n := sh.prefix[px] - 1; n > 0 {
		sh.prefix[px] = n
	} else {
		delete(sh.prefix, px)
	}
}
