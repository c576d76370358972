package main

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/ratelimit"
	"github.com/udpgate/udpgate/internal/seqwin"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/shard"
)

// BenchmarkStages times, in process and without system calls, the whole
// per-datagram work of each scenario: what a server does between recvmmsg
// and sendmmsg. For udpgate that is the connection-map lookup
// (shard.Map.Get), handshake.Server.Handle (decode, cookie, decision,
// encode) and, for Data, SeqState.Receive plus the echo's SeqState.Send and
// EncodeConn, as conn's receive loop composes them (conn's own locking and
// counters are not included). For the naive baseline it is its handle
// function: mutex map, hmac.New, codec. Clients are visited in a random
// order, as interleaved traffic would, so large connection counts pay
// their cache misses.
//
// The end-to-end harness measures the same paths with the kernel's ≈ 2 µs
// per packet around them; these figures say how much of a difference
// between servers is user-space work.
//
//	go test -run '^$' -bench Stages -count 5 ./bench/
func BenchmarkStages(b *testing.B) {
	for _, name := range []string{"challenge-1k", "ack-1k", "ack-100k", "data-1k", "data-10k", "data-100k"} {
		sc, err := parseScenario(name)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("udpgate/"+name, func(b *testing.B) { benchUdpgateStage(b, sc.Kind, sc.Clients) })
		b.Run("naive/"+name, func(b *testing.B) { benchNaiveStage(b, sc.Kind, sc.Clients) })
	}
}

// The simulated clients keep almost no memory of their own, so that at
// 100k clients the figures are the server's cache misses, not the
// benchmark's: a client's address and (for Data) its cookie are computed
// from its index, and its request is written into one hot buffer, as a
// datagram arrives in the receive batch fresh from the kernel's copy. Only
// ack needs a stored value per client (its 20-byte HMAC cookie), one cache
// line that ack-100k pays on top of the server's work.

func stageAddr(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)}), uint16(40000+i>>16))
}

// stageCookie is a Data client's cookie: any 20 bytes do for the data path,
// which checks the session tag, not the HMAC.
func stageCookie(i int) (c cookie.Cookie) {
	x := uint64(i)*0x9E3779B97F4A7C15 + 1
	for k := 0; k < len(c); k += 8 {
		x ^= x >> 29
		x *= 0xBF58476D1CE4E5B9
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], x)
		copy(c[k:], w[:])
	}
	return c
}

var stageMagic wire.Magic

// stageConn is what udpgate's connection holds for the per-packet path.
type stageConn struct {
	clientID uint8
	tag      uint32
	cookie   cookie.Cookie
	seq      seqwin.SeqState
}

// stageLoad makes the request templates and writes client i's next request.
type stageLoad struct {
	kind string
	pkt  []byte          // the request being built: hot, reused
	cks  []cookie.Cookie // ack: each client's valid cookie
	seqs []uint16        // data: each client's next sequence number
	off  int             // ack: where the cookie sits; data: the header
}

func newStageLoad(b *testing.B, kind string, n int, mac func(ts float64, a netip.AddrPort) (uint8, cookie.Cookie), ts float64) *stageLoad {
	l := &stageLoad{kind: kind, pkt: make([]byte, 256)}
	h := protocol.Handshake{ClientID: 1, MinVersion: 3, CurVersion: 4, NetworkVersion: benchNetVersion, RandomLen: 16}
	var k int
	switch kind {
	case scChallenge:
		h.Type = protocol.TypeInitial
		k = wire.EncodeHandshake(l.pkt, stageMagic, &h)
	case scAck:
		l.cks = make([]cookie.Cookie, n)
		var id uint8
		for i := range n {
			id, l.cks[i] = mac(ts, stageAddr(i))
		}
		h.Type, h.SecretID, h.Timestamp = protocol.TypeResponse, id, ts
		h.Cookie = cookie.Cookie{0: 0xA5}
		k = wire.EncodeHandshake(l.pkt, stageMagic, &h)
		// With no magic header the cookie starts on a byte boundary
		// (5 + 82 + 1 + 64 bits = byte 19).
		l.off = (protocol.IDBits + protocol.BaseBits + 1 + 64) / 8
		if l.pkt[l.off] != 0xA5 {
			b.Fatal("cookie is not where expected")
		}
	case scData:
		l.seqs = make([]uint16, n)
		for i := range n {
			ck := stageCookie(i)
			_, l.seqs[i] = cookie.Sequences(&ck)
		}
		ch := protocol.ConnHeader{ClientID: 1, Kind: protocol.KindData}
		k = wire.EncodeConn(l.pkt, stageMagic, &ch, make([]byte, payloadSize))
		l.off = wire.ConnHeaderOffset(stageMagic)
	}
	if k == 0 {
		b.Fatal("encode failed")
	}
	l.pkt = l.pkt[:k]
	return l
}

