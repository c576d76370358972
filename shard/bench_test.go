package shard

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// Benchmark method (as in docs/limits.md §4): keys are 75 % random IPv4 and 25 %
// random IPv6 addresses with random ports, values are *conn; queries walk a
// random sample of the keys (or of absent keys), indexed with a power-of-two
// mask, so that at 1 M entries the maps do not fit in cache.
//
// In BenchmarkGet the index of each query depends on the result of the one
// before (dep), as in a server where what follows a lookup needs its result:
// hit figures are latencies, and at 1 M entries they are memory latency, as
// in docs/limits.md. A miss returns nil on a predicted branch, not loaded data, so
// consecutive misses still overlap in the CPU for every map alike.
// BenchmarkGetThroughput drops the dependency: independent lookups overlap,
// and the figure is throughput.

// conn stands in for a connection: the maps store pointers to it.
type conn struct {
	id  int
	pad [56]byte
}

// randAddr returns a random key as in docs/limits.md §4.
func randAddr(r *rand.Rand) netip.AddrPort {
	port := uint16(r.Uint32())
	if r.IntN(4) != 0 {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], r.Uint32())
		return netip.AddrPortFrom(netip.AddrFrom4(b), port)
	}
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], r.Uint64())
	binary.LittleEndian.PutUint64(b[8:], r.Uint64())
	return netip.AddrPortFrom(netip.AddrFrom16(b), port)
}

func randCookie(r *rand.Rand) (c [20]byte) {
	binary.LittleEndian.PutUint64(c[0:], r.Uint64())
	binary.LittleEndian.PutUint64(c[8:], r.Uint64())
	binary.LittleEndian.PutUint32(c[16:], r.Uint32())
	return c
}

// dep returns 0, computed from p, so that the next query waits for this
// one's result. (User-space pointers have bit 63 clear; the compiler cannot
// know it.)
func dep(p *conn) int { return int(uintptr(unsafe.Pointer(p)) >> 63) }

// rwMap is the baseline for parallel lookups: one Go map behind one RWMutex.
type rwMap struct {
	mu sync.RWMutex
	m  map[netip.AddrPort]*conn
}

func (m *rwMap) Get(a netip.AddrPort) (*conn, bool) {
	m.mu.RLock()
	v, ok := m.m[a]
	m.mu.RUnlock()
	return v, ok
}

// benchSet is one size's keys and maps, built once per process.
type benchSet struct {
	keys    []netip.AddrPort
	cookies [][20]byte
	hits    []netip.AddrPort // a random sample of keys, power-of-two length
	misses  []netip.AddrPort // absent keys, same length
	hitCk   [][20]byte       // a random sample of cookies
	missCk  [][20]byte       // absent cookies
	plain   map[netip.AddrPort]*conn
	rw      *rwMap
	shard   *AddrMap[conn]
	dual    *Map[conn]
}

var benchSizes = []struct {
	name string
	n    int
}{{"1k", 1_000}, {"100k", 100_000}, {"1M", 1_000_000}}

var (
	benchOnce [3]sync.Once
	benchSets [3]*benchSet
)

func getBenchSet(i int) *benchSet {
	benchOnce[i].Do(func() {
		n := benchSizes[i].n
		r := rand.New(rand.NewPCG(uint64(n), 42))
		s := &benchSet{
			plain: make(map[netip.AddrPort]*conn),
			shard: NewAddrMap[conn](0),
			dual:  NewMap[conn](0),
		}
		for len(s.keys) < n {
			a := randAddr(r)
			if _, dup := s.plain[a]; dup {
				continue
			}
			c := &conn{id: len(s.keys)}
			ck := randCookie(r)
			if !s.dual.InsertNew(a, ck, c) {
				panic("duplicate cookie")
			}
			s.keys = append(s.keys, a)
			s.cookies = append(s.cookies, ck)
			s.plain[a] = c
			s.shard.Set(a, c)
		}
		s.rw = &rwMap{m: s.plain}
		q := 1
		for q < n {
			q <<= 1
		}
		for range q {
			j := r.IntN(n)
			s.hits = append(s.hits, s.keys[j])
			s.hitCk = append(s.hitCk, s.cookies[j])
			s.missCk = append(s.missCk, randCookie(r))
			for {
				a := randAddr(r)
				if _, dup := s.plain[a]; !dup {
					s.misses = append(s.misses, a)
					break
				}
			}
		}
		benchSets[i] = s
	})
	return benchSets[i]
}

