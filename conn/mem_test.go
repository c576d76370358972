package conn

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/udpgate/udpgate/batchio"
	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seqwin"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/internal/wire"
)

// A server over an in-memory network (internal/testkit/conntest), driven by the
// test: its receive loops and housekeeping run only when the test steps
// them, at the test's clock, so a test follows every datagram without
// sockets and without sleeping.

var memServerAddr = netip.MustParseAddrPort("10.0.0.1:7777")

type memServer struct {
	*Server
	t   *testing.T
	nw  *conntest.Network
	clk *conntest.Clock
	eps []*conntest.Endpoint
	hk  []*Conn
	// drainedSig fires at the end of each drain task.
	drainedSig conntest.Signal
}

// newMemServer makes a server with cfg (one socket unless cfg says more)
// on memServerAddr; its loops and housekeeping are not running.
func newMemServer(t *testing.T, cfg Config) *memServer {
	t.Helper()
	nw := conntest.NewNetwork()
	clk := conntest.NewClock(time.Unix(1_700_000_000, 0))
	cfg.Now = clk.Now
	if cfg.Sockets == 0 {
		cfg.Sockets = 1
	}
	st, err := cfg.settings()
	if err != nil {
		t.Fatal(err)
	}
	now := st.Now()
	secrets, err := cookie.NewSecrets(seconds(now), nil)
	if err != nil {
		t.Fatal(err)
	}
	g := nw.Listen(memServerAddr, cfg.Sockets)
	socks := make([]transport, len(g.Endpoints()))
	for i, ep := range g.Endpoints() {
		socks[i] = ep
	}
	s, err := newServer(st, now, secrets, g, socks, batchio.DefaultBatchSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	m := &memServer{Server: s, t: t, nw: nw, clk: clk, eps: g.Endpoints()}
	s.drained = m.drainedSig.Fire
	return m
}

// step runs each loop over the datagrams queued for it, a batch at a time,
// and returns once the promotions they asked for are done: their Acks sent
// and the Handler told.
func (m *memServer) step() {
	m.t.Helper()
	for i, l := range m.loops {
		for m.eps[i].Pending() > 0 {
			n, err := m.eps[i].Recv(l.rb)
			if err != nil {
				m.t.Fatal(err)
			}
			l.batch(n, m.clk.Now())
		}
	}
	m.waitPromotions()
}

// waitPromotions waits for every loop's promotion queue to be drained by
// the pool, checking at each drain task's end (Server.drained). A task
// ends after it has sent its replies and told the Handler, so an idle
// queue under the lock means the promotions are done.
func (m *memServer) waitPromotions() {
	m.t.Helper()
	idle := func() bool {
		for _, l := range m.loops {
			l.queue.mu.Lock()
			busy := l.queue.running != 0 || l.queue.waiting() != 0
			l.queue.mu.Unlock()
			if busy {
				return false
			}
		}
		return true
	}
	if !m.drainedSig.Await(10*time.Second, idle) {
		m.t.Fatal("promotions still running after 10 s")
	}
}

// sweepNow runs one round of housekeeping at the clock's time.
func (m *memServer) sweepNow() { m.hk = m.Server.housekeep(m.clk.Now(), m.hk) }

// advance moves the clock by d in SweepInterval steps, housekeeping after
// each, as the server's ticker would.
func (m *memServer) advance(d time.Duration) {
	for step := m.st.SweepInterval; d > 0; d -= step {
		m.clk.Advance(min(step, d))
		m.sweepNow()
	}
}

// memClient plays a client over the network: fastpath's handshake, and a
// sequence state for connection packets.
type memClient struct {
	t  *testing.T
	m  *memServer
	ep *conntest.Endpoint
	hs handshake.ClientHandshake
	id uint8 // ClientID
	// last is the last datagram sent, for a test to repeat.
	last []byte

	events     []handshake.ClientEvent
	handshakes []protocol.PacketType // handshake packets received, by type
	kinds      []protocol.Kind       // connection packets accepted, by kind
	data       [][]byte              // and the payloads of the Data among them

	connected bool
	ck        cookie.Cookie
	hdr       protocol.ConnHeader
	seq       seqwin.SeqState
	heard     time.Time // last connection packet accepted
	rep       seqwin.AckReport
}

// newMemPair is a memServer whose Handler is a recorder (echoing Data or
// not) and a client of it at 10.0.0.2:5000, not started.
func newMemPair(t *testing.T, echo bool, clientID uint8) (*recorder, *memServer, *memClient) {
	rec := newRecorder(echo)
	m := newMemServer(t, Config{Handler: rec})
	return rec, m, m.client("10.0.0.2:5000", clientID)
}

func (m *memServer) client(addr string, clientID uint8) *memClient {
	return &memClient{
		t:  m.t,
		m:  m,
		ep: m.nw.Bind(netip.MustParseAddrPort(addr)),
		id: clientID,
		hs: handshake.NewClientHandshake(handshake.ClientConfig{
			Magic:           m.st.magic,
			NetworkVersion:  m.st.NetworkVersion,
			NetworkFeatures: m.st.NetworkFeatures,
			ClientID:        clientID,
		}, uint64(clientID)+1),
	}
}

func (c *memClient) now() float64 { return seconds(c.m.clk.Now()) }

func (c *memClient) send(p []byte) {
	c.last = bytes.Clone(p)
	if err := c.ep.WriteTo(p, memServerAddr); err != nil {
		c.t.Fatal(err)
	}
}

// start sends the first Initial.
func (c *memClient) start() {
	c.hs.Start(c.now())
	var out [handshake.MaxReplyLen + 32]byte
	n, ev := c.hs.Poll(c.now(), out[:])
	if n == 0 {
		c.t.Fatal("no Initial to send")
	}
	c.send(out[:n])
	c.event(ev)
}

// pump handles every datagram the client has received, answering what the
// handshake answers.
func (c *memClient) pump() {
	var buf [protocol.MaxDatagramLimit]byte
	for {
		n, from, ok := c.ep.RecvFrom(buf[:])
		if !ok {
			return
		}
		if from != memServerAddr {
			c.t.Fatalf("datagram from %v", from)
		}
		c.handle(buf[:n])
	}
}

func (c *memClient) handle(pkt []byte) {
	magic := c.m.st.magic
	p, r := wire.DecodePrefix(magic, pkt)
	if r != protocol.DropNone {
		c.t.Fatalf("server sent a datagram the client drops: %v", r)
	}
	if !p.Handshake {
		var h protocol.ConnHeader
		payload, r := wire.DecodeConn(magic, pkt, &h)
		if r == protocol.DropNone && (!c.connected || h.Tag != c.hdr.Tag) {
			r = protocol.DropBadTag
		}
		if r == protocol.DropNone {
			r = c.seq.Receive(h.Seq, h.Ack, h.AckBits, c.now(), &c.rep)
		}
		if r != protocol.DropNone {
			c.t.Fatalf("server sent a connection packet the client drops: %v", r)
		}
		c.heard = c.m.clk.Now()
		c.kinds = append(c.kinds, h.Kind)
		if h.Kind == protocol.KindData {
			c.data = append(c.data, bytes.Clone(payload))
		}
		return
	}
	var hs protocol.Handshake
	if r := wire.DecodeHandshake(magic, pkt, &hs); r != protocol.DropNone {
		c.t.Fatalf("server sent a handshake packet the client drops: %v", r)
	}
	c.handshakes = append(c.handshakes, hs.Type)
	if c.connected {
		c.event(c.hs.Heard(seconds(c.heard)))
	}
	var out [handshake.MaxReplyLen + 32]byte
	n, ev, _ := c.hs.Receive(c.now(), pkt, out[:])
	if n > 0 {
		c.send(out[:n])
	}
	c.event(ev)
}

func (c *memClient) event(ev handshake.ClientEvent) {
	if ev == handshake.EventNone {
		return
	}
	c.events = append(c.events, ev)
	if ev == handshake.EventConnected {
		c.connected = true
		c.ck = c.hs.Cookie()
		c.hdr = protocol.ConnHeader{SessionID: c.hs.SessionID(), ClientID: c.id, Tag: cookie.SessionTag(&c.ck)}
		srv, cl := cookie.Sequences(&c.ck)
		c.seq.Init(cl, srv, c.now())
		c.heard = c.m.clk.Now()
	}
}

// sendConn sends one connection packet.
func (c *memClient) sendConn(kind protocol.Kind, payload []byte) {
	h := c.hdr
	h.Kind = kind
	h.Seq, h.Ack, h.AckBits, _, _ = c.seq.Send(c.now())
	var buf [protocol.MaxDatagramLimit]byte
	n := wire.EncodeConn(buf[:], c.m.st.magic, &h, payload)
	if n == 0 {
		c.t.Fatal("connection packet not encoded")
	}
	c.send(buf[:n])
}

// rebind moves the client to a new address, as a NAT rebinding would.
func (c *memClient) rebind(addr string) {
	c.ep.Close()
	c.ep = c.m.nw.Bind(netip.MustParseAddrPort(addr))
}

func (c *memClient) addr() netip.AddrPort { return c.ep.LocalAddr() }

// connect runs a client's handshake to the end.
func (c *memClient) connect() {
	c.t.Helper()
	c.start()
	for range 3 { // Initial, Response, and Ack back
		c.m.step()
		c.pump()
	}
	if !c.connected {
		c.t.Fatalf("not connected; events %v, handshake packets %v", c.events, c.handshakes)
	}
}
