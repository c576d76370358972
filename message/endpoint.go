package message

import (
	"math/bits"
	"time"

	"github.com/udpgate/udpgate/internal/congestion"
)

// Endpoint is one connection's message state. Not safe for concurrent
// use: the caller serialises (conn holds the connection's mutex).
type Endpoint struct {
	l    *Layer
	ch   []*channel // per channel, allocated on first use
	recs *records   // packets that carried reliable units

	pkt []byte // the last received payload, for Next's unreliable pass (from pktOff)

	ret    *[]byte // the last reliable message Next returned, freed by the next call
	retBig []byte  // or the last reassembled one

	// pace: the send budget, refilled at the pacing rate (rate); rtt:
	// the smoothed round trip of SetRTT's samples, for the resend timers
	// and the pacing rate; cc: the congestion controller, made with the
	// first packet that carries reliable units.
	pace  congestion.Pacer
	rtt   congestion.RTTStats
	cc    *congestion.Controller
	ackAt int64
	rxAt  int64 // when the last packet with reliable units arrived
	held  int64 // receive storage, counted in the Layer too (and, while above 0, in its holders)
	// progHeld: the part of held that belongs to the reassembly in
	// progress (channel progress), which may use the reserve.
	progHeld int64
	stats    counters

	sendMask uint32 // channels with something queued or unacknowledged
	blocked  uint32 // channels whose Send returned ErrQueueFull since they last drained to half
	sendable uint32 // blocked channels that drained to half, for TakeSendable
	fragOut  uint32 // channels with fragments sent and unacknowledged, or a fragmented message part sent (midMessage)
	ready    uint32 // reliable channels with a unit at next
	// pktOff (into pkt) and inFlight (Stats.InFlight) are 32 bits, next
	// to the masks, so an Endpoint fits 256 bytes (TestIdleEndpointMemory).
	pktOff    int32
	inFlight  int32
	progress  int8  // the channel whose reassembly may use the reserve; -1: none
	rr        uint8 // the channel WritePayload starts with
	rxUnacked uint8 // packets with reliable units received since our last packet
	ackDue    bool
}

// channel is one channel's send and receive state.
type channel struct {
	// Reliable send: units hold ids ua..nextID-1 (ring, power of two);
	// ua..sendNext-1 went out at least once.
	units                []sunit
	ua, sendNext, nextID uint16
	unitPeaks            ringPeaks[uint16] // units in use, for shrinking (ring.go)
	// Sequenced send: the id of the next message written.
	seqOut   uint16
	queued   int  // storage bytes held for sending
	bulk     bool // declared bulk (ChannelConfig.Bulk)
	fragsOut int  // fragments sent and unacknowledged
	// Unreliable and sequenced send queue (ring).
	pq             []*[]byte
	pendHead, pend int
	pendPeaks      ringPeaks[uint32]

	// Reliable receive: slots for ids next.. (ring, power of two);
	// expect is the first id at or after next not held.
	slots        []rslot
	next, expect uint16
	// slotsHeld counts the slots holding a unit; slotPeaks the span of
	// the ring in use (ids next.. up to the farthest held).
	slotsHeld uint16
	slotPeaks ringPeaks[uint16]
	// Reassembly: the fragments taken in order so far.
	asm      []*[]byte
	asmLen   int
	asmHeld  int64  // storage of asm
	asmStart uint16 // the unit id of fragment 0
	asmCnt   uint16
	asmIdx   uint16 // the next fragment index expected
	asmOn    bool
	// Sequenced receive.
	seqAny    bool
	seqNewest uint16
	// acks: the reliable messages' counts for NextAcked (acked.go).
	acks msgAcks
}

// sunit is one reliable unit being sent.
type sunit struct {
	buf         *[]byte // nil once acknowledged
	first, last int64   // first and last send times
	idx, cnt    uint16  // fragment index and count; cnt 0: not a fragment
	flags       uint8
	tries       uint8 // times sent again: each doubles the resend interval
}

const (
	uSent  = 1 << iota // sent at least once
	uAcked             // acknowledged
	uDue               // resend at the next chance (loss or fast repair)
)

// rslot is one received reliable unit awaiting delivery.
type rslot struct {
	buf      *[]byte // nil: empty
	idx, cnt uint16
}

func (e *Endpoint) chanFor(c int) *channel {
	if e.ch == nil {
		e.ch = make([]*channel, len(e.l.kinds))
	}
	ch := e.ch[c]
	if ch == nil {
		ch = &channel{bulk: e.l.bulk&(1<<c) != 0}
		e.ch[c] = ch
	}
	return ch
}

// chanIf returns channel c's state, nil when it was never used.
func (e *Endpoint) chanIf(c int) *channel {
	if e.ch == nil {
		return nil
	}
	return e.ch[c]
}

// MaxSize is the largest message channel ch accepts, 0 for no channel.
func (e *Endpoint) MaxSize(ch int) int {
	l := e.l
	if ch < 0 || ch >= len(l.kinds) {
		return 0
	}
	switch l.kinds[ch] {
	case ReliableOrdered:
		return l.maxMsg
	case Unreliable:
		return min(l.maxPayload-3, maxLen)
	default:
		return min(l.maxPayload-5, maxLen)
	}
}

// singleMax is the largest reliable message sent as one unit.
func (l *Layer) singleMax() int { return min(l.maxPayload-5, maxLen) }

// Send queues a copy of msg on channel ch.
func (e *Endpoint) Send(ch int, msg []byte, now int64) error {
	l := e.l
	if ch < 0 || ch >= len(l.kinds) {
		return ErrNoChannel
	}
	if len(msg) > e.MaxSize(ch) {
		return ErrMessageSize
	}
	e.refill(now) // dates the send budget, for Deadline
	k := l.kinds[ch]
	if k != ReliableOrdered {
		c := e.chanFor(ch)
		if k == Sequenced {
			// Latest wins: a newer message replaces the unsent ones.
			for c.pend > 0 {
				e.freed(c.popPend(l))
			}
		}
		cost := int(l.chunkCost(len(msg)))
		if c.queued+cost > l.maxQueued[ch] {
			e.blocked |= 1 << ch
			return ErrQueueFull
		}
		if !e.reserve(int64(cost)) {
			e.blocked |= 1 << ch
			return ErrSendShare
		}
		c.pushPend(l.get(msg))
		c.queued += cost
		e.sendMask |= 1 << ch
		e.stats.Sent++
		return nil
	}
	n, cost := 1, l.chunkCost(len(msg))
	if len(msg) > l.singleMax() {
		n = (len(msg) + l.fragSize - 1) / l.fragSize
		// Each fragment's chunk, as ackUnit frees them: the last one's
		// may be smaller.
		cost = int64(n-1)*int64(l.top) + l.chunkCost(len(msg)-(n-1)*l.fragSize)
	}
	c := e.chanFor(ch)
	inUse := int(c.nextID - c.ua)
	if int64(c.queued)+cost > int64(l.maxQueued[ch]) || inUse+n > 0x8000 {
		e.blocked |= 1 << ch
		return ErrQueueFull
	}
	if !e.reserve(cost) {
		e.blocked |= 1 << ch
		return ErrSendShare
	}
	c.growUnits(inUse + n)
	c.unitPeaks.note(inUse + n)
	mask := uint16(len(c.units) - 1)
	if n == 1 {
		c.units[c.nextID&mask] = sunit{buf: l.get(msg)}
		c.nextID++
	} else {
		for i := 0; i < n; i++ {
			part := msg[i*l.fragSize : min((i+1)*l.fragSize, len(msg))]
			c.units[c.nextID&mask] = sunit{buf: l.get(part), idx: uint16(i), cnt: uint16(n)}
			c.nextID++
		}
	}
	c.queued += int(cost)
	e.sendMask |= 1 << ch
	e.stats.Sent++
	e.inFlight++
	c.acks.sent++
	return nil
}

