package loadgen

import (
	"context"
	"net/netip"
	"runtime/debug"
	"testing"
	"time"
	"unsafe"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seqwin"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/internal/testkit/netem"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
)

// msgEchoApp echoes Data, and each message on its channel (cmd/server's
// echo application).
type msgEchoApp struct{ echoApp }

func (msgEchoApp) OnMessage(c *conn.Conn, ch int, msg []byte) { _ = c.SendMessage(ch, msg) }

// listenMsgEcho starts an udpgate server with the tools' channels (with
// cfg.Messages' sizes, if it has channels) and the echo application; cfg
// adds settings.
func listenMsgEcho(t *testing.T, cfg conn.Config) *conn.Server {
	t.Helper()
	cfg.Handler = msgEchoApp{}
	cfg.ChallengeRate = -1
	cfg.Sockets = 1
	if len(cfg.Messages.Channels) == 0 {
		cfg.Messages = msgcfg.Config(0, 0)
	}
	return conntest.Listen(t, conn.Listen, cfg)
}

// runMessages connects every client of cfg and runs messages for window.
func runMessages(t *testing.T, cfg Config, window time.Duration) RunResult {
	t.Helper()
	g := newGen(t, cfg)
	c, err := g.Connect(context.Background())
	if err != nil || c.Connected != cfg.Clients {
		t.Fatalf("connect: %+v, %v", c, err)
	}
	r, err := g.Run(context.Background(), RunSpec{Window: window})
	if err != nil {
		t.Fatal(err)
	}
	m := r.Total
	t.Logf("messages: sent %d, delivered %d, out of order %d, duplicated %d, refused %d, dropped %d, unexpected %d, unanswered %d, resent %d, packets %d, acks %d; rtt p50 %v p99 %v max %v",
		m.MessagesSent, m.MessagesDelivered, m.MessagesOutOfOrder, m.MessagesDuplicated, m.MessagesRefused, m.MessagesDropped,
		m.MessagesUnexpected, r.MessagesUnanswered, r.MessagesResent, m.MessagePackets, m.MessageAcks,
		r.MessageLatency.P50, r.MessageLatency.P99, r.MessageLatency.Max)
	if cfg.BulkSize > 0 {
		t.Logf("bulk: sent %d, delivered %d (%d bytes), out of order %d, duplicated %d, refused %d, unanswered %d; goodput %.0f B/s; rtt p50 %v p99 %v max %v",
			m.BulkSent, m.BulkDelivered, m.BulkBytes, m.BulkOutOfOrder, m.BulkDuplicated, m.BulkRefused, r.BulkUnanswered,
			r.BulkGoodput(), r.BulkLatency.P50, r.BulkLatency.P99, r.BulkLatency.Max)
	}
	if m.MessagesSent == 0 && cfg.Messages != MessagesOff || m.BulkSent == 0 && cfg.BulkSize > 0 ||
		m.MessagesDropped != 0 || m.MessagesUnexpected != 0 || m.MessagesStalled != 0 || m.Sent != 0 {
		t.Errorf("%+v", m)
	}
	return r
}

// checkReliable: every reliable message came back once, in order, timed.
func checkReliable(t *testing.T, r RunResult) {
	t.Helper()
	m := r.Total
	if m.MessagesDelivered != m.MessagesSent || m.MessagesOutOfOrder != 0 || m.MessagesDuplicated != 0 || r.MessagesUnanswered != 0 {
		t.Errorf("reliable: sent %d, delivered %d, out of order %d, duplicated %d, unanswered %d",
			m.MessagesSent, m.MessagesDelivered, m.MessagesOutOfOrder, m.MessagesDuplicated, r.MessagesUnanswered)
	}
	if r.MessageLatency.N != m.MessagesDelivered || r.MessageLatency.P50 <= 0 {
		t.Errorf("latency %+v for %d echoes", r.MessageLatency, m.MessagesDelivered)
	}
}

func TestMessagesReliable(t *testing.T) {
	s := listenMsgEcho(t, conn.Config{})
	r := runMessages(t, Config{Server: s.Addr(), Mode: ModeData, Clients: 200, Sockets: 2,
		Messages: MessagesReliable, MessageSize: 100, MessageRate: 50}, 300*time.Millisecond)
	checkReliable(t, r)
}

