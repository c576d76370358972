package conn

import (
	"context"
	"errors"
	"log/slog"
	"math/bits"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/udpgate/udpgate/batchio"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/ratelimit"
	"github.com/udpgate/udpgate/internal/seqwin"
	"github.com/udpgate/udpgate/internal/wire"
)

// loop is one socket's receive loop. It owns, without locks, its batches,
// its fastpath state (signer, rate limiters, scratch) and its counters.
type loop struct {
	s    *Server
	idx  int
	sock transport
	fp   *handshake.Server
	rb   *batchio.Batch
	sb   *batchio.Batch
	rnd  wire.Rand
	// now is the batch's clock reading, which Sends from handlers on this
	// loop reuse; nowSec and nowNs are it in seconds and in nanoseconds,
	// converted once per batch rather than per packet.
	now    time.Time
	nowSec float64
	nowNs  int64
	d      handshake.Decision
	rep    seqwin.AckReport
	// out counts the send batch's messages so far (replies, and Sends
	// from handlers running on this loop).
	out int
	cnt loopCounters
	// pending collects this batch's proven clients, values only (never a
	// pointer into a receive buffer), for one hand-off to queue per batch.
	pending []promotion
	queue   promoQueue
	// gen is the generation of the live settings fp was built from.
	gen uint64
	// stopped is set when run returns before the server closes.
	stopped atomic.Bool
	// deferred: indexes of this batch's datagrams from unconnected
	// addresses, handled after the connected ones.
	deferred []int32
	// conns: this batch's connection per datagram (nil: none), addrs:
	// the batch's source addresses for the lookup, and sink,
	// where the touch pass leaves its loads.
	conns []*Conn
	addrs []netip.AddrPort
	sink  uint64
	// sealedScratch is sealed mode's per-loop state (nil when unsealed).
	sealedScratch *loopSealed
	// challenges is the overload Challenge budget, which fp.Shed points
	// to: kept here so that it survives fp being rebuilt.
	challenges ratelimit.Bucket
	// own and shared are set on a steered server's connection loops: own
	// is sock as a socket, shared the handshake socket whose backlog the
	// loop takes while the classes are apart and its own socket is empty.
	own, shared *batchio.Socket
	// sharedBatch: the batch in hand came from shared; shareFull: the
	// last one filled shareBatch; lastLook: when the loop last found its
	// own socket empty and looked at shared; proofs: the sealed clients
	// the batch proved (the unsealed ones are in pending); played: the
	// batch brought a packet from a player (playerAge), and lastPlay is
	// when one last did, which keeps the loop to its own socket for
	// spreadHold. Only a loop that may share, during a storm, watches
	// (watch), since cookieTS is on a connection's cold lines; playedBy is
	// the spreader's busySince less spreadHold, in seconds, read once a
	// batch: a connection challenged before it is a player.
	sharedBatch, shareFull, played, watch bool
	lastLook, lastPlay                    time.Time
	proofs                                int
	playedBy                              float64
}

func newLoop(s *Server, idx int, sock transport, size int, now float64) *loop {
	// Replies are small, but a handler's Send goes into the same batch:
	// in sealed mode every packet carries 24 more bytes, so room for a
	// whole datagram keeps echoes in the batch.
	msgLen := handshake.MaxReplyLen
	var ls *loopSealed
	if s.sealed != nil {
		msgLen = max(msgLen, s.st.MaxDatagram)
		ls = newLoopSealed(&s.st)
	}
	if s.st.msgs != nil {
		// Messages packets fill datagrams: answers to a packet's messages
		// leave in the batch too.
		msgLen = max(msgLen, s.st.MaxDatagram)
	}
	return &loop{
		sealedScratch: ls,
		s:             s,
		idx:           idx,
		sock:          sock,
		fp:            handshake.NewServer(s.fc, s.secrets, 0, now),
		rb:            batchio.NewBatch(size, s.st.MaxDatagram+1),
		sb:            batchio.NewBatch(size, msgLen),
		rnd:           wire.NewRand(0),
		pending:       make([]promotion, 0, size),
		queue:         promoQueue{sock: sock},
		deferred:      make([]int32, 0, size),
		conns:         make([]*Conn, size),
		addrs:         make([]netip.AddrPort, size),
	}
}

