package shard

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
	"net/netip"
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

// addrKeySize is the length of the byte string hashed for an address:
// As16 ‖ port (big endian), so an IPv4 address and its IPv4-mapped IPv6 form
// land in the same shard (they remain distinct keys).
const addrKeySize = 18

// HashAddr returns the seeded hash by which the maps place an address:
// XXH64 with seed over As16(a) ‖ port (big endian), bit for bit what
// github.com/cespare/xxhash/v2's NewWithSeed(seed) gives for those 18 bytes.
// An IPv4 address and its IPv4-mapped IPv6 form hash alike; the zone is not
// hashed. It is for other fixed tables indexed by address, such as
// fastpath's rate limiter, that must not be aimable from outside: keep seed
// secret (draw it from crypto/rand). It never allocates.
func HashAddr(seed uint64, a netip.AddrPort) uint64 {
	k, _ := keyOf(a)
	return hashAddr(seed, &k)
}

// hashAddr returns HashAddr's value for the address whose key is k.
//
// Why XXH64 is written out here rather than called from
// github.com/cespare/xxhash/v2: the library hashes a byte slice, so a key
// would first be copied into a buffer, and its Sum64 has no seed (the seed
// would be prepended, 26 bytes through its assembly and length dispatch),
// while its seeded Digest copies the input into a 96-byte state.
// Specialised for this one length, the hash runs on the key's words with no
// buffer and no call. BenchmarkHash measures the three ways (inline,
// xxhashSum64, xxhashDigest), and fastpath's BenchmarkLimiterAllow the
// limiter that moved from the second to the first; tuning.md, "shard:
// lookup and write costs", has the hash's share of a lookup and the
// limiter's figures. TestHashAddrMatchesXXHash checks the result against
// the library. The family and zone are not hashed: they only tell apart
// keys that already share a hash.
func hashAddr(seed uint64, k *addrKey) uint64 {
	return xxh18(seed, bits.ReverseBytes64(k.hi), bits.ReverseBytes64(k.lo), uint16(k.meta>>portShift))
}

// xxh18 is XXH64 of the 18 bytes w0 ‖ w1 ‖ p₁₆ big endian (w0 and w1 little
// endian, as XXH64 reads them).
func xxh18(seed, w0, w1 uint64, p uint16) uint64 {
	h := seed + prime5 + addrKeySize
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