// growUnits makes the unit ring hold n units.
func (c *channel) growUnits(n int) {
	if n > len(c.units) {
		c.units = grownRing16(c.units, n, c.ua, int(c.nextID-c.ua))
	}
}

func (c *channel) pushPend(p *[]byte) {
	if c.pend == len(c.pq) {
		size := max(4, 2*len(c.pq))
		q := make([]*[]byte, size)
		for i := 0; i < c.pend; i++ {
			q[i] = c.pq[(c.pendHead+i)&(len(c.pq)-1)]
		}
		c.pq = q
		c.pendHead = 0
	}
	q := c.pq
	q[(c.pendHead+c.pend)&(len(q)-1)] = p
	c.pend++
	c.pendPeaks.note(c.pend)
}

// reserve takes cost bytes of send storage. Every endpoint may hold one
// grant (sendGrant bytes) whatever the pool, outside it (a player's
// messages in flight fit it): the floor, as a TCP socket keeps its
// minimum buffer under memory pressure, and sends within it touch no
// shared counter. Beyond it, storage comes from the Layer's budget
// (Config.SendBudget), in grants: reserve refuses when the budget is
// spent, and, while more than half of it is in use (contention), when
// this endpoint would hold more than its fair share: the budget divided
// by the endpoints holding some of it. A few connections that queue
// without end (a peer that does not acknowledge, an application that
// ignores ErrQueueFull) so take at most their shares, and the others
// keep theirs.
func (e *Endpoint) reserve(cost int64) bool {
	if e.recs == nil {
		e.recs = newRecords()
	}
	r, l := e.recs, e.l
	need := r.queued + cost
	if g := l.sendGrant(); need > g+r.sendRes {
		want := (need - g + g - 1) / g * g // pool bytes beyond the floor
		extra := want - r.sendRes
		total := l.sendHeld.Add(extra)
		holders := l.senders.Load()
		if r.sendRes == 0 {
			holders++
		}
		if total > l.sendBudget || total > l.sendBudget/2 && want+g > l.sendBudget/holders {
			l.sendHeld.Add(-extra)
			l.sendRefused.Add(1)
			return false
		}
		if r.sendRes == 0 {
			l.senders.Add(1)
		}
		r.sendRes = want
	}
	r.queued = need
	return true
}

// freed returns n bytes of send storage: the pool reservation shrinks
// once two grants above what is held beyond the floor, and is given back
// whole when the floor holds it all. Within the floor (a player's
// messages) nothing shared is touched.
func (e *Endpoint) freed(n int64) {
	r := e.recs
	if r == nil || n == 0 {
		return
	}
	r.queued = max(r.queued-n, 0)
	if r.sendRes == 0 {
		return
	}
	l := e.l
	g := l.sendGrant()
	switch over := r.queued - g; {
	case over <= 0:
		l.sendHeld.Add(-r.sendRes)
		l.senders.Add(-1)
		r.sendRes = 0
	case r.sendRes-over > 2*g:
		keep := (over+g-1)/g*g + g
		l.sendHeld.Add(keep - r.sendRes)
		r.sendRes = keep
	}
}

// popPend drops the oldest queued unreliable or sequenced message and
// returns the storage it held.
func (c *channel) popPend(l *Layer) int64 {
	q := c.pq
	p := q[c.pendHead]
	q[c.pendHead] = nil
	c.pendHead = (c.pendHead + 1) & (len(q) - 1)
	c.pend--
	n := l.put(p)
	c.queued -= int(n)
	if c.pend == 0 {
		if size := c.pendPeaks.emptied(len(q), 4); size > 0 {
			c.pq, c.pendHead = make([]*[]byte, size), 0
		}
	}
	return n
}

// SetRTT gives the endpoint a round-trip sample from the packet layer (the
// time from sending a packet to the first packet acknowledging it as the
// newest: fastpath's AckReport.RTTSample), folded in as RFC 6298 does;
// before the first, 100 ms. It times resends and the pacing rate; the
// congestion controller takes its delay samples from the packets that
// carried reliable units (Acked).
func (e *Endpoint) SetRTT(rtt time.Duration) {
	e.rtt.Update(int64(rtt))
	if e.recs != nil {
		// A sample may shorten the timeout: the cached bound (checkAt)
		// is no bound any more.
		e.recs.checkAt = 0
	}
}

// resendInterval is the time after which an unacknowledged unit sent once
// is sent again: the retransmission timeout, smoothed RTT + 2 × its
// deviation (at least 2 ms), times ResendFactor, at least MinResend; later
// resends of a unit back off (backoff). Below a factor of 1 the unit goes
// again before its ack could be back: such speculative copies only ride
// on packets that leave anyway (spec), only for the game's units, not
// bulk ones (bulkUnit), and only while the path loses packets
// (records.lossy), while a packet of its own is sent for a unit only
// once the full timeout has passed (full).
func (e *Endpoint) resendInterval() (spec, full int64) {
	rto := e.rtt.RTO()
	spec = max(e.l.minResend, int64(e.l.resendF*float64(rto)))
	return spec, max(spec, rto)
}

// bulkUnit reports whether unit u of channel ci is bulk: a bulk channel's,
// or a fragment of a large message. Bulk units go after the game's in
// every packet, new ones only while the congestion window has room, and
// get no speculative copies.
func (e *Endpoint) bulkUnit(ci int, u *sunit) bool { return e.l.bulk&(1<<ci) != 0 || u.cnt != 0 }

// due is when unit u goes again under interval iv.
func (u *sunit) due(iv int64) int64 {
	if u.flags&uDue != 0 {
		return u.last
	}
	return u.last + iv<<backoff[u.tries]
}