// TestMessagesReliableLarge: messages of several packets each.
func TestMessagesReliableLarge(t *testing.T) {
	s := listenMsgEcho(t, conn.Config{})
	r := runMessages(t, Config{Server: s.Addr(), Mode: ModeData, Clients: 20,
		Messages: MessagesReliable, MessageSize: 5000, MessageRate: 30}, 300*time.Millisecond)
	checkReliable(t, r)
}

func TestMessagesUnreliable(t *testing.T) {
	s := listenMsgEcho(t, conn.Config{})
	r := runMessages(t, Config{Server: s.Addr(), Mode: ModeData, Clients: 100,
		Messages: MessagesUnreliable, MessageRate: 50}, 300*time.Millisecond)
	m := r.Total
	// Loopback under a light load loses next to nothing.
	if m.MessagesDelivered > m.MessagesSent || m.MessagesDelivered < m.MessagesSent*9/10 || m.MessagesDuplicated != 0 {
		t.Errorf("unreliable: sent %d, delivered %d, duplicated %d", m.MessagesSent, m.MessagesDelivered, m.MessagesDuplicated)
	}
}

func TestMessagesSealed(t *testing.T) {
	s := listenMsgEcho(t, conn.Config{PrivateKey: &testPrivateKey, ProtocolID: testProtocolID})
	r := runMessages(t, Config{Server: s.Addr(), Mode: ModeData, Clients: 30, PrivateKey: &testPrivateKey, ProtocolID: testProtocolID,
		Messages: MessagesReliable, MessageSize: 2000, MessageRate: 30}, 300*time.Millisecond)
	checkReliable(t, r)
}

