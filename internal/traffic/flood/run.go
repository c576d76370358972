package flood

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/udpgate/udpgate/batchio"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

// source is one sending socket and its accounting. The sender that owns it
// writes the first part, its receiver the second; the padding keeps the two
// goroutines off each other's cache lines.
type source struct {
	group *batchio.Group
	sock  *batchio.Socket
	addr  netip.AddrPort

	// conn and kinds: the source's connection and its own datagrams of
	// the sealed-mode kinds (nil: the shared ones), set before sending.
	conn  *sourceConn
	kinds [NumKinds][][]byte

	// Written by the owning sender only.
	sentKinds [NumKinds]uint64
	_         cpu.CacheLinePad

	// Written by the receiver only.
	recv    Counter
	replies [NumReplyTypes]Counter
	// recvPub is recv.Datagrams, published once per receive batch for the
	// drain's "has anything arrived lately" check.
	recvPub atomic.Uint64
	rxErr   error
	_       cpu.CacheLinePad
}

// Run sends cfg.Count datagrams of cfg.Mix to cfg.Server, or fewer if
// cfg.MaxDuration passes or ctx ends first, while counting everything the
// server sends back to each source. It returns once sending has stopped and
// late replies have been drained (at most cfg.Grace), with every socket
// closed.
//
// Before flooding, Run sends one Initial from a separate socket (the probe)
// to learn the server's SessionID and a real Challenge, which the replay
// kind answers from the other sources. A server that does not answer it is
// an error that names what to check; the probe's two datagrams are not in
// the Report.
//
// The Report is valid whenever sending started; if ctx ended the sending,
// the error is ctx's.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	st, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	deadline := start.Add(st.MaxDuration)
	rnd := wire.NewRand(st.Seed)

	probeCtx, cancel := context.WithDeadline(ctx, deadline)
	ch, probeSock, err := probe(probeCtx, &st, &rnd)
	cancel()
	if err != nil {
		return nil, err
	}
	b := &builder{st: &st, m: st.magic, rnd: wire.NewRand(rnd.Uint64() | 1), ch: ch, now: seconds(time.Now())}
	tmpl := b.templates()

	// The probe's socket stays open until the sources have their ports,
	// so that none of them gets the probe's port, from which the replayed
	// Response would be valid and make a connection.
	srcs, err := openSources(&st)
	probeSock.Close()
	if err != nil {
		return nil, err
	}
	e := &engine{st: &st, tmpl: tmpl, srcs: srcs, b: b}
	e.left.Store(int64(st.Count))
	return e.run(ctx, deadline, &rnd)
}

// engine is one Run's state.
type engine struct {
	st   *settings
	tmpl *templates
	srcs []*source
	b    *builder // for the sources' own templates
	// connected: sources that hold a connection for the sealed-mode kinds.
	connected int
	left      atomic.Int64 // datagrams not yet claimed by a sender
	stop      atomic.Bool  // set when MaxDuration passes or ctx ends
	why       atomic.Value // StopReason, set once
}

func (e *engine) halt(r StopReason) {
	if e.stop.CompareAndSwap(false, true) {
		e.why.Store(r)
	}
}

