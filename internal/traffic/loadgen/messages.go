package loadgen

import (
	"encoding/binary"
	"time"

	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
)

// Messages (Config.Messages, Config.BulkSize). Each connected client
// gets a message.Endpoint from its worker's message.Layer when a Run
// starts. The worker sends each stream's messages at its rate per client
// (msgStream: the small messages, MessageRate on their channel; the bulk
// ones, BulkRate on msgcfg.Bulk): Endpoint.Send, then as many Messages
// packets (protocol.KindMessages) as the endpoint WantsSend, at most
// msgMaxBurst, each filled by WritePayload for the sequence number
// seqwin.SeqState gives it. The endpoint decides what goes: the other
// channels' entries first, the bulk channel's after them and within its
// send rate (and window). The packet layer's verdicts go back to the
// endpoint: every AckReport's delivered and lost packets (Acked, Lost),
// an eviction by SeqState.Send (Lost), the smoothed RTT (SetRTT), and
// every packet sent (PacketSent: it carries acks). A Messages packet from
// the server is checked (Check) before the sequence layer accepts it and
// received (Receive) after; its messages (Next) are the echoes, each
// counted by the stream of its channel. Every msgPollEvery the worker
// serves the endpoints whose timers are due: resends and sends the send
// rate held back (WantsSend), ack-only KeepAlives (AckDue), stalls
// (Stalled).
//
// A message is MessageSize (bulk: BulkSize) bytes: its first-send time
// (generator nanoseconds) and its number on its client and stream,
// little-endian, then zeros. An echo's round trip is measured from the
// first send, resends included, to the echo's last byte in. Nothing here
// allocates per message: the endpoint copies the message from one buffer
// per worker and stream. (The message layer itself allocates each
// message it reassembles from fragments, on delivery: a bulk echo costs
// that one allocation.)

// msgMaxBurst bounds the Messages packets one client sends at a time, so
// a client with much queued (a bulk backlog) cannot hold its worker: the
// others' turns, and the replies, come between its bursts.
const msgMaxBurst = 16

// workerMsgs is a worker's message state.
type workerMsgs struct {
	layer *message.Layer
	eps   []*message.Endpoint // per client; nil until a Run starts, or once ended
	pay   int                 // room for entries in one Messages packet
	// small: the Config.Messages stream, bulk: the bulk one; nil when
	// off. streams: those that are on.
	small, bulk *msgStream
	streams     []*msgStream
	// live: clients with an endpoint.
	live   int
	polled int64 // the last poll
	// pollEvery: the gap between polls, msgPollEvery, longer for many
	// clients (a poll looks at every endpoint).
	pollEvery int64
	// At the end of a Run: entries resent and entries copied, all
	// channels.
	resent, copies uint64
}

// msgStream is one stream of numbered messages on one channel, each
// client its own numbering: the small messages or the bulk ones.
type msgStream struct {
	ch       int
	reliable bool
	rate     float64 // messages per second per client
	// tokenFloor: the rate's token bucket holds at least this many.
	tokenFloor float64
	// Counter indexes of its sends, echoes, faults and refusals; bytes:
	// of the payload echoed, -1 for none.
	cSent, cDelivered, cOutOfOrder, cDuplicated, cRefused, cBytes int
	// Per client: the number of its next message, 1 + the highest number
	// echoed, the echoes of the 64 numbers below that (bit k: recv-1-k),
	// and the distinct echoes.
	next []uint64
	recv []uint64
	seen []uint64
	got  []uint64
	// out: messages sent and not echoed, of clients still live.
	out    int64
	buf    []byte
	cursor int
	tokens float64
	last   int64 // the token bucket's last fill
	hist   Histogram
	// At the end of a Run: messages unechoed.
	unanswered int64
}

func newMsgStream(n, ch int, reliable bool, rate float64, size int) *msgStream {
	return &msgStream{
		ch: ch, reliable: reliable, rate: rate,
		next: make([]uint64, n),
		recv: make([]uint64, n),
		seen: make([]uint64, n),
		got:  make([]uint64, n),
		buf:  make([]byte, size),
	}
}

