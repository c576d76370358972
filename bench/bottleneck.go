package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/testkit/netem"
	"github.com/udpgate/udpgate/internal/testkit/procstat"
	"github.com/udpgate/udpgate/message"
)

// The bottleneck scenarios put a game's connection through a narrow link,
// as a home router or a mobile uplink is: internal/testkit/netem's
// bottleneck (Config.Rate: a rate and a drop-tail queue in each
// direction, shared by every client) with bnDelay each way after it. Each
// connection carries, at once,
//
//   - a bulk flow: 1 MiB reliable messages back to back from the client,
//     each answered by the server with a short message once it holds all
//     of it (bulkReply, stamped with the server's clock), so the return
//     path carries acks and answers, not a second bulk; and
//   - the game's small messages: 30 reliable messages of 100 bytes and 30
//     sequenced ones of 64 bytes a second, echoed by the server.
//
// A run first sends only the small messages (the idle phase: their round
// trip with an empty queue), then the bulk flow too for the bulk phase,
// then stops sending and waits up to bnDrain for the last echoes.
//
// The peers, each with one connection per client (bnRuns):
//
//   - udpgate: the tools' channel layout (internal/msgcfg): reliable
//     messages on channel 0, sequenced on 2, bulk on 3 (declared Bulk), the
//     server's answer to a bulk message on 0; the library's default timers
//     and send rate (-bn-send-rate sets Config.Messages.SendRate, the
//     congestion controller's ceiling). The bulk flow keeps the channel's
//     queue (MaxQueued, 2 MiB here) fed: the next message goes as soon as
//     the queue takes it, and while it refuses (ErrQueueFull) the sender
//     waits for OnSendable, an answer or bnPoll;
//   - quic: quic-go (quic.go), a bulk stream written continuously and a
//     small stream carrying the small messages;
//   - kcp and kcp/cc: kcp-go in the fast profile and in its normal mode
//     with the congestion window on (kcp.go), one session carrying both,
//     so the small messages wait behind the bulk flow's queue: part of
//     what is measured.
//
// Scenarios (parseBnScenario):
//
//   - bn-N: one connection through an N Mbit/s bottleneck, queue 64 KiB
//     (N < 10), 256 KiB (N < 50) or 1 MiB;
//   - bn-loss: 50 Mbit/s, queue 1 MiB, 5 % random loss each way before
//     the queue;
//   - bn-fair-N: N udpgate connections through one 20 Mbit/s bottleneck
//     (queue 256 KiB): each one's goodput ÷ an equal share of all theirs;
//   - bn-vs-quic: one udpgate and one quic-go connection through one 20
//     Mbit/s bottleneck (queue 256 KiB), both servers behind one address
//     (bnMux): udpgate's goodput as a share of the link.
//
// Figures per connection: bulk goodput (bytes of the bulk messages the
// server completed, timed by the server's clock, linear between
// completions) over the window from bnWarm (bnFairWarm with several
// connections) after the bulk phase's start to its end, as a percentage of
// the link's rate; the time from the bulk phase's start until a 1 MiB
// message first arrived at 85 % of the link's rate or more; the small
// messages' round trip (from when each was due to its echo) p50/p99 in the
// idle phase and in the bulk phase; small messages never echoed; whether
// the connection ended. Per run: the bottleneck's drops (full queue) as a
// percentage of the datagrams offered to it in each direction over the
// bulk phase, its largest queue in milliseconds of the link, and the bytes
// it forwarded toward the server in the window ÷ the link's rate (link
// use: every byte, headers, small messages and resends included).

// scBn is the bottleneck scenarios' kind.
const scBn = "bn"

const (
	bnDelay      = 25 * time.Millisecond
	bnBulkSize   = 1 << 20
	bnRelSize    = 100 // a reliable small message
	bnSeqSize    = 64  // a sequenced small message
	bnSmallRate  = 30  // of each kind, per second
	bnWarm       = 2 * time.Second
	bnFairWarm   = 5 * time.Second
	bnDrain      = 10 * time.Second
	bnSample     = 100 * time.Millisecond // link samples
	bnReachSpan  = 500 * time.Millisecond // link reach: rate over this span
	bnReachShare = 0.85
	bnMaxConns   = 32
	// seqFlag marks a sequenced small message's sequence number.
	seqFlag = 1 << 30
)

// bnSpec is a bottleneck scenario's path and connections.
type bnSpec struct {
	RateBits int64   // link rate, bits per second each way
	Queue    int     // drop-tail queue, bytes
	Loss     float64 // random loss each way, before the queue
	Conns    int     // udpgate connections (bn-fair-N), else 1
	WithQUIC bool    // bn-vs-quic: a quic-go connection beside udpgate's
	Bulk     time.Duration
}

func (b bnSpec) rate() float64 { return float64(b.RateBits) / 8 }

