package shard

import (
	"math/rand/v2"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// raceIters scales the concurrent tests: bounded work, enough to interleave
// every pair of operations many times (also under -race, which is ~10x
// slower).
const raceIters = 20000

// runBounded runs f on n goroutines and fails the test, with every
// goroutine's stack, if they have not all returned within the limit: a
// deadlock shows up as a failure, not a hung test.
func runBounded(t *testing.T, n int, f func(g int)) {
	t.Helper()
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			f(g)
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines still running after 2 minutes (deadlock?):\n%s", buf[:runtime.Stack(buf, true)])
	}
}

// addrIndex is what Map and AddrMap have alike, for the deletions both
// concurrent tests mix in.
type addrIndex[V any] interface {
	Get(netip.AddrPort) (*V, bool)
	Delete(netip.AddrPort) (*V, bool)
	CompareAndDelete(netip.AddrPort, *V) bool
}

// deleteOp deletes a from m in one of the two ways both maps have: Delete,
// or (compare) CompareAndDelete of the value Get has just returned, which a
// concurrent writer may have replaced meanwhile.
func deleteOp[V any](m addrIndex[V], a netip.AddrPort, compare bool) {
	if !compare {
		m.Delete(a)
		return
	}
	if v, ok := m.Get(a); ok {
		m.CompareAndDelete(a, v)
	}
}

// TestMapConcurrent runs every Map operation from several goroutines over a
// small set of addresses and cookies, so that operations collide on entries
// and on shards, including Moves whose three shards are locked in every
// order. Readers check what a reader must always see; afterwards the
// indexes must agree.
func TestMapConcurrent(t *testing.T) {
	for _, shards := range []int{1, 2, 64} {
		m := NewMap[tconn](shards)
		r0 := rand.New(rand.NewPCG(41, uint64(shards)))
		addrs := sampleAddrs(r0, 24)
		cookies := make([][20]byte, 24)
		for i := range cookies {
			cookies[i] = randCookie(r0)
		}
		runBounded(t, 4, func(g int) {
			r := rand.New(rand.NewPCG(uint64(g), uint64(shards)))
			for op := range raceIters {
				a, c := addrs[r.IntN(len(addrs))], cookies[r.IntN(len(cookies))]
				switch k := r.IntN(10); k {
				case 0:
					m.Insert(a, c, &tconn{id: op, cookie: c})
				case 1:
					m.InsertNew(a, c, &tconn{id: op, cookie: c})
				case 2, 3:
					if v, _, _, ok := m.Move(&c, a); ok && v.cookie != c {
						t.Errorf("Move(%x) moved an entry of cookie %x", c[0], v.cookie[0])
					}
				case 4, 5:
					deleteOp(m, a, k == 5)
				case 6:
					if v, _, ok := m.DeleteByCookie(&c); ok && v.cookie != c {
						t.Errorf("DeleteByCookie(%x) removed an entry of cookie %x", c[0], v.cookie[0])
					}
				case 7:
					if v, ok := m.Get(a); ok && v == nil {
						t.Error("Get returned a nil value")
					}
				case 8:
					if v, _, ok := m.GetByCookie(&c); ok && v.cookie != c {
						t.Errorf("GetByCookie(%x) returned an entry of cookie %x", c[0], v.cookie[0])
					}
				case 9:
					m.RangeShard(r.IntN(m.NumShards()), func(a netip.AddrPort, v *tconn) Action {
						// The sweep holds a's shard, so no one can change
						// this entry: its cookie must resolve to it.
						if got, at, ok := m.GetByCookie(&v.cookie); !ok || got != v || at != a {
							t.Errorf("in a sweep, the cookie of %v resolves to %v at %v (%v)", a, got, at, ok)
						}
						if r.IntN(4) == 0 {
							return Remove
						}
						return Keep
					})
				}
			}
		})
		if err := m.check(); err != nil {
			t.Fatalf("%d shards: %v", shards, err)
		}
		n := 0
		for i := range m.NumShards() {
			m.RangeShard(i, func(a netip.AddrPort, v *tconn) Action {
				n++
				if got, at, ok := m.GetByCookie(&v.cookie); !ok || got != v || at != a {
					t.Errorf("%d shards: entry at %v: its cookie resolves to %v at %v", shards, a, got, at)
				}
				return Keep
			})
		}
		if n != m.Len() {
			t.Fatalf("%d shards: swept %d entries, Len %d", shards, n, m.Len())
		}
	}
}

