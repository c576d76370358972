package loadgen

import (
	"encoding/binary"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
)

// Messages (Config.Messages). Each connected client gets a
// message.Endpoint from its worker's message.Layer when a Run starts. The
// worker sends messages at MessageRate per client: Endpoint.Send, then as
// many Messages packets (protocol.KindMessages) as the endpoint WantsSend,
// each filled by WritePayload for the sequence number seqwin.SeqState
// gives it. The packet layer's verdicts go back to the endpoint: every
// AckReport's delivered and lost packets (Acked, Lost), an eviction by
// SeqState.Send (Lost), the smoothed RTT (SetRTT), and every packet sent
// (PacketSent: it carries acks). A Messages packet from the server is
// checked (Check) before the sequence layer accepts it and received
// (Receive) after; its messages (Next) are the echoes. Every
// msgPollEvery the worker serves the endpoints whose timers are due:
// resends (WantsSend), ack-only KeepAlives (AckDue), stalls (Stalled).
//
// A message is MessageSize bytes: its first-send time (generator
// nanoseconds) and its number on its client, little-endian, then zeros.
// An echo's round trip is measured from the first send, resends included.
// Nothing here allocates per message: the endpoint copies the message
// from one buffer per worker.

// msgMaxBurst bounds the Messages packets one client sends at a time, so
// a client with much queued cannot hold its worker.
const msgMaxBurst = 16

// workerMsgs is a worker's message state.
type workerMsgs struct {
	layer    *message.Layer
	eps      []*message.Endpoint // per client; nil until a Run starts, or once ended
	ch       int
	reliable bool
	pay      int // room for entries in one Messages packet
	// Per client: the number of its next message, 1 + the highest number
	// echoed, the echoes of the 64 numbers below that (bit k: recv-1-k),
	// and the distinct echoes.
	next []uint64
	recv []uint64
	seen []uint64
	got  []uint64
	// out: messages sent and not echoed, of clients still live; live:
	// clients with an endpoint.
	out    int64
	live   int
	buf    []byte
	cursor int
	tokens float64
	last   int64 // the token bucket's last fill
	polled int64 // the last poll
	// pollEvery: the gap between polls, msgPollEvery, longer for many
	// clients (a poll looks at every endpoint).
	pollEvery int64
	hist      Histogram
	// At the end of a Run: messages unechoed, entries resent.
	unanswered int64
	resent     uint64
}

func newWorkerMsgs(cfg *Config, n int) *workerMsgs {
	// withDefaults made a layer of this configuration already.
	l, err := message.NewLayer(cfg.MessageConfig, cfg.msgPayload())
	if err != nil {
		panic("loadgen: " + err.Error())
	}
	return &workerMsgs{
		layer:    l,
		eps:      make([]*message.Endpoint, n),
		ch:       cfg.Messages.channel(),
		reliable: cfg.Messages == MessagesReliable,
		pay:      cfg.msgPayload(),
		next:     make([]uint64, n),
		recv:     make([]uint64, n),
		seen:     make([]uint64, n),
		got:      make([]uint64, n),
		buf:      make([]byte, cfg.MessageSize),
		// About 100 ns per endpoint a poll: at most a tenth of the time
		// (20 ms for 100 000 clients a socket).
		pollEvery: int64(min(max(time.Duration(n)*200, msgPollEvery), 20*time.Millisecond)),
	}
}

// msgStart gives every connected client without one an endpoint, at the
// start of a Run.
func (w *worker) msgStart(now int64) {
	m := w.msg
	for j := range w.n {
		if w.state[j] == stConnected && m.eps[j] == nil {
			m.eps[j] = m.layer.NewEndpoint()
			m.live++
			if rtt := w.seqs[j].RTT(); rtt > 0 {
				m.eps[j].SetRTT(time.Duration(rtt * float64(time.Second)))
			}
		}
	}
	m.hist.Reset()
	m.tokens = 0
	m.last, m.polled = now, now
}

