package conn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/ants/v2"

	"github.com/udpgate/udpgate/batchio"
	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/congestion"
	"github.com/udpgate/udpgate/internal/egress"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/ratelimit"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/shard"
	"github.com/udpgate/udpgate/token"
)

// Server accepts clients through the stateless handshake and hosts them as
// connections. Create one with Listen.
type Server struct {
	st      settings
	fc      handshake.ServerConfig // immutable, shared by loops and workers
	group   transportGroup
	socks   []transport
	secrets *cookie.Secrets
	// tab is the connections, their count and limits, and the memory of
	// closed addresses: everything admit, move and remove change.
	tab *table
	// sealed is the sealed mode's state; nil when unsealed.
	sealed *sealedServer

	loops []*loop
	// connSocks are the sockets no handshake packet arrives on (all of
	// them when unsteered); connections send from them, never from a
	// socket a handshake flood keeps busy.
	connSocks []transport
	pool      *ants.PoolWithFuncGeneric[*promoQueue]
	// drainers: pool tasks one loop's queue may have running at once.
	drainers int
	promos   sync.Pool
	// Test hooks, set by tests only (nil otherwise, each checked on a
	// cold path): drained is called each time a drain task ends (the
	// promotions it took are done: Acks sent, Handler told);
	// awaitingReady when a packet is about to wait for its connection's
	// OnConnect to return (awaitReady).
	drained       func()
	awaitingReady atomic.Pointer[func(*Conn)]
	seedCount     atomic.Uint64

	// Live settings (admin.go).
	draining atomic.Bool
	liveMu   sync.Mutex
	liveFC   handshake.ServerConfig
	liveGen  atomic.Uint64

	closing  atomic.Bool
	done     chan struct{}
	wg       sync.WaitGroup
	shutOnce sync.Once

	ev eventCounters
	ov overload
	// timers hold every connection at its next deadline (timers.go);
	// sweepShard is the map shard whose leftovers the next sweep checks.
	timers     timers
	sweepShard int
	// msgTimer runs message timers (messages.go); nil without channels.
	msgTimer *msgTimer
	// holders is reclaimMessages's scratch; reclaimLog, when it last
	// logged (housekeeping's goroutine only).
	holders    []heldConn
	reclaimLog time.Time
	// egress is the egress budget (Config.EgressRate), which msgTimer
	// recomputes; nil without one.
	egress *egress.Budget
	// spread moves connection packets onto the handshake sockets and off
	// them as handshake floods come and go (spread.go); nil unsteered.
	spread *spreader
}

// Listen starts a server on addr ("0.0.0.0:7777", "[::]:7777",
// "127.0.0.1:0"...): one SO_REUSEPORT socket and receive loop per socket,
// the promotion pool and housekeeping. With Config.Network set, the sockets
// are endpoints of that simulated network, bound at addr there (an IP
// address, not a host name; ":7777" and "0.0.0.0:7777" bind 127.0.0.1).
func Listen(addr string, cfg Config) (*Server, error) {
	s, err := listenStopped(addr, cfg)
	if err != nil {
		return nil, err
	}
	s.start(s.loops)
	return s, nil
}