// TestAddrMapConcurrent does the same for AddrMap; each value remembers the
// address it was stored at.
func TestAddrMapConcurrent(t *testing.T) {
	type val struct{ addr netip.AddrPort }
	for _, shards := range []int{1, 64} {
		m := NewAddrMap[val](shards)
		addrs := sampleAddrs(rand.New(rand.NewPCG(43, 0)), 32)
		runBounded(t, 4, func(g int) {
			r := rand.New(rand.NewPCG(uint64(g), 44))
			for range raceIters {
				a := addrs[r.IntN(len(addrs))]
				switch k := r.IntN(6); k {
				case 0, 1:
					m.Set(a, &val{a})
				case 2, 3:
					deleteOp(m, a, k == 3)
				case 4:
					if v, ok := m.Get(a); ok && v.addr != a {
						t.Errorf("Get(%v) returned the value of %v", a, v.addr)
					}
				case 5:
					m.RangeShard(r.IntN(m.NumShards()), func(a netip.AddrPort, v *val) Action {
						if v.addr != a {
							t.Errorf("sweep: %v holds the value of %v", a, v.addr)
						}
						if r.IntN(3) == 0 {
							return Remove
						}
						return Keep
					})
				}
			}
		})
		if err := m.check(); err != nil {
			t.Fatalf("%d shards: %v", shards, err)
		}
	}
}

// TestReadersDuringWrites checks the optimistic reads where they are most
// exposed: while writers insert and delete enough keys to rebuild tables
// (publishing new arrays) and leave tombstones, keys that stay in the map
// must be found, with their value, by every lookup.
func TestReadersDuringWrites(t *testing.T) {
	r := rand.New(rand.NewPCG(45, 46))
	all := sampleAddrs(r, 2*raceIters)
	stay, churn := all[:len(all)/4], all[len(all)/4:]
	cookies := make([][20]byte, len(all))
	for i := range cookies {
		cookies[i] = randCookie(r)
	}
	am := NewAddrMap[int](4)
	m := NewMap[int](4)
	vals := make([]int, len(all))
	for i, a := range stay {
		vals[i] = i
		am.Set(a, &vals[i])
		m.Insert(a, cookies[i], &vals[i])
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for g := range 2 {
		readers.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				i := (n*7 + g) % len(stay)
				a := stay[i]
				if v, ok := am.Get(a); !ok || *v != i {
					t.Errorf("AddrMap.Get(%v) = %v, %v during writes", a, v, ok)
					return
				}
				if v, ok := m.Get(a); !ok || *v != i {
					t.Errorf("Map.Get(%v) = %v, %v during writes", a, v, ok)
					return
				}
				if v, at, ok := m.GetByCookie(&cookies[i]); !ok || *v != i || at != a {
					t.Errorf("Map.GetByCookie(%d) = %v, %v, %v during writes", i, v, at, ok)
					return
				}
			}
		})
	}
	runBounded(t, 1, func(int) {
		for round := range 3 {
			for j, a := range churn {
				i := len(stay) + j
				am.Set(a, &vals[i])
				m.Insert(a, cookies[i], &vals[i])
			}
			for j, a := range churn {
				if round%2 == 0 {
					am.Delete(a)
					m.Delete(a)
				} else {
					am.CompareAndDelete(a, &vals[len(stay)+j])
					m.DeleteByCookie(&cookies[len(stay)+j])
				}
			}
		}
	})
	close(stop)
	readers.Wait()
	if err := am.check(); err != nil {
		t.Fatal(err)
	}
	if err := m.check(); err != nil {
		t.Fatal(err)
	}
}

// TestReaderParksOnLongWrite: a lookup that overlaps a write section which
// outlasts its spin (the writer descheduled in it) waits on the shard's
// lock, parked, instead of spinning or yielding on a core the writer
// needs; it returns once the writer leaves.
func TestReaderParksOnLongWrite(t *testing.T) {
	m := NewAddrMap[int](1)
	a := netip.MustParseAddrPort("127.0.0.1:9")
	v := 7
	m.Set(a, &v)
	s := &m.shards[0]
	s.mu.Lock()
	s.beginWrite()
	got := make(chan *int)
	go func() {
		p, _ := m.Get(a)
		got <- p
	}()
	// Wait until the reader is parked on the lock.
	parked := func() bool {
		buf := make([]byte, 1<<20)
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, ").waitWrite(") && strings.Contains(g, "sync.(*Mutex).Lock") {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(10 * time.Second)
	for !parked() {
		if time.Now().After(deadline) {
			s.endWrite()
			s.mu.Unlock()
			t.Fatal("the reader did not park on the shard's lock during a long write section")
		}
		runtime.Gosched()
	}
	s.endWrite()
	s.mu.Unlock()
	if p := <-got; p == nil || *p != 7 {
		t.Fatalf("Get after the write: %v", p)
	}
}
