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
// passed without such a batch: by then the handshake sockets' queues have
// drained, so players' packets steered back onto them wait behind nothing.
// A server starts with the classes apart and spreads after its first
// spreadHold, since a (re)start is when logins storm.
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

// check, from housekeeping, spreads connection packets again once the
// handshake sockets have been without a backlog for spreadHold.
func (sp *spreader) check(now time.Time) {
	if sp.g.Spreading() || sp.broken.Load() || now.UnixNano()-sp.lastFlood.Load() < int64(spreadHold) {
		return
	}
	sp.set(true, "no backlog of handshake packets: connection packets spread over every socket again")
}

func (sp *spreader) set(on bool, why string) {
	if err := sp.g.SetSpread(on); err != nil {
		if !sp.broken.Swap(true) {
			sp.log.Error("cannot switch the steering of connection packets; it stays as it is", "spread", !on, "err", err)
		}
		return
	}
	level := slog.LevelInfo
	if on && !sp.flooded.Swap(false) {
		level = slog.LevelDebug
	} else if !on {
		sp.flooded.Store(true)
	}
	sp.log.Log(context.Background(), level, why)
}
