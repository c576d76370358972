package loadgen

import "sync/atomic"

// Counter indexes. Workers count into plain fields and publish the changed
// ones once per loop iteration, so sampling costs the hot path nothing.
const (
	cSent = iota
	cReplies
	cLost
	cLate
	cUnexpected
	cRefused
	cKeepAlivesIn
	cKeepAlivesOut
	cClosed
	cSeqLost
	cHandshakesStarted
	cHandshakes
	cHandshakeFailures
	cHandshakePackets
	cDisconnects
	nCounters
)

// Counters are cumulative since New, summed over the sockets.
type Counters struct {
	// Sent: requests sent by Run (Initials, Responses, Data or raw
	// datagrams; KeepAlives are counted apart).
	Sent uint64
	// Replies: answers of the expected kind that matched an outstanding
	// request.
	Replies uint64
	// Lost: requests written off after LossTimeout without an answer.
	Lost uint64
	// Late: answers that came after their request was written off.
	Late uint64
	// Unexpected: datagrams that were not an answer: undecodable, another
	// type, a stale sequence number, from a stranger, or for no client.
	Unexpected uint64
	// Refused: datagrams the kernel would not send (they end up Lost).
	Refused uint64
	// KeepAlivesIn and KeepAlivesOut: KeepAlive packets received from the
	// server and sent by idle clients (ModeData).
	KeepAlivesIn  uint64
	KeepAlivesOut uint64
	// Closed: connections the server ended with a Disconnect.
	Closed uint64
	// SeqLost: client packets the server's acks reported lost (the
	// client-to-server direction, from fastpath.SeqState; ModeData).
	SeqLost uint64
	// HandshakesStarted, Handshakes, HandshakeFailures: Connect's clients
	// started, connected, and failed (timed out, denied, wrong version).
	HandshakesStarted uint64
	Handshakes        uint64
	HandshakeFailures uint64
	// HandshakePackets: Initials and Responses Connect sent, resends
	// included.
	HandshakePackets uint64
	// Disconnects: Disconnect packets sent.
	Disconnects uint64
}

func countersFrom(a *[nCounters]uint64) Counters {
	return Counters{
		Sent: a[cSent], Replies: a[cReplies], Lost: a[cLost], Late: a[cLate],
		Unexpected: a[cUnexpected], Refused: a[cRefused],
		KeepAlivesIn: a[cKeepAlivesIn], KeepAlivesOut: a[cKeepAlivesOut],
		Closed: a[cClosed], SeqLost: a[cSeqLost],
		HandshakesStarted: a[cHandshakesStarted], Handshakes: a[cHandshakes],
		HandshakeFailures: a[cHandshakeFailures], HandshakePackets: a[cHandshakePackets],
		Disconnects: a[cDisconnects],
	}
}

// Sub returns c − o, field by field: the counts between two samples.
func (c Counters) Sub(o Counters) Counters {
	return Counters{
		Sent: c.Sent - o.Sent, Replies: c.Replies - o.Replies, Lost: c.Lost - o.Lost,
		Late: c.Late - o.Late, Unexpected: c.Unexpected - o.Unexpected, Refused: c.Refused - o.Refused,
		KeepAlivesIn: c.KeepAlivesIn - o.KeepAlivesIn, KeepAlivesOut: c.KeepAlivesOut - o.KeepAlivesOut,
		Closed: c.Closed - o.Closed, SeqLost: c.SeqLost - o.SeqLost,
		HandshakesStarted: c.HandshakesStarted - o.HandshakesStarted, Handshakes: c.Handshakes - o.Handshakes,
		HandshakeFailures: c.HandshakeFailures - o.HandshakeFailures,
		HandshakePackets:  c.HandshakePackets - o.HandshakePackets, Disconnects: c.Disconnects - o.Disconnects,
	}
}

// counters is a worker's private counts and their published copy, on cache
// lines of their own so that sampling never contends with the worker.
type counters struct {
	loc  [nCounters]uint64
	done [nCounters]uint64 // values last published
	_    [64]byte
	pub  [nCounters]atomic.Uint64
	_    [64]byte
}

func (c *counters) publish() {
	for i, v := range c.loc {
		if v != c.done[i] {
			c.pub[i].Store(v)
			c.done[i] = v
		}
	}
}
