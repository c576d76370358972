package conn

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seqwin"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
)

// The per-packet paths of an established connection allocate nothing:
// receiving a Data packet (batch, map lookup, decision, sequence state,
// handler) and Conn.Send.
func TestAllocsEstablished(t *testing.T) {
	if raceEnabled {
		t.Skip("the race runtime allocates; run without -race")
	}
	// The rounds come as fast as the CPU goes: no inbound budget.
	s := listen(t, Config{Sockets: 1, InboundPacketRate: -1})
	p := newRawPeer(t, s, "127.0.0.1:0")
	ck := p.connect()
	if s.Len() != 1 { // a connection is in the table before its Ack is sent
		t.Fatalf("%d connections", s.Len())
	}
	c, ok := s.Conn(p.addr())
	if !ok {
		t.Fatal("no connection")
	}

	// A loop of our own over the server's socket, so the test drives
	// batches without racing the running loop.
	l := newLoop(s, 0, s.socks[0], 8, seconds(time.Now()))
	serverSeq, clientSeq := cookie.Sequences(&ck)
	hdr := protocol.ConnHeader{ClientID: p.clientID, Tag: cookie.SessionTag(&ck),
		Ack: (serverSeq + protocol.SeqModulus - 1) % protocol.SeqModulus, Kind: protocol.KindData}
	payload := []byte("position update 0123456789")
	next := clientSeq
	receive := func() {
		hdr.Seq = next
		next = (next + 1) % protocol.SeqModulus
		m := &l.rb.Msgs[0]
		m.N = wire.EncodeConn(m.Buf, s.st.magic, &hdr, payload)
		m.Addr = p.addr()
		l.batch(1, time.Now())
	}
	before := c.Stats().PacketsIn
	if n := testing.AllocsPerRun(1000, receive); n != 0 {
		t.Errorf("receiving Data: %v allocs per packet", n)
	}
	if got := c.Stats().PacketsIn - before; got < 1000 {
		t.Fatalf("only %d packets reached the connection", got)
	}
	if n := testing.AllocsPerRun(1000, func() {
		if _, err := c.Send(payload); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Conn.Send: %v allocs per packet", n)
	}
}

// The message path of an established connection allocates nothing in
// steady state: a Messages packet received (Check, sequence window,
// Receive, OnMessage), the Handler's SendMessage echo packed into the
// loop's send batch, and the acks both ways.
//
// With an egress budget (Config.EgressRate) on a layout whose channel 3 is
// bulk, each round also echoes a bulk message under the budget's ceiling
// and runs the message timer's tick, which samples the connection and
// recomputes the shares: nothing allocates either.
func TestMessagesAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("the race runtime allocates; run without -race")
	}
	t.Run("plain", func(t *testing.T) { testMessagesAlloc(t, 0, &msgEcho{}) })
	t.Run("egress_budget", func(t *testing.T) { testMessagesAlloc(t, 1<<30, &msgEcho{}) })
	// The echoes' acknowledgements reported to a MessageDeliveryHandler.
	h := &ackCounter{}
	t.Run("delivery_reports", func(t *testing.T) { testMessagesAlloc(t, 0, h) })
	if h.n.Load() < 1000 {
		t.Fatalf("%d echoes reported delivered", h.n.Load())
	}
}

// ackCounter is msgEcho that counts its messages reported delivered.
type ackCounter struct {
	msgEcho
	n atomic.Int64
}

func (a *ackCounter) OnMessageDelivery(_ *Conn, _ int, _ uint64, delivered bool) {
	if delivered {
		a.n.Add(1)
	}
}

// msgPeer is the peer side of a raw peer connected to s (its cookie ck):
// its own message endpoint and sequence state, and a receive loop of s to
// feed its packets into.
func msgPeer(tb testing.TB, s *Server, mc message.Config, ck *cookie.Cookie) (*message.Endpoint, *seqwin.SeqState, *seqwin.AckReport, *loop) {
	tb.Helper()
	layer, err := message.NewLayer(mc, s.st.msgPayload)
	if err != nil {
		tb.Fatal(err)
	}
	pe := layer.NewEndpoint()
	// The rounds' acks come back within the stamp's 16 µs, which gives
	// no RTT sample: set one, so the peer's pacing follows its window.
	pe.SetRTT(time.Millisecond)
	serverSeq, clientSeq := cookie.Sequences(ck)
	seq := new(seqwin.SeqState)
	seq.Init(clientSeq, serverSeq, seconds(time.Now()))
	return pe, seq, new(seqwin.AckReport), newLoop(s, 0, s.socks[0], 8, seconds(time.Now()))
}

