package main

import (
	"crypto/subtle"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/udpgate/udpgate/token"
)

// liveSettings change on SIGHUP without a restart; every other setting
// needs one (the sockets, the wire settings and the process's endpoints
// are made once, at start).
var liveSettings = []string{"max-clients", "challenge-rate", "overload", "log-level"}

// reload is SIGHUP: it loads the settings again as at start (the config
// file may have changed; the command line and environment of a running
// process cannot have), applies those that can change live and logs what
// it applied and what needs a restart. A configuration that does not
// validate changes nothing.
func (s *server) reload() {
	n, err := load(s.args, s.env, io.Discard)
	if err != nil {
		s.logger.Error("reload failed: every setting is kept as it was; fix the config file and send SIGHUP again",
			"config", s.o.configPath, "err", strings.ReplaceAll(err.Error(), "\n", "; "))
		return
	}
	applied, restart, err := s.apply(n)
	// The new level applies after this line, so a reload that raises it
	// still says what it did.
	defer s.level.Set(s.o.level())
	attrs := []any{"config", s.o.configPath}
	if len(applied) > 0 {
		attrs = append(attrs, "applied", strings.Join(applied, ", "))
	}
	if len(restart) > 0 {
		attrs = append(attrs, "needs_restart", strings.Join(restart, ", "))
	}
	switch {
	case err != nil:
		s.logger.Error("reload: a setting could not be applied", append(attrs, "err", err)...)
	case len(applied) == 0 && len(restart) == 0:
		s.logger.Info("reloaded: no setting changed", attrs...)
	case len(restart) > 0:
		s.logger.Warn("reloaded: some changes need a restart to take effect", attrs...)
	default:
		s.logger.Info("reloaded", attrs...)
	}
}

// apply makes the server run the live settings of n. It returns the
// changes applied ("max-clients 10 -> 20") and the settings that differ
// but need a restart; s.o follows what was applied, so a later reload
// compares against what runs.
func (s *server) apply(n *options) (applied, restart []string, err error) {
	for _, name := range definitionOrder {
		was, now := s.o.fs.Lookup(name).Value.String(), n.fs.Lookup(name).Value.String()
		if was == now {
			continue
		}
		live := slices.Contains(liveSettings, name)
		switch name {
		case "max-clients":
			err = s.srv.SetMaxClients(n.maxClients)
			if a := s.agent; a != nil && err == nil {
				a.SetCapacity(int64(n.maxClients))
			}
		case "challenge-rate":
			err = s.srv.SetChallengeRate(n.challengeRate, 0)
		case "overload":
			s.srv.SetOverload(n.overload)
		case "log-level":
			// Set by reload once it has logged.
		}
		if err != nil {
			return applied, restart, fmt.Errorf("%s %s: %w", name, now, err)
		}
		if !live {
			restart = append(restart, fmt.Sprintf("%s (%s -> %s)", name, was, now))
			continue
		}
		// Set the running value through the same flag.Value, so s.o reads
		// as the server runs.
		_ = s.o.fs.Set(name, now)
		applied = append(applied, fmt.Sprintf("%s %s -> %s", name, was, now))
	}
	// The key's file may have changed under the same path. Never live: the
	// connections running are sealed with keys from tokens of the old one.
	if !sameKey(s.o.privateKey, n.privateKey) {
		restart = append(restart, "private key (changed; the key is not reloadable live: restart the server to use the new one)")
	}
	return applied, restart, nil
}

// sameKey reports whether two private keys (nil: sealed mode off) are the
// same.
func sameKey(a, b *[token.KeyBytes]byte) bool {
	if a == nil || b == nil {
		return a == b
	}
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}
