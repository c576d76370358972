package wire

import (
	"encoding/binary"
	"math"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seal"
	"github.com/udpgate/udpgate/token"
)

// Sealed mode (docs/protocol.md §11). After the handshake, a client proves
// its netcode.io connect token in a proof packet, and from then on every
// connection packet both ways is sealed with ChaCha20-Poly1305 under the
// token's keys. The layouts keep §7's prefix and Tag in clear, so a server
// finds the connection exactly as for an unsealed packet, and put
// everything else under the seal:
//
//	sealed packet  prefix ‖ Tag ‖ Counter ‖ seal(Seq Ack AckBits Kind payload) ‖ MAC ‖ 01
//	proof packet   prefix ‖ Tag ‖ SecretId ‖ Timestamp ‖ Cookie ‖ request body ‖ Counter ‖ seal(Seq Ack AckBits Kind=KeepAlive) ‖ MAC ‖ 01
//
// Everything before the ciphertext is the associated data. A proof carries
// the Response's cookie, so the server keeps nothing between the Response
// and the proof: it checks the cookie again against the proof's source.

const (
	// sealedBodyBytes is the plaintext header under the seal: Seq(2),
	// Ack(2), AckBits(8), Kind(1).
	sealedBodyBytes = protocol.ConnHeaderBytes - 4
	// SealedOverhead is what sealing adds to a §7 packet: the counter and
	// the MAC.
	SealedOverhead = seal.Overhead
)

// sealedHdr is where a sealed packet's ciphertext starts: prefix, Tag,
// Counter.
func sealedHdr(m Magic) int { return ConnHeaderOffset(m) + 4 + seal.CounterBytes }

// proofCookieBytes is the cookie part of a proof: SecretId (1), Timestamp
// (8), Cookie (20).
const proofCookieBytes = 1 + 8 + cookie.Size

// proofRequestOffset is where a proof's request body starts, after the
// prefix, the Tag and the cookie part; its version info is there.
func proofRequestOffset(m Magic) int { return ConnHeaderOffset(m) + 4 + proofCookieBytes }

// ProofVersionOffset is where a proof's request body, and so netcode's
// version info, starts: ConnHeaderOffset + 33 (kernel steering matches it).
func ProofVersionOffset(m Magic) int { return proofRequestOffset(m) }

// proofHdr is where a proof packet's ciphertext starts: prefix, Tag,
// cookie part, request body, Counter.
func proofHdr(m Magic) int { return proofRequestOffset(m) + token.RequestBytes + seal.CounterBytes }

// ProofCookie is the Response's SecretId, Timestamp and Cookie, which a
// proof carries (docs/protocol.md §11.3).
type ProofCookie struct {
	SecretID  uint8
	Timestamp float64
	Cookie    cookie.Cookie
}

// SealedConnLen is the size on the wire of a sealed connection packet with
// payloadLen payload bytes: ConnHeaderOffset + 42 + payloadLen. A sealed
// KeepAlive carries no padding: it is already longer than MinConnLen.
func SealedConnLen(m Magic, payloadLen int) int {
	return sealedHdr(m) + sealedBodyBytes + payloadLen + seal.TagBytes + 1
}

// ProofLen is the size of every proof packet: ConnHeaderOffset + 1148.
func ProofLen(m Magic) int { return proofHdr(m) + sealedBodyBytes + seal.TagBytes + 1 }

// SealConn writes h and payload into dst as a sealed connection packet,
// sealed by s, and returns its length. It returns 0 when dst is too short,
// when h or payload break §7's rules (as EncodeConn), or when s refuses
// (its counter is exhausted: the connection must end).
//
// payload may be dst[SealedPayloadOffset(m):][:len(payload)] itself, so a
// sender can build the message in place.
func SealConn(dst []byte, m Magic, h *protocol.ConnHeader, payload []byte, s *seal.Sealer) int {
	hdr := sealedHdr(m)
	n := SealedConnLen(m, len(payload))
	if len(dst) < n || !sealedHeaderOK(h, len(payload)) {
		return 0
	}
	putSealedPrefix(dst, m, h)
	putSealedBody(dst[hdr:], h)
	copy(dst[hdr+sealedBodyBytes:], payload)
	return finishSealed(dst, hdr, n, s)
}

// SealedPayloadOffset is where a sealed packet's payload starts in the
// datagram (before sealing).
func SealedPayloadOffset(m Magic) int { return sealedHdr(m) + sealedBodyBytes }