func (e *engine) run(ctx context.Context, deadline time.Time, rnd *wire.Rand) (*Report, error) {
	st := e.st
	var rwg sync.WaitGroup
	for _, s := range e.srcs {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			s.receive(st.magic, st.Server)
		}()
	}

	timer := time.AfterFunc(time.Until(deadline), func() { e.halt(StopDuration) })
	defer timer.Stop()
	unwatch := context.AfterFunc(ctx, func() { e.halt(StopCanceled) })
	defer unwatch()

	if st.Mix.sealedKinds() {
		e.connected = e.connectSources(deadline, rnd)
		for i, s := range e.srcs {
			if s.conn.ok {
				e.b.sourceTemplates(s, i)
			}
		}
	}

	begin := time.Now()
	var swg sync.WaitGroup
	senders := make([]*sender, st.Senders)
	for i := range senders {
		sd := &sender{
			e:     e,
			rnd:   wire.NewRand(rnd.Uint64() | 1),
			batch: batchio.NewBatch(st.Batch, 1), // slots unused: Buf points at templates
			size:  st.Batch,
			rate:  st.Rate / float64(st.Senders),
		}
		if sd.rate > 0 {
			// Paced: at least pacedBatchesPerSecond batches, so the
			// traffic is a stream rather than a burst and a long sleep.
			sd.size = max(1, min(st.Batch, int(sd.rate/pacedBatchesPerSecond)))
		}
		for j := i; j < len(e.srcs); j += st.Senders {
			sd.srcs = append(sd.srcs, e.srcs[j])
		}
		senders[i] = sd
		swg.Add(1)
		go func() {
			defer swg.Done()
			sd.run()
		}()
	}
	swg.Wait()
	sendTime := time.Since(begin)
	e.halt(StopCount) // no-op if time or ctx stopped it first

	drained := e.drain()
	for _, s := range e.srcs {
		s.group.Close()
	}
	rwg.Wait()

	rep := e.report(sendTime, drained)
	if rep.Stopped == StopCanceled {
		return rep, ctx.Err()
	}
	for _, sd := range senders {
		if sd.err != nil {
			return rep, sd.err
		}
	}
	for _, s := range e.srcs {
		if s.rxErr != nil {
			return rep, fmt.Errorf("flood: receiving on %s failed: %w", s.addr, s.rxErr)
		}
	}
	return rep, nil
}

// drain waits for late replies: until no source has received anything for
// quietPeriod, or Grace has passed. It returns how long it waited.
func (e *engine) drain() time.Duration {
	start := time.Now()
	end := start.Add(e.st.Grace)
	last, lastChange := e.received(), start
	for {
		time.Sleep(5 * time.Millisecond)
		now := time.Now()
		if n := e.received(); n != last {
			last, lastChange = n, now
		}
		if now.Sub(lastChange) >= quietPeriod || !now.Before(end) {
			return now.Sub(start)
		}
	}
}

func (e *engine) received() uint64 {
	var n uint64
	for _, s := range e.srcs {
		n += s.recvPub.Load()
	}
	return n
}

// pacedBatchesPerSecond is the least batch rate of a paced sender.
const pacedBatchesPerSecond = 200

// sender sends from its share of the sources, a batch per source in turn.
type sender struct {
	e     *engine
	rnd   wire.Rand
	batch *batchio.Batch
	size  int // datagrams per batch, at most len(batch.Msgs)
	srcs  []*source
	rate  float64 // datagrams per second for this sender; 0: unpaced
	err   error
}

func (sd *sender) run() {
	e := sd.e
	cum, total := e.st.Mix.cumulative()
	start := time.Now()
	var sent int64
	for i := 0; !e.stop.Load(); i++ {
		n := sd.claim()
		if n == 0 {
			return
		}
		s := sd.srcs[i%len(sd.srcs)]
		sd.fill(s, n, &cum, total)
		if err := s.sock.Send(sd.batch, n); err != nil {
			// Only a socket that cannot send at all fails a whole
			// batch (the engine closes sockets only after the
			// senders return): stop everything and say why.
			sd.err = fmt.Errorf("flood: sending from %s failed: %w", s.addr, err)
			e.halt(StopError)
			return
		}
		sent += int64(n)
		if sd.rate > 0 {
			sd.pace(start.Add(time.Duration(float64(sent) / sd.rate * float64(time.Second))))
		}
	}
}

// pace sleeps until due, waking every 50 ms to notice a stop, so that even
// a very low rate cannot hold a sender past MaxDuration or a cancel.
func (sd *sender) pace(due time.Time) {
	for !sd.e.stop.Load() {
		d := time.Until(due)
		if d <= 0 {
			return
		}
		time.Sleep(min(d, 50*time.Millisecond))
	}
}

