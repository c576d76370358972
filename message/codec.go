package message

import "encoding/binary"

// Entry layout (docs/protocol.md §14).
const (
	headChanMask = 0x1f
	headFrag     = 0x20
	headReserved = 0xc0
	// maxLen is the largest entry length (a 2-byte uvarint).
	maxLen = 1<<14 - 1
	// fragHeader is a fragment entry's header with a 2-byte length:
	// head, id, index, count, len.
	fragHeader = 1 + 2 + 2 + 2 + 2
)

// entry is one decoded message entry; data aliases the payload.
type entry struct {
	ch       int
	frag     bool
	id       uint16
	idx, cnt uint16
	data     []byte
}

// hasID reports whether entries of kind k carry an id.
func hasID(k Kind) bool { return k != Unreliable }

// headerLen is the encoded size of an entry's header for n data bytes.
func headerLen(k Kind, frag bool, n int) int {
	h := 1
	if hasID(k) {
		h += 2
	}
	if frag {
		h += 4
	}
	if n < 0x80 {
		return h + 1
	}
	return h + 2
}

// putEntry encodes e (a channel of kind k) at the start of dst and returns
// the bytes written, 0 when it does not fit.
func putEntry(dst []byte, k Kind, e *entry) int {
	n := len(e.data)
	need := headerLen(k, e.frag, n) + n
	if n > maxLen || need > len(dst) {
		return 0
	}
	h := byte(e.ch & headChanMask)
	if e.frag {
		h |= headFrag
	}
	dst[0] = h
	p := 1
	if hasID(k) {
		binary.LittleEndian.PutUint16(dst[p:], e.id)
		p += 2
	}
	if e.frag {
		binary.LittleEndian.PutUint16(dst[p:], e.idx)
		binary.LittleEndian.PutUint16(dst[p+2:], e.cnt)
		p += 4
	}
	if n < 0x80 {
		dst[p] = byte(n)
		p++
	} else {
		dst[p] = byte(n) | 0x80
		dst[p+1] = byte(n >> 7)
		p += 2
	}
	return p + copy(dst[p:], e.data)
}

// getEntry decodes the entry at the start of b for channels of the given
// kinds. It checks the layout only (not sizes against limits, nor
// fragment counts against MaxMessageSize) and returns the bytes used.
func getEntry(b []byte, kinds []Kind, e *entry) (int, DropReason) {
	if len(b) == 0 {
		return 0, DropMalformed
	}
	h := b[0]
	if h&headReserved != 0 {
		return 0, DropReservedBits
	}
	e.ch = int(h & headChanMask)
	if e.ch >= len(kinds) {
		return 0, DropBadChannel
	}
	k := kinds[e.ch]
	e.frag = h&headFrag != 0
	p := 1
	e.id, e.idx, e.cnt = 0, 0, 0
	if hasID(k) {
		if len(b) < p+2 {
			return 0, DropMalformed
		}
		e.id = binary.LittleEndian.Uint16(b[p:])
		p += 2
	}
	if e.frag {
		if k != ReliableOrdered {
			return 0, DropBadFragment
		}
		if len(b) < p+4 {
			return 0, DropMalformed
		}
		e.idx = binary.LittleEndian.Uint16(b[p:])
		e.cnt = binary.LittleEndian.Uint16(b[p+2:])
		p += 4
		if e.cnt < 2 || e.idx >= e.cnt {
			return 0, DropBadFragment
		}
	}
	if len(b) <= p {
		return 0, DropMalformed
	}
	n := int(b[p])
	p++
	if n >= 0x80 {
		// A second byte must exist, end the varint and be needed (minimal).
		if len(b) <= p || b[p] >= 0x80 || b[p] == 0 {
			return 0, DropMalformed
		}
		n = n&0x7f | int(b[p])<<7
		p++
	}
	if n > len(b)-p {
		return 0, DropMalformed
	}
	e.data = b[p : p+n : p+n]
	return p + n, DropNone
}
