package shard

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
	"unsafe"
)

// An address is stored as three words that lock-free readers can load
// atomically: As16 as two big-endian words (hi, lo) and a meta word holding
// the port, the family and the zone. Within a table slot the meta word also
// carries the low 32 bits of the hash (see addrMeta), so that a table can be
// rebuilt without rehashing and one compare rejects most non-matching slots.
type addrKey struct {
	hi, lo uint64
	meta   uint64 // port << portShift | family << famShift | zone id << zoneShift
}

const (
	portShift = 32
	famShift  = 48
	zoneShift = 50

	// Address families. An IPv4 address and its IPv4-mapped IPv6 form have
	// the same As16, so the family keeps them apart, as netip does.
	famInvalid = 0 // the zero netip.Addr
	famV4      = 1
	famV6      = 2

	// maxZones is how many distinct IPv6 zones one map can hold addresses
	// of. Zones name local interfaces (fe80::1%eth0), so they are few; each
	// is given a small id the first time an address with it is stored, and
	// keeps it for the map's life.
	maxZones = 1<<(63-zoneShift) - 1
)

// addrLayout mirrors netip.Addr: the 128-bit address as hi and lo words, then
// a unique.Handle whose pointer identifies family and zone (nil for the zero
// Addr, one shared handle for all IPv4 addresses, one for all unzoned IPv6).
type addrLayout struct {
	hi, lo uint64
	z      uintptr
}

var (
	// z4 and z6 are the handles of unzoned IPv4 and IPv6 addresses.
	z4, z6 uintptr
	// fastKeys reports whether netip.Addr is laid out as addrLayout, as
	// checkLayout verified when the package was initialised.
	fastKeys = checkLayout()
)

// checkLayout decides whether keyOf and getAddr may read netip.Addr's words
// directly.
//
// Going through As16 costs a store-forwarding stall on every lookup (the
// compiler copies the returned array with one 16-byte load of two 8-byte
// stores) plus a data-dependent branch on the family, together several times
// the cost of the hash itself. Reading the two words in place costs two
// loads.
//
// netip.Addr's layout is not an API, so it is checked here against As16, Is4
// and Zone on sample addresses of every kind, and the code falls back to the
// exported methods if a future Go release changes it (TestNetipLayout then
// fails, to say so). Both paths produce identical keys (tested).
func checkLayout() bool {
	if unsafe.Sizeof(netip.Addr{}) != unsafe.Sizeof(addrLayout{}) ||
		unsafe.Alignof(netip.Addr{}) != unsafe.Alignof(addrLayout{}) {
		return false
	}
	words := func(ip netip.Addr) addrLayout { return *(*addrLayout)(unsafe.Pointer(&ip)) }
	v4 := netip.AddrFrom4([4]byte{192, 0, 2, 1})
	v6 := netip.MustParseAddr("2001:db8::8:7:6:5")
	z4, z6 = words(v4).z, words(v6).z
	zoned := words(v6.WithZone("eth0")).z
	if z4 == 0 || z6 == 0 || zoned == 0 || z4 == z6 || zoned == z4 || zoned == z6 ||
		words(netip.Addr{}) != (addrLayout{}) ||
		words(netip.AddrFrom4([4]byte{10, 1, 2, 3})).z != z4 ||
		words(netip.IPv6Unspecified()).z != z6 {
		return false
	}
	for _, ip := range []netip.Addr{v4, v6, v6.WithZone("eth0"), netip.MustParseAddr("::ffff:1.2.3.4")} {
		k, _ := keyOfSafe(ip)
		if w := words(ip); w.hi != k.hi || w.lo != k.lo {
			return false
		}
	}
	return true
}

// keyOf returns a's key without its zone id, and whether a has a zone (then
// the caller adds the id: see zoneTable).
func keyOf(a netip.AddrPort) (k addrKey, zoned bool) {
	ip := a.Addr()
	if fastKeys {
		w := (*addrLayout)(unsafe.Pointer(&ip))
		k.hi, k.lo = w.hi, w.lo
		// Branch-free: IPv4 and IPv6 arrive interleaved at random.
		var v4, v6 uint64
		if w.z == z4 {
			v4 = 1
		}
		if w.z == z6 {
			v6 = 1
		}
		k.meta = (v4*famV4 | v6*famV6) << famShift
		if v4|v6 == 0 && w.z != 0 {
			k.meta, zoned = famV6<<famShift, true
		}
	} else {
		k, zoned = keyOfSafe(ip)
	}
	k.meta |= uint64(a.Port()) << portShift
	return k, zoned
}

