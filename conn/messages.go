package conn

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/udpgate/udpgate/internal/egress"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
)

// Messages (docs/protocol.md §14): package message keeps each connection's
// channels, packs messages into Messages packets and reads them back; this
// file wires it to the connection. The connection's mutex serialises its
// Endpoint, created on first use so that an idle connection pays one nil
// pointer.

// MessageHandler is optionally implemented by a Handler to receive
// messages. msg is borrowed for the call: copy what you keep. Messages of
// one channel arrive in the channel's order (reliable-ordered: every
// message once, in order; sequenced: only newer ones).
type MessageHandler interface {
	OnMessage(c *Conn, channel int, msg []byte)
}

// maxFlushPackets bounds the packets one flush sends; the rest waits for
// the message timer (at most messageTick later), so one call never holds
// a receive loop for a whole large message.
const maxFlushPackets = 64

// maxTickPackets bounds the packets the message timer sends for one
// connection per tick: a pacer's bucket at the default ceiling (5 ms of
// 32 MiB/s, 145 packets) and more, so that the tick does not cap a fast
// path's rate (at 64 packets a tick it was 15 MB/s), while each of many
// connections still gets its turn within the tick.
const maxTickPackets = 256

// endpointLocked returns the connection's Endpoint, creating it on first
// use, or nil when messages are off; the caller holds mu.
func (c *Conn) endpointLocked() *message.Endpoint {
	if c.msg == nil && c.st.msgs != nil {
		c.msg = c.st.msgs.NewEndpoint()
		c.msg.SetRTT(time.Duration(c.seq.RTT() * float64(time.Second)))
	}
	return c.msg
}

// SendMessage sends msg on channel ch: queued, then sent at once, or, when
// called from this connection's Handler callback, as soon as the callback
// returns, so that answers to the messages of one packet share a packet.
// msg is copied before SendMessage returns.
func (c *Conn) SendMessage(ch int, msg []byte) error {
	hold, err := c.queue(ch, msg)
	if err != nil || hold {
		return err
	}
	return c.Flush()
}

// QueueMessage queues msg on channel ch without sending it: it leaves with
// the next SendMessage or Flush, or within a few milliseconds (the message
// timer). A game queues a frame's messages and flushes once.
func (c *Conn) QueueMessage(ch int, msg []byte) error {
	hold, err := c.queue(ch, msg)
	if err == nil && !hold {
		c.msgSchedule()
	}
	return err
}

