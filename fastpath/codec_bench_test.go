package fastpath

import (
	"math/rand/v2"
	"testing"
)

// Each benchmark runs with no magic header (fields byte-aligned after the
// prefix, so byte runs are copies) and with a 4-bit one (every field
// unaligned), the two shapes a deployment can have.
var codecBenchMagics = []struct {
	name  string
	magic string
}{{"M=0", ""}, {"M=4", "1011"}}

func codecBenchHandshake(b *testing.B, m Magic, t PacketType) []byte {
	h := codecRandHandshake(rand.New(rand.NewPCG(1, 1)), t)
	h.RandomLen = 12
	pkt := make([]byte, 128)
	n := EncodeHandshake(pkt, m, &h)
	if n == 0 {
		b.Fatal("encode failed")
	}
	return pkt[:n]
}

func BenchmarkDecodeHandshake(b *testing.B) {
	for _, bm := range codecBenchMagics {
		b.Run(bm.name, func(b *testing.B) {
			m := codecMagic(b, bm.magic)
			pkt := codecBenchHandshake(b, m, TypeResponse)
			var h Handshake
			b.SetBytes(int64(len(pkt)))
			b.ReportAllocs()
			for b.Loop() {
				if DecodeHandshake(m, pkt, &h) != DropNone {
					b.Fatal("decode failed")
				}
			}
		})
	}
}

func BenchmarkEncodeChallenge(b *testing.B) {
	for _, bm := range codecBenchMagics {
		b.Run(bm.name, func(b *testing.B) {
			m := codecMagic(b, bm.magic)
			h := codecRandHandshake(rand.New(rand.NewPCG(2, 2)), TypeChallenge)
			out := make([]byte, 128)
			b.SetBytes(int64(HandshakeLen(m, TypeChallenge, int(h.RandomLen))))
			b.ReportAllocs()
			for b.Loop() {
				if EncodeHandshake(out, m, &h) == 0 {
					b.Fatal("encode failed")
				}
			}
		})
	}
}

func codecBenchConn() (ConnHeader, []byte) {
	return ConnHeader{ClientID: 1, Tag: 0x56C5ABBC, Seq: 8159, Ack: 9263, AckBits: 0xFFFF_FFFF_FFFF_FFF5, Kind: KindData},
		make([]byte, 48) // a typical small game message
}

func BenchmarkDecodeConn(b *testing.B) {
	for _, bm := range codecBenchMagics {
		b.Run(bm.name, func(b *testing.B) {
			m := codecMagic(b, bm.magic)
			h, payload := codecBenchConn()
			pkt := make([]byte, 128)
			pkt = pkt[:EncodeConn(pkt, m, &h, payload)]
			var got ConnHeader
			b.SetBytes(int64(len(pkt)))
			b.ReportAllocs()
			for b.Loop() {
				if _, r := DecodeConn(m, pkt, &got); r != DropNone {
					b.Fatal("decode failed")
				}
			}
		})
	}
}

func BenchmarkEncodeConn(b *testing.B) {
	for _, bm := range codecBenchMagics {
		b.Run(bm.name, func(b *testing.B) {
			m := codecMagic(b, bm.magic)
			h, payload := codecBenchConn()
			out := make([]byte, 128)
			b.SetBytes(int64(ConnLen(m, h.Kind, len(payload))))
			b.ReportAllocs()
			for b.Loop() {
				if EncodeConn(out, m, &h, payload) == 0 {
					b.Fatal("encode failed")
				}
			}
		})
	}
}

func BenchmarkDecodePrefix(b *testing.B) {
	m := codecMagic(b, "1011")
	pkt := codecBenchHandshake(b, m, TypeInitial)
	b.ReportAllocs()
	for b.Loop() {
		if _, r := DecodePrefix(m, pkt); r != DropNone {
			b.Fatal("decode failed")
		}
	}
}
