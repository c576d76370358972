package message

import (
	"math/bits"
	"time"
)

// Endpoint is one connection's message state. Not safe for concurrent
// use: the caller serialises (conn holds the connection's mutex).
type Endpoint struct {
	l    *Layer
	ch   []*channel // per channel, allocated on first use
	recs *records   // packets that carried reliable units

	pkt    []byte // the last received payload, for Next's unreliable pass
	pktOff int

	ret    *[]byte // the last reliable message Next returned, freed by the next call
	retBig []byte  // or the last reassembled one

	tokens int64 // send budget in nanobytes (bytes × 1e9)
	tokAt  int64
	// rtt and rttVar: the smoothed round trip and its mean deviation
	// (RFC 6298) from SetRTT's samples; defaultRTT until the first
	// (rttSampled).
	rtt, rttVar int64
	ackAt       int64
	held        int64 // receive storage, counted in the Layer too
	// progHeld: the part of held that belongs to the reassembly in
	// progress (channel progress), which may use the reserve.
	progHeld int64
	stats    Stats

	sendMask   uint32 // channels with something queued or unacknowledged
	fragOut    uint32 // channels with fragments sent and unacknowledged
	ready      uint32 // reliable channels with a unit at next
	progress   int8   // the channel whose reassembly may use the reserve; -1: none
	rr         uint8  // the channel WritePayload starts with
	ackDue     bool
	tokInit    bool
	rttSampled bool
}

// channel is one channel's send and receive state.
type channel struct {
	// Reliable send: units hold ids ua..nextID-1 (ring, power of two);
	// ua..sendNext-1 went out at least once.
	units                []sunit
	ua, sendNext, nextID uint16
	// Sequenced send: the id of the next message written.
	seqOut   uint16
	queued   int // storage bytes held for sending
	fragsOut int // fragments sent and unacknowledged
	// Unreliable and sequenced send queue (ring).
	pq             []*[]byte
	pendHead, pend int

	// Reliable receive: slots for ids next.. (ring, power of two);
	// expect is the first id at or after next not held.
	slots        []rslot
	next, expect uint16
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
		ch = new(channel)
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
				c.popPend(l)
			}
		}
		cost := int(l.chunkCost(len(msg)))
		if c.queued+cost > l.maxQueued[ch] {
			return ErrQueueFull
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
		cost = int64(n) * int64(l.top)
	}
	c := e.chanFor(ch)
	inUse := int(c.nextID - c.ua)
	if int64(c.queued)+cost > int64(l.maxQueued[ch]) || inUse+n > 0x8000 {
		return ErrQueueFull
	}
	c.growUnits(inUse + n)
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
	e.stats.InFlight++
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
}

func (c *channel) popPend(l *Layer) {
	q := c.pq
	p := q[c.pendHead]
	q[c.pendHead] = nil
	c.pendHead = (c.pendHead + 1) & (len(q) - 1)
	c.pend--
	c.queued -= int(l.put(p))
}

// SetRTT gives the endpoint a round-trip sample from the packet layer (the
// time from sending a packet to the first packet acknowledging it as the
// newest: fastpath's AckReport.RTTSample), folded in as RFC 6298 does;
// before the first, 100 ms.
func (e *Endpoint) SetRTT(rtt time.Duration) { e.sampleRTT(int64(rtt)) }

// sampleRTT folds in the round trip of one acknowledged packet.
func (e *Endpoint) sampleRTT(s int64) {
	if s <= 0 {
		return
	}
	if !e.rttSampled {
		e.rttSampled, e.rtt, e.rttVar = true, s, s/2
		return
	}
	d := e.rtt - s
	if d < 0 {
		d = -d
	}
	e.rttVar += (d - e.rttVar) / 4
	e.rtt += (s - e.rtt) / 8
}

// resendInterval is the time after which an unacknowledged unit sent once
// is sent again: the retransmission timeout, smoothed RTT + 2 × its
// deviation (at least 2 ms), times ResendFactor, at least MinResend; later
// resends of a unit back off (backoff). Below a factor of 1 the unit goes
// again before its ack could be back: such speculative copies only ride
// on packets that leave anyway (spec), while a packet of its own is sent
// for a unit only once the full timeout has passed (full).
func (e *Endpoint) resendInterval() (spec, full int64) {
	rto := e.rtt + max(2*e.rttVar, int64(2*time.Millisecond))
	spec = max(e.l.minResend, int64(e.l.resendF*float64(rto)))
	return spec, max(spec, rto)
}

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

