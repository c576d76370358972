package message

import "math/bits"

// limitOK applies the per-kind size limits to a decoded entry.
func (l *Layer) limitOK(en *entry) DropReason {
	n := len(en.data)
	switch l.kinds[en.ch] {
	case ReliableOrdered:
		if en.frag {
			if int(en.cnt) > l.maxCount || n > l.fragSize {
				return DropTooLarge
			}
		} else if n > l.singleMax() {
			return DropTooLarge
		}
	case Unreliable:
		if n > l.maxPayload-3 {
			return DropTooLarge
		}
	default:
		if n > l.maxPayload-5 {
			return DropTooLarge
		}
	}
	return DropNone
}

// Check validates a Messages payload before the packet layer accepts the
// packet: every entry well-formed and within limits, reliable units
// inside the window, and their storage within the budgets. A packet it
// rejects must be dropped unacknowledged. The reason is counted.
func (e *Endpoint) Check(payload []byte) DropReason {
	r := e.check(payload)
	if r != DropNone {
		e.l.drop(r)
	}
	return r
}

func (e *Endpoint) check(payload []byte) DropReason {
	l := e.l
	if len(l.kinds) == 0 {
		return DropBadChannel
	}
	if len(payload) == 0 {
		return DropMalformed
	}
	// exp[ch] is channel ch's expect as this packet's units advance it
	// (valid where seen has ch's bit): a unit at it arrives in order.
	var exp [MaxChannels]uint16
	var seen uint32
	prog := int(e.progress)
	var en entry
	var pass, guar, normal int64
	for p := 0; p < len(payload); {
		w, r := getEntry(payload[p:], l.kinds, &en)
		if r != DropNone {
			return r
		}
		p += w
		if r := l.limitOK(&en); r != DropNone {
			return r
		}
		if l.kinds[en.ch] != ReliableOrdered {
			continue
		}
		c := e.chanIf(en.ch)
		var next, expect uint16
		if c != nil {
			next, expect = c.next, c.expect
		}
		if bit := uint32(1) << en.ch; seen&bit == 0 {
			seen |= bit
			exp[en.ch] = expect
		}
		d := en.id - next
		if d >= 0x8000 {
			continue // delivered before: a duplicate
		}
		if d >= window {
			if en.id-expect < window {
				// A legitimate sender's, while undelivered messages
				// hold the window (Next not called): refuse for now.
				return DropOverBudget
			}
			return DropOutOfWindow
		}
		if c != nil && c.held(en.id) {
			continue
		}
		inOrder := en.id == exp[en.ch]
		if inOrder {
			x := en.id + 1
			for c != nil && c.held(x) {
				x++
			}
			exp[en.ch] = x
		}
		cost := l.chunkCost(len(en.data))
		switch {
		case inOrder && !en.frag && (c == nil || c.next == c.expect):
			// A channel's next message: the Next calls that follow
			// the packet deliver it and free it, so it passes through
			// the pool's slack, outside every share, and is accepted
			// whatever the connection holds (docs/protocol.md §14.5).
			// (Units delivered before but not yet taken by Next, a
			// caller that does not drain, make it an ordinary one.)
			pass += cost
		case inOrder && en.frag && (prog < 0 || prog == en.ch):
			// The reassembly in progress (or the one this fragment
			// starts) growing in order: the connection's guaranteed
			// minimum, outside the shares.
			prog = en.ch
			guar += cost
		case e.inProgress(en.ch, en.id):
			// A fragment of the message in reassembly, out of order:
			// the guaranteed minimum too.
			guar += cost
		default:
			normal += cost
		}
	}
	return e.admit(pass, guar, normal)
}

