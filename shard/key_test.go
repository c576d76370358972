package shard

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"unsafe"
)

func TestNetipLayout(t *testing.T) {
	if !fastKeys {
		t.Errorf("netip.Addr is not laid out as addrLayout: lookups fall back to As16 (correct but slower); update addrLayout")
	}
}

// withSafeKeys runs f with the As16-based key path, as on a Go release whose
// netip.Addr layout checkLayout does not recognise.
func withSafeKeys(t *testing.T, f func()) {
	t.Helper()
	old := fastKeys
	fastKeys = false
	defer func() { fastKeys = old }()
	f()
}

// mapStep is one step of a map's table test: do's result must be want.
type mapStep[M, R any] struct {
	name string
	do   func(M) R
	want R
}

// runMapSteps runs steps in order on a new map from newMap for each shard
// count, with the fast and with the safe key path, and fails at the first
// result that is not the same as its want or the first broken invariant.
func runMapSteps[M interface{ check() error }, R any](t *testing.T, shardCounts []int, newMap func(shards int) M,
	same func(got, want R) bool, steps []mapStep[M, R]) {
	t.Helper()
	for _, keys := range []struct {
		name string
		run  func(t *testing.T, f func())
	}{
		{"fast", func(t *testing.T, f func()) { f() }},
		{"safe", withSafeKeys},
	} {
		for _, shards := range shardCounts {
			m := newMap(shards)
			keys.run(t, func() {
				for _, s := range steps {
					if got := s.do(m); !same(got, s.want) {
						t.Fatalf("%s keys, %d shards: %s: got %v, want %v", keys.name, shards, s.name, got, s.want)
					}
					if err := m.check(); err != nil {
						t.Fatalf("%s keys, %d shards: after %s: %v", keys.name, shards, s.name, err)
					}
				}
			})
		}
	}
}

func TestKeyOf(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, a := range sampleAddrs(r, 5000) {
		k, zoned := keyOf(a)
		ks, zs := keyOfSafe(a.Addr())
		ks.meta |= uint64(a.Port()) << portShift
		if k != ks || zoned != zs {
			t.Fatalf("%v: keyOf = %+v %v, keyOfSafe = %+v %v", a, k, zoned, ks, zs)
		}
		if zoned != (a.Addr().Zone() != "") {
			t.Fatalf("%v: zoned = %v", a, zoned)
		}
	}
}

func TestKeyRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	var z zoneTable
	for _, a := range sampleAddrs(r, 5000) {
		k, ok := z.key(a, true)
		if !ok {
			t.Fatalf("%v: key not made", a)
		}
		if got := k.addrPort(&z); got != a {
			t.Fatalf("%v comes back as %v", a, got)
		}
	}
}

func TestKeysDistinct(t *testing.T) {
	var z zoneTable
	distinct := []string{
		"1.2.3.4:5", "[::ffff:1.2.3.4]:5", "1.2.3.4:6", "1.2.3.5:5",
		"[fe80::1]:5", "[fe80::1%eth0]:5", "[fe80::1%eth1]:5", "[fe80::1%1]:5",
		"0.0.0.0:0", "[::]:0",
	}
	seen := map[addrKey]string{}
	for _, s := range distinct {
		k, _ := z.key(netip.MustParseAddrPort(s), true)
		if prev, dup := seen[k]; dup {
			t.Fatalf("%s and %s share key %+v", prev, s, k)
		}
		seen[k] = s
	}
	// The zero AddrPort is a key of its own too.
	k, _ := z.key(netip.AddrPort{}, true)
	if prev, dup := seen[k]; dup {
		t.Fatalf("the zero AddrPort shares a key with %s", prev)
	}
}

func TestZoneTable(t *testing.T) {
	var z zoneTable
	if _, ok := z.id("eth0", false); ok {
		t.Fatal("lookup of an unseen zone succeeded")
	}
	a, _ := z.id("eth0", true)
	b, _ := z.id("eth1", true)
	a2, ok := z.id("eth0", false)
	if a == 0 || b == 0 || a == b || !ok || a2 != a {
		t.Fatalf("ids eth0 %d eth1 %d eth0 again %d %v", a, b, a2, ok)
	}
	if z.name(a) != "eth0" || z.name(b) != "eth1" {
		t.Fatalf("names %q %q", z.name(a), z.name(b))
	}
	// A lookup with an unseen zone is a miss without registering it.
	if _, ok := z.key(netip.MustParseAddrPort("[fe80::1%eth9]:1"), false); ok {
		t.Fatal("key of an unseen zone")
	}
	if _, ok := z.id("eth9", false); ok {
		t.Fatal("a lookup registered a zone")
	}
}

func TestZoneLimit(t *testing.T) {
	if maxZones != 8191 {
		t.Fatalf("maxZones is %d; AddrMap's documentation says 8191", maxZones)
	}
	// Fill the table directly (registering one by one copies the snapshot
	// each time, which is fine for the few zones a host has but quadratic
	// up to maxZones).
	s := &zoneSnap{ids: map[string]uint64{}, names: []string{""}}
	for i := range maxZones - 1 {
		name := fmt.Sprint("if", i)
		s.ids[name] = uint64(i + 1)
		s.names = append(s.names, name)
	}
	var z zoneTable
	z.snap.Store(s)
	if id, ok := z.id("last", true); !ok || id != maxZones {
		t.Fatalf("last zone: id %d, %v", id, ok)
	}
	if id, ok := z.id("if7", true); !ok || id != 8 {
		t.Fatalf("known zone: id %d, %v", id, ok)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("no panic beyond maxZones")
		}
	}()
	z.id("one too many", true)
}

func TestSizes(t *testing.T) {
	if got := unsafe.Sizeof(slot[int]{}); got != 32 || uint64(got) != slotSize {
		t.Errorf("slot is %d bytes, want 32", got)
	}
	if got := unsafe.Sizeof(shard[int]{}); got%64 != 0 {
		t.Errorf("shard is %d bytes, not a whole number of cache lines", got)
	}
	if got := unsafe.Sizeof(shard[[100]byte]{}); got != unsafe.Sizeof(shard[int]{}) {
		t.Errorf("shard size depends on T")
	}
}
