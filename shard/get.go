package shard

import (
	"math/bits"
	"net/netip"
	"sync/atomic"
	"unsafe"
)

// getAddr is the lookup by address behind AddrMap.Get and Map.Get: key
// extraction, XXH64, shard choice and the optimistic probe in one function,
// with the table reached through the shard's own copies of its mask and
// array addresses (see shard).
//
// A lookup costs about as much as the Go map it replaces, so what a factored
// version adds (calls to keyOf, xxh18, shard.get and table.find, their
// argument shuffling and spills, the bounds checks, the load of the table
// header) is a measurable share of it in BenchmarkGet at 1 k entries (the
// figure is in tuning.md, "shard: lookup and write costs"). Uncommon cases
// (zoned addresses, a netip layout other than the expected one, a
// concurrent write) leave through calls.
func getAddr[T any](z *zoneTable, seed uint64, shards []shard[T], a netip.AddrPort) (*T, bool) {
	k, h, ok := addrKeyHash(z, seed, a)
	if !ok {
		return nil, false
	}
	v := probeAddr(&shards[shardIndex(h, len(shards))], &k, h)
	return v, v != nil
}

// addrKeyHash returns a's key and XXH64(seed, As16 ‖ port), as hashAddr
// does; ok is false for a zoned address whose zone no entry has.
func addrKeyHash(z *zoneTable, seed uint64, a netip.AddrPort) (k addrKey, h uint64, ok bool) {
	ip := a.Addr()
	port := a.Port()
	if fastKeys {
		w := (*addrLayout)(unsafe.Pointer(&ip))
		k.hi, k.lo = w.hi, w.lo
		var v4, v6 uint64 // branch-free: families arrive interleaved
		if w.z == z4 {
			v4 = 1
		}
		if w.z == z6 {
			v6 = 1
		}
		k.meta = (v4*famV4|v6*famV6)<<famShift | uint64(port)<<portShift
		if v4|v6 == 0 && w.z != 0 {
			if k, ok = z.key(a, false); !ok {
				return k, 0, false
			}
		}
	} else if k, ok = z.key(a, false); !ok {
		return k, 0, false
	}

	h = seed + prime5 + addrKeySize
	h ^= round0(bits.ReverseBytes64(k.hi))
	h = bits.RotateLeft64(h, 27)*prime1 + prime4
	h ^= round0(bits.ReverseBytes64(k.lo))
	h = bits.RotateLeft64(h, 27)*prime1 + prime4
	h ^= uint64(port>>8) * prime5
	h = bits.RotateLeft64(h, 11) * prime1
	h ^= uint64(port&0xff) * prime5
	h = bits.RotateLeft64(h, 11) * prime1
	return k, avalanche(h), true
}

// probeAddr is the optimistic probe of shard s for key k with hash h.
func probeAddr[T any](s *shard[T], k *addrKey, h uint64) *T {
	want := k.meta | h&addrHashMask
	h2x8 := bitsetLSB * (h >> h2Shift & 0x7f)
	for {
		seq := s.seq.Load()
		gmask := s.gmask.Load() // before the arrays: see shard
		ctrl := unsafe.Pointer(s.ctrl.Load())
		slots := unsafe.Pointer(s.slots.Load())
		var v *T
		g := want & gmask
	probe:
		for step := uint64(0); step <= gmask; step++ {
			c := (*atomic.Uint64)(unsafe.Add(ctrl, g*8)).Load()
			for m := matchH2(c, h2x8); m != 0; m &= m - 1 {
				i := g*groupSize + uint64(bits.TrailingZeros64(m))>>3
				sl := (*slot[T])(unsafe.Add(slots, i*slotSize))
				if sl.meta.Load() == want && sl.w0.Load() == k.hi && sl.w1.Load() == k.lo {
					v = sl.val.Load()
					break probe
				}
			}
			if matchEmpty(c) != 0 {
				break
			}
			g = (g + step + 1) & gmask
		}
		if seq&1 == 0 && s.seq.Load() == seq {
			return v
		}
		s.waitWrite(seq)
	}
}

// getBatchChunk bounds the keys getAddrs hashes ahead of its probes: their
// keys and hashes live on the stack.
const getBatchChunk = 64

// getAddrs looks up every address of addrs into out (nil: none), in two
// passes per chunk: hash every key and load its home control word, then
// probe. Each pass is a short loop whose iterations do not depend on each
// other, so the CPU overlaps their cache misses; one Get after another, with
// the hashing and probing of each in between, pays them nearly one by one.
func getAddrs[T any](z *zoneTable, seed uint64, shards []shard[T], addrs []netip.AddrPort, out []*T) {
	out = out[:len(addrs)]
	var keys [getBatchChunk]addrKey
	var hashes [getBatchChunk]uint64
	var oks [getBatchChunk]bool
	for len(addrs) > 0 {
		n := min(len(addrs), getBatchChunk)
		for i, a := range addrs[:n] {
			k, h, ok := addrKeyHash(z, seed, a)
			keys[i], hashes[i], oks[i] = k, h, ok
			s := &shards[shardIndex(h, len(shards))]
			g := (k.meta | h&addrHashMask) & s.gmask.Load()
			// An atomic load is never optimised away, used or not.
			(*atomic.Uint64)(unsafe.Add(unsafe.Pointer(s.ctrl.Load()), g*8)).Load()
		}
		for i := range n {
			out[i] = nil
			if oks[i] {
				out[i] = probeAddr(&shards[shardIndex(hashes[i], len(shards))], &keys[i], hashes[i])
			}
		}
		addrs, out = addrs[n:], out[n:]
	}
}
