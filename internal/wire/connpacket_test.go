package wire

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire/wiretest"
)

func codecRandConn(rng *rand.Rand) (protocol.ConnHeader, []byte) {
	h := protocol.ConnHeader{
		SessionID: uint8(rng.IntN(4)),
		ClientID:  uint8(rng.IntN(8)),
		Tag:       rng.Uint32(),
		Seq:       uint16(rng.IntN(protocol.SeqModulus)),
		Ack:       uint16(rng.IntN(protocol.SeqModulus)),
		AckBits:   rng.Uint64(),
		Kind:      protocol.Kind(rng.IntN(3)),
	}
	var payload []byte
	switch h.Kind {
	case protocol.KindData:
		payload = make([]byte, 1+rng.IntN(40))
	case protocol.KindDisconnect:
		payload = make([]byte, 1)
	case protocol.KindKeepAlive:
		payload = make([]byte, rng.IntN(3)) // padding
	}
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	return h, payload
}

func TestConnGeometry(t *testing.T) {
	for n := 0; n <= protocol.MaxMagicBits; n++ {
		m := Magic{n: uint8(n)}
		off := ConnHeaderOffset(m)
		if want := (n + 6 + 7) / 8; off != want {
			t.Errorf("M=%d: ConnHeaderOffset = %d, want %d", n, off, want)
		}
		minLen := MinConnLen(m)
		if want := HandshakeLen(m, protocol.TypeRestartHandshake, protocol.MinRandomBytes); minLen != want || minLen != (n+152+7)/8 {
			t.Errorf("M=%d: MinConnLen = %d, want %d (smallest RestartHandshake)", n, minLen, want)
		}
		ka := ConnLen(m, protocol.KindKeepAlive, 0)
		if ka != max(off+protocol.ConnHeaderBytes+1, minLen) {
			t.Errorf("M=%d: KeepAlive %d bytes", n, ka)
		}
		// §7: padding matters only when M mod 8 is 1 or 2.
		if padded := ka > off+protocol.ConnHeaderBytes+1; padded != (n%8 == 1 || n%8 == 2) {
			t.Errorf("M=%d: KeepAlive padded = %v", n, padded)
		}
		if got := ConnLen(m, protocol.KindData, 5); got != off+protocol.ConnHeaderBytes+5+1 {
			t.Errorf("M=%d: Data(5) = %d", n, got)
		}
		if got := ConnLen(m, protocol.KindKeepAlive, 10); got != max(off+protocol.ConnHeaderBytes+11, minLen) {
			t.Errorf("M=%d: KeepAlive(10) = %d", n, got)
		}
	}
	if ConnLen(Magic{}, protocol.KindKeepAlive, 0) != 19 {
		t.Error("the smallest connection packet is not 19 bytes")
	}
	if ConnLen(Magic{}, 4, 1) != 0 || ConnLen(Magic{}, protocol.KindData, -1) != 0 {
		t.Error("ConnLen accepts an unknown kind or a negative length")
	}
}

func TestConnRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	buf := make([]byte, 128)
	for _, ms := range wiretest.Magics {
		m := codecMagic(t, ms)
		for range 500 {
			h, payload := codecRandConn(rng)
			n := EncodeConn(buf, m, &h, payload)
			if want := ConnLen(m, h.Kind, len(payload)); n != want || n == 0 {
				t.Fatalf("magic %q: EncodeConn = %d, ConnLen = %d", ms, n, want)
			}
			pkt := buf[:n]
			var got protocol.ConnHeader
			gotPayload, r := DecodeConn(m, pkt, &got)
			if r != protocol.DropNone || got != h {
				t.Fatalf("magic %q: %x: %+v %v, want %+v", ms, pkt, got, r, h)
			}
			wantPayload := payload
			if h.Kind == protocol.KindKeepAlive {
				// The padding to MinConnLen comes back as payload.
				wantPayload = append(payload, make([]byte, n-ConnHeaderOffset(m)-protocol.ConnHeaderBytes-1-len(payload))...)
			}
			if !bytes.Equal(gotPayload, wantPayload) {
				t.Fatalf("magic %q: payload %x, want %x", ms, gotPayload, wantPayload)
			}
			if !codecCheckConnPrefix(t, fmt.Sprintf("magic %q", ms), m, pkt, &h) {
				t.FailNow()
			}
		}
	}
}

