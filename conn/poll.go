package conn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/udpgate/udpgate/message"
)

// Polling (Config.ReceiveQueue): a connection whose Handler has no
// OnMessage keeps its messages for ReceiveMessage. The reliable ones stay
// in the message Endpoint, which holds them in its receive window until
// ReceiveMessage takes them with Next (backpressure: beyond the window
// the peer's packets are refused unacknowledged and resent); the
// unreliable and sequenced ones live only as long as their packet's
// buffer, so they are copied at once into the connection's pollQueue, a
// byte ring bounded by ReceiveQueue, or dropped and counted
// (message.DropQueueFull) when it has no room.

// ErrNoMessage is ReceiveMessage's answer when no message is ready: poll
// again later (the next frame). It never blocks.
var ErrNoMessage = errors.New("conn: no message ready (poll again later)")

// errNotPolling: ReceiveMessage on a connection whose messages go to
// OnMessage, or with polling off.
var errNotPolling = errors.New("conn: ReceiveMessage: this connection does not queue messages for polling: " +
	"set Config.ReceiveQueue and use a Handler without OnMessage (with OnMessage, messages go to it)")

// pollHeader is a queued message's header in the ring: its channel and
// its length (4 bytes, little-endian: a reliable message kept as the
// connection ends may be up to 8 MiB).
const pollHeader = 5

// minPollRing is the ring's first size; it doubles up to the bound.
const minPollRing = 4 << 10

// pollQueue is a polling connection's queue, under the connection's mu.
type pollQueue struct {
	ring       []byte
	head, used int // ring[head:head+used], wrapping
	max        int // Config.ReceiveQueue
	peak       int // the most bytes used since the ring last emptied
	// pend: the reliable message Next returned that the caller's buffer
	// could not hold, still in the Endpoint's storage (which the next
	// Next call frees): it is the next one returned.
	pend   []byte
	pendCh int
	hasPen bool
}

// push copies msg of channel ch into the ring; false when it has no room
// (force: the connection ended, and the bound gives way to keep what
// arrived).
func (q *pollQueue) push(ch int, msg []byte, force bool) bool {
	need := q.used + pollHeader + len(msg)
	if need > q.max && !force {
		return false
	}
	if need > len(q.ring) {
		size := max(len(q.ring), minPollRing)
		for size < need {
			size *= 2
		}
		if !force {
			size = min(size, q.max)
		}
		q.resize(size)
	}
	var h [pollHeader]byte
	h[0] = byte(ch)
	binary.LittleEndian.PutUint32(h[1:], uint32(len(msg)))
	q.write(h[:])
	q.write(msg)
	q.peak = max(q.peak, q.used)
	return true
}

// write appends p at the ring's tail; the room is there.
func (q *pollQueue) write(p []byte) {
	t := (q.head + q.used) % len(q.ring)
	n := copy(q.ring[t:], p)
	copy(q.ring, p[n:])
	q.used += len(p)
}

// read copies len(p) bytes from offset off past the head.
func (q *pollQueue) read(p []byte, off int) {
	s := (q.head + off) % len(q.ring)
	n := copy(p, q.ring[s:])
	copy(p[n:], q.ring)
}

// peek returns the head message's channel and length; ok is false when
// the ring is empty.
func (q *pollQueue) peek() (ch, n int, ok bool) {
	if q.used == 0 {
		return 0, 0, false
	}
	var h [pollHeader]byte
	q.read(h[:], 0)
	return int(h[0]), int(binary.LittleEndian.Uint32(h[1:])), true
}

// pop copies the head message (n bytes) into buf and drops it; once the
// ring is empty, a ring far larger than its recent use shrinks.
func (q *pollQueue) pop(buf []byte, n int) {
	q.read(buf[:n], pollHeader)
	q.head = (q.head + pollHeader + n) % len(q.ring)
	q.used -= pollHeader + n
	if q.used == 0 {
		q.head = 0
		if len(q.ring) > minPollRing && q.peak <= len(q.ring)/4 {
			q.ring = make([]byte, max(minPollRing, len(q.ring)/2))
		}
		q.peak = 0
	}
}

// resize moves the ring's bytes into a new ring of size bytes.
func (q *pollQueue) resize(size int) {
	r := make([]byte, size)
	if q.used > 0 {
		q.read(r[:q.used], 0)
	}
	q.ring, q.head = r, 0
}