// backoff is the resend interval's doubling after a unit's nth resend: a
// second try goes as soon as the first (one loss in a row is the common
// case to repair fast), later ones back off, so that a path that delays
// rather than loses (a queue) is not flooded with copies.
var backoff = [maxBackoff + 1]uint8{0, 0, 1, 2, 3}

// rate is the pacing rate in bytes per second: the congestion
// controller's, or, before the first reliable packet, the ceiling
// (Config.SendRate).
func (e *Endpoint) rate() int64 {
	if e.cc == nil {
		return e.l.sendRate
	}
	return e.cc.PacingRate(e.rtt.Smoothed())
}

// refill adds the send budget earned since the last call, ages the
// packets in flight and fires the retransmission timeout.
func (e *Endpoint) refill(now int64) {
	e.age(now)
	e.rack(now)
	e.timeout(now)
	if r := e.recs; r != nil && now-r.lastAck > e.l.ackDelay+congestion.Quantum {
		r.hushed = e.quiet(now) // else false since the ack (Acked), as quietAfter is longer
	}
	e.pace.Refill(now, e.rate(), 2*e.l.top)
	if b := e.limit(); b != nil {
		b.refill(now, e.l.bulkCeil.Load(), e.l.top)
	}
}

// limit is the endpoint's bucket under Layer.LimitBulk, nil without one
// or before the first packet (which finds the bucket full).
func (e *Endpoint) limit() *bulkLimit {
	if e.l.bulkCeil == nil || e.recs == nil {
		return nil
	}
	return &e.recs.lim
}

// bulkLimit is an endpoint's bucket under the layer's bulk ceiling
// (Layer.LimitBulk), and what TakeBulk reports.
type bulkLimit struct {
	pace congestion.Pacer
	rate int64 // the ceiling at the last refill; 0: none
	sent int64 // bulk bytes written since TakeBulk
	held bool  // bulk waited on the ceiling since TakeBulk
}

// refill earns the ceiling's budget; its bucket holds bulkQuanta pacer
// quanta (at least two packets), so a sender woken late by the 5 ms
// message timer (a busy CPU delays it by tens of milliseconds) loses
// little of its share.
func (b *bulkLimit) refill(now, rate int64, top int) {
	b.rate = rate
	if rate > 0 {
		b.pace.Refill(now, rate, max(2*top, int(min(rate, congestion.MaxRate)*bulkQuanta*congestion.Quantum/1e9)))
	}
}

// bulkQuanta is the bulk ceiling's bucket in pacer quanta: 20 ms.
const bulkQuanta = 4

func (b *bulkLimit) ok() bool { return b.rate <= 0 || b.pace.Positive() }

// TakeBulk returns the bulk bytes the endpoint wrote since the last call
// and whether its bulk waited on the layer's ceiling (Layer.LimitBulk)
// meanwhile, and starts both anew: a connection that waited wants more
// than its share, one that did not wants what it sent.
func (e *Endpoint) TakeBulk() (sent int64, held bool) {
	b := e.limit()
	if b == nil {
		return 0, false
	}
	sent, held = b.sent, b.held
	b.sent, b.held = 0, false
	return sent, held
}

// rtoAge is the time after which a packet unreported is gone (age): the
// retransmission timeout and a quarter round trip.
func (e *Endpoint) rtoAge() int64 { return e.rtt.RTO() + e.rtt.Smoothed()/4 }

// firstTimeout is the silence timeout before backoff (timeout): rtoAge,
// at least MinResend, as a unit's resend interval is.
func (e *Endpoint) firstTimeout() int64 { return max(e.rtoAge(), e.l.minResend) }

// oldestUnacked is the first send time of the oldest unacknowledged
// reliable unit; ok is false when none is in flight.
func (e *Endpoint) oldestUnacked() (t int64, ok bool) {
	for m := e.sendMask; m != 0; m &= m - 1 {
		i := bits.TrailingZeros32(m)
		c := e.ch[i]
		if e.l.kinds[i] != ReliableOrdered || c.ua == c.sendNext {
			continue
		}
		if f := c.units[c.ua&uint16(len(c.units)-1)].first; !ok || f < t {
			t, ok = f, true
		}
	}
	return t, ok
}

// timeoutAt is when the retransmission timeout fires: reliable units in
// flight, and no packet acknowledged for timeoutInterval, counted from
// the latest of the oldest unit's first send, the last ack and the last
// timeout. ok is false when nothing is in flight.
func (e *Endpoint) timeoutAt() (int64, bool) {
	r := e.recs
	if r == nil || e.cc == nil {
		return 0, false
	}
	first, ok := e.oldestUnacked()
	if !ok {
		return 0, false
	}
	return max(first, r.lastAck, r.timedAt) + e.timeoutInterval(), true
}

// timeoutInterval is the wait for the next timeout: firstTimeout,
// doubled by each timeout since the last ack, at most an eighth of the
// stall bound (silence). A peer that acknowledges nothing so gets at
// most one probe per doubled timeout, and a live one on a lossy path
// still at least eight probes before the stall bound: at 30 % loss each
// way, a probe or its ack is lost half the time, and eight in a row
// happen 0.4 % of the time, where with a cap of 64 timeouts two or three
// probes fit the bound (docs/decisions.md).
func (e *Endpoint) timeoutInterval() int64 {
	ft := e.firstTimeout()
	return min(ft<<e.recs.backoff, max(ft, e.silence()/8))
}

// timeout fires the retransmission timeout when due (timeoutAt). A peer
// that acknowledges nothing for a whole timeout receives nothing, or
// will not say: what it sent a timeout ago is gone (its units due again,
// the oldest first), from the second timeout in a row the congestion
// window falls to its minimum (Controller.OnTimeout), and until an ack
// comes back the endpoint sends one packet per timeout (the probe,
// gated), each timeout twice the last (timeoutInterval), as TCP backs
// off its RTO (RFC 6298 §5.5). The game's entries wait too: their right
// to overdraw the pacer (debt) is for a peer that acknowledges, and a
// silent one so gets a few packets, not a rate.
func (e *Endpoint) timeout(now int64) {
	r := e.recs
	if r == nil || e.cc == nil || now < r.checkAt {
		return // the common case: one comparison
	}
	at, ok := e.timeoutAt()
	if !ok {
		r.checkAt = now + e.firstTimeout() // a unit sent from now on
		return
	}
	if now < at {
		r.checkAt = at
		return
	}
	// The packets sent a timeout ago are gone, their units due (unless
	// sent again since: a unit's own resend may have gone already, and
	// that copy is the probe); younger ones may still be acknowledged.
	mask, first := uint32(len(r.recs)-1), e.firstTimeout()
	for i := r.rHead; i != r.rTail; i++ {
		rec := &r.recs[i&mask]
		if now-rec.sent < first {
			break
		}
		if !rec.done {
			e.markDue(rec)
			e.gone(rec, now)
		}
	}
	if r.backoff > 0 {
		// A second timeout in a row, the probe unanswered too: the
		// path or the peer is gone, not one burst of loss (QUIC's
		// persistent congestion). A first one only holds the sending
		// to the probe, so a lossy path whose acks come back after it
		// keeps its window.
		e.cc.OnTimeout(now)
	}
	r.backoff = min(r.backoff+1, maxTimeouts)
	r.timedAt, r.probed, r.checkAt = now, false, now+e.firstTimeout()
	e.l.timeouts.Add(1)
}