func TestEncodeConnKeepAlivePadding(t *testing.T) {
	m := codecMagic(t, "1") // M mod 8 = 1: 19 bytes would be one short
	h := protocol.ConnHeader{ClientID: 1, Tag: 7, Seq: 1, Ack: 2, Kind: protocol.KindKeepAlive}
	buf := bytes.Repeat([]byte{0xA5}, 32)
	n := EncodeConn(buf, m, &h, nil)
	if n != 20 || n != MinConnLen(m) {
		t.Fatalf("KeepAlive with M=1 is %d bytes, want 20", n)
	}
	if buf[18] != 0 || buf[19] != 1 {
		t.Fatalf("padding/terminator %x", buf[18:20])
	}
	var got protocol.ConnHeader
	p, r := DecodeConn(m, buf[:n], &got)
	if r != protocol.DropNone || got != h || !bytes.Equal(p, []byte{0}) {
		t.Fatalf("decode: %+v %x %v", got, p, r)
	}
}

func TestEncodeConnRejects(t *testing.T) {
	ok := protocol.ConnHeader{ClientID: 1, Kind: protocol.KindData}
	for _, tc := range []struct {
		name    string
		mod     func(*protocol.ConnHeader)
		payload []byte
	}{
		{"session 4", func(h *protocol.ConnHeader) { h.SessionID = 4 }, []byte{1}},
		{"client 8", func(h *protocol.ConnHeader) { h.ClientID = 8 }, []byte{1}},
		{"seq 16384", func(h *protocol.ConnHeader) { h.Seq = protocol.SeqModulus }, []byte{1}},
		{"ack 16384", func(h *protocol.ConnHeader) { h.Ack = protocol.SeqModulus }, []byte{1}},
		{"kind 4", func(h *protocol.ConnHeader) { h.Kind = 4 }, []byte{1}},
		{"empty messages", func(h *protocol.ConnHeader) { h.Kind = protocol.KindMessages }, nil},
		{"empty data", func(h *protocol.ConnHeader) {}, nil},
		{"disconnect without reason", func(h *protocol.ConnHeader) { h.Kind = protocol.KindDisconnect }, nil},
		{"disconnect with 2 bytes", func(h *protocol.ConnHeader) { h.Kind = protocol.KindDisconnect }, []byte{1, 2}},
	} {
		h := ok
		tc.mod(&h)
		dst := bytes.Repeat([]byte{0xA5}, 64)
		if n := EncodeConn(dst, Magic{}, &h, tc.payload); n != 0 {
			t.Errorf("%s: EncodeConn = %d, want 0", tc.name, n)
		}
		if !bytes.Equal(dst, bytes.Repeat([]byte{0xA5}, 64)) {
			t.Errorf("%s: a refused encode wrote into dst", tc.name)
		}
	}
	// Too short by one byte; exactly right; larger writes nothing past n.
	payload := []byte("hello")
	n := ConnLen(Magic{}, protocol.KindData, len(payload))
	backing := bytes.Repeat([]byte{0xA5}, n+8)
	if EncodeConn(backing[:n-1], Magic{}, &ok, payload) != 0 {
		t.Error("encoded into a too-short dst")
	}
	if !bytes.Equal(backing, bytes.Repeat([]byte{0xA5}, n+8)) {
		t.Error("a too-short dst was written")
	}
	if EncodeConn(backing, Magic{}, &ok, payload) != n || !bytes.Equal(backing[n:], bytes.Repeat([]byte{0xA5}, 8)) {
		t.Errorf("wrote past the packet: %x", backing)
	}
}

// codecConnRaw builds a connection packet byte by byte, for the packets the
// encoder refuses to make.
func codecConnRaw(pre byte, seq, ack uint16, kind byte, payload []byte, last byte) []byte {
	b := []byte{pre, 0xBC, 0xAB, 0xC5, 0x56, byte(seq), byte(seq >> 8), byte(ack), byte(ack >> 8),
		1, 2, 3, 4, 5, 6, 7, 8, kind}
	b = append(b, payload...)
	return append(b, last)
}

