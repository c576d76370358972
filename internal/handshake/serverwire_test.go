package handshake

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/internal/wire/wiretest"
)

// The server's codec (serverwire.go) against the reference codec: the same
// verdict for every datagram, the same value for every field, the same bytes
// for every reply.

// requestDecode is what Handle does with a datagram up to the request: the
// prefix checks, then decodeRequest.
func requestDecode(m wire.Magic, b []byte, q *request) protocol.DropReason {
	pw, pb, r := wire.DecodePrefixWord(m, b)
	if r != protocol.DropNone {
		return r
	}
	if !wire.PrefixHandshake(pw) {
		return protocol.DropUnexpectedType
	}
	return decodeRequest(m, b, pw, pb, q)
}

// requestOf is the request a Handshake decodes to.
func requestOf(h *protocol.Handshake) request {
	return request{SessionID: h.SessionID, ClientID: h.ClientID, Restart: h.Restart,
		MinVersion: h.MinVersion, CurVersion: h.CurVersion, Type: h.Type, SentCount: h.SentCount,
		RandomLen: h.RandomLen, SecretID: h.SecretID, Reason: h.Reason,
		NetworkFeatures: h.NetworkFeatures, NetworkVersion: h.NetworkVersion,
		Timestamp: h.Timestamp, Cookie: h.Cookie, OrigCookie: h.OrigCookie, Layout: h.Layout}
}

// requestGarbage has every byte set, to catch a field decodeRequest leaves.
func requestGarbage() request {
	g := wiretest.Garbage()
	return requestOf(&g)
}

// requestEqual compares every field, the Timestamp by its bits.
func requestEqual(a, b *request) bool {
	x, y := *a, *b
	if math.Float64bits(x.Timestamp) != math.Float64bits(y.Timestamp) {
		return false
	}
	x.Timestamp, y.Timestamp = 0, 0
	return x == y
}

// checkRequestDecode fails t when decodeRequest and DecodeHandshake
// disagree on data, and returns the verdict.
func checkRequestDecode(t testing.TB, m wire.Magic, data []byte) protocol.DropReason {
	t.Helper()
	h := wiretest.Garbage()
	want := wire.DecodeHandshake(m, data, &h)
	q := requestGarbage()
	got := requestDecode(m, data, &q)
	if got != want {
		t.Fatalf("magic %q %x: decodeRequest %v, DecodeHandshake %v", m, data, got, want)
	}
	if want == protocol.DropNone {
		if wq := requestOf(&h); !requestEqual(&q, &wq) {
			t.Fatalf("magic %q %x: decodeRequest\n got %+v\nwant %+v", m, data, q, wq)
		}
	}
	return got
}

func TestDecodeRequestVectors(t *testing.T) {
	n := 0
	for _, p := range handshakeVectors(t) {
		m, h, wire := p.m, p.h, p.wire
		var q request
		if r := requestDecode(m, wire, &q); r != protocol.DropNone {
			t.Fatalf("%s: %v", p.name, r)
		}
		if want := requestOf(&h); !requestEqual(&q, &want) {
			t.Errorf("%s:\n got %+v\nwant %+v", p.name, q, want)
		}
		// Every truncation and every single-bit change of a vector.
		for k := range len(wire) {
			checkRequestDecode(t, m, wire[:k])
		}
		for bit := range 8 * len(wire) {
			b := bytes.Clone(wire)
			b[bit/8] ^= 1 << (bit % 8)
			checkRequestDecode(t, m, b)
		}
		checkRequestDecode(t, m, append(bytes.Clone(wire), 1))
		n++
	}
	if n < int(protocol.NumPacketTypes) {
		t.Fatalf("only %d handshake vectors", n)
	}
}

