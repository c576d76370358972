package shard

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// sampleAddrs returns addresses of every kind: IPv4, IPv6, IPv4-mapped IPv6,
// zoned IPv6, the zero Addr, extreme ports, then random ones.
func sampleAddrs(r *rand.Rand, n int) []netip.AddrPort {
	fixed := []netip.AddrPort{
		{},
		netip.AddrPortFrom(netip.Addr{}, 7),
		netip.MustParseAddrPort("0.0.0.0:0"),
		netip.MustParseAddrPort("1.2.3.4:5"),
		netip.MustParseAddrPort("[::ffff:1.2.3.4]:5"),
		netip.MustParseAddrPort("255.255.255.255:65535"),
		netip.MustParseAddrPort("[::]:0"),
		netip.MustParseAddrPort("[2001:db8::1]:443"),
		netip.MustParseAddrPort("[fe80::1%eth0]:9"),
		netip.MustParseAddrPort("[fe80::1%eth1]:9"),
		netip.MustParseAddrPort("[fe80::1]:9"),
		netip.MustParseAddrPort("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"),
	}
	out := append([]netip.AddrPort(nil), fixed...)
	for len(out) < n {
		out = append(out, randAddr(r))
	}
	return out
}

// refHashAddr is the specification: XXH64 with seed over As16 ‖ port (big
// endian), computed by github.com/cespare/xxhash/v2.
func refHashAddr(seed uint64, a netip.AddrPort) uint64 {
	var b [addrKeySize]byte
	a16 := a.Addr().As16()
	copy(b[:], a16[:])
	binary.BigEndian.PutUint16(b[16:], a.Port())
	d := xxhash.NewWithSeed(seed)
	d.Write(b[:])
	return d.Sum64()
}

func TestHashAddrMatchesXXHash(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, seed := range []uint64{0, 1, 0x9e3779b97f4a7c15, ^uint64(0), r.Uint64()} {
		for _, a := range sampleAddrs(r, 2000) {
			want := refHashAddr(seed, a)
			if got := HashAddr(seed, a); got != want {
				t.Fatalf("HashAddr(%#x, %v) = %#x, want %#x", seed, a, got, want)
			}
			k, _ := keyOf(a)
			if got := hashAddr(seed, &k); got != want {
				t.Fatalf("hashAddr(%#x, %v) = %#x, want %#x", seed, a, got, want)
			}
			ks, _ := keyOfSafe(a.Addr())
			ks.meta |= uint64(a.Port()) << portShift
			if got := hashAddr(seed, &ks); got != want {
				t.Fatalf("hashAddr(%#x, %v) via keyOfSafe = %#x, want %#x", seed, a, got, want)
			}
		}
	}
	// With a zero seed, XXH64 with seed is plain XXH64.
	a := netip.MustParseAddrPort("1.2.3.4:5")
	k, _ := keyOf(a)
	var b [addrKeySize]byte
	a16 := a.Addr().As16()
	copy(b[:], a16[:])
	binary.BigEndian.PutUint16(b[16:], a.Port())
	if got, want := hashAddr(0, &k), xxhash.Sum64(b[:]); got != want {
		t.Fatalf("hashAddr(0, %v) = %#x, want xxhash.Sum64 %#x", a, got, want)
	}
}

func TestHashCookieMatchesXXHash(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	cookies := [][20]byte{{}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	for range 2000 {
		cookies = append(cookies, randCookie(r))
	}
	for _, seed := range []uint64{0, 42, r.Uint64()} {
		for _, c := range cookies {
			d := xxhash.NewWithSeed(seed)
			d.Write(c[:])
			w0, w1, w2 := cookieKey(&c)
			if got, want := hashCookie(seed, w0, w1, w2), d.Sum64(); got != want {
				t.Fatalf("hashCookie(%#x, %x) = %#x, want %#x", seed, c, got, want)
			}
			if cookieFromKey(w0, w1, w2) != c {
				t.Fatalf("cookie %x does not survive cookieKey", c)
			}
		}
	}
}

// TestGetAddrHash checks the hash written out in getAddr against hashAddr,
// through the shard it picks: with 2^16 shards almost every key has a shard
// of its own, so a wrong hash would miss.
func TestGetAddrHash(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	m := NewAddrMap[int](MaxShards)
	addrs := sampleAddrs(r, 3000)
	vals := make([]int, len(addrs))
	for i, a := range addrs {
		vals[i] = i
		m.Set(a, &vals[i])
	}
	for i, a := range addrs {
		if v, ok := m.Get(a); !ok || *v != i {
			t.Fatalf("Get(%v) = %v, %v; want %d", a, v, ok, i)
		}
	}
}

func TestSeedsDiffer(t *testing.T) {
	a, b := NewAddrMap[int](0), NewAddrMap[int](0)
	if a.seed == b.seed {
		t.Fatal("two maps drew the same seed")
	}
	m := NewMap[int](0)
	if m.seedA == m.seedC {
		t.Fatal("a Map's two indexes share a seed")
	}
}