// queue hands msg to the Endpoint; hold reports that a Handler callback of
// this connection is under way, whose end flushes.
func (c *Conn) queue(ch int, msg []byte) (hold bool, err error) {
	if c.closed.Load() || (c.st.sealed && !c.sec.proven()) {
		return false, ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lingering {
		return false, ErrClosed
	}
	e := c.endpointLocked()
	if e == nil {
		return false, message.ErrNoChannel
	}
	return c.holdFlush, e.Send(ch, msg, c.nowLocked().UnixNano())
}

// lingerWaits maps a connection whose Close lingers to the channel that
// wakes it (wakeLinger); entries live only while a Close waits.
var lingerWaits sync.Map

// wakeLinger wakes the Close that lingers on c, if any; c.mu is held.
func (c *Conn) wakeLinger() {
	if ch, ok := lingerWaits.LoadAndDelete(c); ok {
		close(ch.(chan struct{}))
	}
}

// linger waits, up to Config.Linger, until the reliable messages in
// flight are acknowledged; it refuses new ones from its start. The message
// timer keeps resending meanwhile. It reports, wrapping ErrUndelivered,
// what was still unacknowledged when the linger passed or the connection
// ended.
func (c *Conn) linger() error {
	d := c.st.Linger
	if d < 0 || c.closed.Load() {
		return nil
	}
	var deadline <-chan time.Time
	c.mu.Lock()
	c.lingering = true
	for {
		n := 0
		if c.msg != nil {
			n = c.msg.InFlight()
		}
		if n == 0 {
			c.mu.Unlock()
			return nil
		}
		if c.closed.Load() {
			c.mu.Unlock()
			return fmt.Errorf("%w: %d reliable messages, the connection ended while Close waited", message.ErrUndelivered, n)
		}
		ch := make(chan struct{})
		lingerWaits.Store(c, ch)
		c.mu.Unlock()
		if deadline == nil {
			t := time.NewTimer(d)
			defer t.Stop()
			deadline = t.C
			_ = c.Flush()
		}
		select {
		case <-ch:
		case <-deadline:
			c.mu.Lock()
			lingerWaits.Delete(c)
			c.mu.Unlock()
			return fmt.Errorf("%w: %d reliable messages after the linger of %v (Config.Linger)", message.ErrUndelivered, n, d)
		}
		c.mu.Lock()
	}
}

// Flush sends the queued messages that are due now, in as few packets as
// the connection's send budget allows.
func (c *Conn) Flush() error { return c.flush(maxFlushPackets) }

// flush sends up to n Messages packets.
func (c *Conn) flush(n int) error {
	var err error
	for range n {
		var sent bool
		if sent, err = c.sendMessages(); !sent || err != nil {
			break
		}
	}
	c.msgSchedule()
	return err
}

// MaxMessageSize is the largest message channel ch takes: Config.Messages's
// MaxMessageSize on a reliable-ordered channel, one packet's worth on the
// others; 0 for a channel that does not exist.
func (c *Conn) MaxMessageSize(ch int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.endpointLocked()
	if e == nil {
		return 0
	}
	return e.MaxSize(ch)
}

// MaxPayload is the largest payload of one Send (one Data packet).
func (c *Conn) MaxPayload() int {
	if c.st.sealed {
		return c.st.MaxDatagram - wire.SealedConnLen(c.st.magic, 0)
	}
	return c.st.MaxDatagram - wire.ConnLen(c.st.magic, protocol.KindData, 0)
}

// MessageStats are the connection's message counters (once it ended, as
// in OnDisconnect, InFlight counts the reliable messages it ended with
// unacknowledged, on every path: Close, a timeout, a stall, the peer's
// Disconnect), the bytes each
// channel holds for sending (Queued: a bulk sender keeps its channel's
// below ChannelConfig.MaxQueued, or waits for OnSendable), and what its
// congestion controller knows of the path (Path: round trips, queueing
// delay, window, pacing and delivery rates; docs/protocol.md §14.4).
// Zero before the connection's first message but for Path.RTT.
func (c *Conn) MessageStats() message.Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.msg == nil {
		return message.Stats{Path: message.PathStats{RTT: time.Duration(c.seq.RTT() * float64(time.Second))}}
	}
	return c.msg.Stats()
}

// nowLocked is the batch's clock reading inside a loop, else the clock.
func (c *Conn) nowLocked() time.Time {
	if l := c.inLoop; l != nil {
		return l.now
	}
	return c.st.Now()
}

// sendMessages sends one Messages packet if the Endpoint has something due;
// sent reports whether it did.
func (c *Conn) sendMessages() (sent bool, err error) {
	if c.closed.Load() {
		return false, ErrClosed
	}
	c.mu.Lock()
	e := c.msg
	if e == nil || !e.WantsSend(c.nowLocked().UnixNano()) {
		c.mu.Unlock()
		return false, nil
	}
	c.mu.Unlock()
	_, err = c.sendKind(protocol.KindMessages, nil)
	return err == nil, err
}

// deliverMessages hands the messages the last Messages packet made
// deliverable to the Handler, then sends what the Handler queued. A
// Handler without OnMessage gets none: they are discarded and counted
// (message.DropUnhandled), and the first time said in the log, since the
// packets that carried them are acknowledged and the peer believes them
// delivered.
func (c *Conn) deliverMessages() {
	mh := c.st.msgHandler
	if c.st.polling {
		return // queued for ReceiveMessage (pollLocked)
	}
	if mh == nil {
		c.mu.Lock()
		n := c.msg.Discard()
		c.mu.Unlock()
		if n > 0 && !c.st.unhandledLogged.Swap(true) {
			c.st.Logger.Warn("messages arrived, but the Handler has no OnMessage(c *conn.Conn, channel int, msg []byte): "+
				"they are acknowledged and dropped, counted as the message drop \"unhandled\"; implement conn.MessageHandler, "+
				"or configure no channels (Config.Messages); logged once", "remote", c.RemoteAddr())
		}
		return
	}
	for {
		c.mu.Lock()
		ch, m, ok := c.msg.Next()
		c.mu.Unlock()
		if !ok {
			break
		}
		mh.OnMessage(c, ch, m)
	}
}