// pollLocked copies the unreliable and sequenced messages of the packet e
// just received into the poll queue, before the packet's buffer goes;
// those it has no room for are dropped and counted. c.mu is held.
func (c *Conn) pollLocked(e *message.Endpoint) {
	for {
		ch, m, ok := e.NextUnreliable()
		if !ok {
			return
		}
		if c.poll == nil {
			c.poll = &pollQueue{max: c.st.ReceiveQueue}
		}
		if !c.poll.push(ch, m, false) {
			e.Overflow(ch)
		}
	}
}

// ReceiveMessage copies the next message that arrived into buf and
// returns its channel and length: a game loop's way to receive, each
// frame until it returns ErrNoMessage, beside the Handler's callbacks. It
// never blocks and allocates nothing. Polling is on for the connections
// whose Handler has no OnMessage when Config.ReceiveQueue is set; the
// other connections return an error saying so.
//
// Messages of one channel come in the channel's order (reliable-ordered:
// every message once, in order; sequenced: only newer ones); the
// unreliable and sequenced ones of each packet come before the reliable
// ones that were ready with them. When buf is too small, the error wraps
// io.ErrShortBuffer, n is the size the message needs and the message
// stays first in line: pass a buffer of MaxMessageSize(channel) bytes to
// never meet it.
//
// A reliable message waits in the connection's receive window until it
// is read; while the window is full, the peer's packets are refused
// unacknowledged and resent, so none is lost, but a connection not read
// for longer than the peer's stall bound (docs/protocol.md §14.4: 3 s, or
// 20 round trips, by default) is ended by the peer as stalled. Unreliable
// and sequenced messages beyond ReceiveQueue's bytes are dropped, counted
// as the message drop "queue_full" (a server's Stats.MessageDrops, and
// MessageStats().QueueFull on either side). Once the
// connection ended, the messages that arrived before are still returned,
// then ErrClosed.
func (c *Conn) ReceiveMessage(buf []byte) (channel, n int, err error) {
	if !c.st.polling {
		return 0, 0, errNotPolling
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.poll
	if q != nil && q.hasPen {
		if len(buf) < len(q.pend) {
			return q.pendCh, len(q.pend), shortBuffer(len(buf), q.pendCh, len(q.pend))
		}
		n = copy(buf, q.pend)
		ch := q.pendCh
		q.pend, q.hasPen = nil, false
		return ch, n, nil
	}
	if q != nil {
		if ch, n, ok := q.peek(); ok {
			if len(buf) < n {
				return ch, n, shortBuffer(len(buf), ch, n)
			}
			q.pop(buf, n)
			return ch, n, nil
		}
	}
	// An Endpoint released (the connection ended) has nothing left: what
	// it held was moved to the queue (keepPolled).
	var ch int
	var m []byte
	ok := false
	if c.msg != nil {
		ch, m, ok = c.msg.Next()
	}
	if !ok {
		if c.closed.Load() {
			return 0, 0, ErrClosed
		}
		return 0, 0, ErrNoMessage
	}
	if len(buf) < len(m) {
		if q == nil {
			q = &pollQueue{max: c.st.ReceiveQueue}
			c.poll = q
		}
		// m stays valid until the next Next call, which only this
		// method makes while polling.
		q.pend, q.pendCh, q.hasPen = m, ch, true
		return ch, len(m), shortBuffer(len(buf), ch, len(m))
	}
	return ch, copy(buf, m), nil
}

// shortBuffer is ReceiveMessage's error for a buffer too small.
func shortBuffer(have, ch, need int) error {
	return fmt.Errorf("conn: ReceiveMessage: the next message, on channel %d, is %d bytes and the buffer %d: "+
		"pass one of at least %d bytes (MaxMessageSize(%d) holds any): %w", ch, need, have, need, ch, io.ErrShortBuffer)
}

// keepPolled moves the messages a polling connection's Endpoint still
// holds into the poll queue as the connection ends, whatever its bound, so
// that ReceiveMessage returns them before ErrClosed: they were
// acknowledged, and the peer believes them delivered. c.mu is held.
func (c *Conn) keepPolled() {
	e := c.msg
	if e == nil {
		return
	}
	if c.poll == nil {
		c.poll = &pollQueue{max: c.st.ReceiveQueue}
	}
	q := c.poll
	if q.hasPen {
		// Copied before Next frees it; it stays first in its
		// channel's line.
		q.push(q.pendCh, q.pend, true)
		q.pend, q.hasPen = nil, false
	}
	for {
		ch, m, ok := e.Next()
		if !ok {
			return
		}
		q.push(ch, m, true)
	}
}
