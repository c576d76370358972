package conn

import (
	"errors"
	"math/bits"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/ratelimit"
	"github.com/udpgate/udpgate/internal/seqwin"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
)

// Conn is one established connection: on a server, a proven client; on a
// client, its link to the server. Its methods are safe for concurrent use.
type Conn struct {
	// The fields every packet touches come first, so that a packet costs
	// few cache lines: with 100k connections each one is a miss.
	mu sync.Mutex
	// inLoop is the receive loop running this connection's handler right
	// now, or nil. While set, Send appends to that loop's send batch, so an
	// echo leaves in the batch's one sendmmsg, and takes the loop's clock
	// reading; the loop touches its batch only after clearing it under mu.
	inLoop *loop
	st     *settings
	// sec is the sealed-mode state (nil on an unsealed connection): every
	// sealed packet is opened or sealed with it.
	sec      *sealState
	closed   atomic.Bool
	clientID uint8
	session  uint8
	tag      uint32
	// cookie goes into every Peer the loop builds for this address.
	cookie cookie.Cookie
	// lastRecv and lastSend (Unix nanoseconds) are read by housekeeping
	// without taking mu.
	lastRecv atomic.Int64
	lastSend atomic.Int64
	addr     netip.AddrPort
	// Payload bytes of Data and Messages packets (ConnStats); the packet
	// counters are seq's.
	bytesIn, bytesOut uint64
	// seq's scalars follow; it ends in a ring of send times.
	seq seqwin.SeqState

	// Cold: setup and the rare paths.
	// cookieTS is the authorised cookie's Timestamp (server side): an
	// older cookie from this address is a replay.
	cookieTS float64
	// limit is what addrLimits counted this connection under (server).
	limit limitKey
	srv   *Server // nil on the client side
	cli   *Client // nil on the server side
	link  link
	// timer is housekeeping's: the connection's place in the timer wheel.
	timer timerLink
	user  atomic.Pointer[any]

	// msg is the message layer's state (messages.go), nil until the
	// connection's first message; under mu. holdFlush: a Handler callback
	// of this connection runs, so SendMessage queues and the delivering
	// path flushes once it returns.
	msg *message.Endpoint
	// poll is a polling connection's queue (poll.go), nil until its
	// first message; under mu. (Room for it: msgIdx is 32 bits, so the
	// fields up to inb pack into 760 bytes.)
	poll      *pollQueue
	holdFlush bool
	// lingering: Close waits for the reliable messages in flight (no
	// more are taken), on a channel in lingerWaits that is closed when
	// they are acknowledged or the connection ends. Under mu. (No field
	// for the channel: at 768 bytes, with the allocation's header, a
	// connection would take the next size class, 896.)
	lingering bool
	// msgListed and msgIdx: the connection's place on its side's message
	// timer (msgIdx under the timer's lock).
	msgListed atomic.Bool
	msgIdx    int32

	// The Handler contract (handler.go): gate is held from the
	// connection's creation until OnConnect returned (ready), so no packet
	// reaches the Handler first; inflight counts Handler callbacks under
	// way, and OnDisconnect waits for the last of them (discReason and
	// discRemote are set before discReady, discFired makes it once).
	gate       sync.Mutex
	ready      atomic.Bool
	inflight   atomic.Int32
	discReady  atomic.Bool
	discFired  atomic.Bool
	discReason DisconnectReason
	discRemote bool
	// inb is the connection's inbound budget (settings.inbound), which the
	// server's receive loops spend from without c.mu before they parse a
	// packet. It shares the Handler contract's line, which the loop's touch
	// pass loads (TestConnLayout), and fills the 768-byte size class
	// (TestHeapPerConnection).
	inb ratelimit.FlowState
}

