package wire

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire/wiretest"
)

// codecHandshakeEqual compares every field, the Timestamp by its bits.
func codecHandshakeEqual(a, b *protocol.Handshake) bool {
	x, y := *a, *b
	if math.Float64bits(x.Timestamp) != math.Float64bits(y.Timestamp) {
		return false
	}
	x.Timestamp, y.Timestamp = 0, 0
	return x == y
}

func TestHandshakeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	buf := make([]byte, 128)
	for _, ms := range wiretest.Magics {
		m := codecMagic(t, ms)
		for typ := range protocol.NumPacketTypes {
			for range 200 {
				h := wiretest.RandHandshake(rng, typ)
				n := EncodeHandshake(buf, m, &h)
				if want := HandshakeLen(m, typ, int(h.RandomLen)); n != want {
					t.Fatalf("magic %q %v: EncodeHandshake = %d bytes, HandshakeLen = %d", ms, typ, n, want)
				}
				pkt := buf[:n]
				if pkt[n-1] == 0 {
					t.Fatalf("magic %q %v: last byte zero", ms, typ)
				}
				bits, _ := payloadBits(pkt)
				if want := m.Len() + protocol.IDBits + protocol.BaseBits + typ.BodyBits() + 8*int(h.RandomLen); bits != want {
					t.Fatalf("magic %q %v: payload %d bits, want %d", ms, typ, bits, want)
				}
				got := wiretest.Garbage()
				if r := DecodeHandshake(m, pkt, &got); r != protocol.DropNone {
					t.Fatalf("magic %q %v: decode %x: %v", ms, typ, pkt, r)
				}
				if !codecHandshakeEqual(&got, &h) {
					t.Fatalf("magic %q %v: round trip\n got %+v\nwant %+v", ms, typ, got, h)
				}
				p, r := DecodePrefix(m, pkt)
				if r != protocol.DropNone || p != (Prefix{h.SessionID, h.ClientID, true}) {
					t.Fatalf("magic %q %v: DecodePrefix = %+v, %v", ms, typ, p, r)
				}
			}
		}
	}
}

// TestEncodeHandshakeIgnoresUncarried: fields a type does not carry do not
// reach the wire; an Initial's body is zeros whatever h holds.
func TestEncodeHandshakeIgnoresUncarried(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for typ := range protocol.NumPacketTypes {
		var secret, ts, ck, orig, reason bool
		switch typ {
		case protocol.TypeChallenge, protocol.TypeResponse, protocol.TypeAck:
			secret, ts, ck = true, true, true
		case protocol.TypeRestartResponse:
			secret, ts, ck, orig = true, true, true, true
		case protocol.TypeDenied:
			reason, ck = true, true
		}
		clean := wiretest.RandHandshake(rng, typ)
		dirty := clean
		if !secret {
			dirty.SecretID = 7 // not even range-checked when not carried
		}
		if !ts {
			dirty.Timestamp = 1234.5
		}
		if !ck {
			dirty.Cookie[0] ^= 0xFF
		}
		if !orig {
			dirty.OrigCookie[19] ^= 0xFF
		}
		if !reason {
			dirty.Reason = 99
		}
		for i := int(dirty.RandomLen); i < len(dirty.Random); i++ {
			dirty.Random[i] = 0xEE
		}
		var a, b [128]byte
		na, nb := EncodeHandshake(a[:], Magic{}, &clean), EncodeHandshake(b[:], Magic{}, &dirty)
		if na == 0 || na != nb || a != b {
			t.Errorf("%v: uncarried fields changed the packet:\n%x\n%x", typ, a[:na], b[:nb])
		}
	}
}