func TestDecodeConnDrops(t *testing.T) {
	m4 := codecMagic(t, "1011")
	keepalive := wiretest.Hex(t, "04bcabc5563324e61ff5ffffffffffffff0101")
	withMagic := wiretest.Hex(t, "4d00bcabc556050009000100000000000000020201")
	for _, tc := range []struct {
		name string
		m    Magic
		pkt  []byte
		want protocol.DropReason
	}{
		{"valid", Magic{}, keepalive, protocol.DropNone},
		{"valid with magic", m4, withMagic, protocol.DropNone},
		{"nil", Magic{}, nil, protocol.DropMalformed},
		{"empty", Magic{}, []byte{}, protocol.DropMalformed},
		{"last byte zero", Magic{}, append(keepalive[:18:18], 0), protocol.DropMalformed},
		{"terminator only", Magic{}, []byte{0x01}, protocol.DropMalformed},
		{"bad magic", codecMagic(t, "1010"), withMagic, protocol.DropBadMagic},
		{"handshake bit", Magic{}, wiretest.Hex(t, "e401020201820181000000d050d151d252d3d3"), protocol.DropUnexpectedType},
		{"last byte 0x03", Magic{}, append(keepalive[:18:18], 0x03), protocol.DropBadSize},
		{"last byte 0x80", Magic{}, append(keepalive[:18:18], 0x80), protocol.DropBadSize},
		{"last byte 0x81", Magic{}, append(keepalive[:18:18], 0x81), protocol.DropBadSize},
		{"header one byte short", Magic{}, append(keepalive[:17:17], 0x01), protocol.DropBadSize},
		{"prefix and terminator", Magic{}, []byte{0x04, 0x01}, protocol.DropBadSize},
		{"header short with magic", m4, append(withMagic[:18:18], 0x01), protocol.DropBadSize},
		{"seq 16383", Magic{}, codecConnRaw(0x04, 16383, 0, 1, nil, 1), protocol.DropNone},
		{"seq 16384", Magic{}, codecConnRaw(0x04, 16384, 0, 1, nil, 1), protocol.DropBadBody},
		{"seq 65535", Magic{}, codecConnRaw(0x04, 65535, 0, 1, nil, 1), protocol.DropBadBody},
		{"ack 16383", Magic{}, codecConnRaw(0x04, 0, 16383, 1, nil, 1), protocol.DropNone},
		{"ack 16384", Magic{}, codecConnRaw(0x04, 0, 16384, 1, nil, 1), protocol.DropBadBody},
		{"kind 4", Magic{}, codecConnRaw(0x04, 0, 0, 4, []byte{1}, 1), protocol.DropBadBody},
		{"messages 1 byte", Magic{}, codecConnRaw(0x04, 0, 0, 3, []byte{1}, 1), protocol.DropNone},
		{"empty messages", Magic{}, codecConnRaw(0x04, 0, 0, 3, nil, 1), protocol.DropBadBody},
		{"kind 255", Magic{}, codecConnRaw(0x04, 0, 0, 255, []byte{1}, 1), protocol.DropBadBody},
		{"data 1 byte", Magic{}, codecConnRaw(0x04, 0, 0, 0, []byte{0}, 1), protocol.DropNone},
		{"empty data", Magic{}, codecConnRaw(0x04, 0, 0, 0, nil, 1), protocol.DropBadBody},
		{"disconnect 1 byte", Magic{}, codecConnRaw(0x04, 0, 0, 2, []byte{1}, 1), protocol.DropNone},
		{"disconnect 0 bytes", Magic{}, codecConnRaw(0x04, 0, 0, 2, nil, 1), protocol.DropBadBody},
		{"disconnect 2 bytes", Magic{}, codecConnRaw(0x04, 0, 0, 2, []byte{1, 2}, 1), protocol.DropBadBody},
		{"keepalive padding of any value", Magic{}, codecConnRaw(0x04, 0, 0, 1, []byte{0xFF, 0}, 1), protocol.DropNone},
		// The two bits between the prefix and the byte boundary.
		{"padding bits ignored", Magic{}, codecConnRaw(0x04|0xC0, 0, 0, 1, nil, 1), protocol.DropNone},
		// A KeepAlive under MinConnLen: accepted, the rule binds senders.
		{"short keepalive, M=1", codecMagic(t, "0"), codecConnRaw(0x08, 0, 0, 1, nil, 1), protocol.DropNone},
	} {
		var h protocol.ConnHeader
		p, got := DecodeConn(tc.m, tc.pkt, &h)
		if got != tc.want {
			t.Errorf("%s (%x): %v, want %v", tc.name, tc.pkt, got, tc.want)
		}
		if got != protocol.DropNone && (p != nil || h != (protocol.ConnHeader{})) {
			t.Errorf("%s: a drop returned payload %x or header %+v", tc.name, p, h)
		}
	}
}