// claim takes up to a batch of datagrams from the engine's count.
func (sd *sender) claim() int {
	b := int64(sd.size)
	left := sd.e.left.Add(-b)
	switch {
	case left >= 0:
		return int(b)
	case left > -b:
		return int(b + left)
	}
	return 0
}

// cumulative returns the mix's running sums of weights, by kind, and their
// total: what fill draws kinds by.
func (m *Mix) cumulative() (cum [NumKinds]uint64, total uint64) {
	for k, w := range m {
		total += uint64(w)
		cum[k] = total
	}
	return cum, total
}

// fill points the first n slots of the batch at templates drawn by the mix,
// addressed to the server. It allocates nothing.
func (sd *sender) fill(s *source, n int, cum *[NumKinds]uint64, total uint64) {
	e := sd.e
	to := e.st.Server
	for j := range n {
		r := uint64(sd.rnd.Intn(int(total)))
		k := 0
		for r >= cum[k] {
			k++
		}
		vs := s.kinds[k]
		if vs == nil {
			vs = e.tmpl.kinds[k]
		}
		p := vs[sd.rnd.Intn(len(vs))]
		m := &sd.batch.Msgs[j]
		m.Buf = p
		m.N = len(p)
		m.Addr = to
		s.sentKinds[k]++
	}
}

// receive counts every datagram arriving at s until its socket closes.
// While the source connects (sealed-mode kinds), handshake replies also go
// to its handshake.
func (s *source) receive(m wire.Magic, server netip.AddrPort) {
	b := batchio.NewBatch(8, 2048)
	var h protocol.Handshake
	var ch protocol.ConnHeader
	for {
		n, err := s.sock.Recv(b)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.rxErr = err
			}
			return
		}
		for i := range n {
			msg := &b.Msgs[i]
			p := msg.Buf[:msg.N]
			t := classify(m, p, &h, &ch)
			if c := s.conn; c != nil && t < ReplyConn && c.active.Load() {
				c.handshakeIn(s, server, p)
			}
			s.recv.add(msg.N)
			s.replies[t].add(msg.N)
		}
		s.recvPub.Store(s.recv.Datagrams)
	}
}

// classify names what the server sent: a handshake packet by its type; a
// refusal of a token (an unsealed Disconnect, reason 5 or 6, which a sealed
// server sends while a connection proves its token); a sealed packet; any
// other connection packet; or invalid.
func classify(m wire.Magic, p []byte, h *protocol.Handshake, ch *protocol.ConnHeader) ReplyType {
	if wire.DecodeHandshake(m, p, h) == protocol.DropNone {
		return ReplyType(h.Type)
	}
	payload, r := wire.DecodeConn(m, p, ch)
	if r == protocol.DropNone && ch.Kind == protocol.KindDisconnect && len(payload) == 1 && (payload[0] == protocol.DisconnectTokenExpired || payload[0] == protocol.DisconnectTokenInvalid || payload[0] == protocol.DisconnectTokenRequired) {
		return ReplyRefusal
	}
	if proof, rs := wire.DecodeSealed(m, p, ch); rs == protocol.DropNone && !proof {
		return ReplySealed
	}
	if r == protocol.DropNone {
		return ReplyConn
	}
	return ReplyInvalid
}

// openSources binds one socket per source address. On failure it closes
// what it opened and says how to fix the address.
func openSources(st *settings) ([]*source, error) {
	srcs := make([]*source, 0, len(st.sources))
	fail := func(err error) ([]*source, error) {
		for _, s := range srcs {
			s.group.Close()
		}
		return nil, err
	}
	for _, a := range st.sources {
		g, err := batchio.Listen(netip.AddrPortFrom(a, 0).String(), batchio.Config{
			Sockets: 1,
			// Parked goroutines, not a thread per source socket.
			Mode:      batchio.ModeNetpoll,
			BatchSize: 8,
			// The WriteTo queue is unused: keep it tiny.
			QueueSize:   1,
			MessageSize: 64,
			// Replies are few and small; the system defaults do.
			RecvBuffer: -1,
			SendBuffer: -1,
		})
		if err != nil {
			return fail(fmt.Errorf("flood: cannot open a source socket on %s: %w (on Linux all of 127.0.0.0/8 is local; elsewhere give Config.Sources addresses the loopback interface has, or fewer NumSources)", a, err))
		}
		srcs = append(srcs, &source{group: g, sock: g.Sockets()[0], addr: g.LocalAddr()})
	}
	return srcs, nil
}

