package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/udpgate/udpgate/cmd/internal/agones"
	"github.com/udpgate/udpgate/conn"
)

// events receives the server's connection events for the process: a
// debug line per connection (rate limited), the players reported to
// Agones, and a wake-up for a drain waiting for the last client. The
// applications (echo, discard) embed it, so their OnPacket is called
// directly, with no wrapper on the per-packet path.
type events struct {
	log   *slog.Logger
	lim   logLimiter
	agent atomic.Pointer[agones.Agent] // set once, before Ready
	ids   atomic.Uint64
	// left receives a value (never blocking) when a connection ends.
	left chan struct{}
}

func newEvents(logger *slog.Logger) *events {
	return &events{
		log:  logger,
		lim:  logLimiter{rate: connLogRate, burst: connLogBurst, tokens: connLogBurst},
		left: make(chan struct{}, 1),
	}
}

// handler is the -app application with e's events.
func (e *events) handler(app string) conn.Handler {
	if app == "discard" {
		return discard{e}
	}
	return echo{e}
}

// echo sends every Data payload back to its sender.
type echo struct{ *events }

func (echo) OnPacket(c *conn.Conn, payload []byte) { _, _ = c.Send(payload) }

// discard drops every Data payload.
type discard struct{ *events }

func (discard) OnPacket(*conn.Conn, []byte) {}

// OnConnect reports the player to Agones and logs the connection.
func (e *events) OnConnect(c *conn.Conn) {
	if a := e.agent.Load(); a != nil {
		// The ID outlives address changes (migration), so the
		// disconnect names the same player.
		id := fmt.Sprintf("%v#%d", c.RemoteAddr(), e.ids.Add(1))
		c.SetValue(id)
		a.PlayerConnected(id)
	}
	if ok, attrs := e.debug(); ok {
		e.log.Debug("connected", append(attrs, "remote", c.RemoteAddr().String(), "client_id", c.ClientID())...)
	}
}

// OnDisconnect reports the player gone, wakes a drain and logs why the
// connection ended.
func (e *events) OnDisconnect(c *conn.Conn, reason conn.DisconnectReason, remote bool) {
	if a := e.agent.Load(); a != nil {
		if id, ok := c.Value().(string); ok {
			a.PlayerDisconnected(id)
		}
	}
	select {
	case e.left <- struct{}{}:
	default:
	}
	if ok, attrs := e.debug(); ok {
		by := "server"
		if remote {
			by = "client"
		}
		e.log.Debug("disconnected", append(attrs, "remote", c.RemoteAddr().String(), "reason", reason.Label(), "by", by)...)
	}
}

// debug reports whether to log a connection event now, with the count of
// events left out before it as an attribute when there were some.
func (e *events) debug() (bool, []any) {
	if !e.log.Enabled(context.Background(), slog.LevelDebug) {
		return false, nil
	}
	ok, suppressed := e.lim.allow(time.Now())
	if !ok {
		return false, nil
	}
	attrs := make([]any, 0, 8)
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	return true, attrs
}

// logLimiter is a token bucket over log lines.
type logLimiter struct {
	rate, burst float64

	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed uint64
}

// allow takes a token if there is one; when it does, it also returns how
// many lines were refused since the previous one allowed.
func (l *logLimiter) allow(now time.Time) (bool, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	}
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		return false, 0
	}
	l.tokens--
	n := l.suppressed
	l.suppressed = 0
	return true, n
}