var sink atomic.Int64

// getter adapts each map to one lookup signature for the benchmarks.
type getter func(netip.AddrPort) (*conn, bool)

func getters(s *benchSet) []struct {
	name string
	get  getter
} {
	return []struct {
		name string
		get  getter
	}{
		{"shard", s.shard.Get},
		{"map", s.dual.Get},
		{"plainmap", func(a netip.AddrPort) (*conn, bool) { v, ok := s.plain[a]; return v, ok }},
		{"rwmutexmap", s.rw.Get},
	}
}

// forSets runs bench on the hit and on the miss queries of every size, as
// the sub-benchmarks hit/1k ... miss/1M.
func forSets(b *testing.B, bench func(b *testing.B, s *benchSet, miss bool)) {
	for _, kind := range []string{"hit", "miss"} {
		b.Run(kind, func(b *testing.B) {
			for si, size := range benchSizes {
				b.Run(size.name, func(b *testing.B) { bench(b, getBenchSet(si), kind == "miss") })
			}
		})
	}
}

func BenchmarkGet(b *testing.B) {
	forSets(b, func(b *testing.B, s *benchSet, miss bool) {
		q := s.hits
		if miss {
			q = s.misses
		}
		mask := len(q) - 1
		// Each map's loop is written out, not run through getter (nor
		// a generic helper), so the plain map's lookup is inlined and
		// the others' Get calls are direct, as in real code.
		b.Run("shard", func(b *testing.B) {
			b.ReportAllocs()
			m, j := s.shard, 0
			for i := 0; b.Loop(); i++ {
				v, _ := m.Get(q[(i+j)&mask])
				j += dep(v)
			}
			sink.Add(int64(j))
		})
		b.Run("map", func(b *testing.B) {
			b.ReportAllocs()
			m, j := s.dual, 0
			for i := 0; b.Loop(); i++ {
				v, _ := m.Get(q[(i+j)&mask])
				j += dep(v)
			}
			sink.Add(int64(j))
		})
		b.Run("plainmap", func(b *testing.B) {
			b.ReportAllocs()
			m, j := s.plain, 0
			for i := 0; b.Loop(); i++ {
				v := m[q[(i+j)&mask]]
				j += dep(v)
			}
			sink.Add(int64(j))
		})
		b.Run("rwmutexmap", func(b *testing.B) {
			b.ReportAllocs()
			m, j := s.rw, 0
			for i := 0; b.Loop(); i++ {
				v, _ := m.Get(q[(i+j)&mask])
				j += dep(v)
			}
			sink.Add(int64(j))
		})
	})
}

func BenchmarkGetThroughput(b *testing.B) {
	forSets(b, func(b *testing.B, s *benchSet, miss bool) {
		q := s.hits
		if miss {
			q = s.misses
		}
		mask := len(q) - 1
		b.Run("shard", func(b *testing.B) {
			b.ReportAllocs()
			m, n := s.shard, 0
			for i := 0; b.Loop(); i++ {
				if _, ok := m.Get(q[i&mask]); ok {
					n++
				}
			}
			sink.Add(int64(n))
		})
		b.Run("plainmap", func(b *testing.B) {
			b.ReportAllocs()
			m, n := s.plain, 0
			for i := 0; b.Loop(); i++ {
				if _, ok := m[q[i&mask]]; ok {
					n++
				}
			}
			sink.Add(int64(n))
		})
	})
}

func BenchmarkGetByCookie(b *testing.B) {
	forSets(b, func(b *testing.B, s *benchSet, miss bool) {
		q := s.hitCk
		if miss {
			q = s.missCk
		}
		b.ReportAllocs()
		m, mask, j := s.dual, len(q)-1, 0
		for i := 0; b.Loop(); i++ {
			v, _, _ := m.GetByCookie(&q[(i+j)&mask])
			j += dep(v)
		}
		sink.Add(int64(j))
	})
}

