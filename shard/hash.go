package shard

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
)

// XXH64 constants (http://cyan4973.github.io/xxHash/, as in
// github.com/cespare/xxhash/v2).
const (
	prime1 uint64 = 11400714785074694791
	prime2 uint64 = 14029467366897019727
	prime3 uint64 = 1609587929392839161
	prime4 uint64 = 9650029242287828579
	prime5 uint64 = 2870177450012600261
)

// AddrKeySize is the length of the byte string hashed for an address:
// As16 ‖ port (big endian), so an IPv4 address and its IPv4-mapped IPv6 form
// land in the same shard (they remain distinct keys).
const AddrKeySize = 18

// hashAddr returns XXH64(seed, As16(a) ‖ port₁₆ big endian) for the address
// a whose key is k: bit for bit what xxhash.NewWithSeed(seed) returns for
// those 18 bytes (tested against the library), written out for this one
// length so that it runs with no buffer, no call into the library and no
// length dispatch. The library's Sum64 has no seed (the seed would have to be
// prepended: 26 bytes through its assembly) and its Digest copies the input
// into a 96-byte state; see BenchmarkHash. The family and zone are not
// hashed: they only tell apart keys that already share a hash.
func hashAddr(seed uint64, k *addrKey) uint64 {
	return xxh18(seed, bits.ReverseBytes64(k.hi), bits.ReverseBytes64(k.lo), uint16(k.meta>>portShift))
}

// xxh18 is XXH64 of the 18 bytes w0 ‖ w1 ‖ p₁₆ big endian (w0 and w1 little
// endian, as XXH64 reads them).
func xxh18(seed, w0, w1 uint64, p uint16) uint64 {
	h := seed + prime5 + AddrKeySize
	h ^= round0(w0)
	h = bits.RotateLeft64(h, 27)*prime1 + prime4
	h ^= round0(w1)
	h = bits.RotateLeft64(h, 27)*prime1 + prime4
	h ^= uint64(p>>8) * prime5
	h = bits.RotateLeft64(h, 11) * prime1
	h ^= uint64(p&0xff) * prime5
	h = bits.RotateLeft64(h, 11) * prime1
	return avalanche(h)
}

// hashCookie returns XXH64(seed, c) for the cookie whose key words are w0,
// w1, w2 (see cookieKey), specialised for 20 bytes like hashAddr. Cookies
// are MAC outputs and so already look random, but this package does not rely
// on what its keys mean: a seeded hash keeps the cookie index safe even for
// keys an attacker could choose.
func hashCookie(seed, w0, w1, w2 uint64) uint64 {
	h := seed + prime5 + 20
	h ^= round0(w0)
	h = bits.RotateLeft64(h, 27)*prime1 + prime4
	h ^= round0(w1)
	h = bits.RotateLeft64(h, 27)*prime1 + prime4
	h ^= w2 * prime1
	h = bits.RotateLeft64(h, 23)*prime2 + prime3
	return avalanche(h)
}

func round0(input uint64) uint64 {
	return bits.RotateLeft64(input*prime2, 31) * prime1
}

func avalanche(h uint64) uint64 {
	h ^= h >> 33
	h *= prime2
	h ^= h >> 29
	h *= prime3
	h ^= h >> 32
	return h
}

// newSeed returns a fresh secret seed. Each map draws its own, so neither
// the shard an address falls in nor its slot in the shard's table can be
// predicted from outside the process: an attacker cannot pile connections
// onto one shard or one probe sequence.
func newSeed() uint64 {
	var b [8]byte
	rand.Read(b[:]) // never fails (Go ≥ 1.24 crashes instead)
	return binary.LittleEndian.Uint64(b[:])
}