// parseBnScenario reads bn-N, bn-loss, bn-fair-N and bn-vs-quic; ok is
// false for other names.
func parseBnScenario(s string) (sc scenario, ok bool, err error) {
	rest, found := strings.CutPrefix(s, scBn+"-")
	if !found {
		return sc, false, nil
	}
	switch {
	case rest == "loss" || rest == "vs-quic":
		n := 1
		if rest == "vs-quic" {
			n = 2
		}
		return scenario{Name: s, Kind: scBn, Clients: n}, true, nil
	case strings.HasPrefix(rest, "fair-"):
		n, err := strconv.Atoi(strings.TrimPrefix(rest, "fair-"))
		if err != nil || n < 2 || n > bnMaxConns {
			return sc, true, fmt.Errorf("scenario %q: want bn-fair-N with 2 to %d connections", s, bnMaxConns)
		}
		return scenario{Name: s, Kind: scBn, Clients: n}, true, nil
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 1 || n > 200 {
		return sc, true, fmt.Errorf("scenario %q: want bn-N with N the link in Mbit/s, 1 to 200, or bn-loss, bn-fair-N, bn-vs-quic", s)
	}
	return scenario{Name: s, Kind: scBn, Clients: 1}, true, nil
}

// bn is the scenario's path and connections.
func (sc scenario) bn() bnSpec {
	rest := strings.TrimPrefix(sc.Name, scBn+"-")
	switch {
	case rest == "loss":
		return bnSpec{RateBits: 50e6, Queue: 1 << 20, Loss: 0.05, Conns: 1, Bulk: 12 * time.Second}
	case rest == "vs-quic":
		return bnSpec{RateBits: 20e6, Queue: 256 << 10, Conns: 1, WithQUIC: true, Bulk: 15 * time.Second}
	case strings.HasPrefix(rest, "fair-"):
		n, _ := strconv.Atoi(strings.TrimPrefix(rest, "fair-"))
		return bnSpec{RateBits: 20e6, Queue: 256 << 10, Conns: n, Bulk: 15 * time.Second}
	}
	n, _ := strconv.Atoi(rest)
	b := bnSpec{RateBits: int64(n) * 1e6, Queue: 1 << 20, Conns: 1, Bulk: 12 * time.Second}
	switch {
	case n < 10:
		// 1 MiB takes 4 s at 2 Mbit/s: a longer phase sees a few.
		b.Queue, b.Bulk = 64<<10, 16*time.Second
	case n < 50:
		b.Queue = 256 << 10
	}
	return b
}

// bnRuns: every peer runs the one-connection scenarios; fairness and
// udpgate beside quic-go are udpgate's (the run holds the quic-go
// connection itself).
func (sc scenario) bnRuns(v variant) bool {
	b := sc.bn()
	switch v.Kind {
	case kindUdpgate:
		return !v.Overload
	case kindQUIC, kindKCP:
		return b.Conns == 1 && !b.WithQUIC
	}
	return false
}

// bnRecord is one bottleneck run.
type bnRecord struct {
	RateMbit float64 `json:"rate_mbit"`
	QueueKiB int     `json:"queue_kib"`
	LossPct  float64 `json:"loss_pct_each_way"`
	DelayMs  float64 `json:"delay_ms_each_way"`
	IdleSec  float64 `json:"idle_s"`
	BulkSec  float64 `json:"bulk_s"`
	// WindowSec: the goodput window's start after the bulk phase's.
	WindowSec float64        `json:"window_from_s"`
	Conns     []bnConnRecord `json:"conns"`
	// The bottleneck over the bulk phase, [0] toward the server, [1]
	// toward the clients.
	Offered [2]uint64  `json:"offered"`
	Dropped [2]uint64  `json:"dropped"`
	DropPct [2]float64 `json:"drop_pct"`
	// MaxQueueMs: the run's largest queue, in milliseconds of the link.
	MaxQueueMs [2]float64 `json:"max_queue_ms"`
	// LinkUsePct: bytes forwarded toward the server in the window ÷ the
	// link's rate; LinkReachS: seconds from the bulk phase's start until
	// that over bnReachSpan first reached bnReachShare (-1: never).
	LinkUsePct float64 `json:"link_use_pct"`
	LinkReachS float64 `json:"link_reach_s"`
	// Several connections: their goodputs together ÷ the link; each
	// one's bytes into the bottleneck ÷ an equal share of theirs (lowest,
	// highest; Jain's index of them), and the same of goodputs.
	TotalPct        float64 `json:"total_goodput_pct,omitempty"`
	MinShare        float64 `json:"min_share,omitempty"`
	MaxShare        float64 `json:"max_share,omitempty"`
	Jain            float64 `json:"jain,omitempty"`
	MinGoodputShare float64 `json:"min_goodput_share,omitempty"`
	MaxGoodputShare float64 `json:"max_goodput_share,omitempty"`
}

// bnConnRecord is one connection's figures.
type bnConnRecord struct {
	Peer       string  `json:"peer"`
	BulkDone   int     `json:"bulk_messages_done"`
	GoodputPct float64 `json:"goodput_pct"`
	ReachS     float64 `json:"reach_s"` // -1: never
	// LinkPct: the client's bytes the bottleneck took toward the server
	// in the window ÷ the link's rate (its resends included); Share: that
	// ÷ the connections' mean, GoodputShare the same of goodputs.
	LinkPct      float64 `json:"link_pct"`
	Share        float64 `json:"share,omitempty"`
	GoodputShare float64 `json:"goodput_share,omitempty"`
	IdleP50      float64 `json:"idle_p50_ms"`
	IdleP99      float64 `json:"idle_p99_ms"`
	BulkP50      float64 `json:"bulk_p50_ms"`
	BulkP99      float64 `json:"bulk_p99_ms"`
	RelSent      uint64  `json:"reliable_sent"`
	RelLost      uint64  `json:"reliable_lost"`
	SeqSent      uint64  `json:"sequenced_sent"`
	SeqLost      uint64  `json:"sequenced_lost"`
	SendErrors   uint64  `json:"send_errors"`
	Resent       int64   `json:"resent"`
	Ended        string  `json:"ended,omitempty"`
	BulkError    string  `json:"bulk_error,omitempty"`
	// Path: udpgate's PathStats at the bulk phase's end.
	Path string `json:"path,omitempty"`
}

// bnConn is one connection of any peer.
type bnConn interface {
	// sendSmall sends a small message, reliable or sequenced.
	sendSmall(reliable bool, b []byte) error
	// sendBulk hands one bulk message to the library, waiting (never
	// spinning) while it holds as much as it takes; progress is signalled
	// by each answer to a bulk message. ctx's end interrupts it.
	sendBulk(ctx context.Context, b []byte, progress <-chan struct{}) error
	// ended says why the connection ended, "" while it is up.
	ended() string
	// resent is the peer's count of resends (kcp-go: its process's resent
	// segments; quic-go: packets declared lost).
	resent() int64
	// port is the client socket's port, by which the proxy's Observe
	// tells its datagrams.
	port() uint16
	close()
}

// addrPort is the port of a net.Addr (a UDP address), 0 if none.
func addrPort(a net.Addr) uint16 {
	if u, ok := a.(*net.UDPAddr); ok {
		return uint16(u.Port)
	}
	return 0
}

// udpgate's side: the bulk sender waits for conn's OnSendable (the bulk
// channel drained to half its MaxQueued), an answer to a bulk message or
// bnPoll, whichever comes first.

type udpgateBn struct {
	c        *conn.Client
	sendable chan struct{}
}

// bnPoll is the udpgate bulk sender's longest wait for OnSendable.
const bnPoll = 50 * time.Millisecond

// bnClientApp hands a client's messages to on and signals sendable.
type bnClientApp struct {
	conn.NopHandler
	on       func([]byte)
	sendable chan struct{}
}

func (a *bnClientApp) OnMessage(c *conn.Conn, ch int, msg []byte) { a.on(msg) }

func (a *bnClientApp) OnSendable(c *conn.Conn, ch int) {
	select {
	case a.sendable <- struct{}{}:
	default:
	}
}

func dialUdpgateBn(ctx context.Context, addr netip.AddrPort, spec msgServerSpec, on func([]byte)) (bnConn, error) {
	app := &bnClientApp{on: on, sendable: make(chan struct{}, 1)}
	c, err := conn.Dial(ctx, addr.String(), msgBaseConfig(app, spec))
	if err != nil {
		return nil, err
	}
	return &udpgateBn{c: c, sendable: app.sendable}, nil
}

func (u *udpgateBn) sendSmall(reliable bool, b []byte) error {
	ch := msgcfg.Sequenced
	if reliable {
		ch = msgcfg.Reliable
	}
	return u.c.Conn().SendMessage(ch, b)
}

func (u *udpgateBn) sendBulk(ctx context.Context, b []byte, progress <-chan struct{}) error {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		err := u.c.Conn().SendMessage(msgcfg.Bulk, b)
		if !errors.Is(err, message.ErrQueueFull) {
			return err
		}
		t.Reset(bnPoll)
		select {
		case <-u.sendable:
		case <-progress:
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (u *udpgateBn) ended() string {
	select {
	case <-u.c.Done():
		if err := u.c.Err(); err != nil {
			return err.Error()
		}
		return "closed"
	default:
		return ""
	}
}

func (u *udpgateBn) resent() int64 { return int64(u.c.Conn().MessageStats().Resent) }
func (u *udpgateBn) port() uint16  { return u.c.LocalAddr().Port() }

// close discards what is still queued: the run is over, and Close's
// linger would only add seconds.
func (u *udpgateBn) close() { _ = u.c.Close() } // Linger -1: at once

// path is the congestion controller's view of the path.
func (u *udpgateBn) path() message.PathStats { return u.c.Conn().MessageStats().Path }

// kcp-go's side (kcpClient, kcp.go); kcpBn counts its resends as the
// process's resent segments (one session per run).
type kcpBn struct{ *kcpClient }

func (kcpBn) resent() int64  { return kcpRetrans() }
func (k kcpBn) port() uint16 { return addrPort(k.s.LocalAddr()) }

func (c *kcpClient) sendSmall(_ bool, b []byte) error {
	_, err := c.s.Write(b)
	return err
}

// sendBulk: kcp-go's Write takes a whole message while fewer segments
// than the send window wait, and blocks otherwise.
func (c *kcpClient) sendBulk(ctx context.Context, b []byte, _ <-chan struct{}) error {
	stop := context.AfterFunc(ctx, func() { c.s.SetWriteDeadline(time.Now()) })
	defer stop()
	_, err := c.s.Write(b)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func (c *kcpClient) ended() string {
	select {
	case <-c.done:
		if c.readErr != nil {
			return c.readErr.Error()
		}
		return "closed"
	default:
		return ""
	}
}

// bnTracker records one connection's small messages and bulk answers.
type bnTracker struct {
	mu       sync.Mutex
	rel, seq bnSent
	done     []int64 // each bulk message's completion at the server, Unix ns
	ping     chan struct{}
	pinged   bool
	progress chan struct{}
}

// bnSent is one kind of small message: when each was due (Unix ns), and
// its round trip once echoed (ms; -1 before).
type bnSent struct {
	at  []int64
	rtt []float64
}

func newBnTracker() *bnTracker {
	return &bnTracker{ping: make(chan struct{}), progress: make(chan struct{}, 1)}
}

// sent records small message seq of its kind, due at.
func (t *bnTracker) sent(seq uint32, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.rel
	if seq&seqFlag != 0 {
		s = &t.seq
	}
	s.at = append(s.at, at.UnixNano())
	s.rtt = append(s.rtt, -1)
}

func (t *bnTracker) on(b []byte) {
	now := time.Now()
	if len(b) < msgHeader {
		return
	}
	seq := msgSeq(b)
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case seq == pingSeq:
		if !t.pinged {
			t.pinged = true
			close(t.ping)
		}
	case b[0] == tagReply:
		if len(b) >= replyHeader {
			t.done = append(t.done, replyTime(b).UnixNano())
			select {
			case t.progress <- struct{}{}:
			default:
			}
		}
	case b[0] == tagEcho:
		s := &t.rel
		if seq&seqFlag != 0 {
			s, seq = &t.seq, seq&^seqFlag
		}
		if int(seq) < len(s.rtt) && s.rtt[seq] < 0 {
			s.rtt[seq] = float64(now.Sub(msgTime(b))) / float64(time.Millisecond)
		}
	}
}

// pending is how many reliable small messages await their echo.
func (t *bnTracker) pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, r := range t.rel.rtt {
		if r < 0 {
			n++
		}
	}
	return n
}

// bnPeerConn is a client of the run: its peer, connection and tracker.
type bnPeerConn struct {
	peer string
	c    bnConn
	t    *bnTracker
	r0   int64
	errs atomic.Uint64
	// link: UDP payload bytes this client sent that the bottleneck took
	// (queued, not dropped), toward the server.
	link atomic.Uint64
	bulk error // the bulk sender's error, if not the phase's end
}

// bnDialerFor dials peer v's client through addr.
func bnDialerFor(v variant, spec msgServerSpec) func(ctx context.Context, addr netip.AddrPort, on func([]byte)) (bnConn, error) {
	switch v.Kind {
	case kindQUIC:
		return func(ctx context.Context, addr netip.AddrPort, on func([]byte)) (bnConn, error) {
			return dialQUIC(ctx, addr, on)
		}
	case kindKCP:
		return func(ctx context.Context, addr netip.AddrPort, on func([]byte)) (bnConn, error) {
			c, err := dialKCPWith(addr, kcpProfileFor(v), on)
			if err != nil {
				return nil, err
			}
			return kcpBn{c}, nil
		}
	}
	return func(ctx context.Context, addr netip.AddrPort, on func([]byte)) (bnConn, error) {
		return dialUdpgateBn(ctx, addr, spec, on)
	}
}

// bnServerSpec is the udpgate server's (and client's) message settings.
func bnServerSpec(opt *options) msgServerSpec {
	return msgServerSpec{Tools: true, LibTimers: true, MaxMessageSize: bnBulkSize, SendRate: opt.BnSendRate}
}

// bnPhases is the run's idle and bulk phases.
func bnPhases(opt *options, b bnSpec) (idle, bulk time.Duration) {
	bulk = b.Bulk
	if opt.BnDuration > 0 {
		bulk = opt.BnDuration
	}
	return min(max(bulk/4, 500*time.Millisecond), 3*time.Second), bulk
}

// runBn measures variant v under a bottleneck scenario.
func runBn(ctx context.Context, opt *options, sc scenario, v variant, rep int) (runRecord, error) {
	rec := runRecord{Rep: rep, Scenario: sc.Name, Variant: v.Spec}
	b := sc.bn()
	idleDur, bulkDur := bnPhases(opt, b)
	// Every sender of the run stops when it returns, whatever happened.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	life := idleDur + bulkDur + bnDrain + 2*connectBudget
	spec := bnServerSpec(opt)
	ch, err := startMsgChild(v, spec, life)
	if err != nil {
		return rec, err
	}
	defer ch.stop()
	backend := ch.addr
	var qch *child
	if b.WithQUIC {
		q := variant{Spec: kindQUIC, Kind: kindQUIC}
		if qch, err = startMsgChild(q, spec, life); err != nil {
			return rec, err
		}
		defer qch.stop()
		mux, err := newBnMux(ch.addr, qch.addr)
		if err != nil {
			return rec, err
		}
		defer mux.close()
		backend = mux.addr()
	}
	px, err := netem.New(backend, netem.Config{
		Rate: b.RateBits / 8, QueueBytes: b.Queue, Loss: b.Loss, Delay: bnDelay,
		Seed: uint64(rep + 1), SocketBuffer: msgSocketBuffer,
	})
	if err != nil {
		return rec, err
	}
	defer px.Close()

	// The clients, one after the other (bnMux tells quic-go's by its
	// first datagram).
	var pcs []*bnPeerConn
	defer func() {
		for _, p := range pcs {
			p.c.close()
		}
	}()
	dialOne := func(peer string, dial func(context.Context, netip.AddrPort, func([]byte)) (bnConn, error)) error {
		t := newBnTracker()
		dctx, cancel := context.WithTimeout(ctx, connectBudget)
		defer cancel()
		c, err := dial(dctx, px.Addr(), t.on)
		if err != nil {
			return fmt.Errorf("connect %s through the bottleneck: %w", peer, err)
		}
		pc := &bnPeerConn{peer: peer, c: c, t: t}
		pcs = append(pcs, pc)
		p := make([]byte, bnRelSize)
		putHeader(p, tagEcho, pingSeq, len(pcs)-1, time.Now())
		for try := 0; ; try++ {
			if err := c.sendSmall(true, p); err != nil && try == 0 {
				return fmt.Errorf("ping %s: %w", peer, err)
			}
			select {
			case <-t.ping:
				return nil
			case <-time.After(time.Second):
			case <-dctx.Done():
				return fmt.Errorf("ping %s: %w", peer, dctx.Err())
			}
		}
	}
	for range b.Conns {
		if err := dialOne(v.Spec, bnDialerFor(v, spec)); err != nil {
			return rec, err
		}
	}
	if b.WithQUIC {
		if err := dialOne(kindQUIC, bnDialerFor(variant{Kind: kindQUIC}, spec)); err != nil {
			return rec, err
		}
	}

	// Count each client's bytes into the bottleneck toward the server,
	// told by port, from now on.
	byPort := map[uint16]*bnPeerConn{}
	for _, p := range pcs {
		byPort[p.c.port()] = p
	}
	px.Observe(func(f netem.Fate, b []byte) {
		if f.Dir == netem.ToServer && f.Copies > 0 {
			if p := byPort[f.Client.Port()]; p != nil {
				p.link.Add(uint64(f.Copies * len(b)))
			}
		}
	})

	m := &bnRecord{RateMbit: float64(b.RateBits) / 1e6, QueueKiB: b.Queue >> 10, LossPct: 100 * b.Loss,
		DelayMs: float64(bnDelay) / float64(time.Millisecond), IdleSec: idleDur.Seconds(), BulkSec: bulkDur.Seconds()}
	rec.Bn = m
	warm := bnWarm
	if len(pcs) > 1 {
		warm = bnFairWarm
	}
	warm = min(warm, bulkDur/2)
	m.WindowSec = warm.Seconds()

	idle0 := time.Now()
	t0 := idle0.Add(idleDur)
	tEnd := t0.Add(bulkDur)
	w0 := t0.Add(warm)
	for _, p := range pcs {
		p.r0 = p.c.resent()
	}
	// The small messages, for both phases.
	var smallWG sync.WaitGroup
	for i, p := range pcs {
		smallWG.Add(1)
		go func() {
			defer smallWG.Done()
			bnSmallLoop(ctx, p, i, idle0, tEnd)
		}()
	}
	smallDone := make(chan struct{})
	go func() { smallWG.Wait(); close(smallDone) }()

	// The bulk phase.
	if !sleepUntil(ctx, t0) {
		return rec, ctx.Err()
	}
	s0 := [2]netem.BottleneckStats{px.Bottleneck(netem.ToServer), px.Bottleneck(netem.ToClient)}
	bctx, bcancel := context.WithDeadline(ctx, tEnd)
	defer bcancel()
	var bulkWG sync.WaitGroup
	for i, p := range pcs {
		bulkWG.Add(1)
		go func() {
			defer bulkWG.Done()
			p.bulk = bnBulkLoop(bctx, p, i)
		}()
	}
	// The link, sampled toward the server.
	type linkSample struct {
		at    time.Time
		bytes uint64
	}
	samples := []linkSample{{time.Now(), s0[0].Bytes}}
	var atW0 uint64
	linkW0 := make([]uint64, len(pcs))
	tk := time.NewTicker(bnSample)
	for now := range tk.C {
		st := px.Bottleneck(netem.ToServer)
		samples = append(samples, linkSample{now, st.Bytes})
		if atW0 == 0 && !now.Before(w0) {
			atW0 = st.Bytes
			w0 = now
			for i, p := range pcs {
				linkW0[i] = p.link.Load()
			}
		}
		if !now.Before(tEnd) || ctx.Err() != nil {
			break
		}
	}
	tk.Stop()
	linkEnd := make([]uint64, len(pcs))
	for i, p := range pcs {
		linkEnd[i] = p.link.Load()
	}
	paths := make([]string, len(pcs))
	for i, p := range pcs {
		if u, ok := p.c.(*udpgateBn); ok {
			ps := u.path()
			paths[i] = fmt.Sprintf("rtt %v base %v queue %v window %d in flight %d pacing %.1f Mbit/s delivery %.1f Mbit/s slow start %v congestion events %d",
				ps.RTT.Round(time.Millisecond), ps.BaseRTT.Round(time.Millisecond), ps.QueueDelay.Round(time.Millisecond), ps.Window, ps.InFlight,
				float64(ps.PacingRate)*8/1e6, float64(ps.DeliveryRate)*8/1e6, ps.SlowStart, ps.CongestionEvents)
		}
	}
	bcancel()
	bulkWG.Wait()
	s1 := [2]netem.BottleneckStats{px.Bottleneck(netem.ToServer), px.Bottleneck(netem.ToClient)}
	tEnd = samples[len(samples)-1].at
	if ctx.Err() != nil {
		return rec, ctx.Err()
	}

	// The drain: the last echoes (and the small senders a blocking Write
	// held), up to bnDrain (a short run's: its bulk phase, at least 2 s).
	drainEnd := time.Now().Add(min(bnDrain, max(2*time.Second, bulkDur)))
	for time.Now().Before(drainEnd) && ctx.Err() == nil {
		select {
		case <-smallDone:
			left := 0
			for _, p := range pcs {
				left += p.t.pending()
			}
			if left == 0 {
				drainEnd = time.Now()
			}
		default:
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Figures.
	rate := b.rate()
	for d := range 2 {
		m.Offered[d] = s1[d].Offered - s0[d].Offered
		m.Dropped[d] = s1[d].Dropped - s0[d].Dropped
		if m.Offered[d] > 0 {
			m.DropPct[d] = 100 * float64(m.Dropped[d]) / float64(m.Offered[d])
		}
		m.MaxQueueMs[d] = 1000 * float64(s1[d].MaxQueue) / rate
	}
	if win := tEnd.Sub(w0).Seconds(); win > 0 && atW0 > 0 {
		m.LinkUsePct = 100 * float64(s1[0].Bytes-atW0) / win / rate
	}
	m.LinkReachS = -1
	for i, s := range samples {
		j := i
		for j > 0 && s.at.Sub(samples[j-1].at) <= bnReachSpan {
			j--
		}
		if span := s.at.Sub(samples[j].at).Seconds(); span >= bnReachSpan.Seconds()*0.9 &&
			float64(s.bytes-samples[j].bytes)/span >= bnReachShare*rate {
			m.LinkReachS = s.at.Sub(t0).Seconds()
			break
		}
	}
	var goodputs, links []float64
	for i, p := range pcs {
		c := bnConnFigures(p, t0, w0, tEnd, rate)
		c.Path = paths[i]
		if win := tEnd.Sub(w0).Seconds(); win > 0 && atW0 > 0 {
			c.LinkPct = 100 * float64(linkEnd[i]-linkW0[i]) / win / rate
		}
		m.Conns = append(m.Conns, c)
		if p.peer != kindQUIC || !b.WithQUIC {
			goodputs = append(goodputs, c.GoodputPct)
			links = append(links, c.LinkPct)
		}
	}
	if len(goodputs) > 1 {
		// Shares of the link's bytes, fine-grained, set the targets; the
		// goodput shares, counted in whole 1 MiB messages, are shown
		// beside them (a short window holds few messages per connection).
		var gshares, shares []float64
		m.TotalPct, gshares = sharesOf(goodputs)
		_, shares = sharesOf(links)
		for i := range shares {
			m.Conns[i].Share, m.Conns[i].GoodputShare = shares[i], gshares[i]
		}
		m.MinShare, m.MaxShare, m.Jain = slices.Min(shares), slices.Max(shares), jain(links)
		m.MinGoodputShare, m.MaxGoodputShare = slices.Min(gshares), slices.Max(gshares)
	}
	for _, p := range pcs {
		p.c.close()
	}
	pcs = nil
	<-smallDone
	if qch != nil {
		rec.ServerStats = "udpgate: " + ch.stop() + "; quic-go: " + qch.stop()
	} else {
		rec.ServerStats = ch.stop()
	}
	px.Close()
	for _, c := range m.Conns {
		if c.RelSent == 0 || c.IdleP50 == 0 {
			return rec, fmt.Errorf("%s: no small message echoed in the idle phase (%d sent; server: %s)", c.Peer, c.RelSent, rec.ServerStats)
		}
	}
	return rec, nil
}

// sharesOf returns xs' sum and each x ÷ their mean (0s when the sum is 0).
func sharesOf(xs []float64) (sum float64, shares []float64) {
	for _, x := range xs {
		sum += x
	}
	shares = make([]float64, len(xs))
	if sum > 0 {
		for i, x := range xs {
			shares[i] = x / (sum / float64(len(xs)))
		}
	}
	return sum, shares
}

// jain is Jain's fairness index of xs (1: all equal), 0 when all are 0.
func jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum, sq = sum+x, sq+x*x
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// bnConnFigures computes one connection's figures once the run is over.
func bnConnFigures(p *bnPeerConn, t0, w0, tEnd time.Time, rate float64) bnConnRecord {
	c := bnConnRecord{Peer: p.peer, Ended: p.c.ended(), SendErrors: p.errs.Load(), ReachS: -1}
	if p.bulk != nil && !errors.Is(p.bulk, context.DeadlineExceeded) && !errors.Is(p.bulk, context.Canceled) {
		c.BulkError = p.bulk.Error()
	}
	if r := p.c.resent(); r >= 0 && p.r0 >= 0 {
		c.Resent = r - p.r0
	}
	t := p.t
	t.mu.Lock()
	defer t.mu.Unlock()
	// Completions in the bulk phase: the cumulative curve through (t0, 0)
	// and (done[k], (k+1) MiB), linear between.
	var done []int64
	for _, d := range t.done {
		if d <= tEnd.UnixNano() {
			done = append(done, d)
		}
	}
	c.BulkDone = len(done)
	prev := t0.UnixNano()
	for _, d := range done {
		if span := float64(d-prev) / 1e9; span > 0 && bnBulkSize/span >= bnReachShare*rate {
			c.ReachS = float64(d-t0.UnixNano()) / 1e9
			break
		}
		prev = d
	}
	if g, ok := curveRate(t0.UnixNano(), done, bnBulkSize, w0.UnixNano(), tEnd.UnixNano()); ok {
		c.GoodputPct = 100 * g / rate
	}
	phase := func(s *bnSent, from, to int64) (rtts []float64, sent, lost uint64) {
		for i, at := range s.at {
			if at < from || at >= to {
				continue
			}
			sent++
			if s.rtt[i] < 0 {
				lost++
				continue
			}
			rtts = append(rtts, s.rtt[i])
		}
		return
	}
	var idle, bulk []float64
	for k, s := range []*bnSent{&t.rel, &t.seq} {
		ri, si, li := phase(s, 0, t0.UnixNano())
		rb, sb, lb := phase(s, t0.UnixNano(), math.MaxInt64)
		idle, bulk = append(idle, ri...), append(bulk, rb...)
		if k == 0 {
			c.RelSent, c.RelLost = si+sb, li+lb
		} else {
			c.SeqSent, c.SeqLost = si+sb, li+lb
		}
	}
	slices.Sort(idle)
	slices.Sort(bulk)
	c.IdleP50, c.IdleP99 = percentile(idle, 0.5), percentile(idle, 0.99)
	c.BulkP50, c.BulkP99 = percentile(bulk, 0.5), percentile(bulk, 0.99)
	return c
}

// curveRate is the slope, in bytes per second, of the cumulative delivery
// curve through (t0, 0) and (done[k], (k+1)·size) between a and b (Unix
// ns), b capped at the last completion; ok is false when no completion
// follows a.
func curveRate(t0 int64, done []int64, size int, a, b int64) (float64, bool) {
	if len(done) == 0 {
		return 0, false
	}
	b = min(b, done[len(done)-1])
	if b <= a {
		return 0, false
	}
	at := func(t int64) float64 {
		prev := t0
		for k, d := range done {
			if t <= d {
				if d == prev {
					return float64(k+1) * float64(size)
				}
				return (float64(k) + float64(t-prev)/float64(d-prev)) * float64(size)
			}
			prev = d
		}
		return float64(len(done)) * float64(size)
	}
	if a < t0 {
		a = t0
	}
	return (at(b) - at(a)) / (float64(b-a) / 1e9), true
}

// bnSmallLoop sends connection i's small messages from start until end:
// reliable and sequenced in turn, each kind bnSmallRate a second, each
// stamped with when it was due (a send that blocks delays the next ones,
// and their round trips count it).
func bnSmallLoop(ctx context.Context, p *bnPeerConn, i int, start, end time.Time) {
	rel := make([]byte, bnRelSize)
	sq := make([]byte, bnSeqSize)
	var nRel, nSeq uint32
	for k := 0; ; k++ {
		at := start.Add(time.Duration(k) * time.Second / (2 * bnSmallRate))
		if !at.Before(end) || !sleepUntil(ctx, at) {
			return
		}
		b, seq := rel, nRel
		if k%2 == 1 {
			b, seq = sq, nSeq|seqFlag
			nSeq++
		} else {
			nRel++
		}
		putHeader(b, tagEcho, seq, i, at)
		p.t.sent(seq, at)
		if p.c.sendSmall(k%2 == 0, b) != nil {
			p.errs.Add(1)
		}
	}
}

// bnBulkLoop keeps connection i's bulk flow fed until ctx ends.
func bnBulkLoop(ctx context.Context, p *bnPeerConn, i int) error {
	big := make([]byte, bnBulkSize)
	for k := range big {
		big[k] = byte(k)
	}
	for k := uint32(0); ; k++ {
		putHeader(big, tagBulk, k, i, time.Now())
		binary.LittleEndian.PutUint32(big[offTotal:], bnBulkSize)
		if err := p.c.sendBulk(ctx, big, p.t.progress); err != nil {
			return err
		}
	}
}

// sleepUntil waits until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func logBn(w io.Writer, r *runRecord) {
	m := r.Bn
	fmt.Fprintf(w, "rep %d %-11s %-16s %.0f Mbit/s queue %d KiB loss %.0f%%: drops %.2f%% / %.2f%%, max queue %.0f / %.0f ms, link use %.0f%% (85%% after %s s)",
		r.Rep, r.Scenario, r.Variant, m.RateMbit, m.QueueKiB, m.LossPct, m.DropPct[0], m.DropPct[1], m.MaxQueueMs[0], m.MaxQueueMs[1], m.LinkUsePct, reachText(m.LinkReachS))
	if m.TotalPct > 0 {
		fmt.Fprintf(w, ", total goodput %.0f%%, link shares %.2f–%.2f (Jain %.3f), goodput shares %.2f–%.2f",
			m.TotalPct, m.MinShare, m.MaxShare, m.Jain, m.MinGoodputShare, m.MaxGoodputShare)
	}
	fmt.Fprintln(w)
	for _, c := range m.Conns {
		fmt.Fprintf(w, "    %-8s goodput %5.1f%% (%d MiB, 85%% after %s s), link %.1f%%  small idle p50 %.1f p99 %.1f ms, bulk p50 %.1f p99 %.1f ms  lost %d/%d rel %d/%d seq  resent %d",
			c.Peer, c.GoodputPct, c.BulkDone, reachText(c.ReachS), c.LinkPct, c.IdleP50, c.IdleP99, c.BulkP50, c.BulkP99, c.RelLost, c.RelSent, c.SeqLost, c.SeqSent, c.Resent)
		if c.Share > 0 {
			fmt.Fprintf(w, "  share %.2f", c.Share)
		}
		if c.Ended != "" {
			fmt.Fprintf(w, "  ENDED: %s", c.Ended)
		}
		if c.BulkError != "" {
			fmt.Fprintf(w, "  bulk: %s", c.BulkError)
		}
		if c.Path != "" {
			fmt.Fprintf(w, "\n             path at the end: %s", c.Path)
		}
		fmt.Fprintln(w)
	}
}

// bnCell summarises one variant under one bottleneck scenario: medians
// over repetitions (lost and ended: the worst run).
type bnCell struct {
	Scenario   string       `json:"scenario"`
	Variant    string       `json:"variant"`
	Runs       int          `json:"runs"`
	RateMbit   float64      `json:"rate_mbit"`
	QueueKiB   int          `json:"queue_kib"`
	LossPct    float64      `json:"loss_pct_each_way"`
	Conns      int          `json:"conns"`
	DropPct    [2]float64   `json:"drop_pct"`
	MaxQueueMs [2]float64   `json:"max_queue_ms"`
	LinkUsePct float64      `json:"link_use_pct"`
	LinkReachS float64      `json:"link_reach_s"`
	TotalPct   float64      `json:"total_goodput_pct,omitempty"`
	MinShare   float64      `json:"min_share,omitempty"`
	MaxShare   float64      `json:"max_share,omitempty"`
	Jain       float64      `json:"jain,omitempty"`
	MinGShare  float64      `json:"min_goodput_share,omitempty"`
	MaxGShare  float64      `json:"max_goodput_share,omitempty"`
	Peers      []bnPeerCell `json:"peers"`
	Ended      int          `json:"runs_with_an_ended_connection"`
}

// bnPeerCell is one peer's figures in a cell: medians over its
// connections and repetitions, the worst for p99 and lost.
type bnPeerCell struct {
	Peer       string  `json:"peer"`
	GoodputPct float64 `json:"goodput_pct"`
	LinkPct    float64 `json:"link_pct"`
	ReachS     float64 `json:"reach_s"` // median; -1: never in most runs
	IdleP50    float64 `json:"idle_p50_ms"`
	IdleP99    float64 `json:"idle_p99_ms"`
	BulkP50    float64 `json:"bulk_p50_ms"`
	BulkP99    float64 `json:"bulk_p99_ms"`
	// P99Rise: the worst connection's bulk p99 − its idle p99 (median
	// over repetitions).
	P99Rise float64 `json:"p99_rise_ms"`
	RelLost uint64  `json:"reliable_lost"`
	SeqLost uint64  `json:"sequenced_lost"`
	SeqSent uint64  `json:"sequenced_sent"`
	Resent  float64 `json:"resent"`
}

func summariseBn(sc scenario, rs []runRecord) bnCell {
	b := sc.bn()
	c := bnCell{Scenario: sc.Name, Variant: rs[0].Variant, Runs: len(rs), RateMbit: float64(b.RateBits) / 1e6,
		QueueKiB: b.Queue >> 10, LossPct: 100 * b.Loss, Conns: b.Conns}
	f := map[string][]float64{}
	add := func(k string, x float64) { f[k] = append(f[k], x) }
	g := func(k string) float64 { return procstat.Median(f[k]) }
	type peerAcc struct {
		cell              bnPeerCell
		good, reach, rise []float64
		link              []float64
		i50, i99, b50     []float64
		b99, resent       []float64
	}
	var peers []*peerAcc
	byPeer := map[string]*peerAcc{}
	for _, r := range rs {
		m := r.Bn
		if m == nil {
			continue
		}
		for d := range 2 {
			add(fmt.Sprint("drop", d), m.DropPct[d])
			add(fmt.Sprint("queue", d), m.MaxQueueMs[d])
		}
		add("use", m.LinkUsePct)
		add("reach", reachKey(m.LinkReachS))
		add("total", m.TotalPct)
		add("min", m.MinShare)
		add("max", m.MaxShare)
		add("jain", m.Jain)
		add("gmin", m.MinGoodputShare)
		add("gmax", m.MaxGoodputShare)
		ended := false
		rise := map[string]float64{}
		for _, cr := range m.Conns {
			pa := byPeer[cr.Peer]
			if pa == nil {
				pa = &peerAcc{cell: bnPeerCell{Peer: cr.Peer}}
				byPeer[cr.Peer] = pa
				peers = append(peers, pa)
			}
			pa.good = append(pa.good, cr.GoodputPct)
			pa.link = append(pa.link, cr.LinkPct)
			pa.reach = append(pa.reach, reachKey(cr.ReachS))
			pa.i50, pa.i99 = append(pa.i50, cr.IdleP50), append(pa.i99, cr.IdleP99)
			pa.b50, pa.b99 = append(pa.b50, cr.BulkP50), append(pa.b99, cr.BulkP99)
			pa.resent = append(pa.resent, float64(cr.Resent))
			pa.cell.RelLost = max(pa.cell.RelLost, cr.RelLost)
			pa.cell.SeqLost = max(pa.cell.SeqLost, cr.SeqLost)
			pa.cell.SeqSent = max(pa.cell.SeqSent, cr.SeqSent)
			if x, ok := rise[cr.Peer]; !ok || cr.BulkP99-cr.IdleP99 > x {
				rise[cr.Peer] = cr.BulkP99 - cr.IdleP99
			}
			ended = ended || cr.Ended != ""
		}
		for p, x := range rise {
			byPeer[p].rise = append(byPeer[p].rise, x)
		}
		if ended {
			c.Ended++
		}
	}
	c.DropPct = [2]float64{g("drop0"), g("drop1")}
	c.MaxQueueMs = [2]float64{g("queue0"), g("queue1")}
	c.LinkUsePct, c.LinkReachS = g("use"), unreach(g("reach"))
	c.TotalPct, c.MinShare, c.MaxShare, c.Jain = g("total"), g("min"), g("max"), g("jain")
	c.MinGShare, c.MaxGShare = g("gmin"), g("gmax")
	for _, pa := range peers {
		p := pa.cell
		p.GoodputPct, p.ReachS = procstat.Median(pa.good), unreach(procstat.Median(pa.reach))
		p.LinkPct = procstat.Median(pa.link)
		p.IdleP50, p.IdleP99 = procstat.Median(pa.i50), procstat.Median(pa.i99)
		p.BulkP50, p.BulkP99 = procstat.Median(pa.b50), slices.Max(pa.b99)
		p.P99Rise, p.Resent = procstat.Median(pa.rise), procstat.Median(pa.resent)
		c.Peers = append(c.Peers, p)
	}
	return c
}

// reachKey turns "never" (-1) into +Inf for medians; unreach turns it
// back.
func reachKey(s float64) float64 {
	if s < 0 {
		return math.Inf(1)
	}
	return s
}

func unreach(s float64) float64 {
	if math.IsInf(s, 1) {
		return -1
	}
	return s
}

func (c bnCell) link() string {
	s := fmt.Sprintf("%g Mbit/s, %d KiB", c.RateMbit, c.QueueKiB)
	if c.LossPct > 0 {
		s += fmt.Sprintf(", %.0f %% loss", c.LossPct)
	}
	return s
}

func (c bnCell) peer(name string) *bnPeerCell {
	for i := range c.Peers {
		if c.Peers[i].Peer == name {
			return &c.Peers[i]
		}
	}
	return nil
}

func reachText(s float64) string {
	if s < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f", s)
}

func endedText(n int) string {
	if n == 0 {
		return "no"
	}
	return fmt.Sprintf("**%d run(s)**", n)
}

func writeBns(w io.Writer, cells []bnCell, opt *options) {
	var one, fair, quic []bnCell
	for _, c := range cells {
		switch sc, _ := parseScenario(c.Scenario); {
		case sc.bn().WithQUIC:
			quic = append(quic, c)
		case c.Conns > 1:
			fair = append(fair, c)
		default:
			one = append(one, c)
		}
	}
	rate := "the library's default"
	if opt.BnSendRate > 0 {
		rate = fmt.Sprintf("%d B/s", opt.BnSendRate)
	}
	fmt.Fprintf(w, "\n## Through a bottleneck: udpgate vs quic-go %s vs kcp-go %s\n\n", quicVersion(), kcpVersion())
	fmt.Fprintf(w, "internal/testkit/netem's bottleneck on loopback: the link's rate each way (UDP payload bytes), a drop-tail queue, "+
		"random loss (bn-loss) before it, %v delay each way after it. Every connection carries 1 MiB reliable messages back to back "+
		"(the server answers each complete one with a short message stamped with its clock) and %d reliable %d-byte plus %d sequenced %d-byte "+
		"messages a second, echoed; first the small messages alone (idle), then both (bulk phase), then up to %v for the last echoes. "+
		"udpgate: the tools' channels (reliable 0, sequenced 2, bulk 3 declared Bulk, answers on 0), MaxMessageSize 1 MiB, SendRate %s, "+
		"the library's timers. quic-go: its defaults (NewReno, pacing), a bulk stream and a small stream (length-prefixed messages), TLS 1.3 "+
		"with a self-signed certificate. kcp-go: one session for both (the small messages queue behind the bulk); kcp = SetNoDelay(1, 10, 2, 1), "+
		"kcp/cc = SetNoDelay(0, 40, 0, 0) (congestion window on), both with 1024-segment windows, message mode.\n\n"+
		"*Goodput*: the bulk messages' bytes the server completed per second, linear between completions, from %v after the bulk phase's start "+
		"(%v with several connections) to its end, ÷ the link's rate (headers are not goodput: 100 %% is out of reach). *85 %% after*: "+
		"from the bulk phase's start until a 1 MiB message first arrived at ≥ 85 %% of the link's rate. *Drops*: the full queue's, ÷ the "+
		"datagrams offered to it, over the bulk phase, toward the server / toward the client. *Max queue*: the run's largest, in "+
		"milliseconds of the link. *Link use*: every byte forwarded toward the server in the window ÷ the rate (its 85 %% after: over %v). "+
		"*Small RTT*: from when a small message was due to its echo, both kinds; *lost*: never echoed (reliable / sequenced; a sequenced "+
		"message may be dropped on purpose when a newer one is there first). Medians over repetitions; p99 during bulk and lost: the worst.\n",
		bnDelay, bnSmallRate, bnRelSize, bnSmallRate, bnSeqSize, bnDrain, rate, bnWarm, bnFairWarm, bnReachSpan)
	if len(one) > 0 {
		fmt.Fprintln(w, "\n### One connection (bn-N, bn-loss)")
		fmt.Fprintln(w, "\n| scenario | link | server | goodput % of link | 85 % after s | link use % (85 % after s) | drops → server / → client % | max queue ms | small RTT idle p50 / p99 ms | during bulk p50 / p99 ms | lost reliable / sequenced | resent | ended |")
		fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
		for _, c := range one {
			for _, p := range c.Peers {
				fmt.Fprintf(w, "| %s | %s | %s | %.1f | %s | %.1f (%s) | %.2f / %.2f | %.0f / %.0f | %.1f / %.1f | %.1f / %.1f | %d / %d | %.0f | %s |\n",
					c.Scenario, c.link(), c.Variant, p.GoodputPct, reachText(p.ReachS), c.LinkUsePct, reachText(c.LinkReachS),
					c.DropPct[0], c.DropPct[1], c.MaxQueueMs[0], c.MaxQueueMs[1], p.IdleP50, p.IdleP99, p.BulkP50, p.BulkP99,
					p.RelLost, p.SeqLost, p.Resent, endedText(c.Ended))
			}
		}
	}
	if len(fair) > 0 {
		fmt.Fprintf(w, "\n### Several udpgate connections through one bottleneck (bn-fair-N)\n\n"+
			"From %v after the bulk phase's start. *Link share*: a connection's bytes the bottleneck took toward the server ÷ the "+
			"connections' mean (fine-grained; resends included), with Jain's index of them: the targets use it. *Goodput share*: the same of "+
			"goodputs, counted in whole 1 MiB messages, so coarse when a connection completes few in the window (bn-fair-10: about 2 "+
			"Mbit/s each, a message every 4 s).\n\n", bnFairWarm)
		fmt.Fprintln(w, "| scenario | link | server | conns | goodput together % of link | link share min / max | Jain | goodput share min / max | drops → server / → client % | max queue ms | small RTT idle p99 ms | during bulk p50 / p99 ms (worst) | lost reliable / sequenced | ended |")
		fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
		for _, c := range fair {
			p := c.peer(c.Variant)
			if p == nil {
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %s | %d | %.1f | %.2f / %.2f | %.3f | %.2f / %.2f | %.2f / %.2f | %.0f / %.0f | %.1f | %.1f / %.1f | %d / %d | %s |\n",
				c.Scenario, c.link(), c.Variant, c.Conns, c.TotalPct, c.MinShare, c.MaxShare, c.Jain, c.MinGShare, c.MaxGShare, c.DropPct[0], c.DropPct[1],
				c.MaxQueueMs[0], c.MaxQueueMs[1], p.IdleP99, p.BulkP50, p.BulkP99, p.RelLost, p.SeqLost, endedText(c.Ended))
		}
	}
	if len(quic) > 0 {
		fmt.Fprintf(w, "\n### udpgate beside quic-go through one bottleneck (bn-vs-quic)\n\n"+
			"Both connections start their bulk flows together; goodputs from %v after the start.\n\n", bnFairWarm)
		fmt.Fprintln(w, "| scenario | link | server | goodput % of link: udpgate / quic-go | bytes into the link, %: udpgate / quic-go | udpgate ÷ both (goodput) | drops → server / → client % | max queue ms | udpgate small RTT p99 idle / bulk ms | quic-go small RTT p99 idle / bulk ms | lost reliable / sequenced (udpgate) | ended |")
		fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
		for _, c := range quic {
			u, q := c.peer(c.Variant), c.peer(kindQUIC)
			if u == nil || q == nil {
				continue
			}
			both := 0.0
			if u.GoodputPct+q.GoodputPct > 0 {
				both = u.GoodputPct / (u.GoodputPct + q.GoodputPct)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %.1f / %.1f | %.1f / %.1f | %.2f | %.2f / %.2f | %.0f / %.0f | %.1f / %.1f | %.1f / %.1f | %d / %d | %s |\n",
				c.Scenario, c.link(), c.Variant, u.GoodputPct, q.GoodputPct, u.LinkPct, q.LinkPct, both, c.DropPct[0], c.DropPct[1],
				c.MaxQueueMs[0], c.MaxQueueMs[1], u.IdleP99, u.BulkP99, q.IdleP99, q.BulkP99, u.RelLost, u.SeqLost, endedText(c.Ended))
		}
	}
}

// bnTargets: udpgate's goals through a bottleneck.
func bnTargets(c bnCell) []target {
	sc, err := parseScenario(c.Scenario)
	if err != nil {
		return nil
	}
	b := sc.bn()
	u := c.peer(c.Variant)
	if u == nil {
		return nil
	}
	name := func(s string) string { return c.Scenario + " (" + c.Variant + "): " + s }
	var ts []target
	drops := max(c.DropPct[0], c.DropPct[1])
	common := func() {
		ts = append(ts,
			target{Name: name("bottleneck drops, % of datagrams offered (worse direction)"), Goal: "≤ 2", Got: drops, Met: drops <= 2},
			target{Name: name("small messages' p99 during bulk − idle p99, ms"), Goal: "≤ 30", Got: u.P99Rise, Met: u.P99Rise <= 30},
			target{Name: name("reliable small messages lost (worst run)"), Goal: "0", Got: float64(u.RelLost), Met: u.RelLost == 0},
			target{Name: name("runs in which a connection ended"), Goal: "0", Got: float64(c.Ended), Met: c.Ended == 0},
		)
	}
	switch {
	case b.WithQUIC:
		ts = append(ts, target{Name: name("goodput beside quic-go, % of link"), Goal: "30–70", Got: u.GoodputPct, Met: u.GoodputPct >= 30 && u.GoodputPct <= 70})
		common()
	case b.Conns > 1:
		ts = append(ts,
			target{Name: name("lowest link share ÷ equal share"), Goal: "≥ 0.75", Got: c.MinShare, Met: c.MinShare >= 0.75},
			target{Name: name("highest link share ÷ equal share"), Goal: "≤ 1.33", Got: c.MaxShare, Met: c.MaxShare <= 1.33},
			target{Name: name("goodput together, % of link"), Goal: "≥ 85", Got: c.TotalPct, Met: c.TotalPct >= 85},
		)
		common()
	case b.Loss > 0:
		ts = append(ts, target{Name: name(fmt.Sprintf("bulk goodput with %.0f %% random loss, %% of link", 100*b.Loss)), Goal: "≥ 70", Got: u.GoodputPct, Met: u.GoodputPct >= 70})
		common()
	default:
		ts = append(ts, target{Name: name("bulk goodput, % of link"), Goal: "≥ 85", Got: u.GoodputPct, Met: u.GoodputPct >= 85})
		common()
	}
	return ts
}
