package conn

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// spreadHold is how long the handshake sockets must go without a backlog
// of handshake packets before connection packets spread over them again.
const spreadHold = 500 * time.Millisecond

// stormShare: a batch from a handshake socket is a login storm's, not a
// flood's, when at least one in stormShare of its datagrams proves a client
// (in a storm about one in two does: each client sends an Initial and a
// Response, or a proof). Only a storm's backlog is shared with the
// connection loops (loop.run).
const stormShare = 8

// spreadGroup is the part of a steered *batchio.Group the spreader moves.
type spreadGroup interface {
	SetSpread(on bool) error
	Spreading() bool
}

// spreader lets connection packets use every loop while no handshake flood
// backs up the handshake sockets, and keeps them to the connection sockets
// while one does (docs/decisions.md, "Connection packets on every core").
// Handshake packets go to the handshake sockets either way.
//
// A handshake loop that receives a batch at least half full, less than
// half of it connection packets accepted for a connection, has a backlog
// of something else: handshakes, sealed mode's proofs, or junk. It stops the
// spreading at once, from the loop, before that queue grows in front of
// players' packets. Housekeeping starts it again once spreadHold has
// passed without such a batch, if the load asks for it: by then the
// handshake sockets' queues have drained, so players' packets steered back
// onto them wait behind nothing.
//
// Spreading is for load. A loop woken for a datagram or two costs about
// as much as one woken for a dozen (the wake-up, the runtime's hand-off
// of its P), so below saturation a second loop buys nothing and costs
// that: at 15,000 datagrams a second (bench msg-cpu-1k) the server's CPU
// per echoed message was 1.7 times what it is with the classes apart
// (tuning.md, "Where a message echo's CPU goes"). So connection packets
// spread only while a connection loop is busy for at least spreadAt of
// the time (check), and are kept to the connection sockets again once
// the loops together, spread, have been busy under keepAt of what the
// connection loops could do, for spreadHold. Spread, the same work costs
// more busy time than apart, so the gap between the two is wide enough
// that a load does not switch to and fro. A server starts with the
// classes apart, since a (re)start is when logins storm.
//
// Each switch moves the sources hashed onto the handshake sockets to
// another loop, whose per-source limiters have not seen them: such a
// source can get one more burst of RestartHandshakes per switch, as an
// eviction from the limiter's table grants one (docs/decisions.md).
// spreadHold bounds the switches to about two a second.
type spreader struct {
	g spreadGroup
	// loops: the handshake sockets' loops are loops[:loops].
	loops int
	log   *slog.Logger
	// lastFlood is when a handshake loop last saw a backlog (Unix ns),
	// lastStorm when a batch from a handshake socket last proved at least
	// one client in stormShare of its datagrams.
	lastFlood atomic.Int64
	lastStorm atomic.Int64
	// busySince is when the handshake sockets' current (or last) busy
	// spell began: the first batch of a storm or a backlog after
	// spreadHold without one, or the server's start; lastBusy is when the
	// last such batch came. Connections whose Challenge came spreadHold
	// or more before busySince are its players (loop.connIn): the margin
	// takes in the first small batches of a storm's Initials.
	busySince atomic.Int64
	lastBusy  atomic.Int64
	// broken is set when the kernel refused a switch: the group then
	// stays as it is, and the refusal is logged once.
	broken atomic.Bool
	// flooded: a backlog kept the classes apart since they last spread.
	// Those switches are logged at Info; the spreading that follows every
	// start, the server's own routine, only at Debug.
	flooded atomic.Bool
	// busy is each loop's time spent on its batches (ns, loop.run), at
	// the loops' own cache lines; check turns it into a share of the
	// time since the last look (lookAt, busyAt: housekeeping's alone).
	// heavyAt is when, spread, the loops' load last reached keepAt.
	busy    []loopBusy
	busyAt  []int64
	lookAt  int64
	heavyAt int64
}

// loopBusy is one loop's busy time, padded to its own cache line.
type loopBusy struct {
	ns atomic.Int64
	_  [56]byte
}

// spreadAt and keepAt are the loads (a connection loop's busy share of the
// time) at which connection packets spread over every socket, and under
// which, spread, they are kept to the connection sockets again (spreader).
// lookEvery is the shortest span check measures the load over.
const (
	spreadAt  = 0.6
	keepAt    = 0.3
	lookEvery = 50 * time.Millisecond
)

// newSpreader makes the spreader of a group of n loops, the first loops
// of them the handshake sockets', at now.
func newSpreader(g spreadGroup, loops, n int, log *slog.Logger, now time.Time) *spreader {
	sp := &spreader{g: g, loops: loops, log: log, busy: make([]loopBusy, n), busyAt: make([]int64, n)}
	t := now.UnixNano()
	sp.lastFlood.Store(t)
	sp.lastStorm.Store(t)
	sp.busySince.Store(t)
	sp.lastBusy.Store(t)
	sp.lookAt = t
	return sp
}