// writePing writes a ping at the start of dst and returns its size (0:
// no reliable unit in flight, or no room): an empty reliable entry for the
// unit just before the oldest unacknowledged one of a channel. The peer
// has that unit (everything before the oldest unacknowledged one was
// acknowledged), so it drops the entry as a duplicate, and acknowledges
// the packet as it does any packet with a reliable entry (§14.4, §14.5).
// A silent peer so costs four bytes a timeout, where a probe of the
// oldest unit cost up to a whole packet: a fifth of what a peer that asked
// 20 KB a second got in its first second, with eight probes in the stall
// bound (docs/decisions.md, "A peer that does not acknowledge").
func (e *Endpoint) writePing(dst []byte) int {
	for i, k := range e.l.kinds {
		c := e.ch[i]
		if k != ReliableOrdered || c == nil || c.ua == c.sendNext {
			continue
		}
		return putEntry(dst, k, &entry{ch: i, id: c.ua - 1})
	}
	return 0
}

// probeFull reports that a packet of n bytes is a whole probe: while the
// endpoint backs off (timeout), a packet carries one reliable entry, the
// oldest due, and nothing unreliable (its ack, not its bytes, is the point).
func (e *Endpoint) probeFull(n int) bool { return n > 0 && e.recs.backoff > 0 }

// gated reports that nothing may go now but an ack: the endpoint backs
// off (timeout) and sent its probe for this timeout already, or the
// peer's acks are overdue (hushed: quiet at the last refill). Nothing
// goes until an ack, or the next timeout's probe.
func (e *Endpoint) gated() bool {
	r := e.recs
	return r != nil && (r.backoff > 0 && r.probed || r.hushed)
}

// quiet reports that the peer's acks are overdue: reliable units are in
// flight and no packet was acknowledged for quietAfter since the oldest
// of them left or the last ack, whichever is later. A peer that
// acknowledges keeps sending acks within a round trip and its AckDelay,
// however lossy its path, so two round trips of silence mean it stopped
// (or its path did): what it asks for then waits, as a TCP sender's
// window stays full, until an ack comes or the retransmission timeout
// sends its probe. Without this a peer that stopped acknowledging got
// what it asked for until that timeout, which a deviation of the round
// trip (a loaded host's) puts many round trips later (docs/decisions.md).
func (e *Endpoint) quiet(now int64) bool {
	r := e.recs
	if e.cc == nil || r.backoff > 0 {
		return false // the timeout's backoff gates on its own
	}
	d := e.quietAfter()
	if now-r.lastAck <= d {
		return false
	}
	first, ok := e.oldestUnacked()
	return ok && now-first > d
}

// quietAfter is the silence after which the peer's acks are overdue
// (quiet): two smoothed round trips, its AckDelay and one pacing quantum
// (the sender's timer).
func (e *Endpoint) quietAfter() int64 {
	return 2*e.rtt.Smoothed() + e.l.ackDelay + congestion.Quantum
}

// debt is how far the game's entries may overdraw the pacer: one bucket,
// which the bulk's next packets then wait for. The game's messages so
// never wait behind the pacer for the bulk, and still cannot outrun it.
func (e *Endpoint) debt() int64 {
	return max(4*int64(e.l.top), e.rate()*congestion.Quantum/1e9)
}

// mayGame reports whether the game's entries may go now (after refill),
// mayBulk whether bulk units may: resends at once, new ones while the
// congestion window has room too (window). A resend needs no room: the
// window counts the lost packet no longer, and a timed-out one must go
// even when no ack comes back to open the window. Under a bulk ceiling
// (Layer.LimitBulk) bulk units also wait for its bucket, and mayBulk
// notes when one waited (TakeBulk's held).
func (e *Endpoint) mayGame() bool { return e.pace.Above(e.debt()) }
func (e *Endpoint) window() bool  { return e.cc == nil || e.cc.CanSend() }
func (e *Endpoint) mayBulk() bool {
	if !e.pace.Positive() {
		return false
	}
	if b := e.limit(); b != nil && !b.ok() {
		if !b.held && e.bulkWaiting() {
			b.held = true
		}
		return false
	}
	return true
}

// bulkWaiting reports whether a bulk unit never sent waits: a bulk
// channel's queued entry or new unit, or a large message's next fragment.
func (e *Endpoint) bulkWaiting() bool {
	for m := e.sendMask; m != 0; m &= m - 1 {
		i := bits.TrailingZeros32(m)
		c := e.ch[i]
		if e.l.kinds[i] != ReliableOrdered {
			if c.bulk && c.pend > 0 {
				return true
			}
		} else if c.sendNext != c.nextID && e.bulkUnit(i, &c.units[c.sendNext&uint16(len(c.units)-1)]) {
			return true
		}
	}
	return false
}

// ackUrgent reports whether so many packets with reliable units arrived
// since our last packet that an ack must go now, not after AckDelay: the
// peer's window reports a packet lost once 64 newer ones arrived before
// an ack, and its congestion controller reads delay from prompt acks.
func (e *Endpoint) ackUrgent() bool { return e.ackDue && e.rxUnacked >= ackEvery }

// WantsSend reports whether WritePayload would write something now, or
// an ack is urgent (WritePayload then writes nothing: the caller sends the
// packet as a KeepAlive, as when nothing was due).
func (e *Endpoint) WantsSend(now int64) bool {
	if e.ackUrgent() {
		return true
	}
	if e.sendMask == 0 {
		return false
	}
	e.refill(now)
	if e.gated() {
		return false
	}
	game := e.mayGame()
	if !game {
		return false
	}
	bulk, probing := e.mayBulk(), e.recs != nil && e.recs.backoff > 0
	_, iv := e.resendInterval()
	for m := e.sendMask; m != 0; m &= m - 1 {
		i := bits.TrailingZeros32(m)
		c := e.ch[i]
		if e.l.kinds[i] != ReliableOrdered {
			if c.pend > 0 && (bulk || e.l.bulk&(1<<i) == 0) && !probing {
				return true
			}
			continue
		}
		if e.canSendNew(i, c) && (bulk && e.window() || !e.bulkUnit(i, &c.units[c.sendNext&uint16(len(c.units)-1)])) {
			return true
		}
		if t, ok := c.nextResend(iv, bulk); ok && t <= now {
			return true
		}
	}
	return false
}