// TestDecodeRequestMatchesGeneric covers every type at every alignment of
// the magic header, with the packets around each valid one that a decoder
// must tell apart from it: one byte shorter or longer, and each base field
// changed.
func TestDecodeRequestMatchesGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	buf := make([]byte, 128)
	verdicts := map[protocol.DropReason]int{}
	for _, ms := range wiretest.Magics {
		m := testMagic(t, ms)
		for typ := range protocol.NumPacketTypes {
			for range 40 {
				h := wiretest.RandHandshake(rng, typ)
				n := wire.EncodeHandshake(buf, m, &h)
				pkt := bytes.Clone(buf[:n])
				verdicts[checkRequestDecode(t, m, pkt)]++
				verdicts[checkRequestDecode(t, m, pkt[:n-1])]++
				verdicts[checkRequestDecode(t, m, append(bytes.Clone(pkt), byte(rng.Uint32())|1))]++
				// Type, RestartBit and HandshakeBit changed, and any
				// bit of the body (an Initial's must stay zero).
				base := m.Len() + protocol.IDBits
				for _, bit := range []int{base, base + 1, base + 18 + rng.IntN(8), base + 82 + rng.IntN(8*n-base-82-8)} {
					b := bytes.Clone(pkt)
					b[bit/8] ^= 1 << (bit % 8)
					verdicts[checkRequestDecode(t, m, b)]++
				}
			}
		}
	}
	for _, r := range []protocol.DropReason{protocol.DropNone, protocol.DropMalformed, protocol.DropUnexpectedType, protocol.DropUnknownType, protocol.DropBadSize, protocol.DropBadBody} {
		if verdicts[r] == 0 {
			t.Errorf("no case ended in %v: %v", r, verdicts)
		}
	}
}

func FuzzDecodeRequest(f *testing.F) {
	// testdata/fuzz/FuzzDecodeRequest holds FuzzDecodeHandshake's seeds
	// (the same arguments); these add every type at every alignment.
	rng := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 128)
	for _, ms := range wiretest.Magics {
		m, _ := wire.ParseMagic(ms)
		for typ := range protocol.NumPacketTypes {
			h := wiretest.RandHandshake(rng, typ)
			f.Add(uint8(m.Len()), m.Bits(), bytes.Clone(buf[:wire.EncodeHandshake(buf, m, &h)]))
		}
	}
	for _, v := range codecVectorSeeds() {
		f.Add(uint8(0), uint32(0), v)
	}
	f.Fuzz(func(t *testing.T, magicLen uint8, magicBits uint32, data []byte) {
		checkRequestDecode(t, fuzzMagic(magicLen, magicBits), data)
	})
}

// refEncodeReply is how the server wrote its replies before serverwire.go:
// a Handshake through EncodeHandshake, RandomData from rnd.Intn and
// rnd.Fill, the no-amplification bound found by trying each length.
func refEncodeReply(c *ServerConfig, out []byte, rep *reply, to *ReplyTo, rnd *wire.Rand) int {
	h := refReplyHandshake(c, rep, to)
	hi := min(int(to.randomLen), protocol.MaxRandomBytes)
	for ; hi >= protocol.MinRandomBytes; hi-- {
		if wire.HandshakeLen(c.Magic, h.Type, hi) <= to.reqLen {
			break
		}
	}
	if hi < protocol.MinRandomBytes {
		return 0
	}
	n := protocol.MinRandomBytes + rnd.Intn(hi-protocol.MinRandomBytes+1)
	h.RandomLen = uint8(n)
	rnd.Fill(h.Random[:n])
	return wire.EncodeHandshake(out, c.Magic, &h)
}

// refReplyHandshake is rep as a Handshake, without RandomData.
func refReplyHandshake(c *ServerConfig, rep *reply, to *ReplyTo) protocol.Handshake {
	h := protocol.Handshake{SessionID: c.SessionID, ClientID: to.ClientID, Restart: rep.Restart,
		MinVersion: protocol.MinHandshakeVersion, CurVersion: to.curVersion, Type: rep.Type, SentCount: to.sentCount,
		NetworkVersion: c.NetworkVersion, NetworkFeatures: c.NetworkFeatures}
	switch rep.Type {
	case protocol.TypeChallenge, protocol.TypeAck:
		h.SecretID, h.Timestamp, h.Cookie = rep.SecretID, rep.Timestamp, *rep.Cookie
	case protocol.TypeDenied:
		h.Reason, h.Cookie = rep.Reason, *rep.Cookie
	case protocol.TypeLayoutMismatch:
		h.Layout = c.Layout
	}
	return h
}