func newWorkerMsgs(cfg *Config, n int) *workerMsgs {
	// withDefaults made a layer of this configuration already.
	l, err := message.NewLayer(cfg.MessageConfig, cfg.msgPayload())
	if err != nil {
		panic("loadgen: " + err.Error())
	}
	m := &workerMsgs{
		layer: l,
		eps:   make([]*message.Endpoint, n),
		pay:   cfg.msgPayload(),
		// About 100 ns per endpoint a poll: at most a tenth of the time
		// (20 ms for 100 000 clients a socket).
		pollEvery: int64(min(max(time.Duration(n)*200, msgPollEvery), 20*time.Millisecond)),
	}
	if cfg.Messages != MessagesOff {
		s := newMsgStream(n, cfg.Messages.channel(), cfg.Messages == MessagesReliable, cfg.MessageRate, cfg.MessageSize)
		// Two batches' worth: a late wake-up is made up.
		s.tokenFloor = 2 * float64(cfg.Batch)
		s.cSent, s.cDelivered, s.cOutOfOrder, s.cDuplicated, s.cRefused, s.cBytes = cMsgSent, cMsgDelivered, cMsgOutOfOrder, cMsgDuplicated, cMsgRefused, -1
		m.small = s
		m.streams = append(m.streams, s)
	}
	if cfg.bulk() {
		s := newMsgStream(n, msgcfg.Bulk, true, cfg.BulkRate, cfg.BulkSize)
		// Bulk messages are few and large: no bursts of them.
		s.tokenFloor = 2
		s.cSent, s.cDelivered, s.cOutOfOrder, s.cDuplicated, s.cRefused, s.cBytes = cBulkSent, cBulkDelivered, cBulkOutOfOrder, cBulkDuplicated, cBulkRefused, cBulkBytes
		m.bulk = s
		m.streams = append(m.streams, s)
	}
	return m
}

// stream is the stream of channel ch, nil for none.
func (m *workerMsgs) stream(ch int) *msgStream {
	for _, s := range m.streams {
		if s.ch == ch {
			return s
		}
	}
	return nil
}

// reliable reports whether a stream is reliable: the end of a Run then
// waits for its echoes.
func (m *workerMsgs) reliable() bool {
	for _, s := range m.streams {
		if s.reliable {
			return true
		}
	}
	return false
}

// outstanding is the messages sent and not echoed, of all streams.
func (m *workerMsgs) outstanding() int64 {
	var n int64
	for _, s := range m.streams {
		n += s.out
	}
	return n
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
	for _, s := range m.streams {
		s.hist.Reset()
		s.tokens = 0
		s.last = now
	}
	if m.bulk != nil {
		// The first bulk message goes at once, so that a slow rate (less
		// than one a Run) still sends one.
		m.bulk.tokens = 1
	}
	m.polled = now
}

// msgSend sends the messages the streams' rates allow now, at most
// *budget, and takes those sent from *budget.
func (w *worker) msgSend(now int64, budget *uint64) {
	for _, s := range w.msg.streams {
		w.streamSend(s, now, budget)
	}
	w.flush()
}

// streamSend sends stream s's messages that its rate allows now, at most
// *budget, clients in turn.
func (w *worker) streamSend(s *msgStream, now int64, budget *uint64) {
	m := w.msg
	rate := s.rate * float64(m.live)
	s.tokens = min(s.tokens+float64(now-s.last)*1e-9*rate, max(s.tokenFloor, rate*0.020))
	s.last = now
	k := int(s.tokens)
	if uint64(max(k, 0)) > *budget {
		k = int(*budget)
	}
	tried, sent := 0, 0
	for tries := 0; tried < k && tries < w.n; tries++ {
		j := s.cursor
		if s.cursor++; s.cursor == w.n {
			s.cursor = 0
		}
		if w.state[j] != stConnected || m.eps[j] == nil {
			continue
		}
		// A refused send (the queue is full) uses its turn too: the rate
		// is of attempts, so one stuck client does not take the others'.
		tried++
		if w.msgSendOne(s, j, now) {
			sent++
		}
	}
	s.tokens -= float64(tried)
	*budget -= uint64(sent)
}