func testMessagesAlloc(t *testing.T, egressRate int64, h Handler) {
	// A send rate no burst of the test's rounds (as fast as the CPU goes)
	// can spend.
	mc := testChannels
	if egressRate > 0 {
		mc.Channels = append(slices.Clone(mc.Channels), message.ChannelConfig{Kind: message.ReliableOrdered, Bulk: true})
	}
	mc.SendRate = 1 << 30
	// Nor the inbound budget: the rounds come as fast as the CPU goes.
	s := listen(t, Config{Sockets: 1, Handler: h, Messages: mc, InboundPacketRate: -1, EgressRate: egressRate})
	p := newRawPeer(t, s, "127.0.0.1:0")
	ck := p.connect()
	if s.Len() != 1 { // a connection is in the table before its Ack is sent
		t.Fatalf("%d connections", s.Len())
	}

	// The rounds drive the message timer themselves: the server's own
	// ticks would otherwise send an echo before the round's batch packs
	// it (the answer then an ack alone), or tick beside a round's.
	s.msgTimer.ticking.Lock()
	t.Cleanup(s.msgTimer.ticking.Unlock)

	pe, seq, rep, l := msgPeer(t, s, mc, &ck)
	msg := []byte("chat: a hundred bytes of a reliable message, give or take, for the allocation test!!")
	echoes := 0
	round := func() {
		now := time.Now()
		ns := now.UnixNano()
		if err := pe.Send(0, msg, ns); err != nil {
			t.Fatal(err)
		}
		// A bulk message a round, but only once the last has left the
		// peer's queue: the peer's bulk waits for its congestion window,
		// and a queue that grew would allocate chunks in the peer, not
		// the server this test measures (it did so in some runs).
		if egressRate > 0 && pe.Stats().Queued[3] == 0 {
			if err := pe.Send(3, msg, ns); err != nil {
				t.Fatal(err)
			}
		}
		sq, ack, bits, lost, evicted := seq.Send(seconds(now))
		if evicted {
			pe.Lost(lost.Seq, ns)
		}
		hdr := protocol.ConnHeader{ClientID: p.clientID, Tag: cookie.SessionTag(&ck),
			Seq: sq, Ack: ack, AckBits: bits, Kind: protocol.KindMessages}
		var pl [protocol.MaxDatagramLimit]byte
		n := pe.WritePayload(pl[:s.st.msgPayload], sq, ns)
		pe.PacketSent(ns)
		m := &l.rb.Msgs[0]
		m.N = wire.EncodeConn(m.Buf, s.st.magic, &hdr, pl[:n])
		m.Addr = p.addr()
		l.batch(1, now)
		// The server's answer, as the peer receives it.
		out := &l.sb.Msgs[0]
		var h protocol.ConnHeader
		payload, r := wire.DecodeConn(s.st.magic, out.Buf[:out.N], &h)
		if r != protocol.DropNone || h.Kind != protocol.KindMessages {
			t.Fatalf("server answered %v kind %d", r, h.Kind)
		}
		if pe.Check(payload) != message.DropNone {
			t.Fatal("the echo does not check")
		}
		if seq.Receive(h.Seq, h.Ack, h.AckBits, seconds(now), rep) != protocol.DropNone {
			t.Fatal("the echo's sequence is refused")
		}
		for _, d := range rep.DeliveredPackets() {
			pe.Acked(d.Seq, ns)
		}
		for _, d := range rep.LostPackets() {
			pe.Lost(d.Seq, ns)
		}
		pe.Receive(payload, ns)
		for {
			_, got, ok := pe.Next()
			if !ok {
				break
			}
			if len(got) == len(msg) {
				echoes++
			}
		}
		if egressRate > 0 {
			s.msgTimer.tickLocked(now)
		}
	}
	for range 300 { // rings and pools reach their steady size
		round()
	}
	if n := testing.AllocsPerRun(1000, round); n != 0 {
		t.Errorf("one message echoed: %v allocs", n)
	}
	if echoes < 1300 {
		t.Fatalf("only %d of 1300 echoes came back", echoes)
	}
}

// A Messages packet refused for room (over_budget) allocates nothing,
// though it is checked, found alive (SeqState.Alive) and proves its peer
// alive.
func TestMessagesRefusedAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("the race runtime allocates; run without -race")
	}
	mc := testChannels
	mc.MaxMessageSize = 4 << 10
	mc.ConnReceiveBudget = 48 * 1200 // the reserve and about a dozen units
	// The refused packets go as fast as the loop takes them: no inbound
	// budget, or it would drop them before the message layer.
	s := listen(t, Config{Sockets: 1, Handler: &msgEcho{}, Messages: mc, InboundPacketRate: -1})
	p := newRawPeer(t, s, "127.0.0.1:0")
	ck := p.connect()
	c, ok := s.Conn(p.addr())
	if !ok {
		t.Fatal("no connection")
	}
	serverSeq, clientSeq := cookie.Sequences(&ck)
	var seq seqwin.SeqState
	seq.Init(clientSeq, serverSeq, seconds(time.Now()))
	l := newLoop(s, 0, s.socks[0], 8, seconds(time.Now()))
	unit := func(id uint16) []byte { return rawEntry(id, 0, 0, make([]byte, s.st.msgPayload-5)) }
	send := func(payload []byte) {
		now := time.Now()
		sq, ack, bits, _, _ := seq.Send(seconds(now))
		hdr := protocol.ConnHeader{ClientID: p.clientID, Tag: cookie.SessionTag(&ck),
			Seq: sq, Ack: ack, AckBits: bits, Kind: protocol.KindMessages}
		m := &l.rb.Msgs[0]
		m.N = wire.EncodeConn(m.Buf, s.st.magic, &hdr, payload)
		m.Addr = p.addr()
		l.batch(1, now)
	}
	for id := uint16(1); id < 40; id++ { // fill the budget; unit 0 never comes
		send(unit(id))
	}
	refused := unit(200)
	before := s.Stats().MessageDrops[message.DropOverBudget]
	last := c.lastRecv.Load()
	round := func() { send(refused) }
	for range 100 {
		round()
	}
	if n := testing.AllocsPerRun(1000, round); n != 0 {
		t.Errorf("a refused Messages packet: %v allocs", n)
	}
	if got := s.Stats().MessageDrops[message.DropOverBudget] - before; got < 1100 {
		t.Fatalf("%d refused, want every one of 1100", got)
	}
	if c.lastRecv.Load() == last {
		t.Fatal("refused packets did not prove the peer alive")
	}
}