// admit decides whether the endpoint may take pass bytes of in-order
// messages that the packet's Next calls deliver and free, guar bytes of
// its guaranteed minimum (the reassembly in progress) and normal bytes of
// out-of-order units (docs/protocol.md §14.5):
//
//   - out-of-order units within the endpoint's own budget
//     (ConnReceiveBudget less the reserve of the reassembly in progress);
//   - while the Layer's pool is contended (more than half of
//     ReceiveBudget held), out-of-order units only up to the endpoint's
//     fair share, ReceiveBudget over the endpoints holding storage
//     (DropOverShare): the heaviest holders are refused first;
//   - what is kept (guar, normal) up to ReceiveBudget less its 64th, the
//     slack that in-order messages pass through, which only the whole
//     budget bounds (one packet's worth per receive loop at a time: far
//     less than the slack). A refusal there of an endpoint within its
//     share is pressure, which Reclaim reports so that the holders
//     heavier than it are ended, the heaviest first.
func (e *Endpoint) admit(pass, guar, normal int64) DropReason {
	l := e.l
	keep := guar + normal
	if keep+pass == 0 {
		return DropNone
	}
	if normal > 0 && e.held-e.progHeld+normal > l.connBudget-l.reserve || e.held+keep > l.connBudget {
		return DropOverBudget
	}
	held := l.held.Load()
	if normal > 0 && held+keep > l.recvBudget/2 && e.held+keep > e.share() {
		return DropOverShare
	}
	if keep > 0 && held+keep > l.recvBudget-l.recvBudget/slackShare || held+keep+pass > l.recvBudget {
		if v := e.held + keep; v <= e.share() {
			l.press(v)
		}
		return DropOverBudget
	}
	return DropNone
}

// share is the endpoint's fair share of the Layer's pool: ReceiveBudget
// over the endpoints holding storage, this one among them.
func (e *Endpoint) share() int64 {
	n := e.l.holders.Load()
	if e.held == 0 {
		n++
	}
	return e.l.recvBudget / max(n, 1)
}

// Held is the receive storage the endpoint holds: out-of-order units,
// the reassembly in progress, and the message Next returned last.
func (e *Endpoint) Held() int64 { return e.held }

// inProgress reports whether unit id of channel ch belongs to the
// reassembly in progress.
func (e *Endpoint) inProgress(ch int, id uint16) bool {
	if int(e.progress) != ch {
		return false
	}
	c := e.ch[ch]
	return c.asmOn && id-c.asmStart < c.asmCnt
}

// progressHeld is the storage held for channel c's reassembly: taken
// fragments and buffered ones of the same message.
func (c *channel) progressHeld() int64 {
	h := c.asmHeld
	for off := 0; off < len(c.slots); off++ {
		id := c.next + uint16(off)
		if id-c.asmStart >= c.asmCnt {
			break
		}
		if b := c.slots[id&uint16(len(c.slots)-1)].buf; b != nil {
			h += int64(cap(*b))
		}
	}
	return h
}

// held reports whether reliable unit id (inside the window) is buffered.
func (c *channel) held(id uint16) bool {
	d := id - c.next
	return int(d) < len(c.slots) && c.slots[id&uint16(len(c.slots)-1)].buf != nil
}

// Receive takes a Messages payload after the packet layer accepted the
// packet (Check passed): reliable units are buffered, unreliable and
// sequenced ones are delivered by the following Next calls (as slices of
// payload, which must stay unchanged until then; those of the previous
// packet not yet taken are dropped). Reliable units delivered or buffered
// already are counted as duplicates and ignored.
func (e *Endpoint) Receive(payload []byte, now int64) {
	l := e.l
	e.pkt = nil
	var en entry
	for p := 0; p < len(payload); {
		w, r := getEntry(payload[p:], l.kinds, &en)
		if r == DropNone {
			r = l.limitOK(&en)
		}
		if r != DropNone {
			l.drop(r) // Check was skipped: ignore the packet
			return
		}
		p += w
	}
	if len(payload) == 0 {
		return
	}
	reliable, other := false, false
	for p := 0; p < len(payload); {
		w, _ := getEntry(payload[p:], l.kinds, &en)
		p += w
		if l.kinds[en.ch] != ReliableOrdered {
			other = true
			continue
		}
		reliable = true
		c := e.chanFor(en.ch)
		d := en.id - c.next
		if d >= 0x8000 || (d < window && c.held(en.id)) {
			l.drop(DropDuplicate)
			continue
		}
		if d >= window {
			l.drop(DropOutOfWindow)
			continue
		}
		c.growSlots(int(d) + 1)
		c.slotsHeld++
		c.slotPeaks.note(int(d) + 1)
		buf := l.get(en.data)
		cost := int64(cap(*buf))
		e.account(cost)
		c.slots[en.id&uint16(len(c.slots)-1)] = rslot{buf: buf, idx: en.idx, cnt: en.cnt}
		if e.inProgress(en.ch, en.id) {
			e.progHeld += cost
		}
		if en.id == c.expect {
			for c.held(c.expect) {
				c.expect++
			}
		}
		if en.id == c.next {
			e.ready |= 1 << en.ch
		}
	}
	if other {
		e.pkt, e.pktOff = payload, 0
	}
	if reliable {
		if !e.ackDue {
			e.ackDue, e.ackAt = true, now
		}
		if e.rxUnacked < ackEvery {
			e.rxUnacked++
		}
		// A packet that comes alone (AckDelay after the one before) is
		// acknowledged at once: its sender's window is small, and an
		// ack it waits for would read as queueing delay there.
		if now-e.rxAt > e.l.ackDelay {
			e.rxUnacked = ackEvery
		}
		e.rxAt = now
	}
}