// canSendNew reports whether channel i has a unit never sent that may go
// now: inside the window; fewer than maxLivePackets packets unreported,
// or nothing of the channel's in flight (so that packets the peer refuses,
// which stay unreported, cannot starve a channel); and, for the first
// fragment of a message, no other channel's fragmented message in flight,
// nor, if this channel has one, another channel waiting to start one.
// The peer so reassembles one message at a time.
func (e *Endpoint) canSendNew(i int, c *channel) bool {
	if c.sendNext == c.nextID || c.sendNext-c.ua >= window ||
		e.recs != nil && e.recs.live >= maxLivePackets && c.sendNext != c.ua {
		return false
	}
	u := &c.units[c.sendNext&uint16(len(c.units)-1)]
	if u.cnt == 0 || u.idx != 0 {
		return true
	}
	bit := uint32(1) << i
	if e.fragOut&^bit != 0 {
		return false
	}
	return e.fragOut&bit == 0 || !e.fragWaiting(i)
}

// midMessage reports whether the channel's next new unit is a fragment
// other than a message's first: a message partly sent, waiting for the
// congestion window or the pacer. Until it is wholly sent and
// acknowledged no other channel starts one, so the peer reassembles one
// at a time.
func (c *channel) midMessage() bool {
	if c.sendNext == c.nextID {
		return false
	}
	u := &c.units[c.sendNext&uint16(len(c.units)-1)]
	return u.cnt != 0 && u.idx != 0
}

// fragWaiting reports whether a reliable channel other than i has the
// first fragment of a message as its next new unit.
func (e *Endpoint) fragWaiting(i int) bool {
	for m := e.sendMask &^ (1 << i); m != 0; m &= m - 1 {
		j := bits.TrailingZeros32(m)
		c := e.ch[j]
		if e.l.kinds[j] != ReliableOrdered || c.sendNext == c.nextID || c.sendNext-c.ua >= window {
			continue
		}
		if u := &c.units[c.sendNext&uint16(len(c.units)-1)]; u.cnt != 0 && u.idx == 0 {
			return true
		}
	}
	return false
}

// nextResend is the earliest time a sent, unacknowledged unit is due
// (bulk units at twice iv, as writeReliable sends them); with bulk false,
// among the game's units only (bulkUnit).
func (c *channel) nextResend(iv int64, bulk bool) (int64, bool) {
	var t int64
	ok := false
	mask := uint16(len(c.units) - 1)
	for id := c.ua; id != c.sendNext; id++ {
		u := &c.units[id&mask]
		isBulk := c.bulk || u.cnt != 0
		if u.flags&uAcked != 0 || !bulk && isBulk {
			continue
		}
		d := u.due(iv)
		if isBulk {
			d = u.due(2 * iv) // writeReliable's timeout for bulk units
		}
		if !ok || d < t {
			t, ok = d, true
		}
	}
	return t, ok
}

// WritePayload packs due entries into dst for the packet numbered seq and
// returns the bytes written, 0 when nothing is due. dst should hold
// maxPayload bytes: an entry that can never fit it is not sent.
//
// The game's entries go first: unreliable and sequenced ones, then
// reliable units that are not bulk (bulkUnit), each channel in turn; then,
// if the pacer's balance is positive and the congestion window has room,
// bulk units. The game's entries may overdraw the pacer by debt.
func (e *Endpoint) WritePayload(dst []byte, seq uint16, now int64) int {
	if e.sendMask == 0 {
		return 0
	}
	e.refill(now)
	if e.gated() || !e.mayGame() {
		return 0
	}
	bulk, window := e.mayBulk(), e.window()
	l := e.l
	nch := len(l.kinds)
	start := int(e.rr) % nch
	e.rr = uint8((start + 1) % nch)
	if e.recs == nil {
		e.recs = newRecords()
	}
	r := e.recs
	if r.rTail-r.rHead >= maxRecords {
		e.lose(&r.recs[r.rHead&uint32(len(r.recs)-1)], now)
	}
	eStart := r.eTail
	if r.backoff > 1 {
		// The data probe went unanswered too: from the second timeout
		// in a row the probe is a ping, only its ack is wanted.
		if n := e.writePing(dst); n > 0 {
			r.pushRecord(record{seq: seq, sent: now, start: eStart, size: uint16(n)})
			e.cc.OnSent(n, now)
			r.probed = true
			e.pace.Spend(n)
			return n
		}
	}
	spec, full := e.resendInterval()
	n, game := 0, 0
	for pass := 0; pass < 2; pass++ {
		for i := 0; i < nch && len(dst)-n >= 4; i++ {
			c := (start + i) % nch
			if e.sendMask&(1<<c) == 0 {
				continue
			}
			if l.kinds[c] == ReliableOrdered {
				n = e.writeReliable(dst, n, c, now, spec, full, pass == 1, window)
			} else if e.ch[c].bulk == (pass == 1) && r.backoff == 0 {
				n = e.writeUnreliable(dst, n, c)
			}
		}
		if !bulk {
			break
		}
		if pass == 0 {
			game = n
		}
	}
	if b := e.limit(); b != nil && bulk && n > game {
		b.sent += int64(n - game)
		b.pace.Spend(n - game)
	}
	if r.eTail != eStart {
		r.pushRecord(record{seq: seq, sent: now, start: eStart, n: r.eTail - eStart, size: uint16(n)})
		if e.cc == nil {
			e.cc = new(congestion.Controller)
			e.cc.Init(l.top, l.sendRate, l.ackDelay, now)
			e.cc.CountEvents(&l.ccEvents)
		}
		e.cc.OnSent(n, now)
	}
	if n > 0 && r.backoff > 0 {
		r.probed = true
	}
	e.pace.Spend(n)
	return n
}