func (l *loop) run() {
	defer l.s.wg.Done()
	for {
		var n int
		var err error
		l.sharedBatch = false
		if !l.sharing() {
			n, err = l.sock.Recv(l.rb)
		} else {
			// A login storm backs up the handshake sockets and nobody
			// plays on this loop. Its own socket first; then shareBatch
			// of the backlog at once while it fills whole shares, and a
			// look every shareCheck while it does not (docs/decisions.md,
			// "Connection loops share a login storm").
			wait := time.Duration(0)
			if !l.shareFull {
				wait = l.lastLook.Add(shareCheck).Sub(l.s.st.Now())
			}
			n, err = l.own.RecvWithin(l.rb, wait)
			if n == 0 && err == nil {
				l.lastLook = l.s.st.Now()
				share := min(shareBatch, len(l.rb.Msgs))
				n, err = l.shared.TryRecv(l.rb, share)
				l.sharedBatch, l.shareFull = n > 0, n == share
			}
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) || l.s.closing.Load() {
				if !l.s.closing.Load() {
					l.stopped.Store(true)
					l.s.st.Logger.Error("receive loop stopped: its socket was closed", "socket", l.idx)
				}
				return
			}
			l.s.st.Logger.Warn("receive failed; retrying", "socket", l.idx, "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if n == 0 {
			continue
		}
		if l.sharedBatch {
			l.cnt.add(cShared, uint64(n))
		}
		now := l.s.st.Now()
		l.batch(n, now)
		if sp := l.s.spread; sp != nil && !l.sharedBatch {
			// The loop's load, for the spreading of connection packets
			// (spread.go): a storm's shared batches are no part of it.
			sp.work(l.idx, l.s.st.Now().Sub(now))
		}
	}
}

// connIn counts a connection packet for c, accepted or dropped for r, and
// notes whether a player sent it.
func (l *loop) connIn(r protocol.DropReason, c *Conn) {
	if r != protocol.DropNone {
		l.cnt.add(cDrop+int(r), 1)
		return
	}
	l.cnt.add(cConnIn, 1)
	if l.watch && (c.cookieTS < l.playedBy || l.nowSec-c.cookieTS >= playerAge.Seconds()) {
		l.played = true
	}
}

// sharing reports whether the loop takes a share of a handshake socket's
// backlog: it is a steered server's connection loop, the classes are
// apart, a login storm is on, and no player (playerAge) has sent a packet
// to it for spreadHold. A loop that shares is never asleep for long, and
// where its core is contended (the storm's promotions, the collector,
// other processes) its players' packets wait for the time slices of
// everything else that runs (docs/decisions.md, "Connection loops share a
// login storm").
func (l *loop) sharing() bool {
	if l.shared == nil {
		return false
	}
	sp, now := l.s.spread, l.s.st.Now()
	return !sp.g.Spreading() && sp.storming(now) && now.Sub(l.lastPlay) >= spreadHold
}

// batch runs the fast path over one received batch: one clock read, one
// sendmmsg for every reply, one promotion hand-off. Datagrams from connected
// addresses are handled first, so an attack in the same batch cannot delay
// them, and overload control sheds only the connectionless rest.
func (l *loop) batch(n int, now time.Time) {
	in := l.cnt.local[cConnIn]
	l.proofs, l.played, l.watch = 0, false, false
	if sp := l.s.spread; l.shared != nil && sp.storming(now) {
		l.watch, l.playedBy = true, float64(sp.busySince.Load())/1e9-spreadHold.Seconds()
	}
	l.process(n, now)
	if l.played {
		l.lastPlay = now
	}
	if sp := l.s.spread; sp != nil {
		// A shared batch came from a handshake socket, and is full at
		// shareBatch.
		hs, size := l.idx < sp.loops || l.sharedBatch, len(l.rb.Msgs)
		if l.sharedBatch {
			size = min(shareBatch, size)
		}
		sp.observe(hs, n, int(l.cnt.local[cConnIn]-in), len(l.pending)+l.proofs, size, now)
	}
	l.flush()
	l.handOff()
	l.cnt.publish()
}