// listenStopped is Listen up to start: the sockets bound, nothing running.
func listenStopped(addr string, cfg Config) (*Server, error) {
	st, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	now := st.Now()
	secrets, err := cookie.NewSecrets(seconds(now), nil)
	if err != nil {
		return nil, fmt.Errorf("conn: cannot create handshake secrets: %w", err)
	}
	sockets := st.Sockets
	if sockets == 0 {
		sockets = runtime.GOMAXPROCS(0)
	}
	if st.Network != nil {
		// A simulated network: its endpoints are the sockets, unsteered.
		ap, err := st.Network.Resolve(addr)
		if err != nil {
			return nil, fmt.Errorf("conn: bad listen address %q: %v", addr, err)
		}
		g, err := st.Network.Listen(ap, sockets)
		if err != nil {
			return nil, fmt.Errorf("conn: cannot listen on %s on the simulated network: %w", addr, err)
		}
		socks := make([]transport, len(g.Endpoints()))
		for i, ep := range g.Endpoints() {
			socks[i] = ep
		}
		batchSize := st.BatchSize
		if batchSize == 0 {
			batchSize = batchio.DefaultBatchSize
		}
		return newServer(st, now, secrets, g, socks, batchSize)
	}
	steer := batchio.Steer{Enabled: !st.NoSteering, Bit: st.magic.Len() + protocol.IDBits}
	if steer.Enabled {
		// Sockets loops in all, as without steering: half for
		// handshakes, the rest for connections, one each at least.
		steer.SetSockets = max(1, sockets/2)
		steer.ClearSockets = max(1, sockets-steer.SetSockets)
		if st.RecvBuffer == 0 {
			steer.SetRecvBuffer = max(batchio.DefaultRecvBuffer, handshakeQueue/steer.SetSockets)
		}
		if st.PrivateKey != nil {
			// Sealed: proofs (exactly ProofLen bytes, the token's version
			// info after the Tag) are connection packets by their bit,
			// but each may open a token: a flood of them queues with the
			// handshakes, not ahead of the players (issue 19).
			off := wire.ProofVersionOffset(st.magic)
			steer.Match = batchio.SteerMatch{Len: wire.ProofLen(st.magic), Off: off,
				Word: binary.BigEndian.Uint32([]byte(token.VersionInfo[:4]))}
		}
	}
	group, err := batchio.Listen(addr, batchio.Config{
		Sockets:    sockets,
		Steer:      steer,
		DSCP:       st.DSCP,
		BatchSize:  st.BatchSize,
		RecvBuffer: st.RecvBuffer,
		SendBuffer: st.SendBuffer,
		// DF on IPv4 unless asked otherwise (see Config).
		AllowFragmentation: st.AllowFragmentation,
		// One byte more than the largest datagram accepted, so a longer
		// one shows as truncated and is dropped as too large.
		MessageSize: st.MaxDatagram + 1,
		Logger:      st.Logger,
	})
	if err != nil {
		return nil, err
	}
	return newServer(st, now, secrets, group, socketTransports(group), group.Config().BatchSize)
}

// newServer makes a server over its transports, whose loops read batches
// of batchSize; start sets it running. A listening server's transports are
// its sockets; conn's tests make servers over an in-memory network.
func newServer(st settings, now time.Time, secrets *cookie.Secrets, group transportGroup, socks []transport, batchSize int) (*Server, error) {
	s := &Server{
		st:      st,
		group:   group,
		socks:   socks,
		secrets: secrets,
		done:    make(chan struct{}),
		ov:      overload{cfg: st.Overload},
	}
	var err error
	if st.PrivateKey != nil {
		if s.sealed, err = newSealedServer(&st, group.LocalAddr()); err != nil {
			group.Close()
			return nil, err
		}
	}
	s.tab = newTable(&s.st)
	if st.msgs != nil {
		s.msgTimer = newMsgTimer()
		if st.EgressRate > 0 {
			s.egress = egress.New(st.EgressRate)
			st.msgs.LimitBulk(s.egress.Level())
			s.msgTimer.budget, s.msgTimer.tx = s.egress, s.group.SentBytes
		}
	}
	s.ov.enabled.Store(st.Overload.Enabled)
	s.timers.init(st.SweepInterval, now)
	s.promos.New = func() any { return newPromoBatch() }
	s.drainers = max(1, st.PromotionWorkers/len(socks))
	s.pool, err = ants.NewPoolWithFuncGeneric(max(st.PromotionWorkers, len(socks)), s.drain,
		ants.WithNonblocking(true),
		ants.WithPanicHandler(func(p any) {
			s.ev.promotionPanics.Add(1)
			st.Logger.Error("promotion worker panicked; the client was not connected", "panic", p)
		}))
	if err != nil {
		group.Close()
		return nil, fmt.Errorf("conn: cannot start the promotion pool: %w", err)
	}
	for _, sock := range socks {
		if sock.Class() != batchio.ClassBitSet {
			s.connSocks = append(s.connSocks, sock)
		}
	}
	s.fc = st.fastpathConfig(s.handshakeLoops())
	s.fc.Closed = s.tab
	// One VersionUpgrade budget for the whole server, not one per loop.
	s.fc.ShareVersionUpgradeTotal(seconds(now))
	for i, sock := range socks {
		l := newLoop(s, i, sock, batchSize, seconds(now))
		s.loops = append(s.loops, l)
	}
	if group.Steered() {
		st.Logger.Debug("handshake packets steered to their own sockets, connection packets to every socket while the load asks for it and no handshake flood backs up",
			"handshake_sockets", len(socks)-len(s.connSocks), "connection_sockets", len(s.connSocks))
		if g, ok := group.(spreadGroup); ok {
			// The halves start apart: a (re)start is when logins storm.
			// Housekeeping spreads connection packets while a connection
			// loop is busy and no backlog of handshakes came for
			// spreadHold (spread.go).
			s.spread = newSpreader(g, s.handshakeLoops(), len(s.loops), st.Logger, now)
			s.shareBacklog()
		}
	}
	if !cookie.Accelerated() {
		st.Logger.Warn("handshake cookies use the slower textbook HMAC: this Go's crypto/sha1 no longer matches what package cookie expects; cookies stay correct, and a udpgate built for this Go restores the speed")
	}
	return s, nil
}

