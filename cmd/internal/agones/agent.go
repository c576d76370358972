package agones

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	// DefaultHealthInterval: Agones' default health.periodSeconds is 5 s;
	// pinging more often keeps one late ping from failing a check.
	DefaultHealthInterval = 2 * time.Second
	// DefaultRetryInterval: the sidecar may start after the game server,
	// so Ready is retried until it answers.
	DefaultRetryInterval = time.Second
	// warnEvery bounds warnings about failing calls.
	warnEvery = time.Minute
)

// Options configure an Agent.
type Options struct {
	// HealthInterval between Health pings (0: DefaultHealthInterval).
	HealthInterval time.Duration
	// RetryInterval between attempts of Ready (0: DefaultRetryInterval).
	RetryInterval time.Duration
	// Players turns on player tracking (alpha; the cluster's PlayerTracking
	// feature gate must be on): PlayerConnected and PlayerDisconnected are
	// passed on, and Capacity, when above 0, is set once Ready succeeded.
	Players  bool
	Capacity int64
	// Logger receives what happens (nil discards it).
	Logger *slog.Logger
}

// Agent runs a game server's side of the Agones lifecycle in a goroutine
// of its own: once started, Ready (retried until the sidecar answers),
// then a Health ping every HealthInterval and the player events as they
// come, until Close says Shutdown. Its methods never block on the sidecar,
// so a server's connection callbacks can call them.
type Agent struct {
	sdk     *SDK
	opts    Options
	log     *slog.Logger
	started atomic.Bool

	wake chan struct{} // capacity 1: pending work
	quit chan struct{}
	done chan struct{}
	// ready is closed once Ready succeeded.
	ready chan struct{}

	mu       sync.Mutex
	pending  map[string]bool // player ID → connect (true) or disconnect (false), not yet sent
	order    []string        // pending IDs, oldest first; may hold IDs no longer pending
	capacity int64           // to send; -1 when sent
	lastWarn time.Time
	failures int // calls failed since the last warning
}