// SealProof writes a proof packet into dst: pc (the Response's cookie,
// whose Tag h.Tag must be), request (the token.RequestBytes request body of
// the client's connect token) and h, whose Kind must be KindKeepAlive,
// sealed by s (salted with pc.Cookie[0:16]). It returns ProofLen(m), or 0
// as SealConn.
func SealProof(dst []byte, m Magic, h *protocol.ConnHeader, pc *ProofCookie, request []byte, s *seal.Sealer) int {
	hdr := proofHdr(m)
	n := ProofLen(m)
	if len(dst) < n || len(request) != token.RequestBytes || h.Kind != protocol.KindKeepAlive || !sealedHeaderOK(h, 0) ||
		pc.SecretID > 1 || h.Tag != cookie.SessionTag(&pc.Cookie) {
		return 0
	}
	putSealedPrefix(dst, m, h)
	o := ConnHeaderOffset(m) + 4
	dst[o] = pc.SecretID
	binary.LittleEndian.PutUint64(dst[o+1:], math.Float64bits(pc.Timestamp))
	copy(dst[o+9:o+proofCookieBytes], pc.Cookie[:])
	copy(dst[o+proofCookieBytes:], request)
	putSealedBody(dst[hdr:], h)
	return finishSealed(dst, hdr, n, s)
}

// ProofCookieOf reads the cookie part of proof packet b (DecodeSealed said
// proof) into pc. It reports false for a SecretId other than 0 or 1, or a
// Cookie whose Tag (LE32(Cookie[4:8])) is not the packet's Tag.
func ProofCookieOf(m Magic, b []byte, pc *ProofCookie) bool {
	o := ConnHeaderOffset(m) + 4
	pc.SecretID = b[o]
	pc.Timestamp = math.Float64frombits(binary.LittleEndian.Uint64(b[o+1:]))
	copy(pc.Cookie[:], b[o+9:o+proofCookieBytes])
	return pc.SecretID <= 1 && binary.LittleEndian.Uint32(b[o-4:]) == cookie.SessionTag(&pc.Cookie)
}

// SealRefusal writes into dst a sealed Disconnect carrying reason, for a
// proof the server refuses after its token opened (docs/protocol.md
// §11.3), sealed by s (Init'ed for the refusal: the token's
// server-to-client key, salted with the proof's cookie) at the reserved
// counter RefusalCounter(reason). Seq and Ack are derived from the cookie
// alone, so a refusal repeated for the same cookie and reason is the very
// same datagram (one nonce, one plaintext). It returns the length, or 0.
func SealRefusal(dst []byte, m Magic, sessionID, clientID uint8, ck *cookie.Cookie, reason uint8, s *seal.Sealer) int {
	serverSeq, clientSeq := cookie.Sequences(ck)
	h := protocol.ConnHeader{SessionID: sessionID, ClientID: clientID, Tag: cookie.SessionTag(ck),
		Seq: serverSeq, Ack: (clientSeq + protocol.SeqModulus - 1) % protocol.SeqModulus, Kind: protocol.KindDisconnect}
	s.SetNext(RefusalCounter(reason))
	p := [1]byte{reason}
	return SealConn(dst, m, &h, p[:], s)
}

// RefusalCounter is the counter of a sealed refusal with reason,
// 2^64 − 257 + reason (docs/protocol.md §11.3 and §13; reason 7 is
// 0xffffffffffffff06): from the top of the counter space, which no
// connection reaches (a sender stops at 2^64 − 1), one per reason byte.
func RefusalCounter(reason uint8) uint64 { return math.MaxUint64 - 256 + uint64(reason) }

func sealedHeaderOK(h *protocol.ConnHeader, payloadLen int) bool {
	return h.SessionID <= 3 && h.ClientID <= 7 && h.Seq < protocol.SeqModulus && h.Ack < protocol.SeqModulus &&
		h.Kind <= kindLast && connPayloadOK(h.Kind, payloadLen)
}

// putSealedPrefix writes the prefix, its zero padding and the Tag.
func putSealedPrefix(dst []byte, m Magic, h *protocol.ConnHeader) {
	binary.LittleEndian.PutUint64(dst, uint64(m.bits)|uint64(h.SessionID)<<m.n|uint64(h.ClientID)<<(m.n+2))
	binary.LittleEndian.PutUint32(dst[ConnHeaderOffset(m):], h.Tag)
}

func putSealedBody(b []byte, h *protocol.ConnHeader) {
	b = b[:sealedBodyBytes] // one bounds check for the stores below
	binary.LittleEndian.PutUint32(b, uint32(h.Seq)|uint32(h.Ack)<<16)
	binary.LittleEndian.PutUint64(b[4:], h.AckBits)
	b[12] = byte(h.Kind)
}

