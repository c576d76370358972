package conn

import (
	"fmt"

	"github.com/udpgate/udpgate/internal/handshake"
)

// Live administration: what an operator may change while clients are
// connected (cmd/server applies these on SIGHUP and SIGTERM). Each setting
// has one owner that reads it: promotion workers read the admission limits,
// each receive loop rebuilds its fastpath state when the handshake limits
// change, housekeeping reads the overload switch.

// Drain stops admitting clients: from now on every proven client is
// answered Denied (server full), so its client tries elsewhere at once,
// while connected clients keep being served. Shutdown ends the drain.
func (s *Server) Drain() { s.draining.Store(true) }

// Draining reports whether Drain was called.
func (s *Server) Draining() bool { return s.draining.Load() }

// SetMaxClients changes MaxClients. Lowering it below the connections open
// now closes none: new clients are refused until enough have left.
func (s *Server) SetMaxClients(n int) error {
	if n <= 0 {
		return fmt.Errorf("conn: max clients %d is not positive: use at least 1", n)
	}
	s.tab.max.Store(int64(n))
	return nil
}

// MaxClients is the current connection limit.
func (s *Server) MaxClients() int { return int(s.tab.max.Load()) }

// SetChallengeRate changes the per-source Challenge limit, with
// Config.ChallengeRate's meaning: 0 the protocol default (32/s, burst 64),
// negative unlimited, burst 0 twice the rate. Each receive loop applies it
// before its next batch, starting with empty rate-limiter tables.
func (s *Server) SetChallengeRate(rate, burst float64) error {
	if burst < 0 {
		return fmt.Errorf("conn: challenge burst %v is negative: use a positive burst, or 0 for twice the rate", burst)
	}
	st := s.st
	st.ChallengeRate, st.ChallengeBurst = rate, burst
	// Only the limit changes: the rest of the wire configuration (and any
	// budget shared between loops) stays the server's.
	fc := s.fc
	fc.ChallengeLimit = st.fastpathConfig(s.handshakeLoops()).ChallengeLimit
	s.liveMu.Lock()
	s.liveFC = fc
	s.liveGen.Add(1)
	s.liveMu.Unlock()
	return nil
}

// SetOverload switches overload control on or off; off returns the level
// to normal at once.
func (s *Server) SetOverload(enabled bool) {
	s.ov.enabled.Store(enabled)
	if !enabled {
		s.ov.level.Store(int32(LevelNormal))
	}
}

// Healthy reports whether every receive loop is running: nil, or an error
// naming the first loop that stopped. A loop stops only when its socket
// fails for good or the server shuts down.
func (s *Server) Healthy() error {
	if s.closing.Load() {
		return fmt.Errorf("conn: the server is shut down")
	}
	for _, l := range s.loops {
		if l.stopped.Load() {
			return fmt.Errorf("conn: receive loop %d (socket %v) has stopped: restart the server", l.idx, s.Addr())
		}
	}
	return nil
}

// liveConfig returns the fastpath configuration a loop should run and its
// generation, for a loop whose state is of generation have.
func (s *Server) liveConfig(have uint64) (handshake.ServerConfig, uint64, bool) {
	g := s.liveGen.Load()
	if g == have {
		return handshake.ServerConfig{}, g, false
	}
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	return s.liveFC, s.liveGen.Load(), true
}