// process handles a received batch up to the send: the replies it makes
// wait in the send batch for flush.
func (l *loop) process(n int, now time.Time) {
	s := l.s
	l.now, l.nowSec, l.nowNs = now, seconds(now), now.UnixNano()
	if fc, g, ok := s.liveConfig(l.gen); ok {
		l.fp = handshake.NewServer(fc, s.secrets, 0, seconds(now))
		l.gen = g
	}
	l.shed(now)
	l.out = 0
	deferred := l.deferred[:0]
	// Three passes over the batch: look up every address, touch every
	// connection found, then handle. With many connections each lookup and
	// each connection is a cache miss; in separate short loops the CPU
	// overlaps them, where one loop doing all three pays them one by one.
	conns, addrs := l.conns[:n], l.addrs[:n]
	for i := range addrs {
		addrs[i] = l.rb.Msgs[i].Addr
	}
	s.tab.conns.GetBatch(addrs, conns)
	var sink uint64
	for _, c := range conns {
		if c != nil {
			// tag, lastSend, inflight (the Handler contract's line)
			// and Touch's loads hit each cache line the packet path
			// uses (TestConnLayout keeps them there). Touch
			// reads seq without c.mu: a deliberate race whose values only
			// warm the cache, left out of race builds.
			sink += uint64(c.tag) ^ uint64(c.lastSend.Load()) ^ uint64(c.inflight.Load())
			if !raceBuild {
				sink += c.seq.Touch()
			}
		}
	}
	l.sink = sink
	maxLen, inbound := s.st.MaxDatagram, &s.st.inbound
	for i, c := range conns {
		m := &l.rb.Msgs[i]
		if m.Truncated || m.N > maxLen {
			l.cnt.add(cDrop+int(protocol.DropTooLarge), 1)
			continue
		}
		if c == nil {
			deferred = append(deferred, int32(i))
			continue
		}
		// The connection's inbound budget, before anything reads the
		// packet: beyond it, a packet costs the loop this and a counter.
		if !inbound.Allow(&c.inb, m.N, l.nowNs) {
			l.cnt.add(cDrop+int(protocol.DropInboundLimited), 1)
			continue
		}
		l.handle(m, c, now)
	}
	if len(deferred) > 0 {
		l.cnt.add(cConnless, uint64(len(deferred)))
		for _, i := range deferred {
			l.handle(&l.rb.Msgs[i], nil, now)
		}
	}
	l.deferred = deferred
}

// handOff queues the batch's proven clients for the promotion pool, once
// per batch.
func (l *loop) handOff() {
	s := l.s
	if len(l.pending) > 0 {
		if n := s.enqueue(&l.queue, l.pending); n > 0 {
			l.cnt.add(cDrop+int(protocol.DropPromotionFull), uint64(n))
			s.ev.promotionRejected.Add(uint64(n))
		}
		clear(l.pending)
		l.pending = l.pending[:0]
	}
}

// shed applies the overload level to this batch: which optional replies to
// skip, and the level's Challenge cap as a token bucket that holds one
// second of it at most (fastpath spends it per Challenge).
func (l *loop) shed(now time.Time) {
	ov := &l.s.ov
	level := OverloadLevel(ov.level.Load())
	limit := ov.challengeCap(level) // negative: no cap
	sh := &l.fp.Shed
	sh.NoRestart = level >= LevelBurst
	sh.NoVersionUpgrade = level >= LevelBurst
	l.challenges.SetLimit(ratelimit.Limit{Rate: limit, Burst: limit}, seconds(now))
	sh.Challenges = &l.challenges
}