// NewAgent returns an Agent that queues player events until Start.
func NewAgent(sdk *SDK, o Options) *Agent {
	if o.HealthInterval <= 0 {
		o.HealthInterval = DefaultHealthInterval
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	a := &Agent{
		sdk:      sdk,
		opts:     o,
		log:      o.Logger,
		wake:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
		ready:    make(chan struct{}),
		pending:  map[string]bool{},
		capacity: -1,
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if o.Players && o.Capacity > 0 {
		a.capacity = o.Capacity
	}
	return a
}

// Start says Ready to the sidecar (retrying in the background) and runs
// the health pings until Close: call it once the server listens. ctx
// bounds the agent's calls; Close, not ctx, ends it normally.
func (a *Agent) Start(ctx context.Context) {
	if a.started.Swap(true) {
		return
	}
	go a.run(ctx)
}

// Start returns a started Agent.
func Start(ctx context.Context, sdk *SDK, o Options) *Agent {
	a := NewAgent(sdk, o)
	a.Start(ctx)
	return a
}

// Ready is closed once the sidecar accepted Ready.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// PlayerConnected queues a PlayerConnect for id (with Options.Players).
func (a *Agent) PlayerConnected(id string) { a.player(id, true) }

// PlayerDisconnected queues a PlayerDisconnect for id (with
// Options.Players). A player that leaves before its connect was sent is
// never reported.
func (a *Agent) PlayerDisconnected(id string) { a.player(id, false) }

func (a *Agent) player(id string, connect bool) {
	if !a.opts.Players {
		return
	}
	a.mu.Lock()
	if prev, ok := a.pending[id]; ok && prev && !connect {
		delete(a.pending, id) // connected and gone before anyone was told
	} else {
		a.pending[id] = connect
		a.order = append(a.order, id)
	}
	a.mu.Unlock()
	a.poke()
}

// SetCapacity queues a new player capacity (with Options.Players), e.g.
// after max-clients changed.
func (a *Agent) SetCapacity(n int64) {
	if !a.opts.Players || n <= 0 {
		return
	}
	a.mu.Lock()
	a.capacity = n
	a.mu.Unlock()
	a.poke()
}

func (a *Agent) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Close stops the health pings, sends the player events still queued
// and says Shutdown, all within ctx. It returns Shutdown's error.
func (a *Agent) Close(ctx context.Context) error {
	close(a.quit)
	if a.started.Load() {
		<-a.done
	}
	select {
	case <-a.ready:
		a.flush(ctx)
	default:
		// Never Ready: the players were never reported either.
	}
	err := a.sdk.Shutdown(ctx)
	if err != nil {
		a.log.Warn("agones: Shutdown failed", "err", err)
	} else {
		a.log.Info("agones: Shutdown sent")
	}
	return err
}

func (a *Agent) run(ctx context.Context) {
	defer close(a.done)
	// Ready, until the sidecar answers.
	retry := time.NewTicker(a.opts.RetryInterval)
	defer retry.Stop()
	for attempt := 1; ; attempt++ {
		err := a.sdk.Ready(ctx)
		if err == nil {
			a.log.Info("agones: Ready sent", "sdk", a.sdk.URL(), "attempts", attempt)
			close(a.ready)
			break
		}
		a.warn("agones: Ready failed, retrying", err, "attempt", attempt)
		select {
		case <-retry.C:
		case <-a.quit:
			return
		case <-ctx.Done():
			return
		}
	}
	health := time.NewTicker(a.opts.HealthInterval)
	defer health.Stop()
	a.flush(ctx)
	for {
		select {
		case <-health.C:
			if err := a.sdk.Health(ctx); err != nil {
				a.warn("agones: Health ping failed", err)
			}
		case <-a.wake:
			a.flush(ctx)
		case <-a.quit:
			return
		case <-ctx.Done():
			return
		}
	}
}

// flush sends the queued capacity and player events. A failed event is
// logged and dropped: the sidecar answers errors for calls it will never
// accept (the feature gate off, capacity reached), so retrying them would
// only repeat the error.
func (a *Agent) flush(ctx context.Context) {
	a.mu.Lock()
	capacity := a.capacity
	a.capacity = -1
	a.mu.Unlock()
	if capacity > 0 {
		if err := a.sdk.SetPlayerCapacity(ctx, capacity); err != nil {
			a.warn("agones: setting the player capacity failed", err, "capacity", capacity)
		}
	}
	for ctx.Err() == nil {
		a.mu.Lock()
		var id string
		var connect, ok bool
		for len(a.order) > 0 && !ok {
			id, a.order = a.order[0], a.order[1:]
			connect, ok = a.pending[id]
		}
		if ok {
			delete(a.pending, id)
		}
		if len(a.order) == 0 {
			a.order = nil // let the backing array go after a burst
		}
		a.mu.Unlock()
		if !ok {
			return
		}
		var err error
		if connect {
			_, err = a.sdk.PlayerConnect(ctx, id)
		} else {
			_, err = a.sdk.PlayerDisconnect(ctx, id)
		}
		if err != nil {
			a.warn("agones: player tracking call failed (is the PlayerTracking feature gate on?)", err, "player", id, "connect", connect)
		}
	}
}

// warn logs a failed call, at most once a minute with the count of
// failures since; the others go to debug.
func (a *Agent) warn(msg string, err error, attrs ...any) {
	a.mu.Lock()
	a.failures++
	now := time.Now()
	loud := now.Sub(a.lastWarn) >= warnEvery
	n := a.failures
	if loud {
		a.lastWarn, a.failures = now, 0
	}
	a.mu.Unlock()
	attrs = append(attrs, "err", err)
	if loud {
		a.log.Warn(msg, append(attrs, "failures", n)...)
	} else {
		a.log.Debug(msg, attrs...)
	}
}
