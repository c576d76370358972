package shard

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// tconn is a test connection: it remembers the cookie it was stored under.
type tconn struct {
	id     int
	cookie [20]byte
}

func ck(b byte) [20]byte { return [20]byte{0: b, 19: b} }

func TestMapOps(t *testing.T) {
	a1 := netip.MustParseAddrPort("1.2.3.4:5")
	a2 := netip.MustParseAddrPort("[2001:db8::1]:443")
	a3 := netip.MustParseAddrPort("[fe80::1%eth0]:9")
	a4 := netip.MustParseAddrPort("[::ffff:1.2.3.4]:5")
	c1, c2, c3, c4 := ck(1), ck(2), ck(3), ck(4)
	v1, v2, v3, v4 := &tconn{id: 1}, &tconn{id: 2}, &tconn{id: 3}, &tconn{id: 4}

	type res []any
	get := func(a netip.AddrPort) func(*Map[tconn]) res {
		return func(m *Map[tconn]) res { v, ok := m.Get(a); return res{v, ok} }
	}
	byCookie := func(c [20]byte) func(*Map[tconn]) res {
		return func(m *Map[tconn]) res { v, a, ok := m.GetByCookie(&c); return res{v, a, ok} }
	}
	insert := func(a netip.AddrPort, c [20]byte, v *tconn) func(*Map[tconn]) res {
		return func(m *Map[tconn]) res { old, ok := m.Insert(a, c, v); return res{old, ok} }
	}
	insertNew := func(a netip.AddrPort, c [20]byte, v *tconn) func(*Map[tconn]) res {
		return func(m *Map[tconn]) res { return res{m.InsertNew(a, c, v)} }
	}
	move := func(c [20]byte, to netip.AddrPort) func(*Map[tconn]) res {
		return func(m *Map[tconn]) res { v, from, d, ok := m.Move(&c, to); return res{v, from, d, ok} }
	}
	del := func(a netip.AddrPort) func(*Map[tconn]) res {
		return func(m *Map[tconn]) res { v, ok := m.Delete(a); return res{v, ok} }
	}
	cad := func(a netip.AddrPort, v *tconn) func(*Map[tconn]) res {
		return func(m *Map[tconn]) res { return res{m.CompareAndDelete(a, v)} }
	}
	delCookie := func(c [20]byte) func(*Map[tconn]) res {
		return func(m *Map[tconn]) res { v, a, ok := m.DeleteByCookie(&c); return res{v, a, ok} }
	}
	length := func(m *Map[tconn]) res { return res{m.Len()} }
	var none *tconn
	zero := netip.AddrPort{}

	steps := []mapStep[*Map[tconn], res]{
		{"empty get", get(a1), res{none, false}},
		{"empty get by cookie", byCookie(c1), res{none, zero, false}},
		{"empty move", move(c1, a1), res{none, zero, none, false}},
		{"empty delete", del(a1), res{none, false}},
		{"empty delete by cookie", delCookie(c1), res{none, zero, false}},
		{"insert a1 c1", insert(a1, c1, v1), res{none, true}},
		{"get a1", get(a1), res{v1, true}},
		{"get c1", byCookie(c1), res{v1, a1, true}},
		{"insert c1 elsewhere is refused", insert(a2, c1, v2), res{none, false}},
		{"a2 not added", get(a2), res{none, false}},
		{"insertNew at a1 is refused", insertNew(a1, c2, v2), res{false}},
		{"insertNew with c1 is refused", insertNew(a2, c1, v2), res{false}},
		{"c2 not added", byCookie(c2), res{none, zero, false}},
		{"insertNew a2 c2", insertNew(a2, c2, v2), res{true}},
		{"len 2", length, res{2}},
		{"replace a1 keeping c1", insert(a1, c1, v3), res{v1, true}},
		{"a1 has the new value", get(a1), res{v3, true}},
		{"c1 has the new value", byCookie(c1), res{v3, a1, true}},
		{"replace a1 with c3", insert(a1, c3, v1), res{v3, true}},
		{"c1 retired", byCookie(c1), res{none, zero, false}},
		{"c3 at a1", byCookie(c3), res{v1, a1, true}},
		{"len still 2", length, res{2}},
		{"move c3 to a fresh address", move(c3, a3), res{v1, a1, none, true}},
		{"a1 vacated", get(a1), res{none, false}},
		{"a3 holds it", get(a3), res{v1, true}},
		{"c3 points to a3", byCookie(c3), res{v1, a3, true}},
		{"move to its own address", move(c3, a3), res{v1, a3, none, true}},
		{"move c3 onto a2, displacing c2", move(c3, a2), res{v1, a3, v2, true}},
		{"c2 gone with its entry", byCookie(c2), res{none, zero, false}},
		{"a2 holds c3's value", get(a2), res{v1, true}},
		{"a3 vacated", get(a3), res{none, false}},
		{"len 1", length, res{1}},
		{"move an unknown cookie", move(c4, a1), res{none, zero, none, false}},
		{"insert a4 c4 (mapped form of a1)", insert(a4, c4, v4), res{none, true}},
		{"a1 still absent", get(a1), res{none, false}},
		{"compare-and-delete, wrong value", cad(a4, v1), res{false}},
		{"compare-and-delete nil", cad(a4, nil), res{false}},
		{"compare-and-delete, right value", cad(a4, v4), res{true}},
		{"c4 gone too", byCookie(c4), res{none, zero, false}},
		{"delete by cookie", delCookie(c3), res{v1, a2, true}},
		{"a2 gone too", get(a2), res{none, false}},
		{"len 0", length, res{0}},
		{"insert zoned", insert(a3, c2, v2), res{none, true}},
		{"zoned by cookie", byCookie(c2), res{v2, a3, true}},
		{"delete zoned", del(a3), res{v2, true}},
		{"delete zoned again", del(a3), res{none, false}},
		{"c2 gone", byCookie(c2), res{none, zero, false}},
	}
	runMapSteps(t, []int{1, 2, 0}, NewMap[tconn], func(got, want res) bool { return fmt.Sprint(got) == fmt.Sprint(want) }, steps)
}