// ConnStats are a connection's counters.
type ConnStats struct {
	PacketsIn, PacketsOut uint64 // connection packets received (accepted) and sent
	// BytesIn and BytesOut count the payload bytes of the Data and
	// Messages packets received (accepted) and sent: Send's payloads,
	// and the message entries (docs/protocol.md §14.2: their headers,
	// resends and copies included). Not counted: connection headers,
	// KeepAlive padding, Disconnects and, in sealed mode, the 24 bytes
	// of counter and MAC per packet.
	BytesIn, BytesOut uint64
	Delivered, Lost   uint64 // own packets acknowledged, or fallen out of the window
	Stale             uint64 // duplicates, packets older than the window and suspect sequences, dropped
	RTT               time.Duration
}

// link is where a connection's packets go: a server socket's transport
// (batched, shared) or a client's own UDP socket.
type link struct {
	sock transport
	udp  *net.UDPConn
}

// write sends p to addr. On a client's socket, which reports ICMP errors
// (enableRecvErr), a send can fail with the port unreachable of an earlier
// datagram (ECONNREFUSED), and then p was not sent: it is sent once more.
// If that fails the same way, p counts as lost and write reports nothing:
// once connected, an ICMP error (unauthenticated, and often transient, as
// when a server restarts behind its address) is not an error of this
// send; the resends, the stall bound and the timeout deal with a server
// that is gone (Client.refusedLocked).
func (l *link) write(p []byte, addr netip.AddrPort) error {
	if l.sock != nil {
		return l.sock.WriteTo(p, addr)
	}
	_, err := l.udp.WriteToUDPAddrPort(p, addr)
	if errors.Is(err, syscall.ECONNREFUSED) {
		if _, err = l.udp.WriteToUDPAddrPort(p, addr); errors.Is(err, syscall.ECONNREFUSED) {
			err = nil
		}
	}
	return err
}

// sendBufs holds packet-sized scratch buffers, so Send encodes without
// allocating and without a per-connection buffer (100k connections would
// otherwise hold 150 MB of idle buffers).
var sendBufs = sync.Pool{New: func() any { return new([protocol.MaxDatagramLimit]byte) }}

// initSeq starts the sequence state from the authorised cookie: a server
// sends from ServerSeq and expects ClientSeq, a client the mirror image.
func (c *Conn) initSeq(server bool, now time.Time) {
	s, cl := cookie.Sequences(&c.cookie)
	if server {
		c.seq.Init(s, cl, seconds(now))
	} else {
		c.seq.Init(cl, s, seconds(now))
	}
	ns := now.UnixNano()
	c.lastRecv.Store(ns)
	c.lastSend.Store(ns)
}

// RemoteAddr is the peer's current address (it changes on migration).
func (c *Conn) RemoteAddr() netip.AddrPort {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addr
}

// ClientID is the ClientID the connection was made with.
func (c *Conn) ClientID() uint8 { return c.clientID }

// RTT is the smoothed round-trip time from acks; before the first, a
// server's connection has its handshake's round trip (when under 100 ms
// and not sealed), a client's 0.
func (c *Conn) RTT() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Duration(c.seq.RTT() * float64(time.Second))
}

// Stats returns the connection's counters.
func (c *Conn) Stats() ConnStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.seq.Stats()
	return ConnStats{
		PacketsIn: q.Received, PacketsOut: q.Sent,
		BytesIn: c.bytesIn, BytesOut: c.bytesOut,
		Delivered: q.Delivered, Lost: q.Lost, Stale: q.Duplicates + q.TooOld + q.Suspect,
		RTT: time.Duration(c.seq.RTT() * float64(time.Second)),
	}
}

// SetValue attaches application data to the connection; Value returns it.
func (c *Conn) SetValue(v any) { c.user.Store(&v) }

// Value returns what SetValue stored, or nil.
func (c *Conn) Value() any {
	if p := c.user.Load(); p != nil {
		return *p
	}
	return nil
}