// work adds d to loop idx's busy time.
func (sp *spreader) work(idx int, d time.Duration) {
	sp.busy[idx].ns.Add(int64(d))
}

// load reads the loops' busy time since the last look, at t: the largest
// share of a connection loop's (apart), and the share of all the loops'
// over the connection loops' count (spread: what each would carry apart,
// or more). ok is false when the span is too short to tell.
func (sp *spreader) load(t int64) (conn, all float64, ok bool) {
	span := t - sp.lookAt
	if span < int64(lookEvery) {
		return 0, 0, false
	}
	sp.lookAt = t
	var sum int64
	for i := range sp.busy {
		b := sp.busy[i].ns.Load()
		d := b - sp.busyAt[i]
		sp.busyAt[i] = b
		sum += d
		if i >= sp.loops {
			conn = max(conn, float64(d)/float64(span))
		}
	}
	connLoops := max(1, len(sp.busy)-sp.loops)
	return conn, float64(sum) / float64(span) / float64(connLoops), true
}

// observe is called by a loop after each batch of n datagrams, of which
// accepted were connection packets accepted for a connection and proven
// clients proven (each a connection to make), in a batch of size slots;
// hs says whether the batch came from a handshake socket.
func (sp *spreader) observe(hs bool, n, accepted, proven, size int, now time.Time) {
	if !hs {
		return
	}
	storm := proven > 0 && proven*stormShare >= n
	if storm {
		sp.lastStorm.Store(now.UnixNano())
	}
	backlog := 2*n >= size && 2*accepted < n
	if storm || backlog {
		if t := now.UnixNano(); t-sp.lastBusy.Swap(t) >= int64(spreadHold) {
			sp.busySince.Store(t)
		}
	}
	if !backlog {
		return
	}
	sp.backlog(now)
}

// storming reports whether a login storm is on at now: until spreadHold
// after its last batch. Connection loops take handshakes from the
// handshake sockets while one is and the classes are apart (loop.run).
func (sp *spreader) storming(now time.Time) bool {
	return now.UnixNano()-sp.lastStorm.Load() < int64(spreadHold)
}

// backlog records a backlog of handshake packets seen at now, and keeps
// connection packets to the connection sockets.
func (sp *spreader) backlog(now time.Time) {
	sp.lastFlood.Store(now.UnixNano())
	if sp.g.Spreading() && !sp.broken.Load() {
		sp.set(false, "a backlog of handshake packets: connection packets kept to the connection sockets")
	}
}

// check, from housekeeping, spreads connection packets over every socket
// while a connection loop is busy for spreadAt of the time and the
// handshake sockets have been without a backlog for spreadHold, and keeps
// them to the connection sockets again once, spread, the loops' load has
// stayed under keepAt for spreadHold.
func (sp *spreader) check(now time.Time) {
	t := now.UnixNano()
	conn, all, ok := sp.load(t)
	if !ok || sp.broken.Load() {
		return
	}
	if sp.g.Spreading() {
		if all >= keepAt {
			sp.heavyAt = t
		} else if t-sp.heavyAt >= int64(spreadHold) {
			sp.setRoutine(false, "a light load of connection packets: kept to the connection sockets, where a wake-up finds more of them", "load", all)
		}
		return
	}
	if conn < spreadAt || t-sp.lastFlood.Load() < int64(spreadHold) {
		return
	}
	sp.heavyAt = t
	sp.set(true, "no backlog of handshake packets and a busy connection loop: connection packets spread over every socket", "load", conn)
}

// setRoutine switches as set does, for the load rather than a flood: at
// Debug, and not taken for a flood's switch.
func (sp *spreader) setRoutine(on bool, why string, args ...any) {
	if sp.swap(on) {
		sp.log.Debug(why, args...)
	}
}

// set switches for a flood (on false) or after one: at Info, but the
// spreading that follows a start without a flood at Debug.
func (sp *spreader) set(on bool, why string, args ...any) {
	if !sp.swap(on) {
		return
	}
	level := slog.LevelInfo
	if on && !sp.flooded.Swap(false) {
		level = slog.LevelDebug
	} else if !on {
		sp.flooded.Store(true)
	}
	sp.log.Log(context.Background(), level, why, args...)
}

// swap switches the group's steering and reports whether it did; a
// refusal breaks the spreader (it stays as it is), logged once.
func (sp *spreader) swap(on bool) bool {
	err := sp.g.SetSpread(on)
	if err != nil && !sp.broken.Swap(true) {
		sp.log.Error("cannot switch the steering of connection packets; it stays as it is", "spread", !on, "err", err)
	}
	return err == nil
}
