package loadgen

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// Source addresses are numbered from Config.FirstSource upward, skipping
// addresses whose last byte is 0 or 255 (network- and broadcast-looking
// addresses that some tools treat specially). Numbering "usable" addresses
// makes both directions plain arithmetic: usable(x) counts the usable
// addresses below x, 254 per /24 block.

// usable returns the number of usable addresses below x.
func usable(x uint32) uint32 {
	lo := x & 0xff
	if lo > 0 {
		lo = min(lo-1, 254)
	}
	return (x>>8)*254 + lo
}

// fromUsable is the inverse of usable: the address with u usable ones below
// it.
func fromUsable(u uint32) uint32 { return (u/254)<<8 | (u%254 + 1) }

// sourceAddr returns the k-th source address from first, or an error if it
// falls outside 127.0.0.0/8.
func sourceAddr(first netip.Addr, k int) (netip.Addr, error) {
	if !first.Is4() || !first.IsLoopback() {
		return netip.Addr{}, fmt.Errorf("loadgen: first source address %v is not in 127.0.0.0/8", first)
	}
	b := first.As4()
	x := fromUsable(usable(binary.BigEndian.Uint32(b[:])) + uint32(k))
	if x>>24 != 127 || k < 0 {
		return netip.Addr{}, fmt.Errorf("loadgen: %d source addresses from %v run past 127.255.255.254: choose a lower first address or fewer sources", k+1, first)
	}
	binary.BigEndian.PutUint32(b[:], x)
	return netip.AddrFrom4(b), nil
}

// sourceRange maps source addresses to their index without allocation: the
// receive path turns every reply's destination into a client this way.
type sourceRange struct {
	base uint32 // usable(first)
	n    uint32 // addresses in use
}

func newSourceRange(first netip.Addr, n int) sourceRange {
	b := first.As4()
	return sourceRange{base: usable(binary.BigEndian.Uint32(b[:])), n: uint32(n)}
}

// index returns the index of address a (4 bytes, network order), or false if
// a is not one of the range's addresses.
func (r *sourceRange) index(a [4]byte) (int, bool) {
	x := binary.BigEndian.Uint32(a[:])
	if lo := x & 0xff; lo == 0 || lo == 255 {
		return 0, false
	}
	k := usable(x) - r.base
	if k >= r.n { // also catches addresses below the base (wraps)
		return 0, false
	}
	return int(k), true
}

// addr4 returns the k-th address of the range in network byte order.
func (r *sourceRange) addr4(k int) [4]byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], fromUsable(r.base+uint32(k)))
	return b
}