func TestMapNilValue(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Insert(nil) did not panic")
		}
	}()
	NewMap[tconn](0).Insert(netip.MustParseAddrPort("1.2.3.4:5"), ck(1), nil)
}

// TestMapRandom runs random operations on one goroutine against a model,
// checking results and invariants, on maps small enough that shards and
// groups collide and tables grow and shrink-by-tombstone.
func TestMapRandom(t *testing.T) {
	for _, shards := range []int{1, 2, 16} {
		r := rand.New(rand.NewPCG(31, uint64(shards)))
		m := NewMap[tconn](shards)
		addrs := sampleAddrs(r, 300)
		cookies := make([][20]byte, 300)
		for i := range cookies {
			cookies[i] = randCookie(r)
		}
		byAddr := map[netip.AddrPort]*tconn{}
		where := map[[20]byte]netip.AddrPort{}
		for op := range 30000 {
			a, c := addrs[r.IntN(len(addrs))], cookies[r.IntN(len(cookies))]
			switch r.IntN(6) {
			case 0, 1:
				v := &tconn{id: op, cookie: c}
				old, ok := m.Insert(a, c, v)
				wa, taken := where[c]
				wantOK := !taken || wa == a
				if ok != wantOK || (ok && old != byAddr[a]) {
					t.Fatalf("op %d Insert: %v %v", op, old, ok)
				}
				if ok {
					if o := byAddr[a]; o != nil {
						delete(where, o.cookie)
					}
					byAddr[a], where[c] = v, a
				}
			case 2:
				v, from, d, ok := m.Move(&c, a)
				wa, present := where[c]
				if ok != present || (ok && (from != wa || v != byAddr[wa])) {
					t.Fatalf("op %d Move: %v %v %v %v", op, v, from, d, ok)
				}
				if ok && wa != a {
					if want := byAddr[a]; d != want {
						t.Fatalf("op %d Move displaced %v, want %v", op, d, want)
					}
					if d != nil {
						delete(where, d.cookie)
					}
					delete(byAddr, wa)
					byAddr[a], where[c] = v, a
				}
			case 3:
				v, ok := m.Delete(a)
				if want := byAddr[a]; v != want || ok != (want != nil) {
					t.Fatalf("op %d Delete: %v %v", op, v, ok)
				}
				if ok {
					delete(where, v.cookie)
					delete(byAddr, a)
				}
			case 4:
				v, at, ok := m.DeleteByCookie(&c)
				wa, present := where[c]
				if ok != present || (ok && (at != wa || v != byAddr[wa])) {
					t.Fatalf("op %d DeleteByCookie: %v %v %v", op, v, at, ok)
				}
				if ok {
					delete(where, c)
					delete(byAddr, wa)
				}
			case 5:
				v, ok := m.Get(a)
				if want := byAddr[a]; v != want || ok != (want != nil) {
					t.Fatalf("op %d Get: %v %v", op, v, ok)
				}
				v, at, ok := m.GetByCookie(&c)
				if wa, present := where[c]; ok != present || (ok && (at != wa || v != byAddr[wa])) {
					t.Fatalf("op %d GetByCookie: %v %v %v", op, v, at, ok)
				}
			}
			if op%1000 == 0 {
				if err := m.check(); err != nil {
					t.Fatalf("%d shards, op %d: %v", shards, op, err)
				}
				if m.Len() != len(byAddr) {
					t.Fatalf("Len %d, want %d", m.Len(), len(byAddr))
				}
			}
		}
	}
}