// writeReliable writes channel ci's due units: in the game's pass (bulk
// false) its units that are not bulk, in the bulk pass the others; in
// each, resends first, oldest first, then new units in order, new bulk
// ones only with room in the congestion window (window).
func (e *Endpoint) writeReliable(dst []byte, n, ci int, now, spec, full int64, bulk, window bool) int {
	c := e.ch[ci]
	if c.bulk && !bulk {
		return n
	}
	mask := uint16(len(c.units) - 1)
	en := entry{ch: ci}
	for id := c.ua; id != c.sendNext; id++ {
		if e.probeFull(n) {
			return n
		}
		u := &c.units[id&mask]
		if u.flags&uAcked != 0 || (c.bulk || u.cnt != 0) != bulk {
			continue
		}
		// A copy of a game unit rides along every spec interval; only
		// a resend at the full timeout (which may have needed a packet
		// of its own) counts toward the backoff. Bulk units go again
		// when lost (due), or at twice the timeout: a window's packets
		// wait in the bottleneck's queue, and a bulk unit resent early
		// takes the place of new data.
		iv := full
		if bulk {
			iv = 2 * full
		}
		timed, due := u.due(iv) <= now, u.flags&uDue != 0
		if !timed && !due && (bulk || now-u.last < spec || !e.recs.lossy()) {
			continue
		}
		en.id, en.frag, en.idx, en.cnt, en.data = id, u.cnt != 0, u.idx, u.cnt, *u.buf
		w := putEntry(dst[n:], ReliableOrdered, &en)
		if w == 0 {
			continue
		}
		n += w
		u.last = now
		u.flags &^= uDue
		if timed {
			u.tries = min(u.tries+1, maxBackoff)
		}
		if timed || due {
			// Lost (due), repaired, or past its timeout: a resend.
			e.stats.Resent++
		} else {
			// Early, riding along: a speculative copy. (One copy per
			// send at most cut the wire bytes at 5 % loss from 2.58 to
			// 2.40 per payload byte, still above kcp-go's 1.57, and
			// raised the p99 from 0.61 to 0.71 of kcp-go's: tuning.md.)
			e.stats.Copies++
		}
		e.recs.pushEntry(uint8(ci), id)
	}
	// Then new units inside the window; the game's pass stops at the
	// first bulk unit, which keeps the channel's order.
	for e.canSendNew(ci, c) && !e.probeFull(n) {
		id := c.sendNext
		u := &c.units[id&mask]
		if !bulk && u.cnt != 0 || bulk && !window {
			break
		}
		en.id, en.frag, en.idx, en.cnt, en.data = id, u.cnt != 0, u.idx, u.cnt, *u.buf
		w := putEntry(dst[n:], ReliableOrdered, &en)
		if w == 0 {
			break
		}
		n += w
		u.first, u.last = now, now
		u.flags |= uSent
		if u.cnt != 0 {
			c.fragsOut++
			e.fragOut |= 1 << ci
		}
		c.sendNext++
		e.recs.pushEntry(uint8(ci), id)
	}
	return n
}

func (e *Endpoint) writeUnreliable(dst []byte, n, ci int) int {
	l := e.l
	c := e.ch[ci]
	k := l.kinds[ci]
	en := entry{ch: ci}
	for c.pend > 0 {
		p := c.pq[c.pendHead]
		en.id, en.data = c.seqOut, *p
		w := putEntry(dst[n:], k, &en)
		if w == 0 {
			if headerLen(k, false, len(*p))+len(*p) > len(dst) {
				e.freed(c.popPend(l)) // can never fit this caller's packets
				continue
			}
			break
		}
		n += w
		if k == Sequenced {
			c.seqOut++
		}
		e.freed(c.popPend(l))
	}
	if c.pend == 0 {
		e.sendMask &^= 1 << ci
	}
	return n
}

// PacketSent tells that a packet went to the peer: it carries acks, so a
// due ack is cleared.
func (e *Endpoint) PacketSent(now int64) { e.ackDue, e.rxUnacked = false, 0 }

// AckDue reports whether an ack-only packet should go now.
func (e *Endpoint) AckDue(now int64) bool {
	return e.ackDue && (now-e.ackAt >= e.l.ackDelay || e.rxUnacked >= ackEvery)
}

// Acked reports packet seq delivered (seqwin.AckReport).
func (e *Endpoint) Acked(seq uint16, now int64) {
	if e.recs == nil {
		return
	}
	r := e.recs
	rec := r.find(seq)
	if rec == nil {
		return
	}
	for i := uint32(0); i < rec.n; i++ {
		ref := r.ents[(rec.start+i)&uint32(len(r.ents)-1)]
		e.ackUnit(int(ref.ch), ref.id)
	}
	if !rec.repaired {
		r.sampleLoss(false) // a packet repaired already counted as lost
	}
	if d := (seq - r.newest) & (seqModulus - 1); !r.anyAcked || d < seqModulus/2 {
		r.newest, r.anyAcked = seq, true
	} else if rec.repaired && !rec.evicted {
		// Taken as lost, and it arrived after a later packet after all:
		// the path reorders by as many packets, and fast repair waits for
		// one more (lossThreshold). (An evicted packet's fate is read
		// after the tracked ones of the same ack, Acks: it proves
		// nothing.)
		r.reorder = max(r.reorder, min(uint16(seqModulus-d), ackWindow))
	}
	// The peer acknowledges: the silence timers restart (timeout, Stalled).
	if r.backoff > 0 {
		r.checkAt = 0 // the next timeout comes sooner than the backed-off one
	}
	r.lastAck, r.backoff, r.probed, r.hushed = now, 0, false, false
	if rec.gone {
		e.cc.OnLateAck(rec.sent, now, e.rtt.Smoothed()) // declared lost too early
	} else {
		e.cc.OnAcked(int(rec.size), rec.sent, now, e.rtt.Smoothed())
	}
	// Fast repair: older packets sent well before this one are probably
	// lost: their units go again. They stay in the congestion
	// controller's flight until the packet layer reports them or their
	// timeout passes (age): a path that reorders by more than thr would
	// otherwise count as lossy. A packet packetThreshold sequence
	// numbers older than the acknowledged one (more on a path seen to
	// reorder: lossThreshold) is lost too, however close their send
	// times (QUIC's packet threshold; RACK's reorder window of 0 before
	// any reordering, RFC 8985 §6.2): a paced flight leaves in bursts of a
	// timer tick that share one send time, and the losses among its last
	// SRTT/8 waited for the rack timer, a quarter round trip and the
	// AckDelay later (a 1 MiB message's transfer 0.15 s instead of 0.13
	// in 7 of 16 netsim runs: TestSimBulkTailRepair).
	thr, rw := e.reorderWindow(), e.rackWindow()
	mask := uint32(len(r.recs) - 1)
	var waiting bool
	for i := r.rHead; i != r.rTail; i++ {
		o := &r.recs[i&mask]
		if o == rec {
			if waiting && int32(i-r.rackPos) > 0 {
				r.rackPos = i
			}
			break
		}
		if o.done || o.repaired {
			continue
		}
		if rec.sent-o.sent > thr || !o.evicted && (rec.seq-o.seq)&(seqModulus-1) >= r.lossThreshold() {
			o.repaired = true
			r.sampleLoss(true)
			e.markDue(o)
			continue
		}
		// Sent just before rec: reordering, or lost at the tail of a
		// flight, where nothing sent later will repair it (rack).
		waiting = true
		if at := o.sent + (now - rec.sent) + rw; r.rackAt == 0 || at < r.rackAt {
			r.rackAt, r.rackRTT = at, now-rec.sent
		}
	}
	r.report(rec)
}

