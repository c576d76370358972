package conn

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/ratelimit"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/internal/wire"
)

// BenchmarkLoopDrop prices a dropped datagram in the receive loop (user
// space, no system calls), batches of 64, for the drops an attacker can
// cause at full rate:
//
//   - inbound_limited: Messages packets whose entries are garbage, from one
//     proven connection whose inbound budget is spent (issue 29: dropped
//     after the address lookup, before any parsing);
//   - message_refused: the same packets with the budget off, each parsed
//     up to the message layer's refusal, as before the budget;
//   - malformed: the handshake path's cheapest drop, a datagram from an
//     address no connection holds whose prefix does not decode (last byte
//     zero), from 1k addresses;
//
// The over-budget drop must cost no more than the malformed one.
func BenchmarkLoopDrop(b *testing.B) {
	const batch = 64
	now := time.Now()
	// A connection sending Messages packets whose entries are garbage: over
	// its budget (inbound_limited), or, the budget off, each parsed up to
	// the message layer's refusal (message_refused, what they cost before
	// issue 29).
	proven := func(b *testing.B, rate float64, want protocol.DropReason) {
		s := conntest.Listen(b, Listen, Config{Sockets: 1, Handler: benchEcho{}, Messages: testChannels,
			KeepAlive: time.Hour, Timeout: 2 * time.Hour, InboundPacketRate: rate, InboundByteRate: rate})
		rng := rand.New(rand.NewPCG(1, 2))
		cl := benchConns(b, s, s.socks[0], 1, now, rng)[0]
		l := newLoop(s, 0, s.socks[0], batch, seconds(now))
		payload := make([]byte, 300)
		for i := range payload {
			payload[i] = byte(rng.Uint32()) | 0x80 // not a valid entry
		}
		cl.hdr.Kind = protocol.KindMessages
		for i := range batch {
			m := &l.rb.Msgs[i]
			m.N = wire.EncodeConn(m.Buf, s.st.magic, &cl.hdr, payload)
			m.Addr = cl.addr
			cl.hdr.Seq = (cl.hdr.Seq + 1) % protocol.SeqModulus
		}
		// Spend the burst at now, which the loop keeps: every datagram
		// after is over budget.
		for range ratelimit.DefaultInboundPacketRate/10/batch + 1 {
			l.process(batch, now)
			l.out = 0
		}
		before := l.cnt.local[cDrop+int(want)]
		b.ReportAllocs()
		b.ResetTimer()
		for done := 0; done < b.N; done += batch {
			l.process(batch, now)
			l.out = 0
		}
		b.StopTimer()
		if got := l.cnt.local[cDrop+int(want)] - before; got < uint64(b.N) {
			b.Fatalf("only %d of %d dropped as %v; %v", got, b.N, want, l.cnt.local[cDrop:cDrop+int(protocol.NumDropReasons)])
		}
	}
	b.Run("reason=inbound_limited", func(b *testing.B) { proven(b, 0, protocol.DropInboundLimited) })
	b.Run("reason=message_refused", func(b *testing.B) { proven(b, -1, protocol.DropMessageRefused) })
	handshake := func(b *testing.B, cfg Config, pkt []byte, want protocol.DropReason) {
		s, err := Listen("127.0.0.1:0", cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		l := newLoop(s, 0, s.socks[0], batch, seconds(now))
		rng := rand.New(rand.NewPCG(3, 4))
		for i := range batch {
			l.rb.Msgs[i].N = copy(l.rb.Msgs[i].Buf, pkt)
		}
		// The sources of the batches, drawn before the timer runs.
		addrs := make([]netip.AddrPort, 1<<14)
		for i := range addrs {
			k := rng.IntN(1000)
			addrs[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 1, byte(k >> 8), byte(k)}), 4000)
		}
		before := l.cnt.local[cDrop+int(want)]
		b.ReportAllocs()
		b.ResetTimer()
		j := 0
		for done := 0; done < b.N; done += batch {
			for i := range batch {
				l.rb.Msgs[i].Addr = addrs[j+i]
			}
			j = (j + batch) % len(addrs)
			l.process(batch, now)
			l.out = 0
		}
		b.StopTimer()
		if got := l.cnt.local[cDrop+int(want)] - before; got < uint64(b.N) {
			b.Fatalf("only %d of %d dropped as %v", got, b.N, want)
		}
	}
	b.Run("reason=malformed", func(b *testing.B) {
		handshake(b, Config{Sockets: 1}, []byte{0x55, 0x00}, protocol.DropMalformed)
	})
}
