package wire

import (
	"math/rand/v2"
	"testing"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire/wiretest"
)

// benchMagics runs f as a sub-benchmark under each magic header of the
// codec benchmarks.
func benchMagics(b *testing.B, f func(b *testing.B, m Magic)) {
	wiretest.BenchEachMagic(b, ParseMagic, f)
}

func codecBenchHandshake(b *testing.B, m Magic, t protocol.PacketType) []byte {
	return wiretest.BenchHandshake(b, t, func(dst []byte, h *protocol.Handshake) int { return EncodeHandshake(dst, m, h) })
}

func BenchmarkDecodeHandshake(b *testing.B) {
	benchMagics(b, func(b *testing.B, m Magic) {
		pkt := codecBenchHandshake(b, m, protocol.TypeResponse)
		var h protocol.Handshake
		b.SetBytes(int64(len(pkt)))
		b.ReportAllocs()
		for b.Loop() {
			if DecodeHandshake(m, pkt, &h) != protocol.DropNone {
				b.Fatal("decode failed")
			}
		}
	})
}

func BenchmarkEncodeChallenge(b *testing.B) {
	benchMagics(b, func(b *testing.B, m Magic) {
		h := wiretest.RandHandshake(rand.New(rand.NewPCG(2, 2)), protocol.TypeChallenge)
		out := make([]byte, 128)
		b.SetBytes(int64(HandshakeLen(m, protocol.TypeChallenge, int(h.RandomLen))))
		b.ReportAllocs()
		for b.Loop() {
			if EncodeHandshake(out, m, &h) == 0 {
				b.Fatal("encode failed")
			}
		}
	})
}

func codecBenchConn() (protocol.ConnHeader, []byte) {
	return protocol.ConnHeader{ClientID: 1, Tag: 0x56C5ABBC, Seq: 8159, Ack: 9263, AckBits: 0xFFFF_FFFF_FFFF_FFF5, Kind: protocol.KindData},
		make([]byte, 48) // a typical small game message
}

func BenchmarkDecodeConn(b *testing.B) {
	benchMagics(b, func(b *testing.B, m Magic) {
		h, payload := codecBenchConn()
		pkt := make([]byte, 128)
		pkt = pkt[:EncodeConn(pkt, m, &h, payload)]
		var got protocol.ConnHeader
		b.SetBytes(int64(len(pkt)))
		b.ReportAllocs()
		for b.Loop() {
			if _, r := DecodeConn(m, pkt, &got); r != protocol.DropNone {
				b.Fatal("decode failed")
			}
		}
	})
}

func BenchmarkEncodeConn(b *testing.B) {
	benchMagics(b, func(b *testing.B, m Magic) {
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

func BenchmarkDecodePrefix(b *testing.B) {
	m := codecMagic(b, "1011")
	pkt := codecBenchHandshake(b, m, protocol.TypeInitial)
	b.ReportAllocs()
	for b.Loop() {
		if _, r := DecodePrefix(m, pkt); r != protocol.DropNone {
			b.Fatal("decode failed")
		}
	}
}