func (c *channel) growSlots(n int) {
	if n > len(c.slots) {
		c.slots = grownRing16(c.slots, n, c.next, len(c.slots))
	}
}

// Next returns the next deliverable message: first the unreliable and
// sequenced messages of the last packet received, in packet order (slices
// of its payload), then the in-order reliable messages, channel by
// channel. msg is valid until the next call of Next (a reliable message's
// storage is freed then) and, for unreliable ones, while the payload is.
func (e *Endpoint) Next() (ch int, msg []byte, ok bool) {
	e.freeRet()
	if ch, msg, ok := e.NextUnreliable(); ok {
		return ch, msg, true
	}
	for e.ready != 0 {
		i := bits.TrailingZeros32(e.ready)
		if msg, ok := e.drain(i, e.ch[i]); ok {
			e.stats.Delivered++
			return i, msg, true
		}
		e.ready &^= 1 << i
	}
	return 0, nil, false
}

// NextUnreliable is Next's first pass alone: the unreliable and sequenced
// messages of the last packet received (slices of its payload), without
// the reliable ones, which stay where Next finds them, and without
// freeing the reliable message Next returned last. A receiver that
// queues messages to be read later (conn's ReceiveMessage) copies these
// before the payload goes, and takes the reliable ones with Next when it
// has room: until then they hold the receive window, and the sender's
// packets beyond it are refused unacknowledged (Check), so it resends
// them.
func (e *Endpoint) NextUnreliable() (ch int, msg []byte, ok bool) {
	l := e.l
	var en entry
	for e.pkt != nil && int(e.pktOff) < len(e.pkt) {
		w, r := getEntry(e.pkt[e.pktOff:], l.kinds, &en)
		if r != DropNone {
			break
		}
		e.pktOff += int32(w)
		switch l.kinds[en.ch] {
		case Unreliable:
			e.stats.Delivered++
			return en.ch, en.data, true
		case Sequenced:
			c := e.chanFor(en.ch)
			if c.seqAny && (en.id-c.seqNewest == 0 || en.id-c.seqNewest >= 0x8000) {
				l.drop(DropStale)
				continue
			}
			c.seqAny, c.seqNewest = true, en.id
			e.stats.Delivered++
			return en.ch, en.data, true
		}
	}
	e.pkt = nil
	return 0, nil, false
}

// Discard takes every message Next would return and drops it, counted as
// DropUnhandled (not as Delivered), for a receiver with no use for
// messages; it returns how many. The packets that carried them stay
// acknowledged.
func (e *Endpoint) Discard() int {
	n := 0
	for {
		if _, _, ok := e.Next(); !ok {
			break
		}
		n++
	}
	e.freeRet()
	e.stats.Delivered -= uint64(n)
	e.l.drops[DropUnhandled].Add(uint64(n))
	return n
}