// serverReplyTypes are the types a server sends, with the RestartBit each
// requires (nil: either).
var serverReplyTypes = []struct {
	t       protocol.PacketType
	restart *bool
}{{protocol.TypeChallenge, nil}, {protocol.TypeAck, nil}, {protocol.TypeDenied, nil},
	{protocol.TypeRestartHandshake, new(true)}, {protocol.TypeVersionUpgrade, new(false)},
	{protocol.TypeLayoutMismatch, nil}}

// checkEncodeReply fails t when encodeReply and refEncodeReply differ: in
// the length, the bytes, the bytes after the packet (which it must not
// touch), or the generator's state afterwards.
func checkEncodeReply(t testing.TB, c *ServerConfig, rep *reply, to *ReplyTo, outLen int, seed uint64) int {
	t.Helper()
	want := bytes.Repeat([]byte{0xA5}, outLen+8)
	got := bytes.Repeat([]byte{0xA5}, outLen+8)
	wr, gr := wire.NewRand(seed|1), wire.NewRand(seed|1) // seed 0 would draw from crypto/rand
	wn := refEncodeReply(c, want[:outLen], rep, to, &wr)
	gn := c.encodeReply(got[:outLen], rep, to, &gr)
	if gn != wn || !bytes.Equal(got, want) || gr != wr {
		t.Fatalf("magic %q %+v %+v %+v out %d seed %d:\nencodeReply %d %x\n  reference %d %x",
			c.Magic, *c, *rep, *to, outLen, seed, gn, got, wn, want)
	}
	return gn
}

func TestEncodeReplyMatchesGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	written := 0
	for _, ms := range wiretest.Magics {
		m := testMagic(t, ms)
		for _, rt := range serverReplyTypes {
			for range 300 {
				c := ServerConfig{Magic: m, SessionID: uint8(rng.IntN(4)),
					NetworkVersion: rng.Uint32(), NetworkFeatures: uint16(rng.Uint32())}
				if rng.IntN(4) != 0 {
					c.Layout = wiretest.RandLayout(rng)
				}
				ck := cookie.Cookie{}
				for i := range ck {
					ck[i] = byte(rng.Uint32())
				}
				rep := reply{Type: rt.t, Restart: rng.IntN(2) == 1, SecretID: uint8(rng.IntN(2)),
					Reason: uint8(rng.Uint32()), Timestamp: math.Float64frombits(rng.Uint64()), Cookie: &ck}
				if rt.restart != nil {
					rep.Restart = *rt.restart
				}
				// Requests from too small to the largest: every
				// no-amplification bound, including none.
				to := ReplyTo{ClientID: uint8(rng.IntN(8)), sentCount: uint8(rng.Uint32()),
					curVersion: uint8(rng.Uint32()), randomLen: uint8(rng.IntN(protocol.MaxRandomBytes + 3)),
					reqLen: wire.HandshakeLen(m, rt.t, 0) + 6 + rng.IntN(14)}
				if checkEncodeReply(t, &c, &rep, &to, MaxReplyLen, rng.Uint64()) > 0 {
					written++
				}
			}
		}
	}
	if written == 0 {
		t.Fatal("no reply written")
	}
	// Out of range IDs and short buffers are refused as before.
	ck := cookie.Cookie{1}
	rep := reply{Type: protocol.TypeChallenge, Cookie: &ck}
	to := ReplyTo{ClientID: 1, randomLen: 16, reqLen: 100}
	checkEncodeReply(t, &ServerConfig{SessionID: 4}, &rep, &to, MaxReplyLen, 1)
	checkEncodeReply(t, &ServerConfig{}, &rep, &ReplyTo{ClientID: 8, randomLen: 16, reqLen: 100}, MaxReplyLen, 1)
	for n := range MaxReplyLen {
		checkEncodeReply(t, &ServerConfig{}, &rep, &to, n, uint64(n))
	}
}

