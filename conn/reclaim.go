package conn

import (
	"cmp"
	"slices"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
)

// Receive memory in shares (docs/protocol.md §14.5). The message layer
// refuses a connection's out-of-order units beyond its fair share of a
// contended pool (message.DropOverShare), but storage it acknowledged it
// cannot give back: when the pool, full, refuses a connection within its
// share, housekeeping ends the connections that hold more than their
// share and than the one refused (message.Layer.Reclaim), heaviest first,
// until the pool is back at three quarters of
// Config.Messages.ReceiveBudget. Each is counted as the disconnect reason
// over_budget.

// reasonOverBudget ends a connection that held more than its share of a
// full receive pool. (conn exports no name for it: its limit of exported
// identifiers is reached; the reason's Label is "over_budget".)
const reasonOverBudget DisconnectReason = protocol.DisconnectOverBudget

// heldConn is a connection and the receive storage it held when counted.
type heldConn struct {
	c    *Conn
	held int64
}

// reclaimMessages runs once per sweep: it ends the heaviest holders if
// the message layer reported pressure since the last sweep.
func (s *Server) reclaimMessages(now time.Time) {
	l := s.st.msgs
	if l == nil {
		return
	}
	free, above := l.Reclaim()
	if free <= 0 {
		return
	}
	hs := s.holders[:0]
	s.Range(func(c *Conn) bool {
		c.mu.Lock()
		var h int64
		if c.msg != nil {
			h = c.msg.Held()
		}
		c.mu.Unlock()
		if h > above {
			hs = append(hs, heldConn{c, h})
		}
		return true
	})
	slices.SortFunc(hs, func(a, b heldConn) int { return cmp.Compare(b.held, a.held) })
	n, freed := 0, int64(0)
	for _, h := range hs {
		if freed >= free {
			break
		}
		if !h.c.closed.Load() {
			h.c.shutdown(reasonOverBudget, false)
			n++
			freed += h.held
		}
	}
	clear(hs)
	s.holders = hs[:0]
	if n > 0 && now.Sub(s.reclaimLog) >= overloadLogEvery {
		s.st.Logger.Warn("message receive memory full: ended the connections holding the most (disconnect reason over_budget)",
			"ended", n, "freed_bytes", freed, "above_bytes", above, "held_bytes", l.Held())
		s.reclaimLog = now
	}
}
