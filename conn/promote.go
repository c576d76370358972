package conn

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/udpgate/udpgate/batchio"
	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

// Promotion: a receive loop proves a client (a valid Response) and queues
// it; pool workers drain the queue, turn each client into a connection and
// answer Ack or Denied.
//
// Each loop has its own queue, and at most a few pool tasks drain it at
// once. A loop therefore never waits for a worker and never hands over more
// tasks than the pool has workers: a login storm fills the queue, not the
// pool, and no proven client is refused because every worker happened to
// be busy at the moment its batch arrived. The workers take clients in
// batches, answer each batch with one sendmmsg and only then tell the
// Handler, so a greeting sent from OnConnect cannot overtake its Ack.

// promotion is one proven client: values only, copied out of the receive
// buffer.
type promotion struct {
	addr   netip.AddrPort
	cookie cookie.Cookie
	// ts is the cookie's Timestamp: cookies of one address are ordered by
	// it, which tells a replay from a newer handshake.
	ts float64
	// rtt: the handshake's round trip in seconds, from the Challenge
	// (ts) to the Response's arrival (0: unknown).
	rtt float64
	to  handshake.ReplyTo
	// proof: a sealed client whose proof checked out (loop.prove), with
	// its token's client id: its connection is created proven.
	proof       bool
	tokenClient uint64
}

// promoQueue is one receive loop's proven clients waiting for a worker.
type promoQueue struct {
	sock transport

	mu sync.Mutex
	// items[head:] wait, oldest first.
	items []promotion
	head  int
	// running counts the pool tasks draining this queue.
	running int
}

// waiting is the queue's depth; the caller holds mu.
func (q *promoQueue) waiting() int { return len(q.items) - q.head }

// take moves up to promotionBatch clients into dst; the caller holds mu.
func (q *promoQueue) take(dst []promotion) []promotion {
	n := min(q.waiting(), promotionBatch)
	dst = append(dst[:0], q.items[q.head:q.head+n]...)
	clear(q.items[q.head : q.head+n])
	q.head += n
	switch {
	case q.head == len(q.items):
		// Drained. A storm's queue is let go rather than kept for the
		// next one: its memory is the storm's, not the server's.
		if cap(q.items) > 4*promotionBatch {
			q.items = nil
		} else {
			q.items = q.items[:0]
		}
		q.head = 0
	case q.head > cap(q.items)/2:
		q.items = q.items[:copy(q.items, q.items[q.head:])]
		q.head = 0
	}
	return dst
}

// enqueue adds a loop's proven clients to its queue and starts a drain task
// if the queue needs one more. It reports how many did not fit.
func (s *Server) enqueue(q *promoQueue, items []promotion) (dropped int) {
	q.mu.Lock()
	n := min(len(items), promotionQueue-q.waiting())
	q.items = append(q.items, items[:n]...)
	// One task per promotionBatch waiting, up to the loop's share of the
	// pool: one is enough unless the Accept hook is slow.
	start := q.running < s.drainers && q.waiting() > q.running*promotionBatch
	if start {
		q.running++
	}
	q.mu.Unlock()
	if start {
		if err := s.pool.Invoke(q); err != nil {
			// Only a released pool refuses: the server is shutting down.
			q.mu.Lock()
			q.running--
			q.mu.Unlock()
		}
	}
	return len(items) - n
}

// drain runs in a pool worker: it promotes the queue's clients, a batch at
// a time, until the queue is empty.
func (s *Server) drain(q *promoQueue) {
	pb := s.promos.Get().(*promoBatch)
	pb.sock = q.sock
	for {
		q.mu.Lock()
		if s.closing.Load() {
			q.items, q.head = nil, 0
		}
		if q.waiting() == 0 {
			q.running--
			q.mu.Unlock()
			if s.drained != nil {
				s.drained()
			}
			break
		}
		pb.items = q.take(pb.items)
		q.mu.Unlock()
		s.promoteBatch(pb)
	}
	pb.sock = nil
	s.promos.Put(pb)
}

// promoBatch is a worker's scratch: the clients it promotes between two
// sendmmsg calls, their replies, and the connections made, told to the
// Handler after their Acks left.
type promoBatch struct {
	items []promotion
	out   *batchio.Batch // replies, out.Msgs[:n]
	n     int
	sock  transport
	made  []*Conn
	// acks and accepted count the Acks and connections made since the
	// last flush, published with one atomic add each just before the
	// replies leave (flushReplies): every worker shares those counters,
	// and a client that has its Ack finds itself counted.
	acks, accepted int
}

