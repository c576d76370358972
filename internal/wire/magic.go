package wire

import (
	"fmt"
	"strings"

	"github.com/udpgate/udpgate/internal/protocol"
)

// Magic is the configured magic header of docs/protocol.md §2: 0 to 32 bits that
// open every packet. Bit i of bits is the header's i-th character, which is
// also the i-th bit on the wire, so writing the header is one WriteBits and
// checking it is one masked compare. The zero Magic is the empty header.
type Magic struct {
	bits uint32
	n    uint8
}

// ParseMagic parses a magic header given as a string of '0' and '1', first
// character first on the wire, at most MaxMagicBits long. The empty string
// is the empty header (no magic).
func ParseMagic(s string) (Magic, error) {
	var m Magic
	for i, c := range s {
		switch c {
		case '0':
		case '1':
			if i < protocol.MaxMagicBits {
				m.bits |= 1 << uint(i)
			}
		default:
			return Magic{}, fmt.Errorf("fastpath: magic header %q has %q at byte %d; "+
				"use only the characters '0' and '1', first character first on the wire", s, c, i)
		}
	}
	if len(s) > protocol.MaxMagicBits {
		return Magic{}, fmt.Errorf("fastpath: magic header %q is %d bits long; "+
			"use at most %d characters of '0' and '1', or \"\" for none", s, len(s), protocol.MaxMagicBits)
	}
	m.n = uint8(len(s))
	return m, nil
}

// Len returns the header's length in bits.
func (m Magic) Len() int { return int(m.n) }

// Bits returns the header's bits, the first in bit 0: what a writer puts on
// the wire before the prefix.
func (m Magic) Bits() uint32 { return m.bits }

// String returns the header as ParseMagic accepts it.
func (m Magic) String() string {
	var b strings.Builder
	b.Grow(int(m.n))
	for i := range int(m.n) {
		b.WriteByte('0' + byte(m.bits>>uint(i)&1))
	}
	return b.String()
}

// mask returns the low Len() bits set: the part of a little-endian prefix
// word the header occupies.
func (m Magic) mask() uint64 { return 1<<m.n - 1 }