func TestEncodeHandshakeRejects(t *testing.T) {
	base := func(typ protocol.PacketType) protocol.Handshake {
		h := protocol.Handshake{Type: typ, MinVersion: 3, CurVersion: 4, RandomLen: 8}
		h.Restart = typ == protocol.TypeRestartHandshake || typ == protocol.TypeRestartResponse
		return h
	}
	for _, tc := range []struct {
		name string
		mod  func(*protocol.Handshake)
	}{
		{"random 7", func(h *protocol.Handshake) { h.RandomLen = 7 }},
		{"random 17", func(h *protocol.Handshake) { h.RandomLen = 17 }},
		{"random 0", func(h *protocol.Handshake) { h.RandomLen = 0 }},
		{"type 9", func(h *protocol.Handshake) { h.Type = 9 }},
		{"type 255", func(h *protocol.Handshake) { h.Type = 255 }},
		{"session 4", func(h *protocol.Handshake) { h.SessionID = 4 }},
		{"client 8", func(h *protocol.Handshake) { h.ClientID = 8 }},
		{"secret 2", func(h *protocol.Handshake) { h.SecretID = 2 }},
		{"restart_handshake without restart", func(h *protocol.Handshake) { *h = base(protocol.TypeRestartHandshake); h.Restart = false }},
		{"restart_response without restart", func(h *protocol.Handshake) { *h = base(protocol.TypeRestartResponse); h.Restart = false }},
		{"restart_response secret 2", func(h *protocol.Handshake) { *h = base(protocol.TypeRestartResponse); h.SecretID = 2 }},
		{"version_upgrade with restart", func(h *protocol.Handshake) { *h = base(protocol.TypeVersionUpgrade); h.Restart = true }},
		{"initial with an invalid layout", func(h *protocol.Handshake) { *h = base(protocol.TypeInitial); h.Layout.Channels = 1 }},
		{"layout_mismatch with 33 channels", func(h *protocol.Handshake) {
			*h = base(protocol.TypeLayoutMismatch)
			h.Layout = protocol.Layout{Channels: 33, MaxDatagram: 1200, Kinds: 1<<64 - 1, MaxMessage: 1}
		}},
	} {
		h := base(protocol.TypeChallenge)
		tc.mod(&h)
		dst := bytes.Repeat([]byte{0xA5}, 128)
		if n := EncodeHandshake(dst, Magic{}, &h); n != 0 {
			t.Errorf("%s: EncodeHandshake = %d, want 0", tc.name, n)
		}
		if !bytes.Equal(dst, bytes.Repeat([]byte{0xA5}, 128)) {
			t.Errorf("%s: a refused encode wrote into dst", tc.name)
		}
	}

	// Types whose body has no SecretID ignore it, and Initial may carry
	// the RestartBit (a restarting client, §6).
	for _, h := range []protocol.Handshake{
		{Type: protocol.TypeInitial, Restart: true, SecretID: 7, RandomLen: 8},
		{Type: protocol.TypeDenied, SecretID: 7, RandomLen: 16},
	} {
		if n := EncodeHandshake(make([]byte, 128), Magic{}, &h); n == 0 {
			t.Errorf("%v refused", h.Type)
		}
	}
}

func TestEncodeHandshakeBufferBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, ms := range wiretest.Magics {
		m := codecMagic(t, ms)
		for typ := range protocol.NumPacketTypes {
			h := wiretest.RandHandshake(rng, typ)
			n := HandshakeLen(m, typ, int(h.RandomLen))
			backing := bytes.Repeat([]byte{0xA5}, n+16)
			if got := EncodeHandshake(backing[:n-1], m, &h); got != 0 {
				t.Fatalf("%q %v: %d bytes into %d", ms, typ, got, n-1)
			}
			if !bytes.Equal(backing, bytes.Repeat([]byte{0xA5}, n+16)) {
				t.Fatalf("%q %v: a too-short dst was written", ms, typ)
			}
			// A larger dst: exactly n bytes are written, the rest untouched.
			if got := EncodeHandshake(backing, m, &h); got != n {
				t.Fatalf("%q %v: %d bytes, want %d", ms, typ, got, n)
			}
			if !bytes.Equal(backing[n:], bytes.Repeat([]byte{0xA5}, 16)) {
				t.Fatalf("%q %v: wrote past the packet: %x", ms, typ, backing[n:])
			}
		}
	}
}