// TestDecodeConnBorrowsPayload: the payload aliases the datagram (no copy)
// and its capacity stops before the terminator.
func TestDecodeConnBorrowsPayload(t *testing.T) {
	pkt := wiretest.Hex(t, "04bcabc556df1f2f2400000000000000000068656c6c6f01")
	var h protocol.ConnHeader
	p, r := DecodeConn(Magic{}, pkt, &h)
	if r != protocol.DropNone || string(p) != "hello" {
		t.Fatalf("%q %v", p, r)
	}
	if unsafe.SliceData(p) != &pkt[18] || cap(p) != len(p) {
		t.Fatalf("payload is not pkt[18:23:23]: cap %d", cap(p))
	}
	_ = append(p, 'X')
	if pkt[len(pkt)-1] != 0x01 {
		t.Fatal("append to the payload overwrote the terminator")
	}
}

func TestConnAllocs(t *testing.T) {
	m := codecMagic(t, "1011")
	h := protocol.ConnHeader{ClientID: 1, Tag: 0xDEADBEEF, Seq: 5, Ack: 9, AckBits: 1, Kind: protocol.KindData}
	payload := make([]byte, 48)
	buf := make([]byte, 128)
	var n int
	codecNoAllocs(t, "EncodeConn", func() bool { n = EncodeConn(buf, m, &h, payload); return n != 0 })
	var got protocol.ConnHeader
	codecNoAllocs(t, "DecodeConn", func() bool { _, r := DecodeConn(m, buf[:n], &got); return r == protocol.DropNone })
}

// TestConnEveryGeometry checks the layout of §7 for every magic length with
// the bit-at-a-time reference: prefix, zero padding to the byte boundary,
// the little-endian header, payload, KeepAlive padding and terminator.
func TestConnEveryGeometry(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	buf := make([]byte, 128)
	for mlen := 0; mlen <= protocol.MaxMagicBits; mlen++ {
		m := codecFuzzMagic(uint8(mlen), rng.Uint32())
		for kind := protocol.KindData; kind <= protocol.KindDisconnect; kind++ {
			h, payload := codecRandConn(rng)
			h.Kind = kind
			payload = payload[:0]
			if kind != protocol.KindKeepAlive {
				payload = append(payload, byte(rng.Uint32()))
			}
			n := EncodeConn(buf, m, &h, payload)
			pkt := buf[:n]
			off := ConnHeaderOffset(m)
			if bitsRefRead(pkt, 0, mlen) != uint64(m.bits) || bitsRefRead(pkt, mlen, 2) != uint64(h.SessionID) ||
				bitsRefRead(pkt, mlen+2, 3) != uint64(h.ClientID) || bitsRefRead(pkt, mlen+5, 8*off-mlen-5) != 0 {
				t.Fatalf("M=%d kind %d: prefix or padding bits wrong: %x", mlen, kind, pkt)
			}
			for _, f := range []struct {
				at, bits int
				want     uint64
			}{
				{0, 32, uint64(h.Tag)}, {4, 16, uint64(h.Seq)}, {6, 16, uint64(h.Ack)},
				{8, 64, h.AckBits}, {16, 8, uint64(h.Kind)},
			} {
				if got := bitsRefRead(pkt, 8*(off+f.at), f.bits); got != f.want {
					t.Fatalf("M=%d: header byte %d = %#x, want %#x", mlen, f.at, got, f.want)
				}
			}
			rest := pkt[off+protocol.ConnHeaderBytes:]
			if !bytes.HasPrefix(rest, payload) || rest[len(rest)-1] != 0x01 ||
				!bytes.Equal(rest[len(payload):len(rest)-1], make([]byte, len(rest)-len(payload)-1)) {
				t.Fatalf("M=%d kind %d: payload/padding/terminator %x", mlen, kind, rest)
			}
			if kind == protocol.KindKeepAlive && n != max(off+protocol.ConnHeaderBytes+1, MinConnLen(m)) {
				t.Fatalf("M=%d: KeepAlive %d bytes", mlen, n)
			}
		}
	}
}

// TestEncodeConnInPlace: a payload built where EncodeConn will put it
// survives the header writes.
func TestEncodeConnInPlace(t *testing.T) {
	for _, ms := range wiretest.Magics {
		m := codecMagic(t, ms)
		buf := make([]byte, 64)
		off := ConnHeaderOffset(m) + protocol.ConnHeaderBytes
		payload := buf[off : off+5]
		copy(payload, "hello")
		h := protocol.ConnHeader{ClientID: 3, Tag: 9, Seq: 1, Ack: 2, AckBits: ^uint64(0), Kind: protocol.KindData}
		n := EncodeConn(buf, m, &h, payload)
		var got protocol.ConnHeader
		p, r := DecodeConn(m, buf[:n], &got)
		if r != protocol.DropNone || got != h || string(p) != "hello" {
			t.Fatalf("magic %q: %+v %q %v", ms, got, p, r)
		}
	}
}