// Send sends payload as one Data packet and returns its sequence number
// (the one a DeliveryHandler later reports). Delivery is not guaranteed: the
// protocol reports loss, it does not retransmit. payload is copied before
// Send returns.
func (c *Conn) Send(payload []byte) (uint16, error) {
	n := wire.ConnLen(c.st.magic, protocol.KindData, len(payload))
	if c.st.sealed {
		n = wire.SealedConnLen(c.st.magic, len(payload))
	}
	if len(payload) == 0 || n > c.st.MaxDatagram {
		return 0, ErrPayloadSize
	}
	return c.sendKind(protocol.KindData, payload)
}

// sendKind encodes and sends one connection packet: sealed on a proven
// sealed connection; an unproven one sends nothing (only proofs and
// refusals, which have their own paths).
func (c *Conn) sendKind(kind protocol.Kind, payload []byte) (uint16, error) {
	if !c.st.sealed {
		return c.send(kind, payload, false)
	}
	if !c.sec.proven() {
		return 0, ErrClosed
	}
	return c.send(kind, payload, true)
}

// send encodes (sealed or not) and sends one connection packet. A
// Messages packet takes its payload from the Endpoint, packed for the
// packet's sequence number; every packet carries acks, which the Endpoint
// is told.
func (c *Conn) send(kind protocol.Kind, payload []byte, sealed bool) (uint16, error) {
	if c.closed.Load() && kind != protocol.KindDisconnect {
		return 0, ErrClosed
	}
	c.mu.Lock()
	l := c.inLoop
	var sec float64
	var ns int64
	if l != nil {
		sec, ns = l.nowSec, l.nowNs // the batch's clock reading: one per batch, not per Send
	} else {
		now := c.st.Now()
		sec, ns = seconds(now), now.UnixNano()
	}
	seq, ack, bits, lost, evicted := c.seq.Send(sec)
	var scratch *[protocol.MaxDatagramLimit]byte
	if e := c.endpoint(); e != nil {
		if evicted {
			e.Evicted(lost.Seq, ns)
		}
		if kind == protocol.KindMessages {
			scratch = sendBufs.Get().(*[protocol.MaxDatagramLimit]byte)
			payload = scratch[:e.WritePayload(scratch[:c.st.msgPayload], seq, ns)]
		}
		e.PacketSent(ns)
	}
	if kind == protocol.KindMessages && len(payload) == 0 {
		kind = protocol.KindKeepAlive // nothing was due after all: acks only
	}
	h := protocol.ConnHeader{SessionID: c.session, ClientID: c.clientID, Tag: c.tag,
		Seq: seq, Ack: ack, AckBits: bits, Kind: kind}
	if kind == protocol.KindData || kind == protocol.KindMessages {
		c.bytesOut += uint64(len(payload))
	}
	// A server shutting down closes its sockets once every connection
	// was told: a Disconnect left in a loop's batch would be lost with
	// them, so it goes now.
	if l != nil && l.out < len(l.sb.Msgs) && (c.srv == nil || !c.srv.closing.Load()) {
		m := &l.sb.Msgs[l.out]
		if n := c.encode(m.Buf[:cap(m.Buf)], &h, payload, sealed); n > 0 {
			m.N, m.Addr = n, c.addr
			l.out++
			c.mu.Unlock()
			if scratch != nil {
				sendBufs.Put(scratch)
			}
			c.lastSend.Store(ns)
			if evicted {
				c.notifyLost(lost.Seq)
			}
			return seq, nil
		}
	}
	buf := sendBufs.Get().(*[protocol.MaxDatagramLimit]byte)
	n := c.encode(buf[:], &h, payload, sealed)
	addr, lk := c.addr, c.link
	c.mu.Unlock()
	if scratch != nil {
		sendBufs.Put(scratch)
	}
	c.lastSend.Store(ns)
	err := lk.write(buf[:n], addr)
	sendBufs.Put(buf)
	if evicted {
		c.notifyLost(lost.Seq)
	}
	return seq, err
}

