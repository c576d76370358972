package batchio

import (
	"net"
	"net/netip"
	"sync"
)

// writeQueue lets any goroutine send through a socket while batching
// concurrent senders into one sendmmsg. It uses flat combining: a sender
// copies its datagram into the queue under the mutex and, if nobody is
// flushing, becomes the flusher and sends everything queued, including what
// other senders add meanwhile; those senders return as soon as their
// datagram is queued. The queue is double-buffered, so the flusher swaps the
// full half for the empty one and sends without holding the mutex.
//
// Guarantees:
//   - A lone sender's datagram is handed to the kernel before WriteTo
//     returns; there is no timer and no background goroutine.
//   - Datagrams leave in the order they entered the queue, so one
//     goroutine's WriteTo calls are sent in call order.
//   - A datagram accepted by WriteTo (nil error) is sent unless the socket
//     is closed first or the kernel rejects that one datagram (counted in
//     Stats.TxErrors).
//   - There is no ordering between WriteTo and Socket.Send, which a loop
//     may run concurrently on the same socket.
type writeQueue struct {
	mu       sync.Mutex
	space    sync.Cond // signalled when the fill half is swapped out
	fill     *Batch    // half being filled
	n        int       // datagrams in fill
	spare    *Batch    // other half; owned by the flusher while flushing
	flushing bool
	closed   bool
	msgSize  int // slot size; immutable, read without the mutex
}

func (q *writeQueue) init(size, msgSize int) {
	q.space.L = &q.mu
	q.msgSize = msgSize
	q.fill = NewBatch(size, msgSize)
	q.spare = NewBatch(size, msgSize)
}

func (q *writeQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.space.Broadcast()
	q.mu.Unlock()
}

// WriteTo sends p to addr. It copies p, so the caller may reuse p at once.
// It is safe for concurrent use and allocates nothing. Concurrent callers
// are combined into shared sendmmsg calls; see writeQueue for the ordering
// guarantees. WriteTo blocks only while the queue is full or while the
// calling goroutine is the one sending the queue.
//
// It returns ErrTooLarge if p does not fit a slot (Config.MessageSize),
// ErrInvalidAddr for a zero address and net.ErrClosed after Close. Errors
// particular to one destination are not returned but counted in
// Stats.TxErrors, because the datagram may be sent by another goroutine.
func (s *Socket) WriteTo(p []byte, addr netip.AddrPort) error {
	q := &s.q
	if len(p) > q.msgSize {
		return ErrTooLarge
	}
	if !addr.IsValid() {
		return ErrInvalidAddr
	}
	q.mu.Lock()
	for q.n == len(q.fill.Msgs) && !q.closed {
		s.ctr.queueWaits.Add(1)
		q.space.Wait()
	}
	if q.closed {
		q.mu.Unlock()
		return net.ErrClosed
	}
	m := &q.fill.Msgs[q.n]
	m.N = copy(m.Buf, p)
	m.Addr = addr
	q.n++
	if q.flushing {
		q.mu.Unlock()
		return nil
	}
	q.flushing = true
	var err error
	for q.n > 0 && err == nil {
		b, n := q.fill, q.n
		q.fill, q.spare, q.n = q.spare, b, 0
		q.space.Broadcast()
		q.mu.Unlock()
		err = s.Send(b, n)
		q.mu.Lock()
	}
	q.flushing = false
	q.mu.Unlock()
	return err
}
