package loadgen

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Run phases, read by the workers once per loop iteration.
const (
	phaseIdle int32 = iota
	phaseWarm
	phaseMeasure
	phaseStop
)

// Generator is a set of load sockets and the simulated clients on them. Its
// phases (Connect, Run, Disconnect) run one at a time; Counters may be read
// from any goroutine at any time.
type Generator struct {
	cfg     Config
	epoch   time.Time
	src     sourceRange
	workers []*worker
	tokens  *tokenSource // sealed mode

	phase     atomic.Int32
	stop      atomic.Bool // the current phase must end now
	mu        sync.Mutex  // one phase at a time
	connected time.Time   // end of the last Connect
	closed    bool
}

// New opens the load sockets. Nothing is sent until a phase runs.
func New(cfg Config) (*Generator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &Generator{cfg: cfg, epoch: time.Now()}
	g.src = newSourceRange(cfg.FirstSource, cfg.SourcesUsed())
	if cfg.sealed() {
		if g.tokens, err = newTokenSource(&cfg); err != nil {
			return nil, fmt.Errorf("loadgen: making connect tokens: %w", err)
		}
	}
	// The receive timeout is the worker's tick: how late it may notice a
	// phase change or a due send. Paced sends need a fine tick; closed
	// loop is driven by answers and only needs the tick after losses.
	tick := 10 * time.Millisecond
	if cfg.Rate > 0 || cfg.messages() {
		tick = time.Millisecond
	}
	for i := range cfg.Sockets {
		s, err := openSock(cfg.RecvBuffer, cfg.SendBuffer, tick)
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("loadgen: socket %d of %d: %w", i+1, cfg.Sockets, err)
		}
		g.workers = append(g.workers, newWorker(g, i, s))
	}
	return g, nil
}

// Config returns the configuration with its defaults filled in.
func (g *Generator) Config() Config { return g.cfg }

// now is the generator's monotonic clock in nanoseconds.
func (g *Generator) now() int64 { return int64(time.Since(g.epoch)) }

func (g *Generator) stopped() bool { return g.stop.Load() }

// Ports returns the local UDP port of each load socket (bound to 0.0.0.0),
// so a caller can find them in /proc/net/udp, e.g. to count what the
// kernel dropped at the generator's own sockets.
func (g *Generator) Ports() []uint16 {
	ps := make([]uint16, len(g.workers))
	for i, w := range g.workers {
		ps[i] = w.s.port
	}
	return ps
}

// Counters returns the cumulative counters. Safe at any time.
func (g *Generator) Counters() Counters {
	var sum [nCounters]uint64
	for _, w := range g.workers {
		for i := range sum {
			sum[i] += w.ctr.pub[i].Load()
		}
	}
	return countersFrom(&sum)
}

// Connected returns the number of clients connected now.
func (g *Generator) Connected() int {
	n := 0
	for _, w := range g.workers {
		for _, s := range w.state {
			if s == stConnected {
				n++
			}
		}
	}
	return n
}

// begin starts a phase: it takes the phase lock and arranges for ctx's end
// to stop the workers.
func (g *Generator) begin(ctx context.Context) (end func(), err error) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, errors.New("loadgen: generator is closed")
	}
	g.stop.Store(false)
	stopAfter := context.AfterFunc(ctx, func() { g.stop.Store(true) })
	return func() {
		stopAfter()
		g.phase.Store(phaseIdle)
		g.mu.Unlock()
	}, nil
}

// each runs fn on every worker, one goroutine each, and waits.
func (g *Generator) each(fn func(w *worker)) error {
	var wg sync.WaitGroup
	for _, w := range g.workers {
		wg.Go(func() { fn(w) })
	}
	wg.Wait()
	var errs []error
	for _, w := range g.workers {
		if w.err != nil {
			errs = append(errs, fmt.Errorf("socket %d: %w", w.idx, w.err))
			w.err = nil
		}
	}
	return errors.Join(errs...)
}