// finishSealed seals dst[:n-1-TagBytes] from hdr and writes the terminator.
func finishSealed(dst []byte, hdr, n int, s *seal.Sealer) int {
	if _, err := s.Seal(dst[:n-1-seal.TagBytes:n], hdr); err != nil {
		return 0
	}
	dst[n-1] = 0x01
	return n
}

// DecodeSealed checks the clear part of a sealed or proof packet b under
// magic header m and fills h's SessionID, ClientID and Tag (the rest of h
// is under the seal). proof reports a proof packet: exactly ProofLen bytes
// with netcode's version info where the request body starts (a sealed
// packet would need the counter "NETCODE " as a u64 to look like one, which
// no connection reaches).
//
// Drops: as DecodePrefix; DropUnexpectedType for a handshake packet;
// DropBadSize when the last byte is not 0x01 or b is shorter than an empty
// sealed packet.
func DecodeSealed(m Magic, b []byte, h *protocol.ConnHeader) (proof bool, r protocol.DropReason) {
	pw, _, r := DecodePrefixWord(m, b)
	if r != protocol.DropNone {
		return false, r
	}
	return DecodeSealedWord(m, b, pw, h)
}

func DecodeSealedWord(m Magic, b []byte, pw uint64, h *protocol.ConnHeader) (proof bool, r protocol.DropReason) {
	if pw>>5&1 != 0 {
		return false, protocol.DropUnexpectedType
	}
	if b[len(b)-1] != 0x01 || len(b) < SealedConnLen(m, 0) {
		return false, protocol.DropBadSize
	}
	o := ConnHeaderOffset(m)
	*h = protocol.ConnHeader{SessionID: uint8(pw & 3), ClientID: uint8(pw >> 2 & 7), Tag: binary.LittleEndian.Uint32(b[o:])}
	v := proofRequestOffset(m)
	proof = len(b) == ProofLen(m) && string(b[v:v+token.VersionInfoBytes]) == token.VersionInfo
	return proof, protocol.DropNone
}

// ProofRequest returns the request body of proof packet b (DecodeSealed
// said proof), borrowed from b.
func ProofRequest(m Magic, b []byte) []byte {
	o := proofRequestOffset(m)
	return b[o : o+token.RequestBytes]
}

// OpenConn opens sealed packet b (DecodeSealed accepted it, not a proof)
// in place with o and completes h from the plaintext. It returns the
// payload, a subslice of b, and the packet's counter.
//
// Drops: DropSealedReplay (the counter was seen, or is too old: checked
// before decrypting), DropSealedForged (it does not authenticate under o's
// key: forged, modified, or another connection's), DropBadBody (the
// plaintext breaks §7's rules).
func OpenConn(m Magic, b []byte, h *protocol.ConnHeader, o *seal.Opener) (payload []byte, counter uint64, r protocol.DropReason) {
	return openSealed(b, sealedHdr(m), h, o)
}

// OpenProof opens the inner seal of proof packet b in place with o (made
// from the token's client-to-server key) and completes h from it. The
// plaintext must be a KeepAlive without padding; it drops as OpenConn,
// with DropProofForged for a seal that does not authenticate.
func OpenProof(m Magic, b []byte, h *protocol.ConnHeader, o *seal.Opener) (counter uint64, r protocol.DropReason) {
	payload, counter, r := openSealed(b, proofHdr(m), h, o)
	switch {
	case r == protocol.DropSealedForged:
		return counter, protocol.DropProofForged
	case r != protocol.DropNone:
		return counter, r
	case h.Kind != protocol.KindKeepAlive || len(payload) != 0:
		return counter, protocol.DropBadBody
	}
	return counter, protocol.DropNone
}

func openSealed(b []byte, hdr int, h *protocol.ConnHeader, o *seal.Opener) (payload []byte, counter uint64, r protocol.DropReason) {
	end := len(b) - 1
	plain, counter, err := o.Open(b[:end], hdr)
	switch err {
	case nil:
	case seal.ErrReplay:
		return nil, counter, protocol.DropSealedReplay
	default:
		return nil, counter, protocol.DropSealedForged
	}
	if len(plain) < sealedBodyBytes {
		return nil, counter, protocol.DropBadBody
	}
	seq := binary.LittleEndian.Uint16(plain)
	ack := binary.LittleEndian.Uint16(plain[2:])
	kind := protocol.Kind(plain[12])
	payload = plain[sealedBodyBytes:len(plain):len(plain)]
	if seq >= protocol.SeqModulus || ack >= protocol.SeqModulus || kind > kindLast || !connPayloadOK(kind, len(payload)) {
		return nil, counter, protocol.DropBadBody
	}
	h.Seq, h.Ack, h.AckBits, h.Kind = seq, ack, binary.LittleEndian.Uint64(plain[4:]), kind
	return payload, counter, protocol.DropNone
}