// TestPutReplyVectors writes each vector the server sends, byte for byte.
func TestPutReplyVectors(t *testing.T) {
	n := 0
	for _, p := range handshakeVectors(t) {
		h := p.h
		switch h.Type {
		case protocol.TypeChallenge, protocol.TypeAck, protocol.TypeDenied, protocol.TypeRestartHandshake, protocol.TypeVersionUpgrade:
		default:
			continue
		}
		if h.MinVersion != protocol.MinHandshakeVersion {
			t.Fatalf("%s: MinVersion %d; a server writes %d", p.name, h.MinVersion, protocol.MinHandshakeVersion)
		}
		c := ServerConfig{Magic: p.m, SessionID: h.SessionID,
			NetworkVersion: h.NetworkVersion, NetworkFeatures: h.NetworkFeatures}
		to := ReplyTo{ClientID: h.ClientID, sentCount: h.SentCount, curVersion: h.CurVersion}
		rep := reply{Type: h.Type, Restart: h.Restart, SecretID: h.SecretID, Reason: h.Reason,
			Timestamp: h.Timestamp, Cookie: &h.Cookie}
		var rw [16]byte
		copy(rw[:], h.Random[:h.RandomLen])
		var r0, r1 uint64
		for i := range 8 {
			r0 |= uint64(rw[i]) << (8 * i)
			r1 |= uint64(rw[8+i]) << (8 * i)
		}
		// Bytes of r1 past the RandomData must not matter.
		r1 |= ^uint64(0) << (8 * uint(h.RandomLen-8))
		out := bytes.Repeat([]byte{0xA5}, MaxReplyLen+8)
		k := c.putReply(out[:MaxReplyLen], &rep, &to, int(h.RandomLen), r0, r1)
		if want := p.wire; !bytes.Equal(out[:k], want) {
			t.Errorf("%s:\n got %x\nwant %x", p.name, out[:k], want)
		}
		if !bytes.Equal(out[k:], bytes.Repeat([]byte{0xA5}, len(out)-k)) {
			t.Errorf("%s: wrote past the packet", p.name)
		}
		n++
	}
	if n != 6 {
		t.Fatalf("%d server reply vectors, want one of each of the 5 types and the sealed Ack", n)
	}
}

func FuzzServerReply(f *testing.F) {
	f.Add(uint8(0), uint32(0), uint8(0), uint8(0), uint8(1), uint8(4), uint8(2), uint32(0x01020304), uint16(0),
		uint8(16), 60, false, uint8(0), uint64(0x41DABF61B0100000), uint8(1), []byte{0x30, 0xe4}, uint8(60), uint64(1))
	f.Add(uint8(32), uint32(0xFFFFFFFF), uint8(3), uint8(3), uint8(7), uint8(255), uint8(255), uint32(0xFFFFFFFF), uint16(0xFFFF),
		uint8(8), 80, true, uint8(1), uint64(0xBFF0000000000000), uint8(2), []byte{}, uint8(255), uint64(2))
	f.Fuzz(func(t *testing.T, magicLen uint8, magicBits uint32, typ, sid, cid, cur, sent uint8, nv uint32, nf uint16,
		randomLen uint8, reqLen int, restart bool, secretID uint8, ts uint64, reason uint8, ckb []byte, outLen uint8, seed uint64) {
		rt := serverReplyTypes[int(typ)%len(serverReplyTypes)]
		c := ServerConfig{Magic: fuzzMagic(magicLen, magicBits), SessionID: sid, NetworkVersion: nv, NetworkFeatures: nf}
		if seed&1 != 0 {
			c.Layout = wiretest.RandLayout(rand.New(rand.NewPCG(seed, 0)))
		}
		var ck cookie.Cookie
		copy(ck[:], ckb)
		rep := reply{Type: rt.t, Restart: restart, SecretID: secretID & 1, Reason: reason,
			Timestamp: math.Float64frombits(ts), Cookie: &ck}
		if rt.restart != nil {
			rep.Restart = *rt.restart
		}
		to := ReplyTo{ClientID: cid, sentCount: sent, curVersion: cur, randomLen: randomLen, reqLen: reqLen}
		checkEncodeReply(t, &c, &rep, &to, min(int(outLen), 2*MaxReplyLen), seed)
	})
}