// BenchmarkGetParallel runs BenchmarkGet's hit loop on every P at once;
// ns/op is wall time per lookup, all cores together.
func BenchmarkGetParallel(b *testing.B) {
	for si, size := range benchSizes {
		b.Run(size.name, func(b *testing.B) {
			s := getBenchSet(si)
			q, mask := s.hits, len(s.hits)-1
			var start atomic.Int64
			for _, g := range getters(s) {
				if g.name == "map" {
					continue // same lookup as shard
				}
				b.Run(g.name, func(b *testing.B) {
					b.ReportAllocs()
					b.RunParallel(func(pb *testing.PB) {
						// Each goroutine walks the sample from its own offset.
						i, j := int(start.Add(int64(len(q)/7+1))), 0
						for ; pb.Next(); i++ {
							v, _ := g.get(q[(i+j)&mask])
							j += dep(v)
						}
						sink.Add(int64(j))
					})
				})
			}
		})
	}
}

// BenchmarkShardRead compares ways of guarding the same table: the
// optimistic read (seqlock) the package uses, against taking the shard's
// sync.Mutex, or a sync.RWMutex read lock, around the same probe. 1 k
// entries, so that the lock, not memory, is what differs.
func BenchmarkShardRead(b *testing.B) {
	s := getBenchSet(0)
	m := s.shard
	q, mask := s.hits, len(s.hits)-1
	rw := make([]struct {
		sync.RWMutex
		_ [40]byte
	}, len(m.shards))
	type read func(a netip.AddrPort) *conn
	reads := []struct {
		name string
		get  read
	}{
		{"seqlock", func(a netip.AddrPort) *conn { v, _ := m.Get(a); return v }},
		{"mutex", func(a netip.AddrPort) *conn {
			k, _ := keyOf(a)
			h := hashAddr(m.seed, &k)
			i := shardIndex(h, len(m.shards))
			sh := &m.shards[i]
			sh.mu.Lock()
			t := sh.t()
			var v *conn
			if j := t.find(addrMeta(&k, h), k.hi, k.lo); j >= 0 {
				v = t.slots[j].val.Load()
			}
			sh.mu.Unlock()
			return v
		}},
		{"rwmutex", func(a netip.AddrPort) *conn {
			k, _ := keyOf(a)
			h := hashAddr(m.seed, &k)
			i := shardIndex(h, len(m.shards))
			rw[i].RLock()
			t := m.shards[i].t()
			var v *conn
			if j := t.find(addrMeta(&k, h), k.hi, k.lo); j >= 0 {
				v = t.slots[j].val.Load()
			}
			rw[i].RUnlock()
			return v
		}},
	}
	for _, r := range reads {
		b.Run(r.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			j := 0
			for i := 0; b.Loop(); i++ {
				j += dep(r.get(q[(i+j)&mask]))
			}
			sink.Add(int64(j))
		})
		b.Run(r.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			var start atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i, j := int(start.Add(int64(len(q)/7+1))), 0
				for ; pb.Next(); i++ {
					j += dep(r.get(q[(i+j)&mask]))
				}
				sink.Add(int64(j))
			})
		})
	}
}

// BenchmarkHash compares ways to compute the seeded XXH64 of As16 ‖ port.
func BenchmarkHash(b *testing.B) {
	s := getBenchSet(0)
	q, mask := s.hits, len(s.hits)-1
	seed := uint64(0x9e3779b97f4a7c15)
	var h uint64
	b.Run("inline", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			k, _ := keyOf(q[i&mask])
			h += hashAddr(seed, &k)
		}
	})
	b.Run("xxhashSum64", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			var buf [8 + addrKeySize]byte
			a := q[i&mask]
			binary.LittleEndian.PutUint64(buf[:8], seed)
			a16 := a.Addr().As16()
			copy(buf[8:24], a16[:])
			binary.BigEndian.PutUint16(buf[24:], a.Port())
			h += xxhash.Sum64(buf[:])
		}
	})
	b.Run("xxhashDigest", func(b *testing.B) {
		b.ReportAllocs()
		var d xxhash.Digest
		for i := 0; b.Loop(); i++ {
			var buf [addrKeySize]byte
			a := q[i&mask]
			a16 := a.Addr().As16()
			copy(buf[:16], a16[:])
			binary.BigEndian.PutUint16(buf[16:], a.Port())
			d.ResetWithSeed(seed)
			d.Write(buf[:])
			h += d.Sum64()
		}
	})
	sink.Add(int64(h))
}

