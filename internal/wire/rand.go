package wire

import (
	crand "crypto/rand"
	"encoding/binary"
	"math/bits"
)

// Rand is a tiny non-cryptographic generator (wyrand) for RandomData padding
// and random lengths. RandomData only has to vary (docs/protocol.md §3: "any
// value"); secrets never come from here. One Rand per goroutine: not safe for
// concurrent use, and it never allocates.
type Rand struct{ s uint64 }

// NewRand seeds a generator; seed 0 draws a seed from crypto/rand.
func NewRand(seed uint64) Rand {
	if seed == 0 {
		var b [8]byte
		_, _ = crand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:]) | 1
	}
	return Rand{s: seed}
}

// Uint64 returns the next value.
func (r *Rand) Uint64() uint64 {
	r.s += 0xa0761d6478bd642f
	hi, lo := mul64(r.s, r.s^0xe7037ed1a0b428db)
	return hi ^ lo
}

// Intn returns a value in [0, n); n must be > 0.
func (r *Rand) Intn(n int) int {
	hi, _ := mul64(r.Uint64(), uint64(n))
	return int(hi)
}

// Fill fills b with random bytes.
func (r *Rand) Fill(b []byte) {
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, r.Uint64())
		b = b[8:]
	}
	if len(b) > 0 {
		v := r.Uint64()
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
	}
}

func mul64(a, b uint64) (hi, lo uint64) { return bits.Mul64(a, b) }
