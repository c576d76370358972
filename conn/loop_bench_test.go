package conn

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seal"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/netsim"
	"github.com/udpgate/udpgate/token"
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

// The Floor benchmarks are made for instruction counts (callgrind over the
// whole test binary, N and 3N iterations; tuning.md, "Issue 21: the
// per-packet floor"): each runs its batches with the timer on throughout,
// no StopTimer (whose ReadMemStats callgrind would count per batch), and
// each has a fill variant that makes the same batches without handing them
// to the loop, whose count is subtracted. What remains is the receive
// loop's user-space work per packet.

// floorRun makes b.N datagrams in batches with fill and, unless fillOnly,
// runs each batch through l.process; handlers' replies are dropped with the
// send batch.
func floorRun(b *testing.B, l *loop, fill func(), fillOnly bool, now time.Time) {
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += len(l.rb.Msgs) {
		fill()
		if !fillOnly {
			l.process(len(l.rb.Msgs), now)
			l.out = 0
		}
		now = now.Add(time.Millisecond)
	}
}

// floorVariants runs bench as its two sub-benchmarks: loop (the batches
// processed) and fill (only made).
func floorVariants(b *testing.B, bench func(b *testing.B, fillOnly bool)) {
	b.Run("loop", func(b *testing.B) { bench(b, false) })
	b.Run("fill", func(b *testing.B) { bench(b, true) })
}

// BenchmarkFloorData is BenchmarkLoopData's Data echo, counted as above.
func BenchmarkFloorData(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("conns=%d", n), func(b *testing.B) {
			floorVariants(b, func(b *testing.B, fillOnly bool) {
				s := listenBench(b, n)
				now := time.Now()
				bc := benchConns(b, s, s.socks[0], n, now, rand.New(rand.NewPCG(1, 2)))
				clients := make([]floorClient, n)
				for i := range clients {
					clients[i].addr, clients[i].hdr = bc[i].addr, bc[i].hdr
				}
				l := newLoop(s, 0, s.socks[0], 64, seconds(now))
				fill := floorFill(l, clients, false)
				floorRun(b, l, fill, fillOnly, now)
				if got := l.cnt.local[cConnIn]; !fillOnly && got < uint64(b.N) {
					b.Fatalf("only %d of %d packets accepted", got, b.N)
				}
			})
		})
	}
}

// floorFill returns a fill that puts a Data packet from a random client into
// every message of l's receive batch, 32 bytes of payload sealed or not, and
// moves the client on as the load generator's SeqState does: the next
// sequence number, and an ack of every echo so far.
func floorFill(l *loop, clients []floorClient, sealed bool) func() {
	rng := rand.New(rand.NewPCG(5, 6))
	payload := make([]byte, 32)
	magic := l.s.st.magic
	return func() {
		for i := range l.rb.Msgs {
			cl := &clients[rng.IntN(len(clients))]
			m := &l.rb.Msgs[i]
			if sealed {
				m.N = wire.SealConn(m.Buf, magic, &cl.hdr, payload, &cl.tx)
			} else {
				m.N = wire.EncodeConn(m.Buf, magic, &cl.hdr, payload)
			}
			m.Addr = cl.addr
			cl.hdr.Seq = (cl.hdr.Seq + 1) % protocol.SeqModulus
			cl.hdr.Ack = (cl.hdr.Ack + 1) % protocol.SeqModulus
			cl.hdr.AckBits = ^uint64(0)
		}
	}
}

// BenchmarkFloorChallenge is BenchmarkLoopChallenge counted as above.
func BenchmarkFloorChallenge(b *testing.B) {
	floorVariants(b, func(b *testing.B, fillOnly bool) {
		s, err := Listen("127.0.0.1:0", Config{Sockets: 1, ChallengeRate: -1})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		now := time.Now()
		l := newLoop(s, 0, s.socks[0], 64, seconds(now))
		h := protocol.Handshake{Type: protocol.TypeInitial, ClientID: 1, MinVersion: protocol.MinHandshakeVersion,
			CurVersion: protocol.CurHandshakeVersion, NetworkVersion: s.st.NetworkVersion, RandomLen: 16}
		rng := rand.New(rand.NewPCG(3, 4))
		for i := range l.rb.Msgs {
			m := &l.rb.Msgs[i]
			m.N = wire.EncodeHandshake(m.Buf, s.st.magic, &h)
		}
		fill := func() {
			for i := range l.rb.Msgs {
				k := rng.IntN(1000)
				l.rb.Msgs[i].Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 1, byte(k >> 8), byte(k)}), 4000)
			}
		}
		floorRun(b, l, fill, fillOnly, now)
		if got := l.cnt.local[cReply+int(protocol.TypeChallenge)]; !fillOnly && got < uint64(b.N) {
			b.Fatalf("only %d Challenges for %d Initials", got, b.N)
		}
	})
}