// reorderWindow is how much earlier than an acknowledged packet another
// must have been sent to be taken as lost at once (fast repair): SRTT/8,
// at least 2 ms.
func (e *Endpoint) reorderWindow() int64 {
	return max(e.rtt.Smoothed()/8, int64(2*time.Millisecond))
}

// rackWindow is how long after its ack would have come (its round trip
// taken as the acknowledged packet's) a packet is taken as lost (rack):
// SRTT/4, RACK's reorder window, plus the peer's AckDelay, since acks of
// packets that arrive together leave together, up to AckDelay after the
// first (at srtt/8 alone, 5 % random loss made 16k spurious repairs in 10 s
// and cost a fifth of the link).
func (e *Endpoint) rackWindow() int64 { return e.rtt.Smoothed()/4 + e.l.ackDelay }

// rack repairs, once its time has come, a packet sent within the reorder
// window before one that was acknowledged and still unreported rackWindow
// after its ack was due (RACK's reorder timer, RFC 8985 §6.2). Fast
// repair alone leaves the last packets of a flight to the retransmission
// timeout (twice it for bulk): at 1 % loss a 1 MiB message's tail lost a
// round trip or two.
func (e *Endpoint) rack(now int64) {
	r := e.recs
	if r == nil || r.rackAt == 0 || now < r.rackAt {
		return
	}
	r.rackAt = 0
	rw := e.rackWindow()
	mask := uint32(len(r.recs) - 1)
	for i := r.rHead; i != r.rTail; i++ {
		o := &r.recs[i&mask]
		if o.done || o.repaired {
			continue
		}
		if int32(i-r.rackPos) >= 0 {
			// Sent with or after the newest acknowledged packet that
			// armed the timer: no later packet has arrived to speak
			// against it, so its own ack, or the timeout, judges it (RFC
			// 8985 §6.2). Judging it by that packet's round trip took a
			// filling queue's delay for loss: beside quic-go, up to
			// 2,434 units a run went twice that had arrived.
			break
		}
		at := o.sent + r.rackRTT + rw
		if at <= now {
			o.repaired = true
			r.sampleLoss(true)
			e.markDue(o)
		} else if r.rackAt == 0 || at < r.rackAt {
			r.rackAt = at
		}
	}
}

// gone takes rec out of the congestion controller's flight as lost, once.
// The packet layer reports a loss only when the peer's acks moved 64
// packets past it; with a small window that may take many round trips,
// and a window full of packets that are long gone would stop the
// connection.
func (e *Endpoint) gone(rec *record, now int64) {
	if !rec.gone {
		rec.gone = true
		e.cc.OnLost(int(rec.size), rec.sent, now)
	}
}

// age declares gone the unreported packets sent a retransmission timeout
// and a quarter round trip ago: their acks would be back by now, unless
// the ack was lost too (a later one may still report them: OnLateAck).
func (e *Endpoint) age(now int64) {
	r := e.recs
	if r == nil || e.cc == nil {
		return
	}
	rto := e.rtoAge()
	mask := uint32(len(r.recs) - 1)
	if int32(r.aged-r.rHead) < 0 {
		r.aged = r.rHead
	}
	for ; r.aged != r.rTail; r.aged++ {
		rec := &r.recs[r.aged&mask]
		if rec.done || rec.gone {
			continue
		}
		if now-rec.sent <= rto {
			return
		}
		e.gone(rec, now)
	}
}

// Evicted reports that the packet layer stopped tracking packet seq
// unreported (seqwin.SeqState.Send's eviction, after 128 newer packets):
// it will never say whether seq arrived. The endpoint keeps the packet and
// reads its fate from the ack fields of the packets that follow (Acks), as
// the packet layer would have.
func (e *Endpoint) Evicted(seq uint16, now int64) {
	if e.recs == nil {
		return
	}
	if rec := e.recs.find(seq); rec != nil && !rec.evicted {
		rec.evicted = true
		e.recs.evicted++
	}
}

// Acks takes the Ack and AckBits of a packet the packet layer accepted,
// for the packets it no longer tracks (Evicted): one that Ack or its bit
// names arrived; one more than 64 behind Ack, unnamed, is lost. Call it
// for every accepted packet, after its AckReport's Acked and Lost; with
// nothing evicted it costs a comparison.
func (e *Endpoint) Acks(ack uint16, bits uint64, now int64) {
	r := e.recs
	if r == nil || r.evicted == 0 {
		return
	}
	mask := uint32(len(r.recs) - 1)
	// The evicted records are the oldest unreported ones: the packet
	// layer evicts in sequence order.
	for i := r.rHead; i != r.rTail && r.evicted > 0; i++ {
		rec := &r.recs[i&mask]
		if rec.done {
			continue
		}
		if !rec.evicted {
			break
		}
		d := uint16(ack-rec.seq) & (seqModulus - 1)
		switch {
		case d >= seqModulus/2:
			return // newer than the peer's newest: not yet
		case d == 0:
			// The peer's newest packet, which the packet layer no longer
			// tracks and so took no round trip from: the endpoint's record
			// gives it. Without this a flight of more packets than the
			// packet layer tracks (128) left the smoothed round trip at
			// what smaller flights had measured (74 ms against 141 ms
			// beside quic-go), and units timed out before their acks.
			e.SetRTT(time.Duration(now - rec.sent))
			e.Acked(rec.seq, now)
		case d <= ackWindow && bits&(1<<(d-1)) != 0:
			e.Acked(rec.seq, now)
		case d > ackWindow:
			e.lose(rec, now)
		}
	}
}

// Lost reports packet seq lost: its units are due at once.
func (e *Endpoint) Lost(seq uint16, now int64) {
	if e.recs == nil {
		return
	}
	if rec := e.recs.find(seq); rec != nil {
		e.lose(rec, now)
	}
}

func (e *Endpoint) lose(rec *record, now int64) {
	if !rec.repaired {
		e.recs.sampleLoss(true)
	}
	e.markDue(rec)
	e.gone(rec, now)
	e.recs.report(rec)
}

// markDue makes the unacknowledged units of rec due, unless sent again
// since.
func (e *Endpoint) markDue(rec *record) {
	r := e.recs
	for i := uint32(0); i < rec.n; i++ {
		ref := r.ents[(rec.start+i)&uint32(len(r.ents)-1)]
		c := e.ch[ref.ch]
		if uint16(ref.id-c.ua) >= uint16(c.sendNext-c.ua) {
			continue
		}
		u := &c.units[ref.id&uint16(len(c.units)-1)]
		if u.flags&uAcked == 0 && u.last <= rec.sent {
			u.flags |= uDue
		}
	}
}

