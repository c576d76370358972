package flood

import (
	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

// The send loop must cost next to nothing per datagram, so every datagram is
// drawn from templates built once before sending: a few hundred variants per
// kind, laid out in one arena. Sending a datagram is then picking a kind and
// a variant and pointing a batch slot at it. The server keeps no cache keyed
// by content, so repeating variants costs it the same work as fresh ones.

// variantsPerKind is how many distinct datagrams each kind has: enough that
// sizes, IDs and random fields vary, small enough to stay in cache.
const variantsPerKind = 256

// challenge is what the probe learned: a real Challenge, answered by the
// replay kind from other addresses. ok is false when there was none.
type challenge struct {
	ok        bool
	sessionID uint8
	clientID  uint8
	sentCount uint8
	secretID  uint8
	timestamp float64
	cookie    cookie.Cookie
}

// templates are the datagrams of each kind, slices of one arena.
type templates struct {
	kinds [NumKinds][][]byte
}

// builder makes templates. It allocates freely: it runs once per Run.
type builder struct {
	st    *settings
	m     wire.Magic
	rnd   wire.Rand
	ch    challenge
	now   float64 // Unix seconds, for forged timestamps
	arena []byte
	// oversized counts the oversized proofs made, which alternate between
	// two sizes.
	oversized int
}

func buildTemplates(st *settings, ch challenge, now float64, rnd wire.Rand) *templates {
	b := &builder{st: st, m: st.magic, rnd: rnd, ch: ch, now: now}
	return b.templates()
}

// templates builds the shared datagrams of every kind in the mix.
func (b *builder) templates() *templates {
	st := b.st
	t := new(templates)
	for k := range NumKinds {
		if st.Mix[k] == 0 {
			continue
		}
		vs := make([][]byte, variantsPerKind)
		for i := range vs {
			vs[i] = b.build(Kind(k), i)
		}
		t.kinds[k] = vs
	}
	return t
}

// put copies p into the arena and returns the arena's copy. The arena grows
// in chunks so templates share few cache lines with anything else.
func (b *builder) put(p []byte) []byte {
	if cap(b.arena)-len(b.arena) < len(p)+1 {
		b.arena = make([]byte, 0, max(64<<10, len(p)+1))
	}
	off := len(b.arena)
	b.arena = append(b.arena, p...)
	// Capacity ends at the datagram, so nothing can append past it; an
	// empty datagram still points into the arena (sendmmsg needs a base).
	return b.arena[off : off+len(p) : off+len(p)]
}

func (b *builder) build(k Kind, i int) []byte {
	var buf [protocol.MaxDatagramLimit + 512]byte
	var n int
	switch k {
	case KindInitial:
		n = b.initial(buf[:], b.st.NetworkVersion)
	case KindVersion:
		// Any other version; CurVersion 4 so the server may answer
		// VersionUpgrade (an older client would just be dropped).
		n = b.initial(buf[:], b.st.NetworkVersion+1+uint32(b.rnd.Intn(1000)))
	case KindForged:
		n = b.forged(buf[:], i)
	case KindReplay:
		n = b.replay(buf[:])
	case KindConn:
		n = b.conn(buf[:], b.sessionID())
	case KindTruncated:
		n = b.truncated(buf[:], i)
	case KindOversize:
		n = b.oversize(buf[:])
	case KindGarbage:
		n = b.garbage(buf[:], i)
	case KindProof:
		n = b.proof(buf[:], i%numProof, nil)
	case KindSealed:
		n = b.sealed(buf[:], nil)
	}
	return b.put(buf[:n])
}

// sessionID is the server's SessionID, as the probe saw it.
func (b *builder) sessionID() uint8 {
	if b.ch.ok {
		return b.ch.sessionID
	}
	return b.st.SessionID
}

// handshake returns a handshake of type t with the client's versions, random
// IDs and 8..16 random bytes.
func (b *builder) handshake(t protocol.PacketType) protocol.Handshake {
	h := protocol.Handshake{
		SessionID:       uint8(b.rnd.Intn(4)),
		ClientID:        uint8(b.rnd.Intn(8)),
		MinVersion:      protocol.MinHandshakeVersion,
		CurVersion:      protocol.CurHandshakeVersion,
		Type:            t,
		SentCount:       uint8(b.rnd.Intn(256)),
		NetworkVersion:  b.st.NetworkVersion,
		NetworkFeatures: b.st.NetworkFeatures,
		RandomLen:       uint8(protocol.MinRandomBytes + b.rnd.Intn(protocol.MaxRandomBytes-protocol.MinRandomBytes+1)),
	}
	b.rnd.Fill(h.Random[:h.RandomLen])
	return h
}

func (b *builder) encode(dst []byte, h *protocol.Handshake) int {
	n := wire.EncodeHandshake(dst, b.m, h)
	if n == 0 {
		panic("flood: a template handshake does not encode; the builder is wrong")
	}
	return n
}

func (b *builder) initial(dst []byte, version uint32) int {
	h := b.handshake(protocol.TypeInitial)
	h.NetworkVersion = version
	return b.encode(dst, &h)
}

// forged is a Response with a random cookie. Most carry the probe's SecretId
// and Timestamp so they pass the cheap checks and cost the server an HMAC
// (bad_cookie); one in eight names the other secret (wrong_secret) and one
// in eight is older than a cookie lives (expired_cookie).
func (b *builder) forged(dst []byte, i int) int {
	h := b.handshake(protocol.TypeResponse)
	h.SessionID = b.sessionID()
	h.SecretID, h.Timestamp = 0, b.now
	if b.ch.ok {
		h.SecretID, h.Timestamp = b.ch.secretID, b.ch.timestamp
	}
	switch i % 8 {
	case 6:
		h.SecretID ^= 1
	case 7:
		h.Timestamp -= 2 * cookie.MaxLifetime
	}
	b.rnd.Fill(h.Cookie[:])
	return b.encode(dst, &h)
}

// replay is the probe's valid Response, sent from addresses the cookie was
// not made for. Only RandomData varies, as a replaying attacker could vary it.
func (b *builder) replay(dst []byte) int {
	if !b.ch.ok {
		// No Challenge: the settings refuse this, but a forged
		// Response is the nearest thing.
		return b.forged(dst, 0)
	}
	h := b.handshake(protocol.TypeResponse)
	h.SessionID = b.ch.sessionID
	h.ClientID = b.ch.clientID
	h.SentCount = b.ch.sentCount
	h.SecretID = b.ch.secretID
	h.Timestamp = b.ch.timestamp
	h.Cookie = b.ch.cookie
	return b.encode(dst, &h)
}

// conn is a well-formed connection packet with a random tag, sequence
// numbers and kind, of at least the size a RestartHandshake needs.
func (b *builder) conn(dst []byte, session uint8) int {
	h := protocol.ConnHeader{
		SessionID: session,
		ClientID:  uint8(b.rnd.Intn(8)),
		Tag:       uint32(b.rnd.Uint64()),
		Seq:       uint16(b.rnd.Intn(protocol.SeqModulus)),
		Ack:       uint16(b.rnd.Intn(protocol.SeqModulus)),
		AckBits:   b.rnd.Uint64(),
		Kind:      protocol.Kind(b.rnd.Intn(3)),
	}
	var payload []byte
	switch h.Kind {
	case protocol.KindData:
		var p [64]byte
		payload = p[:1+b.rnd.Intn(len(p))]
		b.rnd.Fill(payload)
	case protocol.KindDisconnect:
		payload = []byte{byte(1 + b.rnd.Intn(4))}
	}
	n := wire.EncodeConn(dst, b.m, &h, payload)
	if n == 0 {
		panic("flood: a template connection packet does not encode; the builder is wrong")
	}
	return n
}

// truncated is a valid Initial, Response or connection packet cut to a
// random shorter length (0 included).
func (b *builder) truncated(dst []byte, i int) int {
	var full int
	switch i % 3 {
	case 0:
		full = b.initial(dst, b.st.NetworkVersion)
	case 1:
		full = b.forged(dst, i)
	default:
		full = b.conn(dst, b.sessionID())
	}
	return b.rnd.Intn(full)
}

// oversize is a datagram of MaxDatagram+1 up to MaxDatagram+256 bytes that
// opens like an Initial, so only its size is wrong.
func (b *builder) oversize(dst []byte) int {
	n := b.st.MaxDatagram + 1 + b.rnd.Intn(256)
	h := b.initial(dst, b.st.NetworkVersion)
	b.rnd.Fill(dst[h:n])
	dst[n-1] |= 1
	return n
}

// Garbage variants, each drawn equally often. Most are near-valid packets
// broken in one place, so they travel further into the server's checks
// than random bytes do.
const (
	gEmpty           = iota // a 0-byte datagram: legal UDP, malformed here
	gRandomSmall            // 1..64 random bytes
	gRandomLarge            // 1..MaxDatagram random bytes
	gZeroLast               // random bytes ending in 0x00: no terminator
	gBadMagic               // an Initial with the magic header flipped (random bytes without magic)
	gBadSize                // an Initial with 7 or 17..24 random bytes
	gUnknownType            // a handshake of type 8..255
	gServerType             // a Challenge, Ack, RestartHandshake, VersionUpgrade or Denied sent to the server
	gBadVersion             // an Initial with handshake versions the server does not speak
	gBadBody                // an Initial whose body is not zero
	gBadTerminator          // a connection packet whose last byte is not 0x01
	gBadConnKind            // a connection packet of kind 3..255
	gSessionMismatch        // a Response or connection packet for another SessionID
	numGarbage
)

func (b *builder) garbage(dst []byte, i int) int {
	switch i % numGarbage {
	case gEmpty:
		return 0
	case gRandomSmall:
		n := 1 + b.rnd.Intn(64)
		b.rnd.Fill(dst[:n])
		return n
	case gRandomLarge:
		n := 1 + b.rnd.Intn(b.st.MaxDatagram)
		b.rnd.Fill(dst[:n])
		return n
	case gZeroLast:
		n := 1 + b.rnd.Intn(128)
		b.rnd.Fill(dst[:n])
		dst[n-1] = 0
		return n
	case gBadMagic:
		n := b.initial(dst, b.st.NetworkVersion)
		if b.m.Len() == 0 {
			b.rnd.Fill(dst[:n])
			dst[n-1] |= 1
			return n
		}
		dst[0] ^= 1 // the header's first bit
		return n
	case gBadSize:
		r := 7
		if i%2 == 1 {
			r = 17 + b.rnd.Intn(8)
		}
		h := b.handshake(protocol.TypeInitial)
		return b.raw(dst, &h, uint8(protocol.TypeInitial), 225, false, r)
	case gUnknownType:
		h := b.handshake(protocol.TypeInitial)
		return b.raw(dst, &h, uint8(8+b.rnd.Intn(248)), 225, false, int(h.RandomLen))
	case gServerType:
		types := [...]protocol.PacketType{protocol.TypeChallenge, protocol.TypeAck,
			protocol.TypeRestartHandshake, protocol.TypeVersionUpgrade, protocol.TypeDenied}
		h := b.handshake(types[b.rnd.Intn(len(types))])
		h.Restart = h.Type == protocol.TypeRestartHandshake
		h.Timestamp = b.now
		b.rnd.Fill(h.Cookie[:])
		return b.encode(dst, &h)
	case gBadVersion:
		h := b.handshake(protocol.TypeInitial)
		h.MinVersion, h.CurVersion = 1, 2
		if i%2 == 1 {
			h.MinVersion, h.CurVersion = 5, 5
		}
		return b.encode(dst, &h)
	case gBadBody:
		h := b.handshake(protocol.TypeInitial)
		return b.raw(dst, &h, uint8(protocol.TypeInitial), 225, true, int(h.RandomLen))
	case gBadTerminator:
		n := b.conn(dst, b.sessionID())
		dst[n-1] = 0x02 | byte(b.rnd.Intn(127))<<1 // never 0x01, never 0x00
		return n
	case gBadConnKind:
		n := b.conn(dst, b.sessionID())
		dst[wire.ConnHeaderOffset(b.m)+protocol.ConnHeaderBytes-1] = byte(3 + b.rnd.Intn(253))
		return n
	case gSessionMismatch:
		other := (b.sessionID() + 1 + uint8(b.rnd.Intn(3))) & 3
		if i%2 == 0 {
			return b.conn(dst, other)
		}
		h := b.handshake(protocol.TypeResponse)
		h.SessionID = other
		h.Timestamp = b.now
		b.rnd.Fill(h.Cookie[:])
		return b.encode(dst, &h)
	}
	return 0
}

// raw writes a handshake the encoder refuses to: any type byte, a body of
// bodyBits (zero, or random when dirty) and randomLen random bytes, so that
// sizes, types and bodies can be wrong on purpose.
func (b *builder) raw(dst []byte, h *protocol.Handshake, typ uint8, bodyBits int, dirty bool, randomLen int) int {
	w := wire.NewBitWriter(dst)
	for _, c := range b.m.String() {
		w.WriteBool(c == '1')
	}
	w.WriteBits(uint64(h.SessionID)|uint64(h.ClientID)<<2|1<<5|
		uint64(h.MinVersion)<<7|uint64(h.CurVersion)<<15|uint64(typ)<<23|uint64(h.SentCount)<<31, 39)
	w.WriteBits(uint64(h.NetworkVersion)|uint64(h.NetworkFeatures)<<32, 48)
	for left := bodyBits; left > 0; left -= 64 {
		var v uint64
		if dirty {
			v = b.rnd.Uint64() | 1 // never all zero
		}
		w.WriteBits(v, min(left, 64))
	}
	var r [32]byte
	b.rnd.Fill(r[:randomLen])
	w.WriteBytes(r[:randomLen])
	w.WriteTerminator()
	if w.Overflow() {
		panic("flood: a raw template does not fit its buffer")
	}
	return w.Len()
}