// probeTries and probeWait bound the probe: three Initials, a reply awaited
// this long after each.
const (
	probeTries = 3
	probeWait  = 500 * time.Millisecond
)

// probe sends an Initial from its own socket and returns the Challenge it
// gets, and the socket, which the caller closes once the flood's sources
// are bound: the socket is never used for the flood, so the replayed
// Response is never valid from a flood source, and the server makes no
// connection.
func probe(ctx context.Context, st *settings, rnd *wire.Rand) (ch challenge, _ *net.UDPConn, err error) {
	local := netip.AddrPortFrom(st.sources[0], 0)
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(local))
	if err != nil {
		return challenge{}, nil, fmt.Errorf("flood: cannot open the probe socket on %s: %w", local, err)
	}
	defer func() {
		if err != nil {
			udp.Close()
		}
	}()
	stop := context.AfterFunc(ctx, func() { udp.SetReadDeadline(time.Now()) })
	defer stop()

	h := protocol.Handshake{
		SessionID:       st.SessionID,
		ClientID:        uint8(rnd.Intn(8)),
		MinVersion:      protocol.MinHandshakeVersion,
		CurVersion:      protocol.CurHandshakeVersion,
		Type:            protocol.TypeInitial,
		NetworkVersion:  st.NetworkVersion,
		NetworkFeatures: st.NetworkFeatures,
		RandomLen:       protocol.MaxRandomBytes,
	}
	var out [handshake.MaxReplyLen]byte
	in := make([]byte, 2048)
	for try := range probeTries {
		h.SentCount = uint8(try)
		rnd.Fill(h.Random[:])
		n := wire.EncodeHandshake(out[:], st.magic, &h)
		if _, err := udp.WriteToUDPAddrPort(out[:n], st.Server); err != nil {
			return challenge{}, nil, fmt.Errorf("flood: cannot send the probe Initial to %s: %w", st.Server, err)
		}
		udp.SetReadDeadline(time.Now().Add(probeWait))
		for {
			n, from, err := udp.ReadFromUDPAddrPort(in)
			if ctx.Err() != nil {
				return challenge{}, nil, fmt.Errorf("flood: probing %s: %w", st.Server, context.Cause(ctx))
			}
			if err != nil {
				break // no reply in probeWait: send again
			}
			if netip.AddrPortFrom(from.Addr().Unmap(), from.Port()) != st.Server {
				continue
			}
			var r protocol.Handshake
			if wire.DecodeHandshake(st.magic, in[:n], &r) != protocol.DropNone || r.ClientID != h.ClientID {
				continue
			}
			switch r.Type {
			case protocol.TypeChallenge:
				return challenge{ok: true, sessionID: r.SessionID, clientID: r.ClientID, sentCount: r.SentCount,
					secretID: r.SecretID, timestamp: r.Timestamp, cookie: r.Cookie}, udp, nil
			case protocol.TypeVersionUpgrade:
				return challenge{}, nil, fmt.Errorf("flood: the server at %s runs NetworkVersion %d features %d, not %d features %d: set NetworkVersion/NetworkFeatures (-network-version/-network-features) to match",
					st.Server, r.NetworkVersion, r.NetworkFeatures, st.NetworkVersion, st.NetworkFeatures)
			}
		}
	}
	return challenge{}, nil, fmt.Errorf("flood: no Challenge from %s after %d Initials in %v: check that the server runs there and that Magic (-magic) matches",
		st.Server, probeTries, probeTries*probeWait)
}

// seconds converts a clock reading to the protocol's Unix seconds.
func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