func (e *Endpoint) ackUnit(ci int, id uint16) {
	c := e.ch[ci]
	if uint16(id-c.ua) >= uint16(c.sendNext-c.ua) {
		return // acknowledged before
	}
	mask := uint16(len(c.units) - 1)
	u := &c.units[id&mask]
	if u.flags&uAcked != 0 {
		return
	}
	u.flags |= uAcked
	if u.cnt != 0 {
		if c.fragsOut--; c.fragsOut == 0 && !c.midMessage() {
			e.fragOut &^= 1 << ci
		}
	}
	freed := e.l.put(u.buf)
	c.queued -= int(freed)
	e.freed(freed)
	u.buf = nil
	if bit := uint32(1) << ci; e.blocked&bit != 0 && c.queued <= e.l.maxQueued[ci]/2 {
		e.blocked &^= bit
		e.sendable |= bit
	}
	for c.ua != c.sendNext {
		u := &c.units[c.ua&mask]
		if u.flags&uAcked == 0 {
			break
		}
		if u.cnt == 0 || u.idx == u.cnt-1 {
			e.stats.Acked++
			e.inFlight--
			c.acks.acked++
		}
		*u = sunit{}
		c.ua++
	}
	if c.ua == c.nextID {
		if size := c.unitPeaks.emptied(len(c.units), 8); size > 0 {
			c.units = make([]sunit, size)
		}
		if c.pend == 0 {
			e.sendMask &^= 1 << ci
		}
	}
}

// Deadline is the Unix ns time of the next timer event (resend, ack,
// send budget, stall), 0 when idle. A time in the past means now. A bulk
// unit that waits for the congestion window has no time: an ack, which
// Acked reports, opens the window.
func (e *Endpoint) Deadline() int64 {
	var d int64
	consider := func(t int64) {
		if d == 0 || t < d {
			d = t
		}
	}
	if e.ackDue {
		if e.rxUnacked >= ackEvery {
			consider(e.ackAt)
		} else {
			consider(e.ackAt + e.l.ackDelay)
		}
	}
	if e.sendMask == 0 {
		return d
	}
	if t, ok := e.stallAt(); ok {
		consider(t)
	}
	if t, ok := e.timeoutAt(); ok {
		consider(t)
	}
	if e.recs != nil && e.recs.rackAt != 0 {
		consider(e.recs.rackAt)
	}
	if e.gated() {
		return d // the next timeout sends the next probe
	}
	_, iv := e.resendInterval()
	rate := e.rate()
	gameAt := e.pace.When(rate, e.debt()) // the game's entries may go
	bulkAt := e.pace.When(rate, 0)        // bulk ones, with room in the window
	if b := e.limit(); b != nil && b.rate > 0 {
		bulkAt = max(bulkAt, b.pace.When(b.rate, 0)) // and under the ceiling
	}
	window := e.cc == nil || e.cc.CanSend()
	probing := e.recs != nil && e.recs.backoff > 0 // a probe carries no unreliable entry
	for m := e.sendMask; m != 0; m &= m - 1 {
		i := bits.TrailingZeros32(m)
		c := e.ch[i]
		if e.l.kinds[i] != ReliableOrdered {
			if c.pend > 0 && !probing {
				if c.bulk {
					consider(bulkAt)
				} else {
					consider(gameAt)
				}
			}
			continue
		}
		if e.canSendNew(i, c) {
			if !e.bulkUnit(i, &c.units[c.sendNext&uint16(len(c.units)-1)]) {
				consider(gameAt)
			} else if window {
				consider(bulkAt)
			}
		}
		if t, ok := c.nextResend(iv, false); ok {
			consider(max(t, gameAt))
		}
		if t, ok := c.nextResend(iv, true); ok {
			consider(max(t, bulkAt))
		}
	}
	return d
}

// silence is how long a peer may acknowledge nothing while reliable
// units are in flight: max(StallSilence, StallRTTs × the smoothed round
// trip). The round trip is the one before the silence: samples come only
// with acks.
func (e *Endpoint) silence() int64 {
	return max(e.l.stallSilence, e.l.stallRTTs*e.rtt.Smoothed())
}

// stallAt is when the connection stalls: the silence bound after the
// later of the oldest unacknowledged unit's first send and the last ack
// (a peer that acknowledges nothing), or StallTimeout after that send (a
// peer that acknowledges other packets, never that unit's), whichever
// comes first; ok is false when no reliable unit is in flight. A player
// on a lossy path acknowledges some packets every round trip or so, and
// is not ended by the first bound.
func (e *Endpoint) stallAt() (int64, bool) {
	first, ok := e.oldestUnacked()
	if !ok {
		return 0, false
	}
	var last int64
	if e.recs != nil {
		last = e.recs.lastAck
	}
	return min(first+e.l.stall, max(first, last)+e.silence()), true
}

// Stalled reports whether the connection passed its stall bound
// (stallAt): the peer stopped acknowledging.
func (e *Endpoint) Stalled(now int64) bool {
	t, ok := e.stallAt()
	return ok && now > t
}

// TakeSendable returns the channels (bit i: channel i) on which Send
// returned ErrQueueFull and that have since drained to half their
// MaxQueued, and forgets them: a sender that filled a channel learns
// when to queue more.
func (e *Endpoint) TakeSendable() uint32 {
	s := e.sendable
	e.sendable = 0
	return s
}

// path returns what the congestion controller knows of the path.
func (e *Endpoint) path() PathStats {
	p := PathStats{RTT: time.Duration(e.rtt.Smoothed()), PacingRate: e.rate()}
	if e.cc != nil {
		st := e.cc.Stats()
		p.BaseRTT, p.QueueDelay, p.Window, p.InFlight = st.BaseRTT, st.QueueDelay, int(st.Window), int(st.InFlight)
		p.DeliveryRate, p.SlowStart, p.CongestionEvents = st.DeliveryRate, st.SlowStart, st.Events
		p.Competing = st.Competing
	}
	return p
}

// Stats returns the endpoint's counters, queues and path. Acked counts
// whole messages (when every unit of a message is acknowledged).
func (e *Endpoint) Stats() Stats {
	st := Stats{Sent: e.stats.Sent, Delivered: e.stats.Delivered, Acked: e.stats.Acked,
		Resent: e.stats.Resent, Copies: e.stats.Copies, InFlight: int(e.inFlight), Path: e.path()}
	for i, c := range e.ch {
		if c != nil {
			st.Queued[i] = c.queued
			st.QueueFull += c.acks.overflow
		}
	}
	return st
}

// Queued is the storage all channels hold for sending (the sum of
// Stats().Queued), without the rest.
func (e *Endpoint) Queued() int {
	n := 0
	for _, c := range e.ch {
		if c != nil {
			n += c.queued
		}
	}
	return n
}

// InFlight is Stats().InFlight, without the rest.
func (e *Endpoint) InFlight() int { return int(e.inFlight) }