// handle runs one datagram through the fast path; c is its address's
// connection, or nil.
func (l *loop) handle(m *batchio.Message, c *Conn, now time.Time) {
	s := l.s
	d := &l.d
	var peer handshake.Peer
	if c != nil {
		// Field by field: a composite literal builds a temporary and
		// copies it.
		peer.Known, peer.ClientID, peer.Tag = true, c.clientID, c.tag
		peer.Cookie = c.cookie
	}
	dst := l.slot()
	l.fp.Handle(d, m.Addr, m.Buf[:m.N], l.nowSec, &peer, dst.Buf[:cap(dst.Buf)])
	if d.Handshake {
		l.cnt.add(cRequest+int(d.Request), 1)
	}
	switch d.Action {
	case handshake.ActReply:
		l.reply(d.ReplyLen, d.Reply, m.Addr)
	case handshake.ActConn:
		l.connIn(c.receive(&d.Conn, d.Payload, now, &l.rep, l), c)
	case handshake.ActPromote:
		if s.closing.Load() {
			l.cnt.add(cDrop+int(protocol.DropOverload), 1)
			return
		}
		if c.heldSealed() {
			// A handshake in clear never replaces a proven sealed
			// connection (§11.4): its cookie and ClientID travel in
			// clear, so an observer could make one from its address.
			l.cnt.add(cDrop+int(protocol.DropSealedHeld), 1)
			return
		}
		if s.sealed != nil {
			l.sealedAck(m.Addr)
			return
		}
		l.promote(m.Addr)
	case handshake.ActMigrate:
		l.migrate(m.Addr, now)
	case handshake.ActSealed:
		l.sealed(m, c, now)
	case handshake.ActSealedMove:
		l.sealedMove(m, now)
	case handshake.ActNotice:
		l.notice(d.ReplyLen, m.Addr)
		l.cnt.add(cDrop+int(d.Drop), 1)
	default:
		l.cnt.add(cDrop+int(d.Drop), 1)
	}
}

// slot is the next free message of the send batch, flushing it first when
// full (Sends from handlers can add more than one message per datagram).
func (l *loop) slot() *batchio.Message {
	if l.out == len(l.sb.Msgs) {
		l.flush()
	}
	return &l.sb.Msgs[l.out]
}

// flush sends the batch's messages so far.
func (l *loop) flush() {
	if l.out == 0 {
		return
	}
	if err := l.sock.Send(l.sb, l.out); err != nil && !errors.Is(err, net.ErrClosed) {
		l.s.st.Logger.Warn("send failed", "socket", l.idx, "err", err)
	}
	l.out = 0
}

// reply commits the message slot() returned, now holding a reply of n
// bytes of type t.
func (l *loop) reply(n int, t protocol.PacketType, to netip.AddrPort) {
	m := &l.sb.Msgs[l.out]
	m.N = n
	m.Addr = to
	l.out++
	l.cnt.add(cReply+int(t), 1)
}

// promote queues a proven client for the promotion pool, unless its cookie
// already made a connection: then the Response is a repeat (Ack again) if
// that connection holds this address, or a replay after the client moved
// (drop).
func (l *loop) promote(addr netip.AddrPort) {
	d := &l.d
	if c, at, ok := l.s.tab.conns.GetByCookie((*[20]byte)(&d.Cookie)); ok {
		if at != addr {
			l.cnt.add(cDrop+int(protocol.DropUnknownConnection), 1)
			return
		}
		m := l.slot()
		n := l.s.fc.BuildAck(m.Buf[:cap(m.Buf)], &d.To, &c.cookie, &l.rnd)
		l.reply(n, protocol.TypeAck, addr)
		return
	}
	l.pending = append(l.pending, promotion{
		addr: addr, cookie: d.Cookie, ts: d.Timestamp, rtt: l.nowSec - d.Timestamp, to: d.To,
	})
}

