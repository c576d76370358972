package message

// msgAcks counts a reliable channel's messages for NextAcked: those Send
// accepted, those acknowledged in order (every unit of the message and of
// the earlier ones), and those NextAcked returned. Ids are these counts:
// message id is the id-th Send accepted on the channel. On an unreliable
// or sequenced channel, overflow counts the messages Overflow reported.
type msgAcks struct {
	sent, acked, reported uint64
	overflow              uint64
}

// Overflow counts a message of channel ch that NextUnreliable returned and
// the receiver had no room to keep (a poll queue that is full: conn's
// Config.ReceiveQueue), as DropQueueFull in the Layer's drops and in
// Stats.QueueFull.
func (e *Endpoint) Overflow(ch int) {
	if ch < 0 || ch >= len(e.l.kinds) {
		return
	}
	e.l.drop(DropQueueFull)
	e.chanFor(ch).acks.overflow++
}

// NextAcked returns the next reliable message the peer acknowledged, in
// each channel's order: its channel and id, the message's number among
// those Send accepted on the channel, from 1. Every message is returned
// once, after it and every earlier one of its channel were acknowledged.
// A caller that wants to tell its application (conn's
// MessageDeliveryHandler) calls it until it returns false after the
// packet layer's reports (Acked, Lost, Acks); one that does not call it
// pays two counters per message.
func (e *Endpoint) NextAcked() (ch int, id uint64, ok bool) {
	for i, c := range e.ch {
		if c != nil && c.acks.reported < c.acks.acked {
			c.acks.reported++
			return i, c.acks.reported, true
		}
	}
	return 0, 0, false
}

// Unacked calls fn for each reliable channel with messages NextAcked has
// not returned, and counts them as returned: ids from..acked were
// acknowledged, acked+1..to were not (queued, or sent and
// unacknowledged). For a connection that ends, before Release: the fate
// of what it sent that its application has not heard of.
func (e *Endpoint) Unacked(fn func(ch int, from, acked, to uint64)) {
	for i, c := range e.ch {
		if c != nil && c.acks.reported < c.acks.sent {
			fn(i, c.acks.reported+1, c.acks.acked, c.acks.sent)
			c.acks.reported = c.acks.sent
		}
	}
}
