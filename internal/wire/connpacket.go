package wire

import (
	"encoding/binary"

	"github.com/udpgate/udpgate/internal/protocol"
)

// Connection packets (docs/protocol.md §7) carry the game's traffic, so unlike the
// handshake they are byte-aligned after the prefix: the header is plain
// little-endian loads and stores and the payload is a subslice of the
// datagram, never copied or shifted.

// ConnHeaderOffset returns where the byte-aligned header starts: the prefix
// (magic, SessionID, ClientID, HandshakeBit 0) rounded up to whole bytes,
// ⌈(M+6)/8⌉.
func ConnHeaderOffset(m Magic) int { return (int(m.n) + PrefixBits + 7) / 8 }

// MinConnLen returns ⌈(M+152)/8⌉, the size of the smallest RestartHandshake
// (8 random bytes). A KeepAlive is padded to at least this size so that a
// server may answer any connection packet from a moved client with a
// RestartHandshake without breaking the no-amplification rule (§5, §7).
func MinConnLen(m Magic) int {
	return (int(m.n) + protocol.IDBits + protocol.BaseBits + 8*protocol.MinRandomBytes + 1 + 7) / 8
}

// ConnLen returns the size on the wire of a connection packet of kind with
// payloadLen payload bytes: header offset + 17 + payloadLen + the terminator
// byte, and for a KeepAlive at least MinConnLen(m). It returns 0 for an
// unknown kind or a negative payloadLen; it does not check the payload rules
// of the kind (EncodeConn does).
func ConnLen(m Magic, kind protocol.Kind, payloadLen int) int {
	if kind > kindLast || payloadLen < 0 {
		return 0
	}
	n := ConnHeaderOffset(m) + protocol.ConnHeaderBytes + payloadLen + 1
	if kind == protocol.KindKeepAlive {
		n = max(n, MinConnLen(m))
	}
	return n
}

// connPayloadOK is the payload rule of §7 for a known kind: Data carries at
// least one byte, Disconnect exactly one (the reason), KeepAlive any padding.
func connPayloadOK(kind protocol.Kind, n int) bool {
	switch kind {
	case protocol.KindData, protocol.KindMessages:
		return n >= 1
	case protocol.KindDisconnect:
		return n == 1
	}
	return true
}

// EncodeConn writes a connection packet into dst: the prefix with
// HandshakeBit 0, zero bits to the byte boundary, the header of h, payload,
// for a KeepAlive zero bytes up to MinConnLen(m), and the terminator byte
// 0x01. It returns ConnLen(m, h.Kind, len(payload)) and writes nothing past
// that.
//
// It returns 0, having written nothing, when dst is too short or when the
// packet is one DecodeConn would drop: SessionID > 3, ClientID > 7, Seq or
// Ack > 16383, an unknown Kind, or a payload that does not fit the kind.
// For a KeepAlive, payload is written as padding (normally nil).
//
// payload may be dst[ConnHeaderOffset(m)+ConnHeaderBytes:][:len(payload)]
// itself, so a sender can build the message in place and skip the copy; any
// other overlap with dst is not allowed.
func EncodeConn(dst []byte, m Magic, h *protocol.ConnHeader, payload []byte) int {
	if h.SessionID > 3 || h.ClientID > 7 || h.Seq >= protocol.SeqModulus || h.Ack >= protocol.SeqModulus ||
		h.Kind > kindLast || !connPayloadOK(h.Kind, len(payload)) {
		return 0
	}
	n := ConnLen(m, h.Kind, len(payload))
	if len(dst) < n {
		return 0
	}
	dst = dst[:n]
	// The prefix is at most 38 bits and n ≥ 19, so one 8-byte store writes
	// it and its zero padding; the header then overwrites from offset o.
	binary.LittleEndian.PutUint64(dst, uint64(m.bits)|PrefixWord(h.SessionID, h.ClientID, false)<<m.n)
	// Through a slice of the header's fixed length, so the stores need no
	// bounds checks of their own: Tag, Seq and Ack are one 8-byte store.
	o := ConnHeaderOffset(m)
	hdr := dst[o : o+protocol.ConnHeaderBytes]
	binary.LittleEndian.PutUint64(hdr, uint64(h.Tag)|uint64(h.Seq)<<32|uint64(h.Ack)<<48)
	binary.LittleEndian.PutUint64(hdr[8:], h.AckBits)
	hdr[16] = byte(h.Kind)
	p := o + protocol.ConnHeaderBytes
	p += copy(dst[p:], payload)
	if p < n-1 {
		clear(dst[p : n-1]) // KeepAlive padding
	}
	dst[n-1] = 0x01
	return n
}