// floorClient is a client of a Floor benchmark's server: its address, the
// header of its next Data packet and, on a sealed server, its sealer.
type floorClient struct {
	addr netip.AddrPort
	hdr  protocol.ConnHeader
	tx   seal.Sealer
}

// BenchmarkFloorSealedData is the Data echo of BenchmarkFloorData on sealed
// connections (each logged in through the loop: Initial, Challenge, proof),
// counted as above; the clients' sealing is in the fill.
func BenchmarkFloorSealedData(b *testing.B) {
	const n = 1_000
	floorVariants(b, func(b *testing.B, fillOnly bool) {
		s, err := Listen(simServerAddr.String(), Config{Network: netsim.New(), Logger: quiet(), Sockets: 1,
			ChallengeRate: -1, MaxClients: n, Handler: benchEcho{}, KeepAlive: time.Hour, Timeout: 2 * time.Hour,
			PrivateKey: &testKey, ProtocolID: testProtocolID})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		now := time.Now()
		clients := sealedLogins(b, s, n, now)
		l := newLoop(s, 0, s.socks[0], 64, seconds(now))
		fill := floorFill(l, clients, true)
		floorRun(b, l, fill, fillOnly, now)
		if got := l.cnt.local[cConnIn]; !fillOnly && got < uint64(b.N) {
			b.Fatalf("only %d of %d packets accepted", got, b.N)
		}
	})
}

// sealedLogins logs n sealed clients into s through a loop of its own, as
// BenchmarkLoopLogin does, and returns them ready to send Data.
func sealedLogins(b *testing.B, s *Server, n int, now time.Time) []floorClient {
	b.Helper()
	l := newLoop(s, 0, s.socks[0], 1, seconds(now))
	pb := newPromoBatch()
	pb.sock = s.socks[0]
	in := &l.rb.Msgs[0]
	clients := make([]floorClient, n)
	for i := range clients {
		cl := &clients[i]
		tok := makeToken(b, nil, token.Params{ClientID: uint64(i),
			ServerAddresses: []netip.AddrPort{simServerAddr}, Expire: time.Hour})
		cl.addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}), uint16(1000+i>>16))
		ini := protocol.Handshake{Type: protocol.TypeInitial, ClientID: 1, MinVersion: protocol.MinHandshakeVersion,
			CurVersion: protocol.CurHandshakeVersion, NetworkVersion: s.st.NetworkVersion, RandomLen: 16}
		in.N, in.Addr = wire.EncodeHandshake(in.Buf, s.st.magic, &ini), cl.addr
		loginServerSide(l, pb, now)
		var ch protocol.Handshake
		if wire.DecodeHandshake(s.st.magic, l.sb.Msgs[0].Buf[:l.sb.Msgs[0].N], &ch) != protocol.DropNone || ch.Type != protocol.TypeChallenge {
			b.Fatal("no Challenge")
		}
		l.out = 0
		pc := wire.ProofCookie{SecretID: ch.SecretID, Timestamp: ch.Timestamp, Cookie: ch.Cookie}
		cl.tx.Init(&tok.ClientToServerKey, (*[seal.SaltBytes]byte)(ch.Cookie[:seal.SaltBytes]))
		serverSeq, clientSeq := cookie.Sequences(&ch.Cookie)
		cl.hdr = protocol.ConnHeader{SessionID: ch.SessionID, ClientID: 1, Tag: cookie.SessionTag(&ch.Cookie), Seq: clientSeq,
			Ack: (serverSeq + protocol.SeqModulus - 1) % protocol.SeqModulus, Kind: protocol.KindKeepAlive}
		req := tok.Request()
		body, _ := req.AppendBinary(nil)
		in.N = wire.SealProof(in.Buf, s.st.magic, &cl.hdr, &pc, body, &cl.tx)
		loginServerSide(l, pb, now)
		l.out = 0
		cl.hdr.Seq = (cl.hdr.Seq + 1) % protocol.SeqModulus
		cl.hdr.Kind = protocol.KindData
	}
	if got := s.tab.count.Load(); got != int64(n) {
		b.Fatalf("%d connections for %d logins", got, n)
	}
	return clients
}