func TestHandshakeLen(t *testing.T) {
	m4 := codecMagic(t, "1011")
	m32 := codecMagic(t, "10110011100011110000111110000011")
	for _, tc := range []struct {
		m    Magic
		t    protocol.PacketType
		r    int
		want int
	}{
		{Magic{}, protocol.TypeInitial, 8, 48},
		{Magic{}, protocol.TypeInitial, 16, 56},
		{Magic{}, protocol.TypeChallenge, 8, 48},
		{Magic{}, protocol.TypeRestartHandshake, 8, 19},
		{Magic{}, protocol.TypeVersionUpgrade, 16, 27},
		{Magic{}, protocol.TypeRestartResponse, 8, 68},
		{Magic{}, protocol.TypeRestartResponse, 16, 76},
		{Magic{}, protocol.TypeDenied, 8, 40},
		{m4, protocol.TypeInitial, 8, 48},             // 4+87+225+64+1 = 381 bits
		{m4, protocol.TypeRestartHandshake, 8, 20},    // 157 bits
		{m32, protocol.TypeAck, 16, 60},               // 32+87+225+128+1 = 473 bits
		{Magic{}, protocol.TypeInitial, 0, 40},        // any length, for searching
		{Magic{}, protocol.TypeLayoutMismatch, 8, 47}, // 87+224+64+1 = 376 bits
		{Magic{}, 9, 8, 0},
		{Magic{}, protocol.TypeInitial, -1, 0},
	} {
		if got := HandshakeLen(tc.m, tc.t, tc.r); got != tc.want {
			t.Errorf("HandshakeLen(%q, %v, %d) = %d, want %d", tc.m, tc.t, tc.r, got, tc.want)
		}
	}
}

// codecRawHandshake writes a handshake-shaped datagram with any type byte and
// restart bit and extra bits after the base, all zero except the bits listed
// in set (indexes into the extra bits). It builds the packets the encoder
// refuses to make.
func codecRawHandshake(m Magic, typ uint8, restart bool, extra int, set ...int) []byte {
	buf := make([]byte, 128)
	w := NewBitWriter(buf)
	w.WriteBits(uint64(m.bits), m.Len())
	w.WriteBits(1<<2, 5) // SessionID 0, ClientID 1
	w.WriteBool(true)    // HandshakeBit
	w.WriteBool(restart)
	w.WriteBits(3, 8)
	w.WriteBits(4, 8)
	w.WriteBits(uint64(typ), 8)
	w.WriteBits(2, 8)
	w.WriteBits(0x01020304, 32)
	w.WriteBits(0, 16)
	start := w.Bits()
	for extra > 0 {
		k := min(extra, 64)
		w.WriteBits(0, k)
		extra -= k
	}
	for _, i := range set {
		bitsRefSet(buf, start+i, true)
	}
	w.WriteTerminator()
	if w.Overflow() {
		panic("codecRawHandshake: buffer too small")
	}
	return buf[:w.Len()]
}

