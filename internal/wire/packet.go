package wire

import (
	"encoding/binary"
	"math"

	"github.com/udpgate/udpgate/internal/protocol"
)

// Prefix is what opens every packet after the magic header (docs/protocol.md §2).
// A receiver decodes it first to route the datagram: HandshakeBit set goes
// to DecodeHandshake, clear to DecodeConn.
type Prefix struct {
	SessionID uint8 // 0..3
	ClientID  uint8 // 0..7
	Handshake bool
}

// The prefix after the magic header, as DecodePrefixWord returns it and the
// encoders write it (docs/protocol.md §2): SessionID in bits 0..1, ClientID
// in bits 2..4, HandshakeBit in bit 5; the bits above belong to what
// follows. These are the only places that know the layout.
const (
	// PrefixBits is the prefix's length: SessionID, ClientID and
	// HandshakeBit.
	PrefixBits         = protocol.IDBits + 1
	prefixClientShift  = 2
	prefixHandshakeBit = 1 << protocol.IDBits
)

// PrefixSessionID returns the SessionID of prefix word pw.
func PrefixSessionID(pw uint64) uint8 { return uint8(pw & (1<<prefixClientShift - 1)) }

// PrefixClientID returns the ClientID of prefix word pw.
func PrefixClientID(pw uint64) uint8 { return uint8(pw >> prefixClientShift & 7) }

// PrefixHandshake reports the HandshakeBit of prefix word pw.
func PrefixHandshake(pw uint64) bool { return pw&prefixHandshakeBit != 0 }

// PrefixWord is the prefix of a packet with sessionID, clientID and the
// HandshakeBit set for a handshake packet: the first PrefixBits bits after
// the magic header. IDs must fit their fields (the encoders check).
func PrefixWord(sessionID, clientID uint8, handshake bool) uint64 {
	w := uint64(sessionID) | uint64(clientID)<<prefixClientShift
	if handshake {
		w |= prefixHandshakeBit
	}
	return w
}

// DecodePrefix checks the terminator and the magic header of b and returns
// its SessionID, ClientID and HandshakeBit. It is the whole per-datagram cost
// of routing, so it reads one little-endian word instead of a bitstream.
//
// Drops: DropMalformed when b is empty, its last byte is zero, or its payload
// is shorter than the prefix; DropBadMagic when the header differs.
func DecodePrefix(m Magic, b []byte) (Prefix, protocol.DropReason) {
	w, _, r := DecodePrefixWord(m, b)
	if r != protocol.DropNone {
		return Prefix{}, r
	}
	return Prefix{SessionID: PrefixSessionID(w), ClientID: PrefixClientID(w), Handshake: PrefixHandshake(w)}, protocol.DropNone
}

// DecodePrefixWord applies the terminator rule and the magic check and
// returns the bits after the magic header (the prefix word, read with
// PrefixSessionID, PrefixClientID and PrefixHandshake) and the payload
// length in bits. The prefix is at most 38 bits, so one 64-bit load holds it.
func DecodePrefixWord(m Magic, b []byte) (w uint64, pbits int, r protocol.DropReason) {
	pb, ok := payloadBits(b)
	if !ok || pb < int(m.n)+PrefixBits {
		return 0, 0, protocol.DropMalformed
	}
	if len(b) >= 8 {
		w = binary.LittleEndian.Uint64(b)
	} else {
		for k, c := range b {
			w |= uint64(c) << (8 * uint(k))
		}
	}
	if w&m.mask() != uint64(m.bits) {
		return 0, 0, protocol.DropBadMagic
	}
	return w >> m.n, pb, protocol.DropNone
}

// HandshakeLen returns the size on the wire, in bytes, of a handshake packet
// of type t with randomLen bytes of RandomData under magic header m:
// ⌈(M + 5 + 82 + body + 8·randomLen + 1) / 8⌉. It is defined for any
// randomLen ≥ 0, so a sender can search for the longest RandomData that fits
// a size budget (the no-amplification rule of §5); it returns 0 for an
// unknown type or a negative randomLen.
func HandshakeLen(m Magic, t protocol.PacketType, randomLen int) int {
	body := t.BodyBits()
	if body < 0 || randomLen < 0 {
		return 0
	}
	return (int(m.n) + protocol.IDBits + protocol.BaseBits + body + 8*randomLen + 1 + 7) / 8
}