func newPromoBatch() *promoBatch {
	return &promoBatch{
		items: make([]promotion, 0, promotionBatch),
		out:   batchio.NewBatch(promotionBatch, handshake.MaxReplyLen),
		made:  make([]*Conn, 0, promotionBatch),
	}
}

// promoteBatch turns each proven client of pb into a connection and
// answers Ack, or Denied.
func (s *Server) promoteBatch(pb *promoBatch) {
	rnd := wire.NewRand(s.seedCount.Add(0x9e3779b97f4a7c15) | 1)
	now := s.st.Now()
	for i := range pb.items {
		s.promoteOne(pb, &pb.items[i], &rnd, now)
	}
	s.flushReplies(pb)
	for _, c := range pb.made {
		s.st.Handler.OnConnect(c)
		c.announce()
	}
	clear(pb.made)
	pb.made = pb.made[:0]
	clear(pb.items)
	pb.items = pb.items[:0]
}

// flushReplies sends the batch's replies so far, after counting them.
func (s *Server) flushReplies(pb *promoBatch) {
	if pb.acks > 0 {
		s.ev.acks.Add(uint64(pb.acks))
		pb.acks = 0
	}
	if pb.accepted > 0 {
		s.ev.accepted.Add(uint64(pb.accepted))
		pb.accepted = 0
	}
	if pb.n > 0 {
		if err := pb.sock.Send(pb.out, pb.n); err != nil && !errors.Is(err, net.ErrClosed) {
			s.st.Logger.Warn("sending handshake replies failed", "err", err)
		}
		pb.n = 0
	}
}

// verdict is table.admit's decision for one proven client; the reply is
// made from it outside the admission lock.
type verdict struct {
	ack    *cookie.Cookie // reply Ack with this cookie
	denied uint8          // or Denied with this reason
	made   *Conn          // the new connection
	prev   *Conn          // the connection it replaced at the address
	replay bool           // or drop it as a replay
	held   bool           // or drop it: a proven sealed connection holds the address
}

func (s *Server) promoteOne(pb *promoBatch, p *promotion, rnd *wire.Rand, now time.Time) {
	if s.closing.Load() {
		return
	}
	var v verdict
	// Cheap refusals first, without the lock.
	old, hasOld := s.tab.conns.Get(p.addr)
	sameClient := hasOld && old.clientID == p.to.ClientID
	switch {
	case s.draining.Load() && !sameClient:
		v.denied = protocol.DeniedServerFull
	case !hasOld && s.tab.full():
		v.denied = protocol.DeniedServerFull
	case s.st.Accept != nil && !sameClient:
		// The hook may be slow: replies made so far go first.
		s.flushReplies(pb)
		if err := s.st.Accept(p.addr); err != nil {
			s.st.Logger.Debug("client refused by the application", "addr", p.addr, "err", err)
			v.denied = protocol.DeniedRefused
		}
	}
	if v.denied == 0 {
		v = s.tab.admit(p, func() *Conn { return s.newConn(p, pb.sock, now) })
	}

	m := &pb.out.Msgs[pb.n]
	out := m.Buf[:cap(m.Buf)]
	n := 0
	switch {
	case v.replay:
		s.ev.replays.Add(1)
	case v.held:
		s.ev.held.Add(1)
	case v.denied != 0:
		n = s.fc.BuildDenied(out, &p.to, v.denied, &p.cookie, rnd)
		s.ev.denied[v.denied].Add(1)
	case v.ack != nil:
		if n = s.fc.BuildAck(out, &p.to, v.ack, rnd); n > 0 {
			pb.acks++
		}
	}
	if n > 0 {
		m.N, m.Addr = n, p.addr
		pb.n++
	}
	if v.made == nil {
		return
	}
	s.timers.add(v.made)
	if v.prev != nil {
		// The map already points at the new connection, so prev's close
		// removes nothing and the count stays: it took prev's place.
		v.prev.shutdown(ReasonReplaced, false)
	}
	pb.accepted++
	pb.made = append(pb.made, v.made)
}