// keyOfSafe is keyOf for an Addr, through netip's exported methods only.
func keyOfSafe(ip netip.Addr) (k addrKey, zoned bool) {
	b := ip.As16()
	k.hi, k.lo = binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	switch {
	case ip.Is4():
		k.meta = famV4 << famShift
	case ip.Is6():
		k.meta = famV6 << famShift
		zoned = ip.Zone() != ""
	}
	return k, zoned
}

// addrPort rebuilds the netip.AddrPort a key was made from.
func (k addrKey) addrPort(zones *zoneTable) netip.AddrPort {
	port := uint16(k.meta >> portShift)
	var ip netip.Addr
	switch k.meta >> famShift & 3 {
	case famV4:
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(k.lo))
		ip = netip.AddrFrom4(b)
	case famV6:
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], k.hi)
		binary.BigEndian.PutUint64(b[8:], k.lo)
		ip = netip.AddrFrom16(b)
		if id := k.meta >> zoneShift & maxZones; id != 0 {
			ip = ip.WithZone(zones.name(id))
		}
	}
	return netip.AddrPortFrom(ip, port)
}

// zoneTable gives each IPv6 zone seen by a map a small id, so a zoned
// address still fits the three-word key. Lookups read an immutable snapshot
// through an atomic pointer; the first address with a new zone copies it.
// Its lock is a leaf: it is only taken with no shard locked.
type zoneTable struct {
	mu   sync.Mutex
	snap atomic.Pointer[zoneSnap]
}

type zoneSnap struct {
	ids   map[string]uint64
	names []string // names[id]; names[0] is the empty zone
}

// id returns zone's id. If zone has none yet, register decides whether to
// give it one (for stores) or to report false (for lookups: no entry can
// have an unregistered zone). It panics when a map would exceed maxZones.
func (z *zoneTable) id(zone string, register bool) (uint64, bool) {
	if s := z.snap.Load(); s != nil {
		if id, ok := s.ids[zone]; ok {
			return id, true
		}
	}
	if !register {
		return 0, false
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	old := z.snap.Load()
	s := &zoneSnap{ids: map[string]uint64{}, names: []string{""}}
	if old != nil {
		if id, ok := old.ids[zone]; ok {
			return id, true
		}
		for k, v := range old.ids {
			s.ids[k] = v
		}
		s.names = append(s.names[:0], old.names...)
	}
	id := uint64(len(s.names))
	if id > maxZones {
		panic("shard: too many distinct IPv6 zones")
	}
	s.ids[zone] = id
	s.names = append(s.names, zone)
	z.snap.Store(s)
	return id, true
}

func (z *zoneTable) name(id uint64) string {
	return z.snap.Load().names[id]
}

// key returns a's complete key, registering its zone if register is set;
// ok is false only for a lookup of a zone the map has never stored.
func (z *zoneTable) key(a netip.AddrPort, register bool) (k addrKey, ok bool) {
	k, zoned := keyOf(a)
	if zoned {
		id, ok := z.id(a.Addr().Zone(), register)
		if !ok {
			return k, false
		}
		k.meta |= id << zoneShift
	}
	return k, true
}

// cookieKey splits a cookie into the table's key words: two 64-bit words and
// 32 bits that share the meta word with the hash (see cookieMeta).
func cookieKey(c *[20]byte) (w0, w1, w2 uint64) {
	return binary.LittleEndian.Uint64(c[:8]), binary.LittleEndian.Uint64(c[8:16]),
		uint64(binary.LittleEndian.Uint32(c[16:]))
}

func cookieFromKey(w0, w1, w2 uint64) (c [20]byte) {
	binary.LittleEndian.PutUint64(c[:8], w0)
	binary.LittleEndian.PutUint64(c[8:16], w1)
	binary.LittleEndian.PutUint32(c[16:], uint32(w2))
	return c
}
