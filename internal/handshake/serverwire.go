package handshake

import (
	"encoding/binary"
	"math"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

// The server's own handshake codec. Every handshake packet has the fixed
// layout of docs/protocol.md §3 at bit offsets that depend only on the magic
// header's length, so the server loads the few 64-bit words a packet's
// fields lie in and takes the fields out with shifts, and writes its
// replies through one 64-bit accumulator, instead of a bitReader or
// BitWriter call per field with its own bounds and overrun bookkeeping.
// The server also skips what it never reads: the request's RandomData
// bytes. Measured (BenchmarkDecodeRequest, BenchmarkDecodeHandshake,
// BenchmarkWriteChallenge): decoding a Response ≈ 12 ns against
// DecodeHandshake's 29 (no magic header) and 39 (4 bits), a whole
// Challenge reply with its RandomData ≈ 21 ns against 50 and 65.
//
// DecodeHandshake and EncodeHandshake stay the reference: decodeRequest
// returns the same verdict for every datagram and the same value for every
// field it decodes (serverwire_test.go, FuzzDecodeRequest), and the reply
// writers produce byte for byte what EncodeHandshake wrote for the same
// reply and random stream (FuzzServerReply).

// request is a handshake packet as the server reads it: every field of
// Handshake except the RandomData bytes, of which the server needs only the
// length (the no-amplification rule); its replies draw their own.
type request struct {
	SessionID       uint8
	ClientID        uint8
	Restart         bool
	MinVersion      uint8
	CurVersion      uint8
	Type            protocol.PacketType
	SentCount       uint8
	RandomLen       uint8
	SecretID        uint8
	Reason          uint8
	NetworkFeatures uint16
	NetworkVersion  uint32
	Timestamp       float64
	Cookie          cookie.Cookie
	OrigCookie      cookie.Cookie
	Layout          protocol.Layout
}

// load64 returns the 64 bits of b from bit off on. Byte off>>3 + 8 must
// exist; it is read even when off is byte-aligned, so the load needs no
// branch.
func load64(b []byte, off int) uint64 {
	i, s := off>>3, uint(off&7)
	return funnel(binary.LittleEndian.Uint64(b[i:]), uint64(b[i+8]), s)
}

// funnel returns bits s..s+63 of the 128-bit little-endian value hi:lo, s
// in 0..7. The high part is shifted in two steps so that no shift count
// reaches 64 (s = 0 takes none of hi) and the compiler needs no guard for
// one that would.
func funnel(lo, hi uint64, s uint) uint64 {
	return lo>>(s&7) | hi<<1<<((63-s)&63)
}

// loadCookie reads a 20-byte field from bit off on.
func loadCookie(c *cookie.Cookie, b []byte, off int) {
	binary.LittleEndian.PutUint64(c[0:], load64(b, off))
	binary.LittleEndian.PutUint64(c[8:], load64(b, off+64))
	binary.LittleEndian.PutUint32(c[16:], uint32(load64(b, off+128)))
}

// copyCookie copies a cookie that decodeRequest has just written, in the
// same 8-, 8- and 4-byte pieces: a plain assignment moves 16 bytes at once,
// a load the CPU cannot forward from the two 8-byte stores still in flight.
func copyCookie(dst, src *cookie.Cookie) {
	binary.LittleEndian.PutUint64(dst[0:], binary.LittleEndian.Uint64(src[0:]))
	binary.LittleEndian.PutUint64(dst[8:], binary.LittleEndian.Uint64(src[8:]))
	binary.LittleEndian.PutUint32(dst[16:], binary.LittleEndian.Uint32(src[16:]))
}

// decodeRequest is DecodeHandshake for a datagram whose prefix the caller
// has already checked: pw and pb are DecodePrefixWord's word and payload
// length, and pw's HandshakeBit is set. It applies the same rules in the
// same order and returns the same DropReason; on DropNone every field of
// *q is what DecodeHandshake puts in the Handshake's field of that name.
//
// It reads the base as two little-endian words and the body as four, from
// the bytes the base and the body start in, and takes each field out of
// them with shifts. Every load is in bounds: a datagram too short for the
// base's 16 bytes cannot pass the size rule and is left to DecodeHandshake
// for its exact drop reason, and a packet that passes the size rule has at
// least 64 random bits after its body, more than the body's words reach
// past it.
func decodeRequest(m wire.Magic, b []byte, pw uint64, pb int, q *request) protocol.DropReason {
	base := m.Len() + wire.PrefixBits    // RestartBit
	body := base + protocol.BaseBits - 1 // BaseBits counts the HandshakeBit
	if len(b) < base>>3+16 {
		return decodeRequestShort(m, b, q)
	}
	if pb < body {
		return protocol.DropMalformed
	}
	// RestartBit(1) MinVersion(8) CurVersion(8) PacketType(8) SentCount(8),
	// then NetworkVersion(32) NetworkFeatures(16): 81 bits from bit hs of
	// the two words.
	hw := b[base>>3:][:16]
	hs := uint(base & 7)
	hw1 := binary.LittleEndian.Uint64(hw[8:])
	v := funnel(binary.LittleEndian.Uint64(hw), hw1, hs)
	nv := v>>33 | hw1>>(hs&7)<<31
	t := protocol.PacketType(v >> 17 & 0xFF)
	if t >= protocol.NumPacketTypes {
		return protocol.DropUnknownType
	}
	random := pb - body - t.BodyBits()
	restart := v&1 != 0
	if r := wire.CheckShape(t, random, restart); r != protocol.DropNone {
		return r
	}
	// Field by field, not *q = request{...}: a composite literal is built
	// on the stack with narrow stores and copied with 16-byte loads,
	// which the CPU cannot forward from those stores.
	q.SessionID = wire.PrefixSessionID(pw)
	q.ClientID = wire.PrefixClientID(pw)
	q.Restart = restart
	q.MinVersion = uint8(v >> 1)
	q.CurVersion = uint8(v >> 9)
	q.Type = t
	q.SentCount = uint8(v >> 25)
	q.RandomLen = uint8(random / 8)
	q.NetworkVersion = uint32(nv)
	q.NetworkFeatures = uint16(nv >> 32)
	q.SecretID = 0
	q.Reason = 0
	q.Timestamp = 0
	q.OrigCookie = cookie.Cookie{}
	q.Layout = protocol.Layout{}
	switch t {
	case protocol.TypeRestartHandshake, protocol.TypeVersionUpgrade: // no body
		q.Cookie = cookie.Cookie{}
		return protocol.DropNone
	case protocol.TypeDenied:
		q.Reason = uint8(load64(b, body))
		loadCookie(&q.Cookie, b, body+8)
		return protocol.DropNone
	}
	// Initial, Challenge, Response, Ack, RestartResponse: the first 225
	// bits of the body from bit s of four words.
	bw := b[body>>3:][:32]
	s := uint(body & 7)
	w0 := binary.LittleEndian.Uint64(bw[0:])
	w1 := binary.LittleEndian.Uint64(bw[8:])
	w2 := binary.LittleEndian.Uint64(bw[16:])
	w3 := binary.LittleEndian.Uint64(bw[24:])
	if t == protocol.TypeInitial {
		q.Cookie = cookie.Cookie{}
		// SecretId bit 0, then the Layout (§3.7), 28 zero bytes when
		// none is declared: bits s..s+224.
		if w0>>(s&7)|w1|w2|w3&(1<<(s+33)-1) == 0 {
			return protocol.DropNone
		}
		f0, f1, f2, f3 := funnel(w0, w1, s), funnel(w1, w2, s), funnel(w2, w3, s), w3>>(s&7)
		if f0&1 != 0 || !wire.LayoutFromWords(f0>>1|f1<<63, f1>>1|f2<<63, f2>>1|f3<<63, f3>>1, &q.Layout) {
			return protocol.DropBadBody
		}
		return protocol.DropNone
	}
	// SecretId(1) Timestamp(64) Cookie(160): each output word is two
	// aligned words shifted together.
	f0, f1, f2, f3 := funnel(w0, w1, s), funnel(w1, w2, s), funnel(w2, w3, s), w3>>(s&7)
	if t == protocol.TypeLayoutMismatch {
		// A client's type, and so dropped later as unexpected: decoded
		// only for the verdict DecodeHandshake gives.
		q.Cookie = cookie.Cookie{}
		if !wire.LayoutFromWords(f0, f1, f2, f3, &q.Layout) {
			return protocol.DropBadBody
		}
		return protocol.DropNone
	}
	q.SecretID = uint8(f0 & 1)
	q.Timestamp = math.Float64frombits(f0>>1 | f1<<63)
	binary.LittleEndian.PutUint64(q.Cookie[0:], f1>>1|f2<<63)
	binary.LittleEndian.PutUint64(q.Cookie[8:], f2>>1|f3<<63)
	binary.LittleEndian.PutUint32(q.Cookie[16:], uint32(f3>>1))
	if t == protocol.TypeRestartResponse {
		loadCookie(&q.OrigCookie, b, body+225)
	}
	return protocol.DropNone
}

// decodeRequestShort handles datagrams too short for decodeRequest's
// loads: none is a valid handshake, so this runs only for garbage and
// never on a path that matters for speed.
func decodeRequestShort(m wire.Magic, b []byte, q *request) protocol.DropReason {
	var h protocol.Handshake
	r := wire.DecodeHandshake(m, b, &h)
	if r == protocol.DropNone {
		// Unreachable by the size rule; kept correct rather than
		// trusted.
		*q = request{SessionID: h.SessionID, ClientID: h.ClientID, Restart: h.Restart,
			MinVersion: h.MinVersion, CurVersion: h.CurVersion, Type: h.Type, SentCount: h.SentCount,
			RandomLen: h.RandomLen, SecretID: h.SecretID, Reason: h.Reason,
			NetworkFeatures: h.NetworkFeatures, NetworkVersion: h.NetworkVersion,
			Timestamp: h.Timestamp, Cookie: h.Cookie, OrigCookie: h.OrigCookie, Layout: h.Layout}
	}
	return r
}

// wordWriter writes a bitstream (§1) a 64-bit word at a time: bits gather
// in acc and each completed word is one store. It is a value of four
// words, passed and returned by value with the buffer beside it, so that
// the compiler keeps it in registers across a whole reply; a struct holding
// the buffer too would be too large for that and live on the stack.
//
// It does no bounds bookkeeping of its own: callers size the buffer from
// HandshakeLen first, and every store is within the packet: a word is
// stored only once all its bits are written, and writeReply stores the
// tail as the packet's last eight bytes.
type wordWriter struct {
	acc  uint64 // bits not yet stored, from bit 0 up
	last uint64 // the word stored last, for the tail
	i    int    // bytes stored
	n    uint   // bits in acc: 0..63
}

// put writes the low bits of v, which must have no bits set above them.
// bits is 0..64.
func (w wordWriter) put(buf []byte, v uint64, bits uint) wordWriter {
	n := w.n & 63 // n < 64: the mask only spares the shifts a range check
	w.acc |= v << n
	w.n = n + bits
	if w.n >= 64 {
		binary.LittleEndian.PutUint64(buf[w.i:], w.acc)
		w.last = w.acc
		w.i += 8
		w.n -= 64
		// The bits of v that did not fit: v >> (64 − n), in two steps
		// so that n = 0 (all of v stored) gives 0 without a shift by 64.
		w.acc = v >> 1 >> (63 - n)
	}
	return w
}

// reply is what varies between the server's replies, beyond ReplyTo.
type reply struct {
	Type     protocol.PacketType
	Restart  bool
	SecretID uint8 // 0..1
	Reason   uint8
	// Timestamp and Cookie, for the types that carry them.
	Timestamp float64
	Cookie    *cookie.Cookie
}

// maxRandom is the longest RandomData a reply of type t may carry: no
// longer than the request's, and short enough that the reply is no more
// bytes than the request. This is the no-amplification rule (§5), enforced
// here for every reply the server makes; below MinRandomBytes the reply is
// impossible. A reply's length is its RandomData's plus a fixed part, so
// the bound is a subtraction.
func (c *ServerConfig) maxRandom(t protocol.PacketType, to *ReplyTo) int {
	return min(int(to.randomLen), protocol.MaxRandomBytes, to.reqLen-wire.HandshakeLen(c.Magic, t, 0))
}

// writeReply picks the RandomData length uniformly in [8, hi], where hi is
// maxRandom's bound (≥ 8), draws the RandomData and writes the reply with
// putReply. It draws from rnd exactly as rnd.Intn then rnd.Fill would, so
// the packet is the one EncodeHandshake writes for the same reply and
// generator state.
func (c *ServerConfig) writeReply(out []byte, rep *reply, to *ReplyTo, hi int, rnd *wire.Rand) int {
	r := protocol.MinRandomBytes + rnd.Intn(hi-protocol.MinRandomBytes+1)
	// rnd.Fill's layout: whole words first, then the low bytes of one
	// more, drawn only when there are such bytes.
	r0 := rnd.Uint64()
	var r1 uint64
	if r > 8 {
		r1 = rnd.Uint64()
	}
	return c.putReply(out, rep, to, r, r0, r1)
}

// putReply writes into out the header every server reply carries (§5), the
// body of rep.Type, r bytes of RandomData (r0's eight bytes, then the low
// r−8 bytes of r1, little-endian) and the terminator. It returns the
// length, HandshakeLen(c.Magic, rep.Type, r), and writes nothing past it.
//
// rep must be a reply the server makes: Challenge, Ack, Denied,
// RestartHandshake, VersionUpgrade or LayoutMismatch, with SecretID ≤ 1 and the RestartBit
// its type requires, and r must be 8..16. Like EncodeHandshake, it returns
// 0 when out is too short or an ID does not fit its field (c.SessionID > 3,
// to.ClientID > 7).
func (c *ServerConfig) putReply(out []byte, rep *reply, to *ReplyTo, r int, r0, r1 uint64) int {
	n := wire.HandshakeLen(c.Magic, rep.Type, r)
	if len(out) < n || c.SessionID > 3 || to.ClientID > 7 {
		return 0
	}
	buf := out[:n]
	var w wordWriter
	m := c.Magic
	w = w.put(buf, uint64(m.Bits()), uint(m.Len()))
	var restart uint64
	if rep.Restart {
		restart = 1
	}
	// SessionID(2) ClientID(3) HandshakeBit(1) RestartBit(1) MinVersion(8)
	// CurVersion(8) PacketType(8) SentCount(8), then NetworkVersion(32)
	// NetworkFeatures(16).
	w = w.put(buf, wire.PrefixWord(c.SessionID, to.ClientID, true)|restart<<wire.PrefixBits|protocol.MinHandshakeVersion<<7|
		uint64(to.curVersion)<<15|uint64(rep.Type)<<23|uint64(to.sentCount)<<31, 39)
	w = w.put(buf, uint64(c.NetworkVersion)|uint64(c.NetworkFeatures)<<32, 48)
	withCookie := true
	switch rep.Type {
	case protocol.TypeChallenge, protocol.TypeAck:
		w = w.put(buf, uint64(rep.SecretID&1), 1)
		w = w.put(buf, math.Float64bits(rep.Timestamp), 64)
	case protocol.TypeDenied:
		w = w.put(buf, uint64(rep.Reason), 8)
	case protocol.TypeLayoutMismatch:
		// The server's Layout (§3.7): Channels(8) Kinds(64)
		// MaxMessage(32) MaxDatagram(16), 104 zero bits.
		l := &c.Layout
		w = w.put(buf, uint64(l.Channels)|l.Kinds<<8, 64)
		w = w.put(buf, l.Kinds>>56|uint64(l.MaxMessage)<<8|uint64(l.MaxDatagram)<<40, 56)
		w = w.put(buf, 0, 64)
		w = w.put(buf, 0, 40)
		withCookie = false
	default: // RestartHandshake, VersionUpgrade: no body
		withCookie = false
	}
	if withCookie {
		// Written out here rather than in a helper, which the compiler
		// would not inline, so w stays in registers.
		c := rep.Cookie
		w = w.put(buf, binary.LittleEndian.Uint64(c[0:]), 64)
		w = w.put(buf, binary.LittleEndian.Uint64(c[8:]), 64)
		w = w.put(buf, uint64(binary.LittleEndian.Uint32(c[16:])), 32)
	}
	w = w.put(buf, r0, 64)
	// For r = 16 the mask is 1<<64 − 1: all ones, as Go shifts.
	w = w.put(buf, r1&(1<<(8*uint(r-8))-1), 8*uint(r-8))
	// The terminator, then the pending bytes, stored as the packet's last
	// eight bytes together with the end of the word stored before them,
	// so nothing past the packet is written. Every reply is longer than
	// eight bytes, so a word was stored.
	w = w.put(buf, 1, 1)
	k := (w.n + 7) >> 3 // pending bytes, 0..8
	binary.LittleEndian.PutUint64(buf[n-8:], w.last>>(8*k)|w.acc<<(64-8*k))
	return n
}