// drain takes channel c's in-order units until a message is complete.
func (e *Endpoint) drain(i int, c *channel) ([]byte, bool) {
	l := e.l
	for len(c.slots) > 0 {
		s := &c.slots[c.next&uint16(len(c.slots)-1)]
		if s.buf == nil {
			return nil, false
		}
		buf, idx, cnt := s.buf, s.idx, s.cnt
		*s = rslot{}
		c.next++
		if c.slotsHeld--; c.slotsHeld == 0 {
			if size := c.slotPeaks.emptied(len(c.slots), 8); size > 0 {
				c.slots = make([]rslot, size)
			}
		}
		if cnt == 0 {
			if c.asmOn {
				e.abandon(i, c, DropBadFragment)
			}
			e.ret = buf
			return *buf, true
		}
		if c.asmOn && (idx != c.asmIdx || cnt != c.asmCnt) {
			e.abandon(i, c, DropBadFragment)
		}
		if !c.asmOn {
			if idx != 0 {
				l.drop(DropBadFragment)
				e.release(buf)
				continue
			}
			c.asmOn, c.asmCnt, c.asmIdx, c.asmStart, c.asmLen = true, cnt, 0, c.next-1, 0
		}
		c.asm = append(c.asm, buf)
		c.asmHeld += int64(cap(*buf))
		if e.progress < 0 {
			e.progress, e.progHeld = int8(i), c.progressHeld()
		}
		c.asmIdx++
		c.asmLen += len(*buf)
		if c.asmLen > l.maxMsg {
			e.abandon(i, c, DropTooLarge)
			continue
		}
		if c.asmIdx < c.asmCnt {
			continue
		}
		out := make([]byte, 0, c.asmLen)
		for _, b := range c.asm {
			out = append(out, *b...)
		}
		e.finishAsm(i, c)
		e.retBig = out
		e.account(int64(len(out)))
		return out, true
	}
	return nil, false
}

// finishAsm frees channel c's reassembly.
func (e *Endpoint) finishAsm(i int, c *channel) {
	for j, b := range c.asm {
		e.release(b)
		c.asm[j] = nil
	}
	c.asm = c.asm[:0]
	if cap(c.asm) > shrinkAbove {
		c.asm = nil // a large message's: the next one appends afresh
	}
	c.asmOn, c.asmLen, c.asmHeld = false, 0, 0
	if int(e.progress) == i {
		e.progress, e.progHeld = -1, 0
		for j, o := range e.ch {
			if o != nil && o.asmOn {
				e.progress, e.progHeld = int8(j), o.progressHeld()
				break
			}
		}
	}
}

func (e *Endpoint) abandon(i int, c *channel, r DropReason) {
	e.l.drop(r)
	e.finishAsm(i, c)
}

// release frees a receive chunk.
func (e *Endpoint) release(b *[]byte) {
	e.account(-e.l.put(b))
}

// account adds d bytes to the endpoint's receive storage and the
// Layer's, and keeps the Layer's count of holders (Endpoint.share).
func (e *Endpoint) account(d int64) {
	was := e.held > 0
	e.held += d
	l := e.l
	l.held.Add(d)
	if h := e.held > 0; h != was {
		if h {
			l.holders.Add(1)
		} else {
			l.holders.Add(-1)
		}
	}
}

func (e *Endpoint) freeRet() {
	if e.ret != nil {
		e.release(e.ret)
		e.ret = nil
	}
	if e.retBig != nil {
		e.account(-int64(len(e.retBig)))
		e.retBig = nil
	}
}

// Release frees every buffer (the connection closed). The endpoint is
// left empty but for its counters (Stats.InFlight then counts the
// reliable messages discarded unacknowledged): later calls are harmless,
// but it must not carry messages for the connection again (its ids
// restart).
func (e *Endpoint) Release() {
	l := e.l
	e.freeRet()
	for i, c := range e.ch {
		if c == nil {
			continue
		}
		for j := range c.units {
			if c.units[j].buf != nil {
				n := l.put(c.units[j].buf)
				c.queued -= int(n)
			}
		}
		for c.pend > 0 {
			c.popPend(l)
		}
		for j := range c.slots {
			if c.slots[j].buf != nil {
				e.release(c.slots[j].buf)
			}
		}
		e.finishAsm(i, c)
		e.ch[i] = nil
	}
	e.account(-e.held)
	if r := e.recs; r != nil && r.sendRes > 0 {
		l.sendHeld.Add(-r.sendRes)
		l.senders.Add(-1)
	}
	e.ch, e.recs, e.pkt, e.cc = nil, nil, nil, nil
	e.sendMask, e.fragOut, e.ready, e.progress, e.progHeld, e.ackDue, e.rxUnacked = 0, 0, 0, -1, 0, false, 0
	// inFlight stays: the reliable messages discarded unacknowledged,
	// which Stats reports after the end.
}