// msgSend sends the messages the rate allows now, at most *budget, and
// takes those sent from *budget.
func (w *worker) msgSend(now int64, budget *uint64) {
	m := w.msg
	rate := w.cfg.MessageRate * float64(m.live)
	m.tokens = min(m.tokens+float64(now-m.last)*1e-9*rate, max(2*float64(w.cfg.Batch), rate*0.020))
	m.last = now
	k := int(m.tokens)
	if uint64(max(k, 0)) > *budget {
		k = int(*budget)
	}
	tried, sent := 0, 0
	for tries := 0; tried < k && tries < w.n; tries++ {
		j := m.cursor
		if m.cursor++; m.cursor == w.n {
			m.cursor = 0
		}
		if w.state[j] != stConnected || m.eps[j] == nil {
			continue
		}
		// A refused send (the queue is full) uses its turn too: the rate
		// is of attempts, so one stuck client does not take the others'.
		tried++
		if w.msgSendOne(j, now) {
			sent++
		}
	}
	m.tokens -= float64(tried)
	*budget -= uint64(sent)
	w.flush()
}

// msgSendOne queues client j's next message and sends what its endpoint
// has to send; it reports whether the endpoint took the message.
func (w *worker) msgSendOne(j int, now int64) bool {
	m := w.msg
	binary.LittleEndian.PutUint64(m.buf, uint64(now))
	binary.LittleEndian.PutUint64(m.buf[8:], m.next[j])
	if err := m.eps[j].Send(m.ch, m.buf, now); err != nil {
		w.ctr.loc[cMsgRefused]++
		return false
	}
	m.next[j]++
	m.out++
	w.ctr.loc[cMsgSent]++
	w.msgPush(j, now)
	return true
}

// msgPush sends Messages packets from client j while its endpoint has
// entries to send, at most msgMaxBurst.
func (w *worker) msgPush(j int, now int64) {
	ep := w.msg.eps[j]
	for k := 0; k < msgMaxBurst && ep.WantsSend(now); k++ {
		if !w.msgPacket(j, now) {
			return
		}
	}
}

// msgPacket sends one Messages packet from client j, its payload written
// in place by the endpoint. Should the endpoint write nothing after all,
// the sequence number already taken goes out as a KeepAlive (acks and
// all), so that no number is skipped; it then returns false.
func (w *worker) msgPacket(j int, now int64) bool {
	m := w.msg
	ep := m.eps[j]
	buf := w.slot()
	id := &w.ids[j]
	seq, ack, ackBits, lost, evicted := w.seqs[j].Send(seconds(now))
	if evicted {
		ep.Lost(lost.Seq, now)
	}
	n := ep.WritePayload(buf[w.payOff:w.payOff+m.pay], seq, now)
	h := protocol.ConnHeader{SessionID: id.session, ClientID: id.clientID, Tag: id.tag,
		Seq: seq, Ack: ack, AckBits: ackBits, Kind: protocol.KindMessages}
	var payload []byte
	if n > 0 {
		payload = buf[w.payOff : w.payOff+n]
	} else {
		h.Kind = protocol.KindKeepAlive
	}
	var k int
	if w.sealers != nil {
		k = wire.SealConn(buf, w.cfg.Magic, &h, payload, &w.sealers[j])
	} else {
		k = wire.EncodeConn(buf, w.cfg.Magic, &h, payload)
	}
	ep.PacketSent(now)
	if k == 0 {
		return false // a sealer's exhausted counter: never
	}
	w.send(buf[:k], j)
	w.sentAt[j] = now
	if n == 0 {
		w.ctr.loc[cMsgAckOnly]++
		return false
	}
	w.ctr.loc[cMsgPackets]++
	return true
}

// msgPoll serves, every pollEvery, the endpoints whose timers are due;
// with all, every endpoint (a sweep that also catches sends waiting for
// the send rate's budget).
func (w *worker) msgPoll(now int64, all bool) {
	m := w.msg
	if !all && now-m.polled < m.pollEvery {
		return
	}
	m.polled = now
	for j, ep := range m.eps {
		if ep == nil || w.state[j] != stConnected {
			continue
		}
		if d := ep.Deadline(); all || d != 0 && d <= now {
			w.msgService(j, now)
		}
	}
	w.flush()
}

// msgService does what client j's endpoint has due: end a stalled
// connection, resend, acknowledge.
func (w *worker) msgService(j int, now int64) {
	ep := w.msg.eps[j]
	if ep.Stalled(now) {
		w.ctr.loc[cMsgStalled]++
		w.end(j, stFailed)
		return
	}
	w.msgPush(j, now)
	if ep.AckDue(now) {
		w.send(w.buildConn(j, now, protocol.KindKeepAlive), j)
		w.sentAt[j] = now
		w.ctr.loc[cMsgAckOnly]++
	}
}

