package conn

import (
	"net/netip"
	"sync"
)

// addrLimits counts connections per IP and per network prefix (/24 for
// IPv4, /64 for IPv6), so that one host, or one network, cannot take every
// slot: without them a single IP filled 1,000 slots in 58 ms and held them
// with one KeepAlive per slot every few seconds. A prefix is the unit an
// attacker pays for: an IPv6 host usually owns a whole /64, and a rented
// IPv4 block is rarely smaller than a /24.
//
// The counts live in plain maps under one mutex: they change once per
// connection opened, moved or closed, never per packet, and hold an entry
// only for an IP or prefix with a connection, so their size is bounded by
// the connection count.
type addrLimits struct {
	maxIP, maxPrefix int // ≤ 0: unlimited

	mu       sync.Mutex
	ip       map[[16]byte]int32
	prefix   map[[16]byte]int32
	disabled bool
}

// limitKey is the IP a connection was counted under, zero when it is not
// counted (no datagram comes from the unspecified address).
type limitKey [16]byte

func (k *limitKey) counted() bool { return *k != limitKey{} }

func newAddrLimits(maxIP, maxPrefix int) *addrLimits {
	return &addrLimits{
		maxIP: maxIP, maxPrefix: maxPrefix,
		ip:       make(map[[16]byte]int32),
		prefix:   make(map[[16]byte]int32),
		disabled: maxIP <= 0 && maxPrefix <= 0,
	}
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

// admit counts a new connection from addr unless its IP or prefix is at its
// limit. force counts it regardless: a connection that replaces another at
// the same address adds nothing once its predecessor is released.
func (l *addrLimits) admit(addr netip.Addr, force bool, k *limitKey) bool {
	if l.disabled {
		return true
	}
	ip, is4 := ipKey(addr)
	px := prefixOf(ip, is4)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !force {
		if l.maxIP > 0 && int(l.ip[ip]) >= l.maxIP {
			return false
		}
		if l.maxPrefix > 0 && int(l.prefix[px]) >= l.maxPrefix {
			return false
		}
	}
	l.ip[ip]++
	l.prefix[px]++
	*k = ip
	return true
}

// move recounts a migrated connection under its new address; a migration
// is never refused (the client proved the connection is its own).
func (l *addrLimits) move(to netip.Addr, k *limitKey) {
	if l.disabled {
		return
	}
	ip, is4 := ipKey(to)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !k.counted() || *k == ip {
		return
	}
	l.dec(*k)
	l.ip[ip]++
	l.prefix[prefixOf(ip, is4)]++
	*k = ip
}

// release uncounts a closed connection, once.
func (l *addrLimits) release(k *limitKey) {
	if l.disabled {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !k.counted() {
		return
	}
	l.dec(*k)
	*k = limitKey{}
}

func (l *addrLimits) dec(ip limitKey) {
	px := prefixOf(ip, netip.AddrFrom16(ip).Unmap().Is4())
	if n := l.ip[ip] - 1; n > 0 {
		l.ip[ip] = n
	} else {
		delete(l.ip, ip)
	}
	if n := l.prefix[px] - 1; n > 0 {
		l.prefix[px] = n
	} else {
		delete(l.prefix, px)
	}
}