// migrate moves the connection holding OrigCookie (and the same ClientID)
// to the datagram's address and answers Ack with OrigCookie; its sequence
// numbers and state are unchanged (§5).
func (l *loop) migrate(addr netip.AddrPort, now time.Time) {
	d := &l.d
	s := l.s
	c, from, ok := s.tab.conns.GetByCookie((*[20]byte)(&d.OrigCookie))
	if !ok || c.clientID != d.To.ClientID || c.closed.Load() {
		// The connection is gone (closed, or this is a restarted server):
		// tell the client at once, rather than let it resend until its
		// timeout. Its address is proven and a Denied is smaller than the
		// RestartResponse.
		l.cnt.add(cDrop+int(protocol.DropUnknownConnection), 1)
		m := l.slot()
		if n := s.fc.BuildDenied(m.Buf[:cap(m.Buf)], &d.To, handshake.DeniedUnknownConnection, &d.Cookie, &l.rnd); n > 0 {
			l.reply(n, protocol.TypeDenied, addr)
		}
		return
	}
	if from != addr && !l.move(c, addr) {
		l.cnt.add(cDrop+int(protocol.DropUnknownConnection), 1)
		return
	}
	// A valid RestartResponse proves the client alive.
	c.lastRecv.Store(now.UnixNano())
	m := l.slot()
	n := s.fc.BuildAck(m.Buf[:cap(m.Buf)], &d.To, &d.OrigCookie, &l.rnd)
	l.reply(n, protocol.TypeAck, addr)
}

// move moves connection c to addr (it proved itself there) and reports
// whether it did; a connection that another move took first stays.
func (l *loop) move(c *Conn, addr netip.AddrPort) bool {
	s := l.s
	from, displaced, moved := s.tab.move(c, addr)
	if !moved {
		return false
	}
	c.mu.Lock()
	c.addr = addr
	c.link.sock = s.sendSocket(l.sock, addr)
	c.mu.Unlock()
	if c.sec != nil {
		s.sealed.moved(c, addr)
	}
	if s.st.Logger.Enabled(context.Background(), slog.LevelDebug) {
		s.st.Logger.Debug("connection migrated", "from", from, "to", addr, "client_id", c.clientID)
	}
	if c.closed.Load() {
		// It closed while moving: its shutdown may have looked for
		// it at the old address. closed was set before that lookup
		// read c.addr, so one of the two removals finds the entry.
		s.tab.forget(c)
	}
	if displaced != nil {
		displaced.shutdown(ReasonReplaced, false)
	}
	s.ev.migrations.Add(1)
	return true
}

// Loop counter layout: drops by reason, handshake packets received by type,
// replies sent by type, connection packets accepted, datagrams from
// unconnected addresses, datagrams taken from another loop's socket. Every
// size comes from protocol's tables, so a new drop reason or packet type is
// counted without an edit here.
const (
	cDrop     = 0
	cRequest  = cDrop + int(protocol.NumDropReasons)
	cReply    = cRequest + int(protocol.NumPacketTypes)
	cConnIn   = cReply + int(protocol.NumPacketTypes)
	cConnless = cConnIn + 1
	cShared   = cConnless + 1
	nCounters = cShared + 1
)

// loopCounters are written by one loop and read by Stats. Increments go to
// plain fields; once per batch the changed ones are stored into atomics on
// the loop's own cache lines, so the per-packet path has no shared atomic.
// dirty has one bit per counter, in as many words as nCounters needs.
type loopCounters struct {
	local  [nCounters]uint64
	dirty  [(nCounters + 63) / 64]uint64
	shared [nCounters]atomic.Uint64
	_      [64]byte
}

func (c *loopCounters) add(i int, n uint64) {
	c.local[i] += n
	c.dirty[i>>6] |= 1 << uint(i&63)
}

func (c *loopCounters) publish() {
	for w, d := range c.dirty {
		for ; d != 0; d &= d - 1 {
			i := w<<6 + bits.TrailingZeros64(d)
			c.shared[i].Store(c.local[i])
		}
		c.dirty[w] = 0
	}
}