// refill adds the send budget earned since the last call.
func (e *Endpoint) refill(now int64) {
	l := e.l
	if !e.tokInit {
		e.tokInit, e.tokens, e.tokAt = true, l.burst*1e9, now
		return
	}
	dt := now - e.tokAt
	if dt <= 0 {
		return
	}
	e.tokAt = now
	if dt >= 1e9 {
		e.tokens = l.burst * 1e9
		return
	}
	e.tokens = min(e.tokens+dt*l.sendRate, l.burst*1e9)
}

// WantsSend reports whether WritePayload would write something now.
func (e *Endpoint) WantsSend(now int64) bool {
	if e.sendMask == 0 {
		return false
	}
	e.refill(now)
	if e.tokens <= 0 {
		return false
	}
	_, iv := e.resendInterval()
	for m := e.sendMask; m != 0; m &= m - 1 {
		i := bits.TrailingZeros32(m)
		c := e.ch[i]
		if e.l.kinds[i] != ReliableOrdered {
			if c.pend > 0 {
				return true
			}
			continue
		}
		if e.canSendNew(i, c) {
			return true
		}
		if t, ok := c.nextResend(iv); ok && t <= now {
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

// nextResend is the earliest time a sent, unacknowledged unit is due.
func (c *channel) nextResend(iv int64) (int64, bool) {
	var t int64
	ok := false
	mask := uint16(len(c.units) - 1)
	for id := c.ua; id != c.sendNext; id++ {
		u := &c.units[id&mask]
		if u.flags&uAcked != 0 {
			continue
		}
		d := u.due(iv)
		if !ok || d < t {
			t, ok = d, true
		}
	}
	return t, ok
}

// WritePayload packs due entries into dst for the packet numbered seq and
// returns the bytes written, 0 when nothing is due. dst should hold
// maxPayload bytes: an entry that can never fit it is not sent.
func (e *Endpoint) WritePayload(dst []byte, seq uint16, now int64) int {
	if e.sendMask == 0 {
		return 0
	}
	e.refill(now)
	if e.tokens <= 0 {
		return 0
	}
	l := e.l
	nch := len(l.kinds)
	start := int(e.rr) % nch
	e.rr = uint8((start + 1) % nch)
	if e.recs == nil {
		e.recs = new(records)
	}
	r := e.recs
	if r.rTail-r.rHead >= maxRecords {
		e.lose(&r.recs[r.rHead&uint32(len(r.recs)-1)])
	}
	eStart := r.eTail
	spec, full := e.resendInterval()
	n := 0
	// The game's channels first, then the bulk ones, each in turn from
	// start.
	for pass := 0; pass < 2; pass++ {
		want := uint32(0)
		if pass == 1 {
			want = l.bulk
		}
		for i := 0; i < nch && len(dst)-n >= 4; i++ {
			c := (start + i) % nch
			if e.sendMask&(1<<c) == 0 || l.bulk&(1<<c) != want&(1<<c) {
				continue
			}
			if l.kinds[c] == ReliableOrdered {
				n = e.writeReliable(dst, n, c, now, spec, full)
			} else {
				n = e.writeUnreliable(dst, n, c)
			}
		}
		if l.bulk == 0 {
			break
		}
	}
	if r.eTail != eStart {
		r.pushRecord(record{seq: seq, sent: now, start: eStart, n: r.eTail - eStart})
	}
	e.tokens -= int64(n) * 1e9
	return n
}

func (e *Endpoint) writeReliable(dst []byte, n, ci int, now, spec, full int64) int {
	c := e.ch[ci]
	mask := uint16(len(c.units) - 1)
	en := entry{ch: ci}
	// Resends first, oldest first.
	for id := c.ua; id != c.sendNext; id++ {
		u := &c.units[id&mask]
		// A copy rides along every spec interval; only a resend at the
		// full timeout (which may have needed a packet of its own) counts
		// toward the backoff.
		timed := u.due(full) <= now
		if u.flags&uAcked != 0 || !timed && u.flags&uDue == 0 && now-u.last < spec {
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
		e.stats.Resent++
		e.recs.pushEntry(uint8(ci), id)
	}
	// Then new units inside the window.
	for e.canSendNew(ci, c) {
		id := c.sendNext
		u := &c.units[id&mask]
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
				c.popPend(l) // can never fit this caller's packets
				continue
			}
			break
		}
		n += w
		if k == Sequenced {
			c.seqOut++
		}
		c.popPend(l)
	}
	if c.pend == 0 {
		e.sendMask &^= 1 << ci
	}
	return n
}

// PacketSent tells that a packet went to the peer: it carries acks, so a
// due ack is cleared.
func (e *Endpoint) PacketSent(now int64) { e.ackDue = false }

// AckDue reports whether an ack-only packet should go now.
func (e *Endpoint) AckDue(now int64) bool {
	return e.ackDue && now-e.ackAt >= e.l.ackDelay
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
	// Fast repair: older packets sent well before this one are probably lost.
	thr := max(e.rtt/8, int64(2*time.Millisecond))
	mask := uint32(len(r.recs) - 1)
	for i := r.rHead; i != r.rTail; i++ {
		o := &r.recs[i&mask]
		if o == rec {
			break
		}
		if !o.done && !o.repaired && rec.sent-o.sent > thr {
			o.repaired = true
			e.markDue(o)
		}
	}
	r.report(rec)
}

// Lost reports packet seq lost: its units are due at once.
func (e *Endpoint) Lost(seq uint16, now int64) {
	if e.recs == nil {
		return
	}
	if rec := e.recs.find(seq); rec != nil {
		e.lose(rec)
	}
}

func (e *Endpoint) lose(rec *record) {
	e.markDue(rec)
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
		if c.fragsOut--; c.fragsOut == 0 {
			e.fragOut &^= 1 << ci
		}
	}
	c.queued -= int(e.l.put(u.buf))
	u.buf = nil
	for c.ua != c.sendNext {
		u := &c.units[c.ua&mask]
		if u.flags&uAcked == 0 {
			break
		}
		if u.cnt == 0 || u.idx == u.cnt-1 {
			e.stats.Acked++
			e.stats.InFlight--
		}
		*u = sunit{}
		c.ua++
	}
	if c.ua == c.nextID && c.pend == 0 {
		e.sendMask &^= 1 << ci
	}
}

// Deadline is the Unix ns time of the next timer event (resend, ack,
// send budget, stall), 0 when idle. A time in the past means now.
func (e *Endpoint) Deadline() int64 {
	var d int64
	consider := func(t int64) {
		if d == 0 || t < d {
			d = t
		}
	}
	if e.ackDue {
		consider(e.ackAt + e.l.ackDelay)
	}
	if e.sendMask == 0 {
		return d
	}
	_, iv := e.resendInterval()
	var send int64
	sendOK := false
	for m := e.sendMask; m != 0; m &= m - 1 {
		i := bits.TrailingZeros32(m)
		c := e.ch[i]
		var t int64
		ok := false
		if e.l.kinds[i] != ReliableOrdered {
			t, ok = e.tokAt, c.pend > 0
		} else {
			if e.canSendNew(i, c) {
				t, ok = e.tokAt, true
			} else {
				t, ok = c.nextResend(iv)
			}
			if c.ua != c.sendNext {
				consider(c.units[c.ua&uint16(len(c.units)-1)].first + e.l.stall)
			}
		}
		if ok && (!sendOK || t < send) {
			send, sendOK = t, true
		}
	}
	if sendOK {
		if e.tokens <= 0 {
			send = max(send, e.tokAt+(-e.tokens)/e.l.sendRate+1)
		}
		consider(send)
	}
	return d
}

// Stalled reports whether the oldest unacknowledged reliable unit was
// first sent more than StallTimeout ago.
func (e *Endpoint) Stalled(now int64) bool {
	for m := e.sendMask; m != 0; m &= m - 1 {
		i := bits.TrailingZeros32(m)
		c := e.ch[i]
		if e.l.kinds[i] == ReliableOrdered && c.ua != c.sendNext &&
			now-c.units[c.ua&uint16(len(c.units)-1)].first > e.l.stall {
			return true
		}
	}
	return false
}

// Stats returns the endpoint's counters. Acked counts whole messages
// (when every unit of a message is acknowledged).
func (e *Endpoint) Stats() Stats { return e.stats }
