package shard

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

func TestShardCount(t *testing.T) {
	for _, c := range []struct{ in, want int }{
		{0, DefaultShards}, {1, 1}, {2, 2}, {3, 4}, {64, 64}, {65, 128}, {MaxShards, MaxShards},
	} {
		if got := NewAddrMap[int](c.in).NumShards(); got != c.want {
			t.Errorf("NewAddrMap(%d).NumShards() = %d, want %d", c.in, got, c.want)
		}
		if got := NewMap[int](c.in).NumShards(); got != c.want {
			t.Errorf("NewMap(%d).NumShards() = %d, want %d", c.in, got, c.want)
		}
	}
	for _, bad := range []int{-1, MaxShards + 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewAddrMap(%d) did not panic", bad)
				}
			}()
			NewAddrMap[int](bad)
		}()
	}
}

func TestAddrMapOps(t *testing.T) {
	a1 := netip.MustParseAddrPort("1.2.3.4:5")
	a1m := netip.MustParseAddrPort("[::ffff:1.2.3.4]:5")
	a2 := netip.MustParseAddrPort("[2001:db8::1]:443")
	az := netip.MustParseAddrPort("[fe80::1%eth0]:9")
	v1, v2, v3 := new(int), new(int), new(int)
	type op = mapStep[*AddrMap[int], any]
	type pair struct {
		v  *int
		ok bool
	}
	get := func(a netip.AddrPort) func(m *AddrMap[int]) any {
		return func(m *AddrMap[int]) any { v, ok := m.Get(a); return pair{v, ok} }
	}
	del := func(a netip.AddrPort) func(m *AddrMap[int]) any {
		return func(m *AddrMap[int]) any { v, ok := m.Delete(a); return pair{v, ok} }
	}
	set := func(a netip.AddrPort, v *int) func(m *AddrMap[int]) any {
		return func(m *AddrMap[int]) any { m.Set(a, v); return nil }
	}
	cad := func(a netip.AddrPort, v *int) func(m *AddrMap[int]) any {
		return func(m *AddrMap[int]) any { return m.CompareAndDelete(a, v) }
	}
	length := func(m *AddrMap[int]) any { return m.Len() }
	steps := []op{
		{"get from empty", get(a1), pair{nil, false}},
		{"delete from empty", del(a1), pair{nil, false}},
		{"len empty", length, 0},
		{"set a1", set(a1, v1), nil},
		{"get a1", get(a1), pair{v1, true}},
		{"mapped form is another key", get(a1m), pair{nil, false}},
		{"set mapped form", set(a1m, v2), nil},
		{"a1 unchanged", get(a1), pair{v1, true}},
		{"get mapped", get(a1m), pair{v2, true}},
		{"len 2", length, 2},
		{"replace a1", set(a1, v3), nil},
		{"get replaced", get(a1), pair{v3, true}},
		{"len still 2", length, 2},
		{"compare-and-delete, wrong value", cad(a1, v1), false},
		{"a1 still there", get(a1), pair{v3, true}},
		{"compare-and-delete nil", cad(a1, nil), false},
		{"compare-and-delete, right value", cad(a1, v3), true},
		{"a1 gone", get(a1), pair{nil, false}},
		{"compare-and-delete absent", cad(a1, v3), false},
		{"zoned, unseen zone", get(az), pair{nil, false}},
		{"set zoned", set(az, v1), nil},
		{"get zoned", get(az), pair{v1, true}},
		{"zone matters", get(netip.MustParseAddrPort("[fe80::1]:9")), pair{nil, false}},
		{"set a2", set(a2, v2), nil},
		{"len 3", length, 3},
		{"delete a2", del(a2), pair{v2, true}},
		{"delete a2 again", del(a2), pair{nil, false}},
		{"delete zoned", del(az), pair{v1, true}},
		{"delete mapped", del(a1m), pair{v2, true}},
		{"len 0", length, 0},
		{"zero AddrPort is a key", set(netip.AddrPort{}, v2), nil},
		{"get zero AddrPort", get(netip.AddrPort{}), pair{v2, true}},
	}
	runMapSteps(t, []int{1, 4, 0}, NewAddrMap[int], func(got, want any) bool { return got == want }, steps)
}

func TestAddrMapNilValue(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Set(nil) did not panic")
		}
	}()
	NewAddrMap[int](0).Set(netip.MustParseAddrPort("1.2.3.4:5"), nil)
}

