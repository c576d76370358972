package conn

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/udpgate/udpgate/batchio"
	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/fastpath"
)

// promotion is one proven client handed from a loop to the pool: values
// only, copied out of the receive buffer.
type promotion struct {
	addr   netip.AddrPort
	cookie cookie.Cookie
	to     fastpath.ReplyTo
	sock   int
}

// promoBatch is one loop's proven clients of one receive batch, and the
// worker's scratch for answering them: their Acks and Denieds leave in one
// sendmmsg, not one system call each.
type promoBatch struct {
	items []promotion
	out   *batchio.Batch // replies, out.Msgs[:n]
	n     int
	sock  *batchio.Socket
	made  []*Conn // new connections, told to the Handler after their Acks left
}

func newPromoBatch() *promoBatch {
	return &promoBatch{
		items: make([]promotion, 0, promotionBatch),
		out:   batchio.NewBatch(promotionBatch, fastpath.MaxReplyLen),
	}
}

// promoteBatch runs in a pool worker: it turns each proven client into a
// connection and answers Ack, or Denied.
func (s *Server) promoteBatch(pb *promoBatch) {
	rnd := fastpath.NewRand(s.seedCount.Add(0x9e3779b97f4a7c15) | 1)
	now := s.st.Now()
	for i := range pb.items {
		s.promoteOne(pb, &pb.items[i], &rnd, now)
	}
	s.flushReplies(pb)
	for _, c := range pb.made {
		s.st.Handler.OnConnect(c)
	}
	clear(pb.made)
	pb.made = pb.made[:0]
	clear(pb.items)
	pb.items = pb.items[:0]
	s.promos.Put(pb)
}

// flushReplies sends the batch's replies so far.
func (s *Server) flushReplies(pb *promoBatch) {
	if pb.n > 0 {
		if err := pb.sock.Send(pb.out, pb.n); err != nil && !errors.Is(err, net.ErrClosed) {
			s.st.Logger.Warn("sending handshake replies failed", "err", err)
		}
		pb.n = 0
	}
}

func (s *Server) promoteOne(pb *promoBatch, p *promotion, rnd *fastpath.Rand, now time.Time) {
	if s.closing.Load() {
		return
	}
	if sock := s.group.Sockets()[p.sock]; sock != pb.sock {
		s.flushReplies(pb) // one batch comes from one loop: never, in practice
		pb.sock = sock
	}
	reply := func(n int) {
		if n > 0 {
			m := &pb.out.Msgs[pb.n]
			m.N, m.Addr = n, p.addr
			pb.n++
		}
	}
	slot := func() []byte { return pb.out.Msgs[pb.n].Buf[:cap(pb.out.Msgs[pb.n].Buf)] }
	deny := func(reason uint8) {
		reply(s.fc.BuildDenied(slot(), &p.to, reason, &p.cookie, rnd))
		if reason == fastpath.DeniedServerFull {
			s.ev.deniedFull.Add(1)
		} else {
			s.ev.deniedRefused.Add(1)
		}
	}
	ack := func(ck *cookie.Cookie) {
		if n := s.fc.BuildAck(slot(), &p.to, ck, rnd); n > 0 {
			reply(n)
			s.ev.acks.Add(1)
		}
	}
	// Cheap refusals first, without the lock.
	old, hasOld := s.conns.Get(p.addr)
	if !hasOld && int(s.count.Load()) >= s.st.maxClients {
		deny(fastpath.DeniedServerFull)
		return
	}
	if s.st.Accept != nil && !(hasOld && old.clientID == p.to.ClientID) {
		// The hook may be slow: replies made so far go first.
		s.flushReplies(pb)
		if err := s.st.Accept(p.addr); err != nil {
			s.st.Logger.Debug("client refused by the application", "addr", p.addr, "err", err)
			deny(fastpath.DeniedRefused)
			return
		}
	}

	s.promoMu.Lock()
	if c, at, ok := s.conns.GetByCookie((*[20]byte)(&p.cookie)); ok {
		s.promoMu.Unlock()
		if at == p.addr {
			ack(&c.cookie) // a duplicate Response raced through
		}
		return
	}
	old, hasOld = s.conns.Get(p.addr)
	if hasOld && old.clientID == p.to.ClientID && !old.closed.Load() {
		// The same client answered a newer Challenge before its Ack
		// arrived: the connection exists, repeat its Ack.
		s.promoMu.Unlock()
		ack(&old.cookie)
		return
	}
	// A replaced connection does not count against capacity.
	if !hasOld && int(s.count.Load()) >= s.st.maxClients {
		s.promoMu.Unlock()
		deny(fastpath.DeniedServerFull)
		return
	}
	c := s.newConn(p, pb.sock, now)
	// Insert's answer is the truth: a migration may have moved another
	// connection onto this address since the Get above.
	prev, ok := s.conns.Insert(p.addr, p.cookie, c)
	if !ok {
		// Unreachable: the cookie index was checked under promoMu.
		s.promoMu.Unlock()
		return
	}
	replaced := prev != nil
	if !replaced {
		s.count.Add(1)
	}
	s.clearRecent(p.addr)
	s.promoMu.Unlock()
	s.timers.add(c)

	if replaced {
		// The map already points at c, so prev's close removes nothing and
		// the count stays: c took prev's place.
		prev.shutdown(ReasonReplaced, false)
	}
	ack(&p.cookie)
	s.ev.accepted.Add(1)
	pb.made = append(pb.made, c)
}
