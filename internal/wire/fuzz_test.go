package wire

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire/wiretest"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/: every packet of
// vectors.json plus malformed ones. Each target takes the magic header as a
// length and bits, so the fuzzer also explores every alignment of the fields.

// codecFuzzMagic maps fuzzer input onto a valid magic header.
func codecFuzzMagic(n uint8, bits uint32) Magic {
	m := Magic{n: n % (protocol.MaxMagicBits + 1)}
	m.bits = bits & uint32(m.mask())
	return m
}

// codecRefPrefix is DecodePrefix written with the bitReader, field by field.
func codecRefPrefix(m Magic, b []byte) (Prefix, protocol.DropReason) {
	r, ok := newBitReader(b)
	if !ok || r.Left() < m.Len()+protocol.IDBits+1 {
		return Prefix{}, protocol.DropMalformed
	}
	if r.ReadBits(m.Len()) != uint64(m.bits) {
		return Prefix{}, protocol.DropBadMagic
	}
	return Prefix{SessionID: uint8(r.ReadBits(2)), ClientID: uint8(r.ReadBits(3)), Handshake: r.ReadBool()}, protocol.DropNone
}

func FuzzDecodePrefix(f *testing.F) {
	f.Fuzz(func(t *testing.T, magicLen uint8, magicBits uint32, data []byte) {
		m := codecFuzzMagic(magicLen, magicBits)
		p, r := DecodePrefix(m, data)
		rp, rr := codecRefPrefix(m, data)
		if p != rp || r != rr {
			t.Fatalf("DecodePrefix = %+v %v, reference %+v %v", p, r, rp, rr)
		}
		// Both packet decoders apply the same prefix checks first.
		var h protocol.Handshake
		var c protocol.ConnHeader
		hr := DecodeHandshake(m, data, &h)
		_, cr := DecodeConn(m, data, &c)
		switch {
		case r != protocol.DropNone:
			if hr != r || cr != r {
				t.Fatalf("prefix %v, handshake %v, conn %v", r, hr, cr)
			}
		case p.Handshake:
			if cr != protocol.DropUnexpectedType {
				t.Fatalf("DecodeConn of a handshake-bit packet: %v", cr)
			}
		default:
			if hr != protocol.DropUnexpectedType {
				t.Fatalf("DecodeHandshake of a connection-bit packet: %v", hr)
			}
		}
	})
}

func FuzzDecodeHandshake(f *testing.F) {
	var out [128]byte // the largest handshake: a RestartResponse, M=32, R=16, is 80 bytes
	f.Fuzz(func(t *testing.T, magicLen uint8, magicBits uint32, data []byte) {
		m := codecFuzzMagic(magicLen, magicBits)
		h := wiretest.Garbage()
		r := DecodeHandshake(m, data, &h)
		if r >= protocol.NumDropReasons {
			t.Fatalf("drop reason %d out of range", r)
		}
		if r != protocol.DropNone {
			return
		}
		if p, pr := DecodePrefix(m, data); pr != protocol.DropNone || p != (Prefix{h.SessionID, h.ClientID, true}) {
			t.Fatalf("DecodePrefix disagrees: %+v %v, handshake %+v", p, pr, h)
		}
		if len(data) != HandshakeLen(m, h.Type, int(h.RandomLen)) {
			t.Fatalf("accepted %d bytes, HandshakeLen %d", len(data), HandshakeLen(m, h.Type, int(h.RandomLen)))
		}
		// The size rule leaves no ignored payload bits, and the terminator
		// is by definition the highest set bit of the last byte, so there
		// are no set bits above it either: re-encoding must give the input
		// exactly.
		n := EncodeHandshake(out[:], m, &h)
		if !bytes.Equal(out[:n], data) {
			t.Fatalf("re-encode differs:\n in %x\nout %x\n%+v", data, out[:n], h)
		}
		var h2 protocol.Handshake
		if DecodeHandshake(m, out[:n], &h2) != protocol.DropNone || !codecHandshakeEqual(&h, &h2) {
			t.Fatalf("decode of the re-encode differs: %+v", h2)
		}
	})
}