// ConnectResult describes a Connect or a Storm.
type ConnectResult struct {
	Clients   int // clients that were not yet connected
	Connected int
	Failed    int
	// Failed by cause (they sum to Failed): Denied by reason (server
	// full, refused by the application, any other reason), timed out (no
	// progress within ConnectTimeout, or unfinished when the phase ended),
	// wrong version (the server sent VersionUpgrade) and wrong layout (it
	// sent LayoutMismatch: its message layout differs, docs/protocol.md
	// §3.7).
	DeniedFull    int
	DeniedRefused int
	DeniedOther   int
	TimedOut      int
	WrongVersion  int
	WrongLayout   int
	// Sealed mode: tokens the server refused, by reason (token expired,
	// invalid, this server not in the token, in use from another address,
	// server full); also part of Failed.
	RefusedExpired int
	RefusedInvalid int
	RefusedForeign int
	RefusedInUse   int
	RefusedFull    int
	// Resent: connected clients that had to resend an Initial or a
	// Response (something was lost, or slower than the first resend gap:
	// 100 ms, or 3 round trips).
	Resent int
	// Elapsed: the whole phase, waiting for the last failure included.
	// AllIn: from the phase's first Initial to its last Ack (sealed: to
	// the server's first sealed packet, which proves the last token).
	Elapsed time.Duration
	AllIn   time.Duration
	// Latency: from a client's first Initial to its Ack, resends included.
	// SinceStart: from the phase's first Initial to each client's Ack; in
	// a Storm, where every client starts at once, this is each client's
	// time to connect.
	Latency    Quantiles
	SinceStart Quantiles
	// Packets: handshake datagrams sent (Initials, Responses and, sealed,
	// proofs; resends included). Proofs: the proofs among them.
	Packets uint64
	Proofs  uint64
}

// PerSecond is the handshake rate: clients connected ÷ AllIn.
func (r *ConnectResult) PerSecond() float64 { return perSecond(uint64(r.Connected), r.AllIn) }