// request writes client i's next request into the hot buffer.
func (l *stageLoad) request(i int) []byte {
	switch l.kind {
	case scAck:
		copy(l.pkt[l.off:], l.cks[i][:])
	case scData:
		ck := stageCookie(i)
		binary.LittleEndian.PutUint32(l.pkt[l.off:], cookie.SessionTag(&ck))
		// Ack: the server's newest packet, its answer to each earlier
		// request (one answer per request, from serverSeq on), as a
		// client acknowledges; the server drops an Ack of a packet it
		// never sent.
		serverSeq, clientSeq := cookie.Sequences(&ck)
		ack := serverSeq - 1 + (l.seqs[i] - clientSeq)
		binary.LittleEndian.PutUint16(l.pkt[l.off+4:], l.seqs[i])
		binary.LittleEndian.PutUint16(l.pkt[l.off+6:], ack&(protocol.SeqModulus-1))
		l.seqs[i] = (l.seqs[i] + 1) & (protocol.SeqModulus - 1)
	}
	return l.pkt
}

// cookieOf is client i's authorised cookie on the server.
func (l *stageLoad) cookieOf(i int) cookie.Cookie {
	if l.kind == scAck {
		return l.cks[i]
	}
	return stageCookie(i)
}

// stageOrder visits clients 0..n-1 in one fixed random order, over and
// over, as interleaved traffic would.
type stageOrder struct {
	order []int32
	k     int
}

func newStageOrder(n int) stageOrder {
	order := make([]int32, n)
	for i := range order {
		order[i] = int32(i)
	}
	rand.New(rand.NewPCG(7, 7)).Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
	return stageOrder{order: order}
}

// next is the next client in the order.
func (o *stageOrder) next() int {
	i := int(o.order[o.k])
	if o.k++; o.k == len(o.order) {
		o.k = 0
	}
	return i
}

func benchUdpgateStage(b *testing.B, kind string, n int) {
	now := float64(time.Now().UnixNano()) / 1e9
	secrets, err := cookie.NewSecrets(now-1, nil)
	if err != nil {
		b.Fatal(err)
	}
	signer := cookie.NewSigner(secrets)
	srv := handshake.NewServer(handshake.ServerConfig{
		NetworkVersion: benchNetVersion, ChallengeLimit: ratelimit.Limit{Rate: -1},
	}, secrets, 1, now)
	load := newStageLoad(b, kind, n, func(ts float64, a netip.AddrPort) (uint8, cookie.Cookie) {
		var c cookie.Cookie
		id := signer.GenerateTo(&c, ts, a)
		return id, c
	}, now-0.5)
	conns := shard.NewMap[stageConn](0)
	if kind != scChallenge {
		for i := range n {
			ck := load.cookieOf(i)
			c := &stageConn{clientID: 1, tag: cookie.SessionTag(&ck), cookie: ck}
			s, cl := cookie.Sequences(&ck)
			c.seq.Init(s, cl, now)
			if _, ok := conns.Insert(stageAddr(i), ck, c); !ok {
				b.Fatal("insert failed")
			}
		}
	}
	order := newStageOrder(n)
	out := make([]byte, 2048)
	var d handshake.Decision
	var rep seqwin.AckReport
	want := handshake.ActReply
	if kind == scData {
		want = handshake.ActConn
	}
	b.ReportAllocs()
	for b.Loop() {
		i := order.next()
		addr := stageAddr(i)
		pkt := load.request(i)
		var peer handshake.Peer
		c, known := conns.Get(addr)
		if known {
			peer = handshake.Peer{Known: true, ClientID: c.clientID, Tag: c.tag, Cookie: c.cookie}
		}
		srv.Handle(&d, addr, pkt, now, &peer, out)
		if d.Action != want {
			b.Fatalf("action %v drop %v", d.Action, d.Drop)
		}
		if d.Action == handshake.ActConn {
			if c.seq.Receive(d.Conn.Seq, d.Conn.Ack, d.Conn.AckBits, now, &rep) != protocol.DropNone {
				b.Fatal("stale")
			}
			seq, ack, bits, _, _ := c.seq.Send(now)
			h := protocol.ConnHeader{ClientID: c.clientID, Tag: c.tag, Seq: seq, Ack: ack, AckBits: bits, Kind: protocol.KindData}
			if wire.EncodeConn(out, stageMagic, &h, d.Payload) == 0 {
				b.Fatal("encode failed")
			}
		}
	}
}

func benchNaiveStage(b *testing.B, kind string, n int) {
	s := newNaive(stageMagic, benchNetVersion)
	now := time.Now()
	ts := float64(now.UnixNano())/1e9 - 0.5
	mac := func(ts float64, a netip.AddrPort) (uint8, cookie.Cookie) { return 0, s.mac(ts, a) }
	load := newStageLoad(b, kind, n, mac, ts)
	if kind != scChallenge {
		for i := range n {
			ck := load.cookieOf(i)
			c := &naiveConn{clientID: 1, cookie: ck, tag: cookie.SessionTag(&ck)}
			ss, cs := cookie.Sequences(&ck)
			c.seq.Init(ss, cs, ts)
			s.conns[stageAddr(i)] = c
		}
	}
	order := newStageOrder(n)
	out := make([]byte, 2048)
	rnd := wire.NewRand(1)
	rep := new(seqwin.AckReport)
	b.ReportAllocs()
	for b.Loop() {
		i := order.next()
		if s.handle(load.request(i), stageAddr(i), out, &rnd, rep, now) == 0 {
			b.Fatal("no reply")
		}
	}
}