func FuzzDecodeConn(f *testing.F) {
	var out []byte
	f.Fuzz(func(t *testing.T, magicLen uint8, magicBits uint32, data []byte) {
		m := codecFuzzMagic(magicLen, magicBits)
		h := protocol.ConnHeader{SessionID: 0xFF, Kind: 0xFF}
		payload, r := DecodeConn(m, data, &h)
		if r >= protocol.NumDropReasons {
			t.Fatalf("drop reason %d out of range", r)
		}
		if r != protocol.DropNone {
			if payload != nil {
				t.Fatalf("drop %v with a payload", r)
			}
			return
		}
		if p, pr := DecodePrefix(m, data); pr != protocol.DropNone || p != (Prefix{h.SessionID, h.ClientID, false}) {
			t.Fatalf("DecodePrefix disagrees: %+v %v, conn %+v", p, pr, h)
		}
		// The payload is borrowed: it ends right before the terminator.
		off := ConnHeaderOffset(m) + protocol.ConnHeaderBytes
		if len(payload) != len(data)-off-1 || (len(payload) > 0 && unsafe.SliceData(payload) != &data[off]) {
			t.Fatalf("payload is not data[%d:%d]", off, len(data)-1)
		}
		// Re-encoding gives the input except for what a decoder ignores:
		// the padding bits between the prefix and the byte boundary
		// (written as zeros), and a KeepAlive below MinConnLen, which an
		// encoder pads up to it with zero bytes.
		want := bytes.Clone(data)
		for i := m.Len() + protocol.IDBits + 1; i < 8*ConnHeaderOffset(m); i++ {
			bitsRefSet(want, i, false)
		}
		if h.Kind == protocol.KindKeepAlive && len(want) < MinConnLen(m) {
			want = append(want[:len(want)-1], make([]byte, MinConnLen(m)-len(want))...)
			want = append(want, 0x01)
		}
		// Decoders take datagrams of any length (the size cap is the
		// caller's, DropTooLarge), so the output buffer follows the input.
		if len(out) < len(want) {
			out = make([]byte, len(want))
		}
		n := EncodeConn(out, m, &h, payload)
		if !bytes.Equal(out[:n], want) {
			t.Fatalf("re-encode differs:\n in %x\nout %x\nwant %x", data, out[:n], want)
		}
	})
}

// FuzzBitReader reads data's payload as a run of fields whose widths come
// from ops, checks every value against the bit-at-a-time reference, then
// writes the same fields back with the BitWriter: the result must be the
// datagram itself, whatever the field boundaries.
func FuzzBitReader(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, ops []byte) {
		limit, ok := payloadBits(data)
		r, rok := newBitReader(data)
		if rok != ok {
			t.Fatalf("newBitReader ok=%v, payloadBits ok=%v", rok, ok)
		}
		if !ok {
			if len(data) != 0 && data[len(data)-1] != 0 {
				t.Fatalf("refused %x", data)
			}
			return
		}
		buf := bytes.Repeat([]byte{0xA5}, len(data)+8)
		w := NewBitWriter(buf[:len(data)])
		pos := 0
		var tmp [32]byte
		for _, op := range ops {
			if op&0x80 != 0 {
				// ReadBytes of 0..31 bytes.
				dst := tmp[:op&0x1F]
				r.ReadBytes(dst)
				if pos+8*len(dst) > limit {
					if !r.Overrun() || r.Left() != 0 || !bytes.Equal(dst, make([]byte, len(dst))) {
						t.Fatalf("ReadBytes(%d) past the end at bit %d: overrun=%v left=%d dst=%x",
							len(dst), pos, r.Overrun(), r.Left(), dst)
					}
					if r.ReadBits(1) != 0 || !r.Overrun() {
						t.Fatal("overrun is not sticky")
					}
					return
				}
				for i, c := range dst {
					if want := byte(bitsRefRead(data, pos+8*i, 8)); c != want {
						t.Fatalf("ReadBytes at bit %d, byte %d = %#x, want %#x", pos, i, c, want)
					}
				}
				w.WriteBytes(dst)
				pos += 8 * len(dst)
			} else {
				n := int(op) % 65
				v := r.ReadBits(n)
				if pos+n > limit {
					if v != 0 || !r.Overrun() || r.Left() != 0 {
						t.Fatalf("ReadBits(%d) past the end at bit %d: v=%#x overrun=%v left=%d",
							n, pos, v, r.Overrun(), r.Left())
					}
					if r.ReadBits(1) != 0 || !r.Overrun() {
						t.Fatal("overrun is not sticky")
					}
					return
				}
				if want := bitsRefRead(data, pos, n); v != want {
					t.Fatalf("ReadBits(%d) at bit %d = %#x, want %#x", n, pos, v, want)
				}
				w.WriteBits(v, n)
				pos += n
			}
			if r.Left() != limit-pos || r.Overrun() {
				t.Fatalf("at bit %d: left=%d overrun=%v, want left=%d", pos, r.Left(), r.Overrun(), limit-pos)
			}
		}
		for r.Left() > 0 {
			n := min(64, r.Left())
			w.WriteBits(r.ReadBits(n), n)
		}
		w.WriteTerminator()
		if w.Overflow() || !bytes.Equal(buf[:w.Len()], data) {
			t.Fatalf("rewritten %x (overflow %v), want %x", buf[:w.Len()], w.Overflow(), data)
		}
		if !bytes.Equal(buf[len(data):], bytes.Repeat([]byte{0xA5}, 8)) {
			t.Fatal("BitWriter wrote past len(buf)")
		}
	})
}