// endpoint is c.msg, read only when the server or client has messages
// configured: c.msg lies past the lines the packet path keeps hot
// (TestConnLayout), and at many connections a read of it is a cache miss
// per packet (tuning.md, "Data at 100k connections"). Called with c.mu
// held.
func (c *Conn) endpoint() *message.Endpoint {
	if c.st.msgs == nil {
		return nil // c.msg is only ever set with messages configured
	}
	return c.msg
}

// receive handles one connection packet whose SessionID, ClientID and tag
// were already checked. It runs on the receive path: no allocation.
//
// rep is the caller's scratch report (a receive loop owns one), lent for the
// call: it is kilobytes, too big to zero per packet.
func (c *Conn) receive(h *protocol.ConnHeader, payload []byte, now time.Time, rep *seqwin.AckReport, l *loop) protocol.DropReason {
	if c.closed.Load() {
		return protocol.DropUnknownConnection
	}
	c.mu.Lock()
	return c.receiveLocked(h, payload, now, rep, l)
}

// receiveLocked is receive from the sequence window on, called with c.mu
// held (which it releases) by a path that took it already and found c open.
func (c *Conn) receiveLocked(h *protocol.ConnHeader, payload []byte, now time.Time, rep *seqwin.AckReport, l *loop) protocol.DropReason {
	var e *message.Endpoint
	var sendable uint32 // channels drained for OnSendable
	if h.Kind == protocol.KindMessages {
		// The message layer checks a Messages packet before the sequence
		// window accepts (and so acknowledges) it: a packet it cannot
		// hold must stay unacknowledged, so that its sender resends.
		var r message.DropReason
		if e = c.endpointLocked(); e != nil {
			r = e.Check(payload)
		}
		if e == nil || r != message.DropNone {
			// Refused for room, but authenticated (its Tag, or sealed,
			// its AEAD and counter): unless it is a duplicate or too
			// old, it still proves the peer alive, so that a
			// connection refused for room is not also timed out. (A
			// packet that breaks the rules proves nothing.)
			alive := (r == message.DropOverBudget || r == message.DropOverShare) && c.seq.Alive(h.Seq, h.Ack)
			c.mu.Unlock()
			if alive {
				c.lastRecv.Store(now.UnixNano())
			}
			return protocol.DropMessageRefused
		}
	}
	// The batch's conversions of now on a loop (now is then l.now), its
	// own otherwise.
	var sec float64
	var ns int64
	if l != nil {
		sec, ns = l.nowSec, l.nowNs
	} else {
		sec, ns = seconds(now), now.UnixNano()
	}
	r := c.seq.Receive(h.Seq, h.Ack, h.AckBits, sec, rep)
	if r != protocol.DropNone {
		c.mu.Unlock()
		return r
	}
	if m := c.endpoint(); m != nil {
		for _, p := range rep.DeliveredPackets() {
			m.Acked(p.Seq, ns)
		}
		for _, p := range rep.LostPackets() {
			m.Lost(p.Seq, ns)
		}
		m.Acks(h.Ack, h.AckBits, ns)
		if rep.RTTSample >= 0 {
			m.SetRTT(time.Duration(rep.RTTSample * float64(time.Second)))
		}
		if e != nil {
			e.Receive(payload, ns)
			if c.st.polling {
				c.pollLocked(e)
			}
		}
		if c.st.sendable != nil {
			sendable = m.TakeSendable()
		}
		if c.lingering && m.InFlight() == 0 {
			c.wakeLinger()
		}
	}
	if h.Kind == protocol.KindData || h.Kind == protocol.KindMessages {
		c.bytesIn += uint64(len(payload))
	}
	c.inLoop = l
	// With messages, the Handler's SendMessage calls only queue until
	// the callbacks return (one flush below); set in this critical
	// section, so the packet path takes no lock for it.
	hold := false
	if c.st.msgs != nil {
		hold = h.Kind != protocol.KindDisconnect
		c.holdFlush = hold // without messages it stays false, its line untouched
	}
	c.mu.Unlock()
	c.lastRecv.Store(ns)
	// With l set, every return below ends the window in which Send
	// appends to l's batch (leaveLoop): by hand, as a defer costs more.
	if h.Kind == protocol.KindDisconnect {
		c.awaitReady()
		reason := ReasonClosed
		if len(payload) == 1 && payload[0] >= 1 && payload[0] < protocol.NumDisconnectReasons {
			reason = DisconnectReason(payload[0])
		}
		c.shutdown(reason, true)
		if l != nil {
			c.leaveLoop()
		}
		return protocol.DropNone
	}
	if !c.enter() { // enter waits for OnConnect first, as awaitReady
		if l != nil {
			c.leaveLoop()
		}
		return protocol.DropNone // closed: the hold no longer matters
	}
	if c.st.delivery != nil && rep.NumDelivered+rep.NumLost > 0 {
		c.notify(rep)
	}
	for ; sendable != 0; sendable &= sendable - 1 {
		c.st.sendable.OnSendable(c, bits.TrailingZeros32(sendable))
	}
	if dh := c.st.msgDelivery; dh != nil && c.st.msgs != nil {
		c.reportAcked(dh)
	}
	switch h.Kind {
	case protocol.KindData:
		if sh := c.st.seqHandler; sh != nil {
			sh.OnSequencedPacket(c, h.Seq, payload)
		} else {
			c.st.Handler.OnPacket(c, payload)
		}
	case protocol.KindMessages:
		c.deliverMessages()
	}
	if hold && c.endHold() {
		_ = c.Flush()
	}
	c.exit()
	if l != nil {
		c.leaveLoop()
	}
	return protocol.DropNone
}