// TestAddrMapGrowth fills a map far past its initial size, deletes most of
// it, and refills it, checking every key against a Go map.
func TestAddrMapGrowth(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	m := NewAddrMap[int](8)
	ref := map[netip.AddrPort]*int{}
	addrs := sampleAddrs(r, 20000)
	for round := range 3 {
		for i, a := range addrs {
			v := &[]int{i}[0]
			m.Set(a, v)
			ref[a] = v
		}
		if m.Len() != len(ref) {
			t.Fatalf("round %d: Len %d, want %d", round, m.Len(), len(ref))
		}
		for _, a := range addrs[:len(addrs)*9/10] {
			if _, ok := m.Delete(a); !ok {
				t.Fatalf("round %d: Delete(%v) missed", round, a)
			}
			delete(ref, a)
		}
		for a, v := range ref {
			if got, ok := m.Get(a); !ok || got != v {
				t.Fatalf("round %d: Get(%v) = %v, %v", round, a, got, ok)
			}
		}
		if err := m.check(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

// TestAddrMapNoShrink documents that tables keep their size when emptied.
func TestAddrMapNoShrink(t *testing.T) {
	m := NewAddrMap[int](1)
	r := rand.New(rand.NewPCG(23, 24))
	addrs := sampleAddrs(r, 5000)
	v := new(int)
	for _, a := range addrs {
		m.Set(a, v)
	}
	size := len(m.shards[0].t().slots)
	for _, a := range addrs {
		m.Delete(a)
	}
	if m.Len() != 0 || len(m.shards[0].t().slots) != size {
		t.Fatalf("after emptying: Len %d, %d slots (was %d)", m.Len(), len(m.shards[0].t().slots), size)
	}
}

func TestAddrMapRangeShard(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	m := NewAddrMap[int](4)
	addrs := sampleAddrs(r, 3000)
	vals := make([]int, len(addrs))
	for i, a := range addrs {
		vals[i] = i
		m.Set(a, &vals[i])
	}
	// Sweep every shard, removing odd values; each entry is seen once.
	seen := map[netip.AddrPort]int{}
	for i := range m.NumShards() {
		stopped := m.RangeShard(i, func(a netip.AddrPort, v *int) Action {
			seen[a]++
			if *v != vals[*v] || addrs[*v] != a {
				t.Fatalf("sweep gave %v -> %d", a, *v)
			}
			// Lookups are allowed inside a sweep: they take no lock.
			if got, ok := m.Get(a); !ok || got != v {
				t.Fatalf("Get inside sweep: %v %v", got, ok)
			}
			if *v%2 == 1 {
				return Remove
			}
			return Keep
		})
		if stopped {
			t.Fatal("sweep reported a stop")
		}
	}
	if len(seen) != len(addrs) {
		t.Fatalf("sweep saw %d entries, want %d", len(seen), len(addrs))
	}
	for a, n := range seen {
		if n != 1 {
			t.Fatalf("sweep saw %v %d times", a, n)
		}
	}
	for i, a := range addrs {
		if _, ok := m.Get(a); ok != (i%2 == 0) {
			t.Fatalf("after sweep, Get(%v) = %v", a, ok)
		}
	}
	if err := m.check(); err != nil {
		t.Fatal(err)
	}
	// Stop, and Remove|Stop, end the sweep at once.
	for _, act := range []Action{Stop, Remove | Stop} {
		before := m.Len()
		var first netip.AddrPort
		n := 0
		if !m.RangeShard(0, func(a netip.AddrPort, _ *int) Action { n++; first = a; return act }) {
			t.Fatalf("%v: sweep did not report the stop", act)
		}
		_, present := m.Get(first)
		if n != 1 || present != (act == Stop) || m.Len() != before-int(act&Remove) {
			t.Fatalf("%v: %d calls, present %v, Len %d -> %d", act, n, present, before, m.Len())
		}
	}
	// An empty shard calls nothing.
	e := NewAddrMap[int](1)
	e.RangeShard(0, func(netip.AddrPort, *int) Action { t.Fatal("called on an empty map"); return Keep })
}

func TestAddrMapAllocs(t *testing.T) {
	m := NewAddrMap[int](0)
	r := rand.New(rand.NewPCG(27, 28))
	addrs := sampleAddrs(r, 1000)
	v, w := new(int), new(int)
	for _, a := range addrs {
		m.Set(a, v)
	}
	hit, miss, zoned := addrs[500], netip.MustParseAddrPort("9.9.9.9:9"), netip.MustParseAddrPort("[fe80::1%eth0]:9")
	for name, f := range map[string]func(){
		"Get hit":          func() { m.Get(hit) },
		"Get miss":         func() { m.Get(miss) },
		"Get zoned":        func() { m.Get(zoned) },
		"Set existing":     func() { m.Set(hit, w); m.Set(hit, v) },
		"CompareAndDelete": func() { m.CompareAndDelete(hit, w) },
		"Len":              func() { m.Len() },
		"RangeShard": func() {
			m.RangeShard(3, func(netip.AddrPort, *int) Action { return Keep })
		},
		"Delete and Set": func() { m.Delete(hit); m.Set(hit, v) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocs", name, n)
		}
	}
}