// msgSent tells client j's endpoint that a packet went (buildConn).
func (w *worker) msgSent(j int, now int64) {
	if ep := w.msg.eps[j]; ep != nil {
		ep.PacketSent(now)
	}
}

// msgLost tells client j's endpoint that SeqState.Send evicted one of its
// packets unreported.
func (w *worker) msgLost(j int, seq uint16, now int64) {
	if ep := w.msg.eps[j]; ep != nil {
		ep.Lost(seq, now)
	}
}

// msgCheck runs a Messages packet for client j through its endpoint's
// Check, before the sequence layer takes it; false drops it.
func (w *worker) msgCheck(j int, payload []byte) bool {
	if w.msg == nil || w.msg.eps[j] == nil {
		w.ctr.loc[cUnexpected]++
		return false
	}
	if w.msg.eps[j].Check(payload) != message.DropNone {
		w.ctr.loc[cMsgDropped]++
		return false
	}
	return true
}

// msgAcks hands the AckReport of a packet client j just accepted to its
// endpoint, with the RTT.
func (w *worker) msgAcks(j int, now int64) {
	ep := w.msg.eps[j]
	if ep == nil {
		return
	}
	for _, p := range w.rep.DeliveredPackets() {
		ep.Acked(p.Seq, now)
	}
	for _, p := range w.rep.LostPackets() {
		ep.Lost(p.Seq, now)
	}
	if w.rep.RTTSample >= 0 {
		ep.SetRTT(time.Duration(w.rep.RTTSample * float64(time.Second)))
	}
}

// msgIn receives the accepted Messages packet payload for client j and
// counts the echoes it completes.
func (w *worker) msgIn(j int, payload []byte, now int64) {
	ep := w.msg.eps[j]
	if ep == nil {
		return // ended on this very packet
	}
	ep.Receive(payload, now)
	for {
		ch, msg, ok := ep.Next()
		if !ok {
			return
		}
		if ch != w.msg.ch || len(msg) < MinMessageSize {
			w.ctr.loc[cMsgUnexpected]++
			continue
		}
		w.msgEcho(j, int64(binary.LittleEndian.Uint64(msg)), binary.LittleEndian.Uint64(msg[8:]), now)
	}
}

// msgEcho counts the echo of client j's message number num, first sent
// at sent.
func (w *worker) msgEcho(j int, sent int64, num uint64, now int64) {
	m := w.msg
	if num >= m.next[j] {
		w.ctr.loc[cMsgUnexpected]++ // never sent
		return
	}
	recv := m.recv[j]
	switch {
	case num >= recv:
		// The newest yet. Ahead of the next expected is a gap: on the
		// reliable-ordered channel that is out of order; on the
		// unreliable one the messages skipped are lost, or late.
		if num > recv && m.reliable {
			w.ctr.loc[cMsgOutOfOrder]++
		}
		d := num - recv + 1
		if d >= 64 {
			m.seen[j] = 1
		} else {
			m.seen[j] = m.seen[j]<<d | 1
		}
		m.recv[j] = num + 1
	case recv-1-num < 64:
		bit := uint64(1) << (recv - 1 - num)
		if m.seen[j]&bit != 0 {
			w.ctr.loc[cMsgDuplicated]++
			return
		}
		m.seen[j] |= bit
		w.ctr.loc[cMsgOutOfOrder]++
	default:
		// Older than the window: late, and whether it came before is not
		// known. Counted out of order, not delivered again.
		w.ctr.loc[cMsgOutOfOrder]++
		return
	}
	m.got[j]++
	m.out--
	w.ctr.loc[cMsgDelivered]++
	m.hist.Record(time.Duration(now - sent))
}

// msgEnd releases client j's endpoint: the client ended, or disconnected.
// Its messages still unechoed no longer count as outstanding.
func (w *worker) msgEnd(j int) {
	m := w.msg
	if ep := m.eps[j]; ep != nil {
		m.out -= int64(m.next[j] - m.got[j])
		ep.Release()
		m.eps[j] = nil
		m.live--
	}
}

// msgFinish records, at the end of a Run, the messages unechoed and the
// entries the endpoints resent.
func (w *worker) msgFinish() {
	m := w.msg
	m.unanswered = m.out
	m.resent = 0
	for _, ep := range m.eps {
		if ep != nil {
			m.resent += ep.Stats().Resent
		}
	}
}