// handshakeEncodable reports whether h is a packet DecodeHandshake accepts
// structurally: a known type, 8..16 random bytes, IDs and SecretID within
// their field widths, and the RestartBit the type requires. Refusing the
// rest keeps the encoder from silently truncating a field into a packet that
// means something else.
func handshakeEncodable(h *protocol.Handshake) bool {
	if h.Type >= protocol.NumPacketTypes || h.RandomLen < protocol.MinRandomBytes || h.RandomLen > protocol.MaxRandomBytes ||
		h.SessionID > 3 || h.ClientID > 7 {
		return false
	}
	switch h.Type {
	case protocol.TypeChallenge, protocol.TypeResponse, protocol.TypeAck:
		return h.SecretID <= 1
	case protocol.TypeRestartResponse:
		return h.SecretID <= 1 && h.Restart
	case protocol.TypeRestartHandshake:
		return h.Restart
	case protocol.TypeVersionUpgrade:
		return !h.Restart
	case protocol.TypeInitial:
		return layoutValid(&h.Layout)
	case protocol.TypeLayoutMismatch:
		return layoutValid(&h.Layout)
	}
	return true
}

// layoutValid reports whether l is a Layout the wire may carry: the zero Layout,
// or 1..32 channels each with a kind code 1..3, no code beyond them, and a
// nonzero MaxDatagram; MaxMessage is nonzero exactly when a channel is
// reliable-ordered, so that two sides that agree compare equal.
func layoutValid(l *protocol.Layout) bool {
	if *l == (protocol.Layout{}) {
		return true
	}
	if l.Channels == 0 || l.Channels > maxLayoutChannels || l.MaxDatagram == 0 {
		return false
	}
	reliable := false
	for i := range maxLayoutChannels {
		k := l.Kinds >> (2 * i) & 3
		if (k == 0) != (i >= int(l.Channels)) {
			return false
		}
		reliable = reliable || k == 1
	}
	return reliable == (l.MaxMessage != 0)
}

// maxLayoutChannels is the most channels a Layout describes
// (docs/protocol.md §14.1).
const maxLayoutChannels = 32

// writeLayout writes l's 224 bits (docs/protocol.md §3.7): Channels(8)
// Kinds(64) MaxMessage(32) MaxDatagram(16) and 104 zero bits.
func writeLayout(w *BitWriter, l *protocol.Layout) {
	w.WriteBits(uint64(l.Channels)|l.Kinds<<8, 64)
	w.WriteBits(l.Kinds>>56|uint64(l.MaxMessage)<<8|uint64(l.MaxDatagram)<<40, 56)
	w.WriteBits(0, 64)
	w.WriteBits(0, 40)
}

// LayoutFromWords reads a Layout from the 224 bits after its start, given
// as the four little-endian words f0..f3 (bits 0..63, 64..127, …; only the
// low 32 bits of f3 are its). It returns false, with l unset, for bits that
// are not a Layout the wire may carry (Layout.Valid, reserved bits zero):
// the receiver drops the packet as bad_body.
func LayoutFromWords(f0, f1, f2, f3 uint64, l *protocol.Layout) bool {
	v := protocol.Layout{
		Channels:    uint8(f0),
		Kinds:       f0>>8 | f1<<56,
		MaxMessage:  uint32(f1 >> 8),
		MaxDatagram: uint16(f1 >> 40),
	}
	if f1>>56|f2|f3&(1<<32-1) != 0 || !layoutValid(&v) {
		return false
	}
	*l = v
	return true
}

// readLayout reads a Layout's 224 bits from br.
func readLayout(br *bitReader, l *protocol.Layout) bool {
	f0 := br.ReadBits(64)
	f1 := br.ReadBits(64)
	f2 := br.ReadBits(64)
	f3 := br.ReadBits(32)
	return LayoutFromWords(f0, f1, f2, f3, l)
}