// msgSendOne queues client j's next message of stream s and sends what
// its endpoint has to send; it reports whether the endpoint took the
// message. A refused one (the channel's queue full) is counted and
// skipped: its number goes to the next.
func (w *worker) msgSendOne(s *msgStream, j int, now int64) bool {
	binary.LittleEndian.PutUint64(s.buf, uint64(now))
	binary.LittleEndian.PutUint64(s.buf[8:], s.next[j])
	if err := w.msg.eps[j].Send(s.ch, s.buf, now); err != nil {
		w.ctr.loc[s.cRefused]++
		return false
	}
	s.next[j]++
	s.out++
	w.ctr.loc[s.cSent]++
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
		ep.Evicted(lost.Seq, now)
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

// msgEvicted tells client j's endpoint that SeqState.Send evicted one of
// its packets unreported: the endpoint reads its fate from the ack fields
// that follow (msgAcks).
func (w *worker) msgEvicted(j int, seq uint16, now int64) {
	if ep := w.msg.eps[j]; ep != nil {
		ep.Evicted(seq, now)
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
// endpoint, with the RTT, and the packet's ack fields (for the packets the
// sequence layer evicted). With bulk messages, acks are what lets the
// endpoint send more (its window, and packets in flight, make room), so
// the client sends then what its endpoint has (at most msgMaxBurst) rather
// than at its next poll: a bulk transfer is clocked by its acks.
func (w *worker) msgAcks(j int, ack uint16, ackBits uint64, now int64) {
	ep := w.msg.eps[j]
	if ep == nil {
		return
	}
	acked := w.rep.DeliveredPackets()
	for _, p := range acked {
		ep.Acked(p.Seq, now)
	}
	for _, p := range w.rep.LostPackets() {
		ep.Lost(p.Seq, now)
	}
	ep.Acks(ack, ackBits, now)
	if w.rep.RTTSample >= 0 {
		ep.SetRTT(time.Duration(w.rep.RTTSample * float64(time.Second)))
	}
	if w.msg.bulk != nil && (len(acked) > 0 || w.rep.NumLost > 0) {
		w.msgPush(j, now)
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
		s := w.msg.stream(ch)
		if s == nil || len(msg) < MinMessageSize {
			w.ctr.loc[cMsgUnexpected]++
			continue
		}
		w.msgEcho(s, j, int64(binary.LittleEndian.Uint64(msg)), binary.LittleEndian.Uint64(msg[8:]), len(msg), now)
	}
}

// msgEcho counts the echo, size bytes, of client j's message number num
// of stream s, first sent at sent.
func (w *worker) msgEcho(s *msgStream, j int, sent int64, num uint64, size int, now int64) {
	if num >= s.next[j] {
		w.ctr.loc[cMsgUnexpected]++ // never sent
		return
	}
	recv := s.recv[j]
	switch {
	case num >= recv:
		// The newest yet. Ahead of the next expected is a gap: on a
		// reliable-ordered channel that is out of order; on the
		// unreliable one the messages skipped are lost, or late.
		if num > recv && s.reliable {
			w.ctr.loc[s.cOutOfOrder]++
		}
		d := num - recv + 1
		if d >= 64 {
			s.seen[j] = 1
		} else {
			s.seen[j] = s.seen[j]<<d | 1
		}
		s.recv[j] = num + 1
	case recv-1-num < 64:
		bit := uint64(1) << (recv - 1 - num)
		if s.seen[j]&bit != 0 {
			w.ctr.loc[s.cDuplicated]++
			return
		}
		s.seen[j] |= bit
		w.ctr.loc[s.cOutOfOrder]++
	default:
		// Older than the window: late, and whether it came before is not
		// known. Counted out of order, not delivered again.
		w.ctr.loc[s.cOutOfOrder]++
		return
	}
	s.got[j]++
	s.out--
	w.ctr.loc[s.cDelivered]++
	if s.cBytes >= 0 {
		w.ctr.loc[s.cBytes] += uint64(size)
	}
	s.hist.Record(time.Duration(now - sent))
}

// msgEnd releases client j's endpoint: the client ended, or disconnected.
// Its messages still unechoed no longer count as outstanding.
func (w *worker) msgEnd(j int) {
	m := w.msg
	if ep := m.eps[j]; ep != nil {
		for _, s := range m.streams {
			s.out -= int64(s.next[j] - s.got[j])
		}
		ep.Release()
		m.eps[j] = nil
		m.live--
	}
}

// msgFinish records, at the end of a Run, the messages unechoed and the
// entries the endpoints resent and copied.
func (w *worker) msgFinish() {
	m := w.msg
	for _, s := range m.streams {
		s.unanswered = s.out
	}
	m.resent, m.copies = 0, 0
	for _, ep := range m.eps {
		if ep != nil {
			st := ep.Stats()
			m.resent += st.Resent
			m.copies += st.Copies
		}
	}
}