// msgService runs the connection's message timers at now: resends, an
// ack-only packet, the stall bound; with an egress budget (b), it first
// gives the budget the connection's bulk sample. It reports whether the
// connection still has timers pending.
func (c *Conn) msgService(now time.Time, b *egress.Budget) bool {
	if c.closed.Load() {
		return false
	}
	ns := now.UnixNano()
	c.mu.Lock()
	e := c.msg
	if e == nil {
		c.mu.Unlock()
		return false
	}
	if b != nil {
		sent, held := e.TakeBulk()
		var queued int64
		if held {
			queued = int64(e.Queued())
		}
		b.Add(sent, held, queued)
	}
	if e.Stalled(ns) {
		c.mu.Unlock()
		c.shutdown(ReasonStalled, false)
		return false
	}
	wants, ackDue := e.WantsSend(ns), e.AckDue(ns)
	c.mu.Unlock()
	if wants {
		_ = c.flush(maxTickPackets)
	} else if ackDue {
		_, _ = c.sendKind(protocol.KindKeepAlive, nil)
	}
	c.mu.Lock()
	pending := c.msg != nil && c.msg.Deadline() != 0
	c.mu.Unlock()
	return pending
}

// msgSchedule puts the connection on its side's message timer if its
// Endpoint has timers pending.
func (c *Conn) msgSchedule() {
	t := c.msgTimer()
	if t == nil || c.msgListed.Load() {
		return
	}
	c.mu.Lock()
	pending := c.msg != nil && c.msg.Deadline() != 0
	c.mu.Unlock()
	if pending {
		t.add(c)
	}
}

func (c *Conn) msgTimer() *msgTimer {
	if c.srv != nil {
		return c.srv.msgTimer
	}
	if c.cli != nil {
		return c.cli.msgTimer
	}
	return nil
}

// releaseMessages frees the Endpoint's buffers once the connection closed;
// for an announced connection whose Handler hears of its messages'
// delivery, it keeps what OnDisconnect's reports need (endReports).
func (c *Conn) releaseMessages(announced bool) {
	c.mu.Lock()
	if c.msg != nil {
		if c.st.polling {
			c.keepPolled()
		}
		if announced && c.st.msgDelivery != nil {
			var ends []unackedRange
			c.msg.Unacked(func(ch int, from, acked, to uint64) {
				ends = append(ends, unackedRange{ch, from, acked, to})
			})
			if ends != nil {
				endReports.Store(c, ends)
			}
		}
		c.msg.Release()
	}
	c.mu.Unlock()
}

// reportAcked tells dh of the reliable messages the packet just received
// acknowledged, in order per channel (MessageDeliveryHandler).
func (c *Conn) reportAcked(dh MessageDeliveryHandler) {
	for {
		c.mu.Lock()
		var ch int
		var id uint64
		ok := false
		if c.msg != nil {
			ch, id, ok = c.msg.NextAcked()
		}
		c.mu.Unlock()
		if !ok {
			return
		}
		dh.OnMessageDelivery(c, ch, id, true)
	}
}

// unackedRange is one channel's messages whose fate a connection's end
// reports: ids from..acked delivered, acked+1..to not.
type unackedRange struct {
	ch              int
	from, acked, to uint64
}

// endReports maps a connection that ended to the reliable messages its
// MessageDeliveryHandler has not heard of (releaseMessages), until
// fireDisconnect reports them; entries live only between the two.
var endReports sync.Map

// reportUnacked tells the MessageDeliveryHandler, just before
// OnDisconnect, of the reliable messages it has not heard of: acknowledged
// before the end (delivered), or not.
func (c *Conn) reportUnacked() {
	dh := c.st.msgDelivery
	if dh == nil {
		return
	}
	v, ok := endReports.LoadAndDelete(c)
	if !ok {
		return
	}
	for _, r := range v.([]unackedRange) {
		for id := r.from; id <= r.to; id++ {
			dh.OnMessageDelivery(c, r.ch, id, id <= r.acked)
		}
	}
}