// EncodeHandshake writes h as the handshake packet of §3 into dst: prefix
// (HandshakeBit 1), base, the body of h.Type, h.Random[:h.RandomLen] and the
// terminator. It returns the number of bytes written, HandshakeLen(m,
// h.Type, h.RandomLen), and writes nothing past them.
//
// It returns 0, having written nothing, when dst is too short or when h is
// not a packet DecodeHandshake would accept: an unknown Type, RandomLen
// outside 8..16, SessionID > 3, ClientID > 7, SecretID > 1 (types that carry
// it), a RestartBit the type forbids (RestartHandshake and
// RestartResponse need Restart, VersionUpgrade needs !Restart), or a Layout
// the wire may not carry (not Valid). Fields the type does not carry are ignored.
func EncodeHandshake(dst []byte, m Magic, h *protocol.Handshake) int {
	if !handshakeEncodable(h) {
		return 0
	}
	n := HandshakeLen(m, h.Type, int(h.RandomLen))
	if len(dst) < n {
		return 0
	}
	w := NewBitWriter(dst[:n])
	w.WriteBits(uint64(m.bits), int(m.n))
	// SessionID(2) ClientID(3) HandshakeBit(1) RestartBit(1) MinVersion(8)
	// CurVersion(8) PacketType(8) SentCount(8): 39 bits in one write.
	var restart uint64
	if h.Restart {
		restart = 1
	}
	w.WriteBits(PrefixWord(h.SessionID, h.ClientID, true)|restart<<PrefixBits|
		uint64(h.MinVersion)<<7|uint64(h.CurVersion)<<15|uint64(h.Type)<<23|uint64(h.SentCount)<<31, 39)
	w.WriteBits(uint64(h.NetworkVersion)|uint64(h.NetworkFeatures)<<32, 48)
	switch h.Type {
	case protocol.TypeInitial:
		// SecretId 0, then the declared Layout (28 zero bytes for none).
		w.WriteBits(0, 1)
		writeLayout(&w, &h.Layout)
	case protocol.TypeLayoutMismatch:
		writeLayout(&w, &h.Layout)
	case protocol.TypeChallenge, protocol.TypeResponse, protocol.TypeAck, protocol.TypeRestartResponse:
		w.WriteBits(uint64(h.SecretID), 1)
		w.WriteBits(math.Float64bits(h.Timestamp), 64)
		w.WriteBytes(h.Cookie[:])
		if h.Type == protocol.TypeRestartResponse {
			w.WriteBytes(h.OrigCookie[:])
		}
	case protocol.TypeDenied:
		w.WriteBits(uint64(h.Reason), 8)
		w.WriteBytes(h.Cookie[:])
	}
	w.WriteBytes(h.Random[:h.RandomLen])
	w.WriteTerminator()
	if w.Overflow() || w.Len() != n {
		// HandshakeLen and the writes above disagree: a bug here, not
		// in the caller's input.
		panic("fastpath: EncodeHandshake: layout does not match HandshakeLen")
	}
	return n
}

// CheckShape applies the rules on a handshake's random bytes and Restart
// flag that DecodeHandshake and the server's decodeRequest share: the
// random part is whole bytes within bounds, and only the restart types (and
// not VersionUpgrade) carry Restart.
func CheckShape(t protocol.PacketType, randomBits int, restart bool) protocol.DropReason {
	if randomBits < 8*protocol.MinRandomBytes || randomBits > 8*protocol.MaxRandomBytes || randomBits&7 != 0 {
		return protocol.DropBadSize
	}
	switch t {
	case protocol.TypeRestartHandshake, protocol.TypeRestartResponse:
		if !restart {
			return protocol.DropBadBody
		}
	case protocol.TypeVersionUpgrade:
		if restart {
			return protocol.DropBadBody
		}
	}
	return protocol.DropNone
}