// DecodeConn parses b as a connection packet under magic header m into *h and
// returns its payload, a subslice of b (borrowed: valid as long as b is, not
// copied; its capacity ends before the terminator so an append cannot
// overwrite it). *h is set only on DropNone.
//
// Drops, in the order checked:
//   - DropMalformed, DropBadMagic: as DecodePrefix;
//   - DropUnexpectedType: HandshakeBit is 1;
//   - DropBadSize: the last byte is not exactly 0x01, or b is shorter than
//     the header and the terminator;
//   - DropBadBody: Seq or Ack above 16383, Kind above 3, a Data or Messages packet with
//     no payload, or a Disconnect whose payload is not exactly one byte.
//
// The bits between the prefix and the byte boundary are ignored (a sender
// writes zeros). The terminator must be the whole byte 0x01, not merely the
// highest set bit of the last byte: §7 defines it as "the byte 0x01" after
// a byte-aligned payload, so a last byte with other bits set would put
// payload bits under the terminator, a payload that is not whole bytes,
// which no conforming sender writes. Such a packet is malformed and dropped
// as DropBadSize rather than given a truncated payload.
//
// A KeepAlive's payload is its padding, returned as is (any byte values,
// possibly empty); callers ignore it. A KeepAlive shorter than MinConnLen is
// accepted: the padding rule binds senders, and the server's
// no-amplification check already refuses to answer a packet too small.
func DecodeConn(m Magic, b []byte, h *protocol.ConnHeader) (payload []byte, r protocol.DropReason) {
	pw, _, r := DecodePrefixWord(m, b)
	if r != protocol.DropNone {
		return nil, r
	}
	return DecodeConnWord(m, b, pw, h)
}

// DecodeConnWord is DecodeConn after the prefix checks, for a caller that has
// decoded the prefix word pw already (DecodePrefixWord accepted b).
func DecodeConnWord(m Magic, b []byte, pw uint64, h *protocol.ConnHeader) (payload []byte, r protocol.DropReason) {
	if PrefixHandshake(pw) {
		return nil, protocol.DropUnexpectedType
	}
	end := len(b) - 1
	o := ConnHeaderOffset(m)
	if b[end] != 0x01 || end < o+protocol.ConnHeaderBytes {
		return nil, protocol.DropBadSize
	}
	hdr := b[o : o+protocol.ConnHeaderBytes]
	seq := binary.LittleEndian.Uint16(hdr[4:])
	ack := binary.LittleEndian.Uint16(hdr[6:])
	kind := protocol.Kind(hdr[16])
	payload = b[o+protocol.ConnHeaderBytes : end : end]
	if seq >= protocol.SeqModulus || ack >= protocol.SeqModulus || kind > kindLast || !connPayloadOK(kind, len(payload)) {
		return nil, protocol.DropBadBody
	}
	*h = protocol.ConnHeader{
		SessionID: PrefixSessionID(pw),
		ClientID:  PrefixClientID(pw),
		Tag:       binary.LittleEndian.Uint32(hdr),
		Seq:       seq,
		Ack:       ack,
		AckBits:   binary.LittleEndian.Uint64(hdr[8:]),
		Kind:      kind,
	}
	return payload, protocol.DropNone
}

// kindLast is the highest kind a connection packet may carry (§7.1).
const kindLast = protocol.KindMessages