func TestMapRangeShard(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	for _, shards := range []int{1, 8} {
		m := NewMap[tconn](shards)
		addrs := sampleAddrs(r, 2000)
		for i, a := range addrs {
			c := randCookie(r)
			m.Insert(a, c, &tconn{id: i, cookie: c})
		}
		seen := 0
		for i := range m.NumShards() {
			m.RangeShard(i, func(a netip.AddrPort, v *tconn) Action {
				seen++
				if addrs[v.id] != a {
					t.Fatalf("sweep gave %v for entry %d at %v", a, v.id, addrs[v.id])
				}
				// Lookups, by either key, are allowed inside a sweep.
				if got, at, ok := m.GetByCookie(&v.cookie); !ok || got != v || at != a {
					t.Fatalf("GetByCookie inside sweep: %v %v %v", got, at, ok)
				}
				if v.id%3 == 0 {
					return Remove
				}
				return Keep
			})
		}
		if seen != len(addrs) {
			t.Fatalf("sweep saw %d entries, want %d", seen, len(addrs))
		}
		for i, a := range addrs {
			if _, ok := m.Get(a); ok != (i%3 != 0) {
				t.Fatalf("after sweep, Get(%v) = %v", a, ok)
			}
		}
		if err := m.check(); err != nil {
			t.Fatal(err)
		}
		if want := len(addrs) - (len(addrs)+2)/3; m.Len() != want {
			t.Fatalf("Len %d, want %d", m.Len(), want)
		}
	}
}

func TestMapAllocs(t *testing.T) {
	m := NewMap[tconn](0)
	r := rand.New(rand.NewPCG(35, 36))
	addrs := sampleAddrs(r, 1000)
	cookies := make([][20]byte, len(addrs))
	for i, a := range addrs {
		cookies[i] = randCookie(r)
		m.Insert(a, cookies[i], &tconn{id: i})
	}
	v := &tconn{}
	hit, hc := addrs[500], cookies[500]
	other := cookies[501]
	miss, mc := netip.MustParseAddrPort("9.9.9.9:9"), ck(9)
	away := netip.MustParseAddrPort("9.9.9.9:10")
	out := make([]*tconn, 200)
	for name, f := range map[string]func(){
		"GetBatch":            func() { m.GetBatch(addrs[300:500], out) },
		"Get hit":             func() { m.Get(hit) },
		"Get miss":            func() { m.Get(miss) },
		"GetByCookie hit":     func() { m.GetByCookie(&hc) },
		"GetByCookie miss":    func() { m.GetByCookie(&mc) },
		"Insert existing":     func() { m.Insert(hit, hc, v) },
		"Insert refused":      func() { m.Insert(hit, other, v) },
		"InsertNew refused":   func() { m.InsertNew(hit, hc, v) },
		"Move there and back": func() { m.Move(&hc, away); m.Move(&hc, hit) },
		"CompareAndDelete":    func() { m.CompareAndDelete(hit, &tconn{}) },
		"RangeShard": func() {
			m.RangeShard(5, func(netip.AddrPort, *tconn) Action { return Keep })
		},
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocs", name, n)
		}
	}
}

// GetBatch answers exactly what a Get per address answers: hits, misses,
// zoned addresses (registered zone or not), IPv4-mapped and IPv6 forms, and
// batches longer than one hashing chunk.
func TestMapGetBatch(t *testing.T) {
	m := NewMap[tconn](4)
	rng := rand.New(rand.NewPCG(5, 6))
	var addrs []netip.AddrPort
	for i := range 300 {
		var a netip.AddrPort
		switch i % 4 {
		case 0:
			a = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), uint16(i))
		case 1:
			v4 := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
			a = netip.AddrPortFrom(netip.AddrFrom16(v4.As16()), uint16(i)) // ::ffff:10.0.x.y
		case 2:
			a = netip.MustParseAddrPort(fmt.Sprintf("[2001:db8::%x]:%d", i, i))
		case 3:
			zone := "eth0"
			if i%8 == 7 {
				zone = "never-registered"
			}
			a = netip.MustParseAddrPort(fmt.Sprintf("[fe80::%x%%%s]:%d", i, zone, i))
		}
		addrs = append(addrs, a)
		// Store two of every three; the zone never registered is never
		// stored, so its lookups must miss without registering it.
		if i%3 != 0 && !(i%8 == 7) {
			var c [20]byte
			binary.LittleEndian.PutUint64(c[:], rng.Uint64())
			binary.LittleEndian.PutUint64(c[8:], uint64(i))
			if !m.InsertNew(a, c, &tconn{id: i}) {
				t.Fatalf("insert %v failed", a)
			}
		}
	}
	rng.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	out := make([]*tconn, len(addrs))
	for i := range out {
		out[i] = &tconn{id: -1} // GetBatch must overwrite misses with nil
	}
	m.GetBatch(addrs, out)
	hits := 0
	for i, a := range addrs {
		want, _ := m.Get(a)
		if out[i] != want {
			t.Errorf("GetBatch(%v) = %v, Get = %v", a, out[i], want)
		}
		if want != nil {
			hits++
		}
	}
	if hits == 0 || hits == len(addrs) {
		t.Fatalf("%d hits of %d: the test needs both hits and misses", hits, len(addrs))
	}
}