// start runs the receive loops (all of s.loops but in tests) and
// housekeeping.
func (s *Server) start(loops []*loop) {
	s.wg.Add(len(loops) + 1)
	for _, l := range loops {
		go l.run()
	}
	go s.housekeeping()
	if s.msgTimer != nil {
		s.wg.Add(1)
		go s.msgTimer.run(s.done, nil, s.st.Now, &s.wg)
	}
}

// Config returns the server's effective configuration, defaults filled.
func (s *Server) Config() Config { return s.st.Config }

// Addr is the address the server listens on (with the chosen port).
func (s *Server) Addr() netip.AddrPort { return s.group.LocalAddr() }

// Len is the number of connections.
func (s *Server) Len() int { return int(s.tab.len()) }

// Conn returns the connection at addr, if any.
func (s *Server) Conn(addr netip.AddrPort) (*Conn, bool) { return s.tab.conns.Get(addr) }

// Range calls fn for every connection until it returns false. Connections
// may come and go meanwhile.
func (s *Server) Range(fn func(*Conn) bool) {
	for i := range s.tab.conns.NumShards() {
		if s.tab.conns.RangeShard(i, func(_ netip.AddrPort, c *Conn) shard.Action {
			if !fn(c) {
				return shard.Stop
			}
			return shard.Keep
		}) {
			return
		}
	}
}

// Close shuts the server down, giving clients a second to be told.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return s.Shutdown(ctx)
}

// Shutdown stops accepting clients, sends every connection Disconnect
// (reason 2) disconnectPackets times, waits for promotions in flight (until
// ctx is done) and closes the sockets.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.shutOnce.Do(func() {
		s.closing.Store(true)
		if d, ok := ctx.Deadline(); ok {
			err = s.pool.ReleaseTimeout(time.Until(d))
		} else {
			s.pool.Release()
		}
		var all []*Conn
		s.Range(func(c *Conn) bool { all = append(all, c); return true })
		for _, c := range all {
			c.shutdown(ReasonShutdown, false)
		}
		close(s.done)
		if cerr := s.group.Close(); err == nil {
			err = cerr
		}
		s.wg.Wait()
	})
	if errors.Is(err, ants.ErrTimeout) {
		err = fmt.Errorf("conn: shutdown: promotions still running when the deadline passed: %w", err)
	}
	return err
}

// housekeeping rotates secrets and runs the connections' timers (a wheel
// advanced every SweepInterval, not a timer per connection).
func (s *Server) housekeeping() {
	defer s.wg.Done()
	t := time.NewTicker(s.st.SweepInterval)
	defer t.Stop()
	var batch []*Conn
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		batch = s.housekeep(s.st.Now(), batch)
	}
}

// housekeep is one round of housekeeping at now; batch is its reusable
// scratch. Tests call it to run a sweep at a time of their choosing.
func (s *Server) housekeep(now time.Time, batch []*Conn) []*Conn {
	if _, err := s.secrets.MaybeRotate(seconds(now)); err != nil {
		s.st.Logger.Error("secret rotation failed; the previous secrets stay in use", "err", err)
	}
	batch = s.sweep(now, batch[:0])
	if s.spread != nil {
		s.spread.check(now)
	}
	if s.sealed != nil {
		s.sealed.purge(now)
	}
	s.checkOverload(now)
	s.reclaimMessages(now)
	return batch
}

// checkOverload moves the overload level from the loops' connectionless
// counters and logs changes, at most one line per overloadLogEvery.
func (s *Server) checkOverload(now time.Time) {
	if !s.ov.enabled.Load() {
		return
	}
	var n uint64
	for _, l := range s.loops {
		n += l.cnt.shared[cConnless].Load()
	}
	from, to, changed := s.ov.update(n, now)
	if !changed {
		return
	}
	if now.Sub(s.ov.lastLog) < overloadLogEvery {
		s.ov.suppressed++
		return
	}
	s.st.Logger.Warn("overload level changed", "from", from.String(), "to", to.String(),
		"connectionless_per_s", int64(s.ov.rate), "suppressed_changes", s.ov.suppressed)
	s.ov.lastLog, s.ov.suppressed = now, 0
}

