package conn

import (
	"net/netip"
	"time"

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

type promoBatch struct{ items []promotion }

// promoteBatch runs in a pool worker: it turns each proven client into a
// connection and answers Ack, or Denied.
func (s *Server) promoteBatch(pb *promoBatch) {
	rnd := fastpath.NewRand(s.seedCount.Add(0x9e3779b97f4a7c15) | 1)
	now := s.st.Now()
	var buf [fastpath.MaxReplyLen]byte
	for i := range pb.items {
		s.promoteOne(&pb.items[i], &rnd, now, buf[:])
	}
	clear(pb.items)
	pb.items = pb.items[:0]
	s.promos.Put(pb)
}

func (s *Server) promoteOne(p *promotion, rnd *fastpath.Rand, now time.Time, buf []byte) {
	if s.closing.Load() {
		return
	}
	sock := s.group.Sockets()[p.sock]
	deny := func(reason uint8) {
		n := s.fc.BuildDenied(buf, &p.to, reason, &p.cookie, rnd)
		if n > 0 {
			_ = sock.WriteTo(buf[:n], p.addr)
		}
		if reason == fastpath.DeniedServerFull {
			s.ev.deniedFull.Add(1)
		} else {
			s.ev.deniedRefused.Add(1)
		}
	}
	ack := func(ck *cookie.Cookie) {
		if n := s.fc.BuildAck(buf, &p.to, ck, rnd); n > 0 {
			_ = sock.WriteTo(buf[:n], p.addr)
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
	c := s.newConn(p, sock, now)
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
	s.st.Handler.OnConnect(c)
}