// perSecond is n ÷ d in seconds, 0 for no time.
func perSecond(n uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Connect runs the handshake (Initial, Challenge, Response, Ack) for every
// client not connected yet, at most Window per socket at a time, as
// handshake.ClientHandshake does it: resends backing off from 100 ms to
// ResendInterval (docs/protocol.md §6.2), failure after ConnectTimeout
// without progress. In sealed mode a client proves its token in place of
// the Response (a proof right after the Challenge, again every
// ResendInterval) and is connected when the server's first sealed packet
// opens; it fails on a refusal or after ConnectTimeout from its Challenge. It
// returns when every client has connected or failed, when ctx ends, or
// after MaxPhase. Only ModeResponse and ModeData use connections.
func (g *Generator) Connect(ctx context.Context) (ConnectResult, error) {
	return g.connect(ctx, false)
}

// Storm is Connect with every client starting at once, as when a match
// starts or a server comes back: open loop, each socket sends its clients'
// Initials back to back in batches (reading replies between batches, so the
// generator does not drop them), and each client then follows the protocol
// (Response on Challenge, resends backing off to ResendInterval) until it is
// connected or fails.
func (g *Generator) Storm(ctx context.Context) (ConnectResult, error) {
	return g.connect(ctx, true)
}

func (g *Generator) connect(ctx context.Context, open bool) (ConnectResult, error) {
	var res ConnectResult
	if !g.cfg.Mode.NeedsConnect() {
		return res, fmt.Errorf("loadgen: mode %v needs no connections", g.cfg.Mode)
	}
	end, err := g.begin(ctx)
	if err != nil {
		return res, err
	}
	defer end()
	before := g.Counters()
	for _, w := range g.workers {
		w.hist.Reset()
		w.since.Reset()
		w.lastAck = 0
	}
	start := g.now()
	deadline := start + int64(MaxPhase)
	err = g.each(func(w *worker) { w.connect(start, deadline, open) })
	res.Elapsed = time.Duration(g.now() - start)
	g.connected = time.Now()
	var h, since Histogram
	lastAck := start
	for _, w := range g.workers {
		h.Merge(&w.hist)
		since.Merge(&w.since)
		lastAck = max(lastAck, w.lastAck)
	}
	d := g.Counters().Sub(before)
	res.Clients = int(d.HandshakesStarted)
	res.Connected = int(d.Handshakes)
	res.Failed = int(d.HandshakeFailures)
	res.DeniedFull, res.DeniedRefused, res.DeniedOther = int(d.DeniedFull), int(d.DeniedRefused), int(d.DeniedOther)
	res.TimedOut, res.WrongVersion, res.Resent = int(d.TimedOut), int(d.WrongVersion), int(d.Resent)
	res.WrongLayout = int(d.WrongLayout)
	res.AllIn = time.Duration(lastAck - start)
	res.Latency = h.Summary()
	res.SinceStart = since.Summary()
	res.Packets = d.HandshakePackets
	res.Proofs = d.Proofs
	res.RefusedExpired, res.RefusedInvalid, res.RefusedForeign = int(d.RefusedExpired), int(d.RefusedInvalid), int(d.RefusedForeign)
	res.RefusedInUse, res.RefusedFull = int(d.RefusedInUse), int(d.RefusedFull)
	if err == nil && res.Connected == 0 && res.WrongLayout > 0 {
		err = fmt.Errorf("loadgen: no client connected to %v: the server's message layout differs from the clients' (docs/protocol.md §3.7): give both the same -message-max-size", g.cfg.Server)
	}
	if err == nil && res.Connected == 0 && res.Clients > 0 {
		err = fmt.Errorf("loadgen: no client connected to %v (is the server running, with the same magic header and network version?)", g.cfg.Server)
	}
	return res, err
}

// RunSpec shapes a Run: a warm-up, then a measuring window.
type RunSpec struct {
	Warmup time.Duration
	Window time.Duration
	// Mark, if not nil, is called at the start (end false) and at the end
	// (end true) of the window, right before the counters are sampled: the
	// benchmark harness samples the server's CPU time there.
	Mark func(end bool)
	// Until, if not nil, stops the run early, as ending its ctx would,
	// once it accepts the counters (cumulative since New), which Run
	// shows it at its start and at each publish of changed counters (as
	// Await does, so no other Await may run beside it); RunResult.Stopped
	// then says so.
	Until func(*Counters) bool
}

// RunResult describes a Run.
type RunResult struct {
	// Elapsed is the measured window's length (shorter than asked if ctx
	// ended it).
	Elapsed time.Duration
	// Window counts what happened inside the window; Total the whole Run,
	// warm-up and drain included.
	Window Counters
	Total  Counters
	// Latency: request to answer, for answers inside the window.
	Latency Quantiles
	// Unanswered: requests still outstanding at the end of the drain.
	Unanswered int
	// Stopped: RunSpec.Until stopped the run.
	Stopped bool
	// Ran is the whole Run's length: warm-up, window and drain, from the
	// first send to the last worker's end.
	Ran time.Duration

	// Messages (Config.Messages; the counts are in Window and Total):
	// MessageLatency is each echoed message's round trip from its first
	// send, over the whole Run (the drain included); MessagesUnanswered:
	// messages of clients still connected with no echo at the end of the
	// drain; MessagesResent: message entries the clients' endpoints sent
	// again after a loss or a timeout (message.Stats.Resent), and
	// MessagesCopies those they sent again speculatively, riding on
	// packets that left anyway (message.Stats.Copies).
	MessageLatency     Quantiles
	MessagesUnanswered int
	MessagesResent     uint64
	MessagesCopies     uint64

	// Bulk messages (Config.BulkSize; the counts are in Window and Total,
	// Bulk*), as the messages above: BulkLatency, each echo's round trip
	// from the first send to its last byte in, over the whole Run;
	// BulkUnanswered, bulk messages of clients still connected with no
	// echo at the end of the drain. MessagesResent and MessagesCopies
	// count the bulk channel's entries too.
	BulkLatency    Quantiles
	BulkUnanswered int
	// BulkPerClient: the fewest, median and most bulk messages one
	// client had echoed over the whole Run (each message once), over every
	// client: how evenly a server shares its sending between them (an
	// egress budget's fairness).
	BulkPerClient [3]uint64
}

// PerSecond is the answer rate inside the window.
func (r *RunResult) PerSecond() float64 { return perSecond(r.Window.Replies, r.Elapsed) }

// BulkGoodput is the bulk payload echoed in the whole Run, drain
// included, in bytes per second of it (Ran): what came back whole,
// resends and headers not counted. Over the Run rather than the window:
// a bulk echo may take longer than a short window, and the drain is
// where the last ones come back.
func (r *RunResult) BulkGoodput() float64 { return perSecond(r.Total.BulkBytes, r.Ran) }

// responseLifetime bounds how long after Connect a ModeResponse run may
// end: a cookie outlives at least one secret rotation (15 s), not two.
const responseLifetime = 15 * time.Second

// Run sends requests for Warmup + Window and measures the window: answers,
// losses and latency. It stops by itself at the end of the window, after
// MaxPackets requests, or when ctx ends; then it waits up to LossTimeout
// for answers still in flight.
func (g *Generator) Run(ctx context.Context, spec RunSpec) (RunResult, error) {
	var res RunResult
	if spec.Warmup < 0 || spec.Window <= 0 || spec.Warmup+spec.Window > MaxPhase {
		return res, fmt.Errorf("loadgen: warm-up %v and window %v: the window must be positive and both together at most %v",
			spec.Warmup, spec.Window, MaxPhase)
	}
	if g.cfg.Mode.NeedsConnect() {
		if g.Connected() == 0 {
			return res, fmt.Errorf("loadgen: mode %v runs on connected clients: Connect first", g.cfg.Mode)
		}
		if g.cfg.Mode == ModeResponse && time.Since(g.connected)+spec.Warmup+spec.Window > responseLifetime {
			return res, fmt.Errorf("loadgen: mode response must end within %v of Connect (cookies expire after the server's second secret rotation)", responseLifetime)
		}
	}
	end, err := g.begin(ctx)
	if err != nil {
		return res, err
	}
	defer end()
	// RunSpec.Until: Await shows it the counters; once it accepts them the
	// workers stop as at ctx's end, and met wakes the coordinator.
	var met chan struct{}
	stopUntil := func() bool { return false }
	if spec.Until != nil {
		wctx, cancel := context.WithCancel(ctx)
		met = make(chan struct{})
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			if g.Await(wctx, spec.Until) {
				g.stop.Store(true)
				close(met)
			}
		}()
		stopUntil = func() bool {
			cancel()
			<-watched
			select {
			case <-met:
				return true
			default:
				return false
			}
		}
		defer stopUntil() // before end: no stop is stored after the phase
	}
	for _, w := range g.workers {
		w.hist.Reset()
	}
	budget := ^uint64(0)
	if g.cfg.MaxPackets > 0 {
		budget = (g.cfg.MaxPackets + uint64(len(g.workers)) - 1) / uint64(len(g.workers))
	}
	first := g.Counters()
	g.phase.Store(phaseWarm)
	done := make(chan error, 1)
	start := g.now()
	go func() { done <- g.each(func(w *worker) { w.run(budget) }) }()

	// The coordinator: sleep through the warm-up, mark and sample, sleep
	// through the window, mark and sample, stop.
	var werr error
	finished := false
	var doneAt int64 // when the workers finished
	sleep := func(d time.Duration) {
		if finished {
			return
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		case <-met:
		case werr = <-done:
			finished, doneAt = true, g.now()
		}
	}
	sleep(spec.Warmup)
	if spec.Mark != nil {
		spec.Mark(false)
	}
	c0, t0 := g.Counters(), g.now()
	g.phase.Store(phaseMeasure)
	sleep(spec.Window)
	if spec.Mark != nil {
		spec.Mark(true)
	}
	c1, t1 := g.Counters(), g.now()
	g.phase.Store(phaseStop)
	if !finished {
		werr = <-done
		doneAt = g.now()
	}
	res.Stopped = stopUntil()
	res.Elapsed = time.Duration(t1 - t0)
	res.Ran = time.Duration(doneAt - start)
	res.Window = c1.Sub(c0)
	res.Total = g.Counters().Sub(first)
	var h, mh, bh Histogram
	var perClient []uint64
	for _, w := range g.workers {
		h.Merge(&w.hist)
		res.Unanswered += w.unanswered
		if m := w.msg; m != nil {
			if m.small != nil {
				mh.Merge(&m.small.hist)
				res.MessagesUnanswered += int(m.small.unanswered)
			}
			if m.bulk != nil {
				bh.Merge(&m.bulk.hist)
				res.BulkUnanswered += int(m.bulk.unanswered)
				perClient = append(perClient, m.bulk.got[:w.n]...)
			}
			res.MessagesResent += m.resent
			res.MessagesCopies += m.copies
		}
	}
	res.Latency = h.Summary()
	res.MessageLatency = mh.Summary()
	res.BulkLatency = bh.Summary()
	if len(perClient) > 0 {
		slices.Sort(perClient)
		res.BulkPerClient = [3]uint64{perClient[0], perClient[len(perClient)/2], perClient[len(perClient)-1]}
	}
	return res, werr
}

// Disconnect sends copies Disconnect packets (docs/protocol.md §7 says 5) from
// every connected client, at most perSecond datagrams a second in all (0:
// 200 000), and forgets the connections. It returns the packets sent. Only
// ModeData keeps the sequence state a Disconnect needs; in other modes it
// does nothing.
func (g *Generator) Disconnect(ctx context.Context, copies int, perSecond float64) (int, error) {
	if g.cfg.Mode != ModeData || copies <= 0 {
		return 0, nil
	}
	if perSecond <= 0 {
		perSecond = 200_000
	}
	end, err := g.begin(ctx)
	if err != nil {
		return 0, err
	}
	defer end()
	before := g.Counters().Disconnects
	per := perSecond / float64(len(g.workers))
	err = g.each(func(w *worker) { w.disconnect(copies, per) })
	return int(g.Counters().Disconnects - before), err
}

// Close closes the load sockets. It waits for a running phase to end, so
// cancel that phase's context first.
func (g *Generator) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	var errs []error
	for _, w := range g.workers {
		if err := w.s.close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