// DecodeHandshake parses b as a handshake packet under magic header m into
// *h, applying every structural rule of §1–§3. On DropNone every field of h
// is set: fields the type does not carry are zero, Random[RandomLen:] is
// zero, and an Initial reads as SecretID 0, Timestamp 0 and a zero Cookie.
// On a drop *h may be partly overwritten.
//
// It does not check what depends on the receiver: versions, the types a
// role accepts, SessionID, or the Timestamp's sign. Drops, in the order
// checked:
//   - DropMalformed: empty, last byte zero, or the payload ends inside the
//     prefix or the base;
//   - DropBadMagic: the magic header differs;
//   - DropUnexpectedType: HandshakeBit is 0 (a connection packet);
//   - DropUnknownType: PacketType above 8;
//   - DropBadSize: the bits after the base are not the type's body plus
//     8..16 whole random bytes;
//   - DropBadBody: an Initial or LayoutMismatch whose Layout is not one the
//     wire may carry (§3.7: Valid, reserved bits zero), or a RestartBit the
//     type forbids (RestartHandshake and RestartResponse need 1,
//     VersionUpgrade needs 0).
//
// Because the payload must be exactly prefix + base + body + RandomData,
// a packet DecodeHandshake accepts is exactly what EncodeHandshake writes for
// the *h it returns: there are no ignored bits to differ in.
func DecodeHandshake(m Magic, b []byte, h *protocol.Handshake) protocol.DropReason {
	pw, pb, r := DecodePrefixWord(m, b)
	if r != protocol.DropNone {
		return r
	}
	if !PrefixHandshake(pw) {
		return protocol.DropUnexpectedType
	}
	br := bitReader{buf: b, pos: int(m.n) + PrefixBits, limit: pb}
	// RestartBit(1) MinVersion(8) CurVersion(8) PacketType(8) SentCount(8),
	// then NetworkVersion(32) NetworkFeatures(16).
	v := br.ReadBits(33)
	nv := br.ReadBits(48)
	if br.Overrun() {
		return protocol.DropMalformed
	}
	t := protocol.PacketType(v >> 17)
	if t >= protocol.NumPacketTypes {
		return protocol.DropUnknownType
	}
	random := br.Left() - t.BodyBits()
	restart := v&1 != 0
	if r := CheckShape(t, random, restart); r != protocol.DropNone {
		return r
	}

	// The size rule guarantees every read below is in bounds.
	h.SessionID = PrefixSessionID(pw)
	h.ClientID = PrefixClientID(pw)
	h.Restart = restart
	h.MinVersion = uint8(v >> 1)
	h.CurVersion = uint8(v >> 9)
	h.Type = t
	h.SentCount = uint8(v >> 25)
	h.NetworkVersion = uint32(nv)
	h.NetworkFeatures = uint16(nv >> 32)
	h.SecretID = 0
	h.Timestamp = 0
	h.Reason = 0
	h.Layout = protocol.Layout{}
	switch t {
	case protocol.TypeInitial:
		if br.ReadBits(1) != 0 || !readLayout(&br, &h.Layout) {
			return protocol.DropBadBody
		}
		clear(h.Cookie[:])
		clear(h.OrigCookie[:])
	case protocol.TypeLayoutMismatch:
		if !readLayout(&br, &h.Layout) {
			return protocol.DropBadBody
		}
		clear(h.Cookie[:])
		clear(h.OrigCookie[:])
	case protocol.TypeChallenge, protocol.TypeResponse, protocol.TypeAck, protocol.TypeRestartResponse:
		h.SecretID = uint8(br.ReadBits(1))
		h.Timestamp = math.Float64frombits(br.ReadBits(64))
		br.ReadBytes(h.Cookie[:])
		if t == protocol.TypeRestartResponse {
			br.ReadBytes(h.OrigCookie[:])
		} else {
			clear(h.OrigCookie[:])
		}
	case protocol.TypeDenied:
		h.Reason = uint8(br.ReadBits(8))
		br.ReadBytes(h.Cookie[:])
		clear(h.OrigCookie[:])
	default: // RestartHandshake, VersionUpgrade: no body
		clear(h.Cookie[:])
		clear(h.OrigCookie[:])
	}
	n := random / 8
	h.RandomLen = uint8(n)
	br.ReadBytes(h.Random[:n])
	clear(h.Random[n:])
	return protocol.DropNone
}