// msgTimer runs the message timers (resends, prompt acks, stalls) of the
// connections that have any, every messageTick: a resend is due tens of
// milliseconds after a send, far finer than the housekeeping sweep.
// Connections join when they get pending work and leave when they have
// none. With none listed the timer sleeps until one joins (at most every
// idleBudgetTick with an egress budget, whose figures then fall to
// zero), so an idle server does not wake 200 times a second.
type msgTimer struct {
	// ticking is held by tick: a test that drives the timer itself holds
	// it, so that run's ticks wait (TestMessagesAlloc).
	ticking sync.Mutex
	mu      sync.Mutex
	active  []*Conn // each with msgListed set, at index msgIdx
	snap    []*Conn
	// wake tells a sleeping run that active is no longer empty.
	wake chan struct{}
	// ticks counts run's ticks (TestSimMessageTimerSleeps).
	ticks atomic.Uint64
	// budget: a server's egress budget (Config.EgressRate), recomputed
	// at every tick from the connections' samples and tx, the server's
	// egress bytes so far; nil without one.
	budget *egress.Budget
	tx     func() uint64
}

// add lists c once.
func (t *msgTimer) add(c *Conn) {
	if !c.msgListed.CompareAndSwap(false, true) {
		return
	}
	t.mu.Lock()
	c.msgIdx = int32(len(t.active))
	t.active = append(t.active, c)
	first := len(t.active) == 1
	t.mu.Unlock()
	if first {
		select {
		case t.wake <- struct{}{}:
		default: // a wake is pending already
		}
	}
}

// newMsgTimer returns a timer with nothing listed; run serves it.
func newMsgTimer() *msgTimer {
	return &msgTimer{wake: make(chan struct{}, 1)}
}

// drop unlists c; the caller holds mu.
func (t *msgTimer) dropLocked(c *Conn) {
	i, last := int(c.msgIdx), len(t.active)-1
	if i > last || t.active[i] != c {
		return
	}
	t.active[i] = t.active[last]
	t.active[i].msgIdx = int32(i)
	t.active[last] = nil
	t.active = t.active[:last]
	c.msgListed.Store(false)
}

// run ticks until done or quit closes. Ticks fall on a grid of
// messageTick from run's start, as a ticker's would, whether or not the
// timer slept between them.
func (t *msgTimer) run(done, quit <-chan struct{}, now func() time.Time, wg *sync.WaitGroup) {
	defer wg.Done()
	start := time.Now()
	// next returns the wait until the next point of the grid of every
	// from start.
	next := func(every time.Duration) time.Duration {
		since := time.Since(start)
		return every - since%every
	}
	tm := time.NewTimer(next(messageTick))
	defer tm.Stop()
	for {
		select {
		case <-done:
			return
		case <-quit:
			return
		case <-tm.C:
		case <-t.wake:
			// Joined while asleep: tick at the next grid point.
			tm.Reset(next(messageTick))
			continue
		}
		t.ticks.Add(1)
		t.tick(now())
		t.mu.Lock()
		idle := len(t.active) == 0
		t.mu.Unlock()
		switch {
		case !idle:
			tm.Reset(next(messageTick))
		case t.budget != nil:
			tm.Reset(next(idleBudgetTick))
		default:
			// Asleep until add wakes it. A wake sent since the list
			// emptied is in the channel and is taken above.
		}
	}
}

// tick serves every listed connection once.
func (t *msgTimer) tick(now time.Time) {
	t.ticking.Lock()
	defer t.ticking.Unlock()
	t.tickLocked(now)
}

// tickLocked is tick, its caller holding ticking.
func (t *msgTimer) tickLocked(now time.Time) {
	t.mu.Lock()
	t.snap = append(t.snap[:0], t.active...)
	t.mu.Unlock()
	for i, c := range t.snap {
		t.snap[i] = nil
		if c.msgService(now, t.budget) {
			continue
		}
		t.mu.Lock()
		t.dropLocked(c)
		t.mu.Unlock()
		// Work may have arrived between msgService and the drop.
		if !c.closed.Load() {
			c.msgSchedule()
		}
	}
	if t.budget != nil {
		t.budget.Update(now.UnixNano(), t.tx())
	}
}