// sweep runs the timers that are due and, one shard of each map per call,
// drops leftovers: connections closed while a migration moved them (see
// migrate) and expired recently-disconnected entries. A full pass over the
// shards takes NumShards sweeps (25.6 s at the defaults), well inside the
// 120 s an entry lives; isRecent checks expiry itself.
func (s *Server) sweep(now time.Time, batch []*Conn) []*Conn {
	s.timers.advance(now)
	i := s.sweepShard
	s.sweepShard = (i + 1) % s.tab.conns.NumShards()
	return s.tab.sweep(i, now, batch)
}

// removed is called once when a server connection closes.
func (s *Server) removed(c *Conn, reason DisconnectReason) {
	s.timers.remove(c)
	announced := true
	if c.sec != nil {
		announced = c.sec.proven()
		s.sealed.closed(c)
	}
	s.tab.remove(c)
	if announced && int(reason) < len(s.ev.disconnects) {
		s.ev.disconnects[reason].Add(1)
	}
}

// handshakeLoops is how many receive loops handshake packets arrive at.
func (s *Server) handshakeLoops() int {
	if !s.group.Steered() {
		return len(s.socks)
	}
	return len(s.socks) - len(s.connSocks)
}

// shareBacklog gives each connection loop of a steered group of sockets a
// handshake socket whose backlog it takes while its own socket is empty
// and the classes are apart: without it a login storm waits on the
// handshake loops' cores while the connection loops' cores idle.
func (s *Server) shareBacklog() {
	var hs []*batchio.Socket
	for _, l := range s.loops {
		if so, ok := l.sock.(*batchio.Socket); ok && so.Class() == batchio.ClassBitSet {
			hs = append(hs, so)
		}
	}
	if len(hs) == 0 {
		return
	}
	k := 0
	for _, l := range s.loops {
		if so, ok := l.sock.(*batchio.Socket); ok && so.Class() == batchio.ClassBitClear {
			l.own, l.shared = so, hs[k%len(hs)]
			k++
		}
	}
}

// sendSocket is the socket a connection at addr sends from: sock, the one
// its packet arrived on, when connection packets arrive there too, or else
// a connection socket chosen by the address.
func (s *Server) sendSocket(sock transport, addr netip.AddrPort) transport {
	if sock.Class() != batchio.ClassBitSet {
		return sock
	}
	return s.connSocks[int(addr.Port())%len(s.connSocks)]
}

// maxSeedRTT: a handshake's round trip above this is not a connection's
// first sample (newConn): what is assumed before one.
const maxSeedRTT = time.Duration(congestion.DefaultRTT)

// newConn makes the connection for a proven client. table.admit calls it,
// under the client's admission lock.
func (s *Server) newConn(p *promotion, sock transport, now time.Time) *Conn {
	c := &Conn{
		st:       &s.st,
		srv:      s,
		link:     link{sock: s.sendSocket(sock, p.addr)},
		clientID: p.to.ClientID,
		session:  s.st.SessionID,
		cookie:   p.cookie,
		cookieTS: p.ts,
		tag:      cookie.SessionTag(&p.cookie),
		addr:     p.addr,
		inb:      ratelimit.NewFlowState(now.UnixNano()),
	}
	c.timer.home = s.timers.home()
	// Held until OnConnect returned (announce): the connection is in the
	// table, and its client's first packets may already be arriving.
	c.gate.Lock()
	c.initSeq(true, now)
	// The handshake's round trip is the connection's first sample, as
	// QUIC takes its handshake's, so that its first resends and its
	// overdue-ack check follow the path rather than the 100 ms assumed
	// before a sample. It can only be longer than the path's (a client
	// that answered late); above that 100 ms it is not taken, so that a
	// client cannot lengthen its own timeouts by answering late.
	if p.rtt > 0 && p.rtt < maxSeedRTT.Seconds() {
		c.seq.SeedRTT(p.rtt)
	}
	if s.sealed != nil {
		// Made only for a proof that checked out (loop.prove).
		c.sec = &sealState{}
		c.sec.state.Store(sealProven)
	}
	return c
}