func TestDecodeHandshakeDrops(t *testing.T) {
	m4 := codecMagic(t, "1011")
	type tcase struct {
		name string
		m    Magic
		pkt  []byte
		want protocol.DropReason
	}
	restartFor := func(typ protocol.PacketType) bool {
		return typ == protocol.TypeRestartHandshake || typ == protocol.TypeRestartResponse
	}
	cases := []tcase{
		{"nil", Magic{}, nil, protocol.DropMalformed},
		{"empty", Magic{}, []byte{}, protocol.DropMalformed},
		{"last byte zero", Magic{}, []byte{0xA4, 0x01, 0x00}, protocol.DropMalformed},
		{"only 5 prefix bits", Magic{}, []byte{0x24}, protocol.DropMalformed},
		{"shorter than the magic", codecMagic(t, "10110011100011110000111110000011"), []byte{0xCD, 0x01}, protocol.DropMalformed},
		{"ends inside the base", Magic{}, []byte{0xA4, 0x01, 0x02, 0x00, 0x01, 0x01}, protocol.DropMalformed},
		{"base only, no random", Magic{}, codecRawHandshake(Magic{}, 4, true, 0), protocol.DropBadSize},
		{"bad magic", codecMagic(t, "1010"), codecRawHandshake(m4, 0, false, 225+64), protocol.DropBadMagic},
		{"bad magic, first bit", codecMagic(t, "0011"), codecRawHandshake(m4, 0, false, 225+64), protocol.DropBadMagic},
		{"magic where none is expected reads as a prefix", Magic{}, codecRawHandshake(m4, 0, false, 225+64), protocol.DropUnexpectedType},
		{"connection packet", Magic{}, append([]byte{0x04}, make([]byte, 17)...), protocol.DropMalformed},
		{"connection packet, terminated", Magic{}, append(append([]byte{0x04}, make([]byte, 17)...), 1), protocol.DropUnexpectedType},
		{"type 9", Magic{}, codecRawHandshake(Magic{}, 9, false, 225+64), protocol.DropUnknownType},
		{"type 255", Magic{}, codecRawHandshake(Magic{}, 255, false, 225+64), protocol.DropUnknownType},
		{"type 9, no body", Magic{}, codecRawHandshake(Magic{}, 9, false, 64), protocol.DropUnknownType},
		{"initial secret bit", Magic{}, codecRawHandshake(Magic{}, 0, false, 225+64, 0), protocol.DropBadBody},
		{"initial first zero byte", Magic{}, codecRawHandshake(Magic{}, 0, false, 225+64, 1), protocol.DropBadBody},
		{"initial timestamp sign", Magic{}, codecRawHandshake(Magic{}, 0, false, 225+64, 64), protocol.DropBadBody},
		{"initial last zero bit", Magic{}, codecRawHandshake(Magic{}, 0, false, 225+64, 224), protocol.DropBadBody},
		{"initial last zero bit, magic", m4, codecRawHandshake(m4, 0, false, 225+64, 224), protocol.DropBadBody},
		// An Initial's Layout (§3.7) from body bit 1: Channels 1..8,
		// Kinds 9..72, MaxMessage 73..104, MaxDatagram 105..120,
		// reserved 121..224; a LayoutMismatch's from bit 0.
		{"initial layout: one unreliable channel", Magic{}, codecRawHandshake(Magic{}, 0, false, 225+64, 1, 10, 105), protocol.DropNone},
		{"initial layout: one reliable channel", Magic{}, codecRawHandshake(Magic{}, 0, false, 225+64, 1, 9, 73, 105), protocol.DropNone},
		{"initial layout: reliable, MaxMessage 0", Magic{}, codecRawHandshake(Magic{}, 0, false, 225+64, 1, 9, 105), protocol.DropBadBody},
		{"initial layout: MaxMessage without a reliable channel", Magic{}, codecRawHandshake(Magic{}, 0, false, 225+64, 1, 10, 73, 105), protocol.DropBadBody},
		{"initial layout: MaxDatagram 0", Magic{}, codecRawHandshake(Magic{}, 0, false, 225+64, 1, 10), protocol.DropBadBody},
		{"initial layout: kind code 0 inside", Magic{}, codecRawHandshake(Magic{}, 0, false, 225+64, 2, 10, 105), protocol.DropBadBody},
		{"initial layout: kind beyond Channels", Magic{}, codecRawHandshake(Magic{}, 0, false, 225+64, 1, 10, 12, 105), protocol.DropBadBody},
		{"initial layout: 33 channels", Magic{}, codecRawHandshake(Magic{}, 0, false, 225+64, 1, 6, 10, 105), protocol.DropBadBody},
		{"initial layout: reserved bit", Magic{}, codecRawHandshake(Magic{}, 0, false, 225+64, 1, 10, 105, 121), protocol.DropBadBody},
		{"initial layout: 0 channels, MaxDatagram", Magic{}, codecRawHandshake(Magic{}, 0, false, 225+64, 105), protocol.DropBadBody},
		{"layout_mismatch: one sequenced channel", Magic{}, codecRawHandshake(Magic{}, 8, false, 224+64, 0, 8, 9, 104), protocol.DropNone},
		{"layout_mismatch: a server without messages", Magic{}, codecRawHandshake(Magic{}, 8, false, 224+64), protocol.DropNone},
		{"layout_mismatch: reserved bit", Magic{}, codecRawHandshake(Magic{}, 8, false, 224+64, 0, 8, 9, 104, 223), protocol.DropBadBody},
		{"initial random is free", Magic{}, codecRawHandshake(Magic{}, 0, false, 225+64, 225, 288), protocol.DropNone},
		{"initial with restart", Magic{}, codecRawHandshake(Magic{}, 0, true, 225+64), protocol.DropNone},
		{"restart_handshake restart 0", Magic{}, codecRawHandshake(Magic{}, 4, false, 64), protocol.DropBadBody},
		{"restart_response restart 0", Magic{}, codecRawHandshake(Magic{}, 5, false, 385+64), protocol.DropBadBody},
		{"version_upgrade restart 1", Magic{}, codecRawHandshake(Magic{}, 6, true, 64), protocol.DropBadBody},
		{"challenge restart 1", Magic{}, codecRawHandshake(Magic{}, 1, true, 225+64), protocol.DropNone},
		{"denied restart 1", Magic{}, codecRawHandshake(Magic{}, 7, true, 168+64), protocol.DropNone},
		// A RestartHandshake is the right size for a VersionUpgrade with
		// 8 more bits of body: the type decides the body, never the size.
		{"size of another type", Magic{}, codecRawHandshake(Magic{}, 0, false, 64), protocol.DropBadSize},
		{"restart_response sized as a response", Magic{}, codecRawHandshake(Magic{}, 5, true, 225+128), protocol.DropBadSize},
	}
	// The size windows of every type: R = 8 and 16 accepted; 7, 17 and
	// an extra or missing bit dropped.
	for typ := range protocol.NumPacketTypes {
		body := typ.BodyBits()
		for _, w := range []struct {
			extra int
			want  protocol.DropReason
		}{
			{body + 8*7, protocol.DropBadSize},
			{body + 8*8, protocol.DropNone},
			{body + 8*12, protocol.DropNone},
			{body + 8*16, protocol.DropNone},
			{body + 8*17, protocol.DropBadSize},
			{body + 8*8 + 1, protocol.DropBadSize},
			{body + 8*8 - 1, protocol.DropBadSize},
			{body + 8*16 + 1, protocol.DropBadSize},
			{body + 8*12 + 4, protocol.DropBadSize},
		} {
			for _, m := range []Magic{{}, m4} {
				cases = append(cases, tcase{
					name: typ.String() + " size", m: m,
					pkt:  codecRawHandshake(m, uint8(typ), restartFor(typ), w.extra),
					want: w.want,
				})
			}
		}
	}
	for _, tc := range cases {
		h := wiretest.Garbage()
		if got := DecodeHandshake(tc.m, tc.pkt, &h); got != tc.want {
			t.Errorf("%s (magic %q, %x): %v, want %v", tc.name, tc.m, tc.pkt, got, tc.want)
		}
	}
}