// BenchmarkInsertDelete measures churn at a steady size: of 2n distinct
// keys, a window of n is in the map; each op deletes the window's oldest key
// and adds the next one, so tables neither grow nor shrink.
func BenchmarkInsertDelete(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		r := rand.New(rand.NewPCG(7, uint64(n)))
		keys := make([]netip.AddrPort, 2*n)
		cks := make([][20]byte, 2*n)
		seen := make(map[netip.AddrPort]bool, 2*n)
		for i := range keys {
			for {
				keys[i] = randAddr(r)
				if !seen[keys[i]] {
					seen[keys[i]] = true
					break
				}
			}
			cks[i] = randCookie(r)
		}
		v := &conn{}
		b.Run(fmt.Sprintf("%d/shard", n), func(b *testing.B) {
			b.ReportAllocs()
			m := NewAddrMap[conn](0)
			for i := range n {
				m.Set(keys[i], v)
			}
			for i := 0; b.Loop(); i++ {
				m.Delete(keys[i%(2*n)])
				m.Set(keys[(i+n)%(2*n)], v)
			}
		})
		b.Run(fmt.Sprintf("%d/map", n), func(b *testing.B) {
			b.ReportAllocs()
			m := NewMap[conn](0)
			for i := range n {
				m.Insert(keys[i], cks[i], v)
			}
			for i := 0; b.Loop(); i++ {
				m.Delete(keys[i%(2*n)])
				j := (i + n) % (2 * n)
				m.Insert(keys[j], cks[j], v)
			}
		})
		b.Run(fmt.Sprintf("%d/plainmap", n), func(b *testing.B) {
			b.ReportAllocs()
			m := make(map[netip.AddrPort]*conn)
			for i := range n {
				m[keys[i]] = v
			}
			for i := 0; b.Loop(); i++ {
				delete(m, keys[i%(2*n)])
				m[keys[(i+n)%(2*n)]] = v
			}
		})
	}
}

// BenchmarkMove migrates connections between addresses at a steady size:
// each op moves one connection to a free address, freeing its old one.
func BenchmarkMove(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			r := rand.New(rand.NewPCG(9, uint64(n)))
			m := NewMap[conn](0)
			cks := make([][20]byte, n)
			free := make([]netip.AddrPort, n) // where cks[i] goes next
			for i := range cks {
				cks[i] = randCookie(r)
				for !m.InsertNew(randAddr(r), cks[i], &conn{id: i}) {
				}
				free[i] = randAddr(r)
			}
			for i := 0; b.Loop(); i++ {
				j := i % n
				_, from, _, ok := m.Move(&cks[j], free[j])
				if !ok {
					b.Fatal("Move failed")
				}
				free[j] = from
			}
		})
	}
}

// BenchmarkGetBatch compares a receive loop's two ways to find a batch's
// connections: a Get per datagram, and one GetBatch for all 64. One op is
// one address.
func BenchmarkGetBatch(b *testing.B) {
	const batch = 64
	for si, size := range benchSizes {
		b.Run(size.name, func(b *testing.B) {
			s := getBenchSet(si)
			q := s.hits
			out := make([]*conn, batch)
			b.Run("get", func(b *testing.B) {
				b.ReportAllocs()
				m, n := s.dual, 0
				for i := 0; b.Loop(); i++ {
					if v, _ := m.Get(q[i&(len(q)-1)]); v != nil {
						n++
					}
				}
				sink.Add(int64(n))
			})
			b.Run("batch", func(b *testing.B) {
				b.ReportAllocs()
				m, n := s.dual, 0
				for i := 0; b.Loop(); i += batch {
					lo := i & (len(q) - 1)
					m.GetBatch(q[lo:lo+batch], out)
					if out[0] != nil {
						n++
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/addr")
				sink.Add(int64(n))
			})
		})
	}
}