// endHold closes the window in which SendMessage only queues; it reports
// whether the connection has a message Endpoint.
func (c *Conn) endHold() bool {
	c.mu.Lock()
	c.holdFlush = false
	has := c.msg != nil
	c.mu.Unlock()
	return has
}

// enter admits a Handler callback unless the connection closed, and counts
// it, so that OnDisconnect comes after it.
func (c *Conn) enter() bool {
	c.awaitReady()
	c.inflight.Add(1)
	if c.closed.Load() {
		c.exit()
		return false
	}
	return true
}

// awaitReady returns once OnConnect has returned: at once but for a packet
// that raced its connection's promotion.
func (c *Conn) awaitReady() {
	if !c.ready.Load() {
		if c.srv != nil {
			if h := c.srv.awaitingReady.Load(); h != nil {
				(*h)(c)
			}
		}
		c.gate.Lock()
		c.gate.Unlock() //nolint:staticcheck // a barrier: OnConnect has returned
	}
}

// exit ends a callback admitted by enter; the last one out after the
// connection closed tells the Handler.
func (c *Conn) exit() {
	if c.inflight.Add(-1) == 0 && c.discReady.Load() {
		c.fireDisconnect()
	}
}

// fireDisconnect calls OnDisconnect once.
func (c *Conn) fireDisconnect() {
	if c.discFired.CompareAndSwap(false, true) {
		c.reportUnacked()
		c.st.Handler.OnDisconnect(c, c.discReason, c.discRemote)
	}
}

// announce marks the connection ready once OnConnect returned, and opens
// the gate for packets that waited.
func (c *Conn) announce() {
	c.ready.Store(true)
	c.gate.Unlock()
}

// leaveLoop ends the window in which Send appends to a loop's batch.
func (c *Conn) leaveLoop() {
	c.mu.Lock()
	c.inLoop = nil
	c.mu.Unlock()
}

func (c *Conn) notifyLost(seq uint16) {
	if dh := c.st.delivery; dh != nil {
		dh.OnDelivery(c, seq, false)
	}
}