// TestDecodeHandshakeZeroesUncarried decodes into a Handshake full of
// garbage: every field the type does not carry must come back zero.
func TestDecodeHandshakeZeroesUncarried(t *testing.T) {
	for _, typ := range []protocol.PacketType{protocol.TypeInitial, protocol.TypeRestartHandshake, protocol.TypeVersionUpgrade, protocol.TypeDenied, protocol.TypeAck} {
		body := typ.BodyBits()
		pkt := codecRawHandshake(Magic{}, uint8(typ), typ == protocol.TypeRestartHandshake, body+64)
		h := wiretest.Garbage()
		if r := DecodeHandshake(Magic{}, pkt, &h); r != protocol.DropNone {
			t.Fatalf("%v: %v", typ, r)
		}
		want := protocol.Handshake{ClientID: 1, Restart: typ == protocol.TypeRestartHandshake, MinVersion: 3, CurVersion: 4,
			Type: typ, SentCount: 2, NetworkVersion: 0x01020304, RandomLen: 8}
		if !codecHandshakeEqual(&h, &want) {
			t.Errorf("%v:\n got %+v\nwant %+v", typ, h, want)
		}
	}
}

func TestDecodePrefix(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, ms := range wiretest.Magics {
		m := codecMagic(t, ms)
		for sid := range uint8(4) {
			for cid := range uint8(8) {
				for _, hs := range []bool{false, true} {
					// Prefix, then some random payload of any length
					// (short datagrams take the byte-wise load).
					buf := make([]byte, 16)
					w := NewBitWriter(buf)
					w.WriteBits(uint64(m.bits), m.Len())
					w.WriteBits(uint64(sid), 2)
					w.WriteBits(uint64(cid), 3)
					w.WriteBool(hs)
					w.WriteBits(rng.Uint64(), rng.IntN(65))
					w.WriteTerminator()
					p, r := DecodePrefix(m, buf[:w.Len()])
					if want := (Prefix{sid, cid, hs}); r != protocol.DropNone || p != want {
						t.Fatalf("magic %q: %x: %+v %v, want %+v", ms, buf[:w.Len()], p, r, want)
					}
				}
			}
		}
		// Every single flipped magic bit is caught.
		for i := range m.Len() {
			buf := make([]byte, 16)
			w := NewBitWriter(buf)
			w.WriteBits(uint64(m.bits)^1<<i, m.Len())
			w.WriteBits(0, 6)
			w.WriteTerminator()
			if _, r := DecodePrefix(m, buf[:w.Len()]); r != protocol.DropBadMagic {
				t.Fatalf("magic %q with bit %d flipped: %v", ms, i, r)
			}
		}
		// One bit short of a prefix.
		buf := make([]byte, 8)
		w := NewBitWriter(buf)
		w.WriteBits(uint64(m.bits), m.Len())
		w.WriteBits(0, 5)
		w.WriteTerminator()
		if _, r := DecodePrefix(m, buf[:w.Len()]); r != protocol.DropMalformed {
			t.Fatalf("magic %q, 5 prefix bits: %v", ms, r)
		}
	}
	for _, b := range [][]byte{nil, {}, {0}, {0xFF, 0}} {
		if p, r := DecodePrefix(Magic{}, b); r != protocol.DropMalformed || p != (Prefix{}) {
			t.Errorf("DecodePrefix(%x) = %+v, %v", b, p, r)
		}
	}
}

func TestHandshakeAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	m := codecMagic(t, "1011")
	var h protocol.Handshake
	for typ := range protocol.NumPacketTypes {
		src := wiretest.RandHandshake(rng, typ)
		pkt := make([]byte, 128)
		pkt = pkt[:EncodeHandshake(pkt, m, &src)]
		codecNoAllocs(t, fmt.Sprintf("DecodeHandshake(%v)", typ), func() bool { return DecodeHandshake(m, pkt, &h) == protocol.DropNone })
	}
	ch := wiretest.RandHandshake(rng, protocol.TypeChallenge)
	out := make([]byte, 128)
	var n int
	codecNoAllocs(t, "EncodeHandshake(challenge)", func() bool { n = EncodeHandshake(out, m, &ch); return n != 0 })
	codecNoAllocs(t, "DecodePrefix", func() bool { _, r := DecodePrefix(m, out[:n]); return r == protocol.DropNone })
}

// codecNoAllocs checks that op, which reports whether it succeeded,
// allocates nothing.
func codecNoAllocs(t *testing.T, what string, op func() bool) {
	t.Helper()
	if a := testing.AllocsPerRun(100, func() {
		if !op() {
			panic(what + " failed")
		}
	}); a != 0 {
		t.Errorf("%s allocates %v times", what, a)
	}
}

