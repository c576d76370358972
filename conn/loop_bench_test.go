package conn

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/internal/wire"
)

type benchEcho = conntest.Echo[*Conn, DisconnectReason]

// BenchmarkLoopData times the receive loop's user-space work for Data on
// established connections, as the end-to-end bench's data-N scenarios
// drive it: batches of 64 datagrams from clients in random order, each
// echoed by the handler into the loop's send batch. The system calls are
// left out (the batch is never flushed), so this is the part of the
// server's cost per packet that udpgate adds to a raw echo, including the
// cache misses of N connections.
func BenchmarkLoopData(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("conns=%d", n), func(b *testing.B) { benchLoopData(b, n) })
	}
}

// listenBench starts a one-socket echo server on loopback for up to nconns
// connections that never time out during a benchmark; b's cleanup closes it.
func listenBench(b *testing.B, nconns int) *Server {
	b.Helper()
	return conntest.Listen(b, Listen, Config{Sockets: 1, Handler: benchEcho{},
		KeepAlive: time.Hour, Timeout: 2 * time.Hour, MaxClients: nconns})
}

func benchLoopData(b *testing.B, nconns int) {
	s := listenBench(b, nconns)
	now := time.Now()
	sock := s.socks[0]
	rng := rand.New(rand.NewPCG(1, 2))
	clients := benchConns(b, s, sock, nconns, now, rng)
	const batch = 64
	l := newLoop(s, 0, sock, batch, seconds(now))
	payload := make([]byte, 32)
	fill := func() {
		for i := range batch {
			cl := &clients[rng.IntN(nconns)]
			m := &l.rb.Msgs[i]
			m.N = wire.EncodeConn(m.Buf, s.st.magic, &cl.hdr, payload)
			m.Addr = cl.addr
			// The client acks every echo so far, as the load
			// generator's SeqState does.
			cl.hdr.Seq = (cl.hdr.Seq + 1) % protocol.SeqModulus
			cl.hdr.Ack = (cl.hdr.Ack + 1) % protocol.SeqModulus
			cl.hdr.AckBits = ^uint64(0)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		b.StopTimer()
		fill()
		b.StartTimer()
		l.process(batch, now)
		l.out = 0
		now = now.Add(time.Millisecond)
	}
	b.StopTimer()
	if got := l.cnt.local[cConnIn]; got < uint64(b.N) {
		b.Fatalf("only %d of %d packets accepted", got, b.N)
	}
}

// BenchmarkLoopChallenge times the receive loop's user-space work per
// Initial answered with a Challenge: batches of 64 from 1k addresses that
// hold no connection (map miss, limiter off as in the end-to-end bench,
// cookie, encode), without the system calls.
func BenchmarkLoopChallenge(b *testing.B) {
	s, err := Listen("127.0.0.1:0", Config{Sockets: 1, ChallengeRate: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	const batch = 64
	l := newLoop(s, 0, s.socks[0], batch, seconds(now))
	h := protocol.Handshake{Type: protocol.TypeInitial, ClientID: 1, MinVersion: protocol.MinHandshakeVersion,
		CurVersion: protocol.CurHandshakeVersion, NetworkVersion: s.st.NetworkVersion, RandomLen: 16}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range batch {
		m := &l.rb.Msgs[i]
		m.N = wire.EncodeHandshake(m.Buf, s.st.magic, &h)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		for i := range batch {
			k := rng.IntN(1000)
			l.rb.Msgs[i].Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 1, byte(k >> 8), byte(k)}), 4000)
		}
		l.process(batch, now)
		l.out = 0
	}
	b.StopTimer()
	if got := l.cnt.local[cReply+int(protocol.TypeChallenge)]; got < uint64(b.N) {
		b.Fatalf("only %d Challenges for %d Initials", got, b.N)
	}
}

// benchClient is a client of a benchmark's server: its address and the
// header of its next Data packet.
type benchClient struct {
	addr netip.AddrPort
	hdr  protocol.ConnHeader
}

// benchConns puts n connections on sock into s, as promotion would, and
// returns their clients.
func benchConns(b *testing.B, s *Server, sock transport, n int, now time.Time, rng *rand.Rand) []benchClient {
	clients := make([]benchClient, n)
	for i := range clients {
		var p promotion
		p.addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)}), uint16(10000+i>>16))
		for j := range p.cookie {
			p.cookie[j] = byte(rng.Uint32())
		}
		p.to.ClientID = 1
		c := s.newConn(&p, sock, now)
		if _, ok := s.tab.conns.Insert(p.addr, p.cookie, c); !ok {
			b.Fatal("insert failed")
		}
		s.tab.count.Add(1)
		c.announce() // as promotion does once OnConnect returned: packets wait for it
		serverSeq, clientSeq := cookie.Sequences(&p.cookie)
		clients[i] = benchClient{addr: p.addr, hdr: protocol.ConnHeader{SessionID: s.st.SessionID,
			ClientID: 1, Tag: c.tag, Seq: clientSeq,
			Ack: (serverSeq + protocol.SeqModulus - 1) % protocol.SeqModulus, Kind: protocol.KindData}}
	}
	return clients
}