// TestMessagesNoAllocs: end to end, a message costs no allocation (the
// in-process server's share included). A Run allocates a fixed few
// objects, and the message layer's buffer pools (sync.Pool) sometimes
// miss when buffers are taken on one thread and returned on another, so
// the bound is a fraction per message, far below the one a per-message
// allocation would show; TestClientMessageAllocs counts exactly.
func TestMessagesNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race runtime allocates")
	}
	s := listenMsgEcho(t, conn.Config{})
	g := newGen(t, Config{Server: s.Addr(), Mode: ModeData, Clients: 200, Messages: MessagesReliable, MessageRate: 100})
	if _, err := g.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A first run gives every client its endpoint and warms the buffers.
	if _, err := g.Run(context.Background(), RunSpec{Window: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	// The message layer keeps its buffers in sync.Pools, which a garbage
	// collection empties: refilling them is a cost per collection, not per
	// message, so the collector stays off while the run is measured.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	// On a busy machine the messages in flight, and with them the pools'
	// high-water mark, can grow during a run: that allocates once per new
	// buffer, not per message, and a later run reuses the buffers. A
	// per-message allocation shows in every run, so the bound holds for
	// the best of three.
	for try := 1; ; try++ {
		r, mallocs := runMallocs(t, g)
		n := r.Total.MessagesDelivered
		per := float64(mallocs) / float64(max(n, 1))
		t.Logf("run %d: %d allocations for %d messages (%.3f per message)", try, mallocs, n, per)
		if per <= 0.25 && n >= 1000 {
			return
		}
		if try == 3 {
			t.Fatalf("%d allocations for %d messages (%.3f per message) in the best of %d runs", mallocs, n, per, try)
		}
	}
}

func TestMessageConfig(t *testing.T) {
	srv := netip.MustParseAddrPort("127.0.0.1:7777")
	for _, c := range []Config{
		{Server: srv, Mode: ModeEcho, Clients: 1, Messages: MessagesReliable},
		{Server: srv, Mode: ModeData, Clients: 1, Messages: MessagesReliable, MessageSize: 8},
		{Server: srv, Mode: ModeData, Clients: 1, Messages: MessagesUnreliable, MessageSize: 5000},
		{Server: srv, Mode: ModeData, Clients: 1, Messages: MessagesReliable, MessageRate: -1},
		{Server: srv, Mode: ModeData, Clients: 1, Messages: 9},
	} {
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	c, err := Config{Server: srv, Mode: ModeData, Clients: 1, Messages: MessagesReliable}.withDefaults()
	if err != nil || c.MessageSize != DefaultMessageSize || c.MessageRate != DefaultMessageRate || len(c.MessageConfig.Channels) != msgcfg.NumChannels {
		t.Errorf("defaults %+v, %v", c, err)
	}
	for _, s := range []string{"", "off", "reliable", "unreliable"} {
		if m, err := ParseMessageMode(s); err != nil || s != "" && m.String() != s {
			t.Errorf("ParseMessageMode(%q) = %v, %v", s, m, err)
		}
	}
}

// TestMessageEchoCounting: echoes are counted once, gaps and late ones
// as out of order, repeats as duplicates, numbers never sent apart.
func TestMessageEchoCounting(t *testing.T) {
	cfg, err := Config{Server: netip.MustParseAddrPort("127.0.0.1:7777"), Mode: ModeData, Clients: 1, Sockets: 1, Messages: MessagesReliable}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	g := &Generator{cfg: cfg}
	g.src = newSourceRange(cfg.FirstSource, cfg.SourcesUsed())
	w := newWorker(g, 0, nil)
	s := w.msg.small
	s.next[0] = 100
	s.out = 100
	for _, num := range []uint64{0, 1, 3, 2, 3, 100, 60, 10, 4} {
		w.msgEcho(s, 0, 1, num, 64, 1001)
	}
	c := w.ctr.loc
	// Delivered: 0 1 3 2 60 10 4; out of order: 3 (gap), 2 (late), 60
	// (gap), 10 (late), 4 (late); duplicated: the second 3; unexpected: 100.
	if c[cMsgDelivered] != 7 || c[cMsgOutOfOrder] != 5 || c[cMsgDuplicated] != 1 || c[cMsgUnexpected] != 1 || s.out != 93 || s.hist.Count() != 7 {
		t.Errorf("delivered %d, out of order %d, duplicated %d, unexpected %d, out %d, timed %d",
			c[cMsgDelivered], c[cMsgOutOfOrder], c[cMsgDuplicated], c[cMsgUnexpected], s.out, s.hist.Count())
	}
}

// TestMessagesReliableLossy: through a proxy that drops 10 % of the
// datagrams each way, every reliable message still comes back once and in
// order: the endpoints learn the losses from the acks and resend.
func TestMessagesReliableLossy(t *testing.T) {
	s := listenMsgEcho(t, conn.Config{})
	p, err := netem.New(s.Addr(), netem.Config{Loss: 0.10, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	r := runMessages(t, Config{Server: p.Addr(), Mode: ModeData, Clients: 20, ResendInterval: 100 * time.Millisecond,
		Messages: MessagesReliable, MessageSize: 1500, MessageRate: 50,
		// The drain ends as soon as every message is echoed; on a busy
		// machine a message lost more than once can take longer than
		// the default 5 s.
		MessageDrain: 20 * time.Second}, 500*time.Millisecond)
	checkReliable(t, r)
	if r.MessagesResent == 0 {
		t.Error("nothing resent through a lossy path")
	}
}

// msgPair is one client of a socketless worker and a mirror of the
// server's side of its connection (SeqState and message Endpoint, echoing
// each message), for timing and counting the generator's own message work
// without system calls.
type msgPair struct {
	w     *worker
	seq   seqwin.SeqState
	ep    *message.Endpoint
	rep   seqwin.AckReport
	reply []byte
	pay   int
	now   int64
}

func newMsgPair(tb testing.TB) *msgPair {
	return newMsgPairWith(tb, Config{Messages: MessagesReliable, MessageSize: 100})
}

// newMsgPairWith is newMsgPair with cfg's message settings.
func newMsgPairWith(tb testing.TB, cfg Config) *msgPair {
	tb.Helper()
	cfg.Server, cfg.Mode, cfg.Clients, cfg.Sockets = netip.MustParseAddrPort("127.0.0.1:7777"), ModeData, 1, 1
	cfg, err := cfg.withDefaults()
	if err != nil {
		tb.Fatal(err)
	}
	g := &Generator{cfg: cfg}
	g.src = newSourceRange(cfg.FirstSource, cfg.SourcesUsed())
	p := &msgPair{w: newWorker(g, 0, nil), reply: make([]byte, protocol.DefaultMaxDatagram), pay: cfg.msgPayload(), now: 1e9}
	var ck cookie.Cookie
	ck[0], ck[2] = 7, 9
	s, c := cookie.Sequences(&ck)
	p.w.seqs[0].Init(c, s, 0)
	p.seq.Init(s, c, 0)
	p.w.ids[0] = connID{tag: cookie.SessionTag(&ck), clientID: 1}
	p.w.state[0] = stConnected
	p.w.msgStart(p.now)
	l, err := message.NewLayer(cfg.MessageConfig, p.pay)
	if err != nil {
		tb.Fatal(err)
	}
	p.ep = l.NewEndpoint()
	// The pair's acks come back at the instant of the send, which gives
	// no RTT sample: give both sides one, so that their congestion
	// controllers pace at a millisecond's round trip rather than the
	// 100 ms assumed before the first.
	p.ep.SetRTT(time.Millisecond)
	p.w.msg.eps[0].SetRTT(time.Millisecond)
	return p
}

// roundTrip sends one message from the client, lets the mirror echo it
// and the client take the echo.
func (p *msgPair) roundTrip(tb testing.TB) { p.roundTripOn(tb, p.w.msg.small) }

// roundTripOn is roundTrip with a message of stream s.
func (p *msgPair) roundTripOn(tb testing.TB, s *msgStream) {
	w := p.w
	p.now += int64(time.Millisecond)
	if !w.msgSendOne(s, 0, p.now) {
		tb.Fatal("message refused")
	}
	var h protocol.ConnHeader
	for i := range w.tx.n {
		pkt := unsafe.Slice((*byte)(w.tx.iovs[i].Base), w.tx.iovs[i].Len)
		payload, r := wire.DecodeConn(w.cfg.Magic, pkt, &h)
		if r != protocol.DropNone {
			tb.Fatalf("client packet: %v", r)
		}
		if h.Kind == protocol.KindMessages && p.ep.Check(payload) != message.DropNone {
			tb.Fatal("client packet refused by Check")
		}
		if p.seq.Receive(h.Seq, h.Ack, h.AckBits, seconds(p.now), &p.rep) != protocol.DropNone {
			tb.Fatal("client packet refused by the sequence layer")
		}
		for _, d := range p.rep.DeliveredPackets() {
			p.ep.Acked(d.Seq, p.now)
		}
		if h.Kind == protocol.KindMessages {
			p.ep.Receive(payload, p.now)
		}
		for {
			ch, msg, ok := p.ep.Next()
			if !ok {
				break
			}
			if err := p.ep.Send(ch, msg, p.now); err != nil {
				tb.Fatal(err)
			}
		}
	}
	w.tx.n = 0
	off := wire.ConnHeaderOffset(w.cfg.Magic) + protocol.ConnHeaderBytes
	for p.ep.WantsSend(p.now) {
		seq, ack, bits, _, _ := p.seq.Send(seconds(p.now))
		n := p.ep.WritePayload(p.reply[off:off+p.pay], seq, p.now)
		rh := protocol.ConnHeader{ClientID: 1, Tag: w.ids[0].tag, Seq: seq, Ack: ack, AckBits: bits, Kind: protocol.KindMessages}
		p.ep.PacketSent(p.now)
		deliver(w, 0, p.reply[:wire.EncodeConn(p.reply, w.cfg.Magic, &rh, p.reply[off:off+n])])
		w.answer(0, p.now+int64(100*time.Microsecond), true)
	}
}

// TestClientMessageAllocs: a reliable message's round trip costs the
// generator no allocation: building and sending it (Endpoint.Send,
// WritePayload, SeqState, EncodeConn), then taking its echo (Check,
// Receive, acks, Next, the counts and the histogram).
func TestClientMessageAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race runtime allocates")
	}
	p := newMsgPair(t)
	for range 200 {
		p.roundTrip(t)
	}
	allocs := testing.AllocsPerRun(2000, func() { p.roundTrip(t) })
	c := p.w.ctr.loc
	if allocs != 0 || c[cMsgDelivered] != c[cMsgSent] || c[cMsgDelivered] < 2000 || c[cMsgOutOfOrder] != 0 {
		t.Errorf("%v allocations per message; sent %d, delivered %d, out of order %d", allocs, c[cMsgSent], c[cMsgDelivered], c[cMsgOutOfOrder])
	}
}

// BenchmarkClientMessage is TestClientMessageAllocs's round trip, timed;
// the mirror's share (the server's decode, Check, Receive, Send and
// WritePayload) is included.
func BenchmarkClientMessage(b *testing.B) {
	p := newMsgPair(b)
	b.ReportAllocs()
	for b.Loop() {
		p.roundTrip(b)
	}
}