// TestHandshakeEveryGeometry covers every layout there is: each magic length
// 0..32, type and RandomData length. The encoder's bytes are read back with
// the bit-at-a-time reference at the offsets §2–§3 give, independently of
// DecodeHandshake, so encoder and decoder cannot agree on a wrong layout.
func TestHandshakeEveryGeometry(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	buf := make([]byte, 128)
	for mlen := 0; mlen <= protocol.MaxMagicBits; mlen++ {
		m := codecFuzzMagic(uint8(mlen), rng.Uint32())
		for typ := range protocol.NumPacketTypes {
			for rlen := protocol.MinRandomBytes; rlen <= protocol.MaxRandomBytes; rlen++ {
				h := wiretest.RandHandshake(rng, typ)
				h.RandomLen = uint8(rlen)
				clear(h.Random[rlen:])
				n := EncodeHandshake(buf, m, &h)
				if n != HandshakeLen(m, typ, rlen) || n == 0 {
					t.Fatalf("M=%d %v R=%d: %d bytes, HandshakeLen %d", mlen, typ, rlen, n, HandshakeLen(m, typ, rlen))
				}
				pkt := buf[:n]
				pos := 0
				field := func(bits int) uint64 {
					v := bitsRefRead(pkt, pos, bits)
					pos += bits
					return v
				}
				want := []uint64{uint64(m.bits), uint64(h.SessionID), uint64(h.ClientID), 1, 0,
					uint64(h.MinVersion), uint64(h.CurVersion), uint64(typ), uint64(h.SentCount),
					uint64(h.NetworkVersion), uint64(h.NetworkFeatures)}
				if h.Restart {
					want[4] = 1
				}
				for i, w := range []int{mlen, 2, 3, 1, 1, 8, 8, 8, 8, 32, 16} {
					if got := field(w); got != want[i] {
						t.Fatalf("M=%d %v: prefix/base field %d = %#x, want %#x", mlen, typ, i, got, want[i])
					}
				}
				var body []uint64 // 8-bit fields unless noted
				switch typ {
				case protocol.TypeInitial, protocol.TypeLayoutMismatch:
					if typ == protocol.TypeInitial && field(1) != 0 {
						t.Fatalf("M=%d: Initial SecretId set", mlen)
					}
					l := h.Layout
					if field(8) != uint64(l.Channels) || field(64) != l.Kinds || field(32) != uint64(l.MaxMessage) || field(16) != uint64(l.MaxDatagram) {
						t.Fatalf("M=%d %v: Layout fields", mlen, typ)
					}
					for range 104 {
						if field(1) != 0 {
							t.Fatalf("M=%d %v: reserved bit %d set", mlen, typ, pos-1)
						}
					}
				case protocol.TypeChallenge, protocol.TypeResponse, protocol.TypeAck, protocol.TypeRestartResponse:
					if field(1) != uint64(h.SecretID) || field(64) != math.Float64bits(h.Timestamp) {
						t.Fatalf("M=%d %v: SecretId/Timestamp", mlen, typ)
					}
					for _, c := range h.Cookie {
						body = append(body, uint64(c))
					}
					if typ == protocol.TypeRestartResponse {
						for _, c := range h.OrigCookie {
							body = append(body, uint64(c))
						}
					}
				case protocol.TypeDenied:
					body = append(body, uint64(h.Reason))
					for _, c := range h.Cookie {
						body = append(body, uint64(c))
					}
				}
				for _, c := range h.Random[:rlen] {
					body = append(body, uint64(c))
				}
				for i, c := range body {
					if got := field(8); got != c {
						t.Fatalf("M=%d %v R=%d: body/random byte %d = %#x, want %#x", mlen, typ, rlen, i, got, c)
					}
				}
				if bits, _ := payloadBits(pkt); bits != pos {
					t.Fatalf("M=%d %v R=%d: terminator at bit %d, fields end at %d", mlen, typ, rlen, bits, pos)
				}
				got := wiretest.Garbage()
				if r := DecodeHandshake(m, pkt, &got); r != protocol.DropNone || !codecHandshakeEqual(&got, &h) {
					t.Fatalf("M=%d %v R=%d: decode %v\n got %+v\nwant %+v", mlen, typ, rlen, r, got, h)
				}
			}
		}
	}
}