func BenchmarkDecodeRequest(b *testing.B) {
	wiretest.BenchEachMagic(b, wire.ParseMagic, func(b *testing.B, m wire.Magic) {
		pkt := codecBenchHandshake(b, m, protocol.TypeResponse)
		var q request
		b.SetBytes(int64(len(pkt)))
		b.ReportAllocs()
		for b.Loop() {
			if requestDecode(m, pkt, &q) != protocol.DropNone {
				b.Fatal("decode failed")
			}
		}
	})
}

// BenchmarkWriteChallenge times a whole Challenge reply as the server makes
// it: the RandomData length and bytes drawn, and the packet written; the
// reference sub-benchmarks do the same through EncodeHandshake.
func BenchmarkWriteChallenge(b *testing.B) {
	wiretest.BenchEachMagic(b, wire.ParseMagic, func(b *testing.B, m wire.Magic) {
		for _, enc := range []struct {
			name string
			f    func(c *ServerConfig, out []byte, rep *reply, to *ReplyTo, rnd *wire.Rand) int
		}{{"fast", (*ServerConfig).encodeReply}, {"reference", refEncodeReply}} {
			b.Run(enc.name, func(b *testing.B) {
				h := wiretest.RandHandshake(rand.New(rand.NewPCG(2, 2)), protocol.TypeChallenge)
				c := ServerConfig{Magic: m, SessionID: h.SessionID, NetworkVersion: h.NetworkVersion}
				to := ReplyTo{ClientID: h.ClientID, sentCount: h.SentCount, curVersion: 4, randomLen: 16, reqLen: 100}
				rep := reply{Type: protocol.TypeChallenge, SecretID: h.SecretID, Timestamp: h.Timestamp, Cookie: &h.Cookie}
				rnd := wire.NewRand(1)
				out := make([]byte, 128)
				b.ReportAllocs()
				for b.Loop() {
					if enc.f(&c, out, &rep, &to, &rnd) == 0 {
						b.Fatal("encode failed")
					}
				}
			})
		}
	})
}

// handshakeVector is one handshake packet of the repository's vectors.
type handshakeVector struct {
	name string
	m    wire.Magic
	h    protocol.Handshake
	wire []byte
}

// handshakeVectors are the handshake packets of the repository's vectors,
// in file order.
func handshakeVectors(t *testing.T) []handshakeVector {
	t.Helper()
	var vs []handshakeVector
	for _, p := range wiretest.LoadVectors(t).Packets {
		f := wiretest.NewFields(t, p.Name, p.Fields)
		if !f.Has("type") {
			continue
		}
		vs = append(vs, handshakeVector{p.Name, testMagic(t, f.Str("magic")), wiretest.VectorHandshake(f), wiretest.Hex(t, p.Hex)})
	}
	return vs
}

// testMagic parses a magic header in tests.
func testMagic(tb testing.TB, s string) wire.Magic {
	tb.Helper()
	m, err := wire.ParseMagic(s)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// fuzzMagic maps fuzzer input onto a valid magic header: its length
// modulo 33, its bits from the low bits of bits.
func fuzzMagic(n uint8, bits uint32) wire.Magic {
	var s [protocol.MaxMagicBits]byte
	n %= protocol.MaxMagicBits + 1
	for i := range n {
		s[i] = '0' + byte(bits>>i&1)
	}
	m, _ := wire.ParseMagic(string(s[:n]))
	return m
}

// codecBenchHandshake is the codec benchmarks' handshake of type t.
func codecBenchHandshake(b *testing.B, m wire.Magic, t protocol.PacketType) []byte {
	return wiretest.BenchHandshake(b, t, func(dst []byte, h *protocol.Handshake) int { return wire.EncodeHandshake(dst, m, h) })
}