// notify passes delivery and loss reports to the DeliveryHandler.
func (c *Conn) notify(rep *seqwin.AckReport) {
	dh := c.st.delivery
	for _, p := range rep.DeliveredPackets() {
		dh.OnDelivery(c, p.Seq, true)
	}
	for _, p := range rep.LostPackets() {
		dh.OnDelivery(c, p.Seq, false)
	}
}

// tick runs the connection's timers: a KeepAlive after KeepAlive idle, a
// close after Timeout silent. Housekeeping calls it every sweep; it reads
// two atomics and usually does nothing.
func (c *Conn) tick(now time.Time) {
	if c.closed.Load() {
		return
	}
	ns := now.UnixNano()
	if c.st.sealed && !c.sec.proven() {
		// A client still proving: its proof timer is its Dial's.
		return
	}
	if ns-c.lastRecv.Load() >= c.timeoutNs() {
		c.shutdown(ReasonTimedOut, false)
		return
	}
	// KeepAlives keep a live peer from timing out. A peer silent for two
	// intervals is likely gone: it gets no more, so a client that proves
	// an address and goes quiet is sent little more than it sent.
	ka := c.st.KeepAlive.Nanoseconds()
	if ns-c.lastSend.Load() >= ka && ns-c.lastRecv.Load() < 2*ka {
		_, _ = c.sendKind(protocol.KindKeepAlive, nil)
	}
}

// Close ends the connection: first it waits, up to Config.Linger, for
// the reliable messages queued or unacknowledged to be acknowledged (new
// ones are refused meanwhile), then the peer is sent Disconnect (reason
// 1) disconnectPackets times. It returns an error wrapping
// ErrUndelivered when some were not. A negative Linger closes at
// once, discarding them. Called from a Handler callback of the
// connection, Close returns at once and the linger runs in the
// background (the acks it waits for come through that callback's
// goroutine). From another connection's callback it blocks that
// callback's receive loop for up to the linger: close other connections
// from a goroutine of your own, or configure a negative Linger. Closing
// twice is harmless.
func (c *Conn) Close() error {
	if c.cli != nil {
		return c.cli.Close()
	}
	if c.inCallback() {
		// The acks it would wait for come through the receive loop
		// running this callback: linger in the background instead.
		go func() {
			_ = c.linger()
			c.shutdown(ReasonClosed, false)
		}()
		return nil
	}
	err := c.linger()
	c.shutdown(ReasonClosed, false)
	return err
}

// inCallback reports whether a Handler callback of this connection's
// receive path is under way (with messages configured: holdFlush), the
// goroutine that would have to take the acks a linger waits for.
func (c *Conn) inCallback() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.holdFlush
}

// shutdown ends the connection once. A local decision notifies the peer
// with Disconnect packets; a remote Disconnect is not answered (§7).
func (c *Conn) shutdown(reason DisconnectReason, remote bool) {
	if c.closed.Swap(true) {
		return
	}
	// A client's sealed connection that was never proven was never
	// announced: its end is silent, to the peer and to the Handler.
	announced := c.sec == nil || c.sec.proven()
	if !remote && announced {
		var p [1]byte
		p[0] = byte(reason)
		n := disconnectPackets
		if reason == ReasonTimedOut {
			n = timeoutDisconnectPackets
		}
		for range n {
			_, _ = c.sendKind(protocol.KindDisconnect, p[:])
		}
	}
	if c.srv != nil {
		c.srv.removed(c, reason)
	}
	if c.cli != nil {
		c.cli.ended(reason, remote)
	}
	c.mu.Lock()
	if c.lingering {
		c.wakeLinger() // a Close lingering: the connection ended
	}
	c.mu.Unlock()
	c.releaseMessages(announced)
	if announced {
		// After every callback under way (exit fires it otherwise).
		c.discReason, c.discRemote = reason, remote
		c.discReady.Store(true)
		if c.inflight.Load() == 0 {
			c.fireDisconnect()
		}
	}
}
