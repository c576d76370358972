package conn

import (
	"sync/atomic"
	"time"
)

// Overload control, in the spirit of UE's DDoS detection and WireGuard's
// "under load": when connectionless traffic (datagrams from addresses that
// hold no connection) rises, the server first stops the optional replies
// (RestartHandshake, VersionUpgrade), then caps Challenge replies per
// receive loop. Established connections are never shed: each loop handles
// datagrams from connected addresses before the rest of its batch, and
// their handling does no cookie work.

// OverloadLevel is the server's current overload state.
type OverloadLevel int32

const (
	// LevelNormal: every reply the protocol allows.
	LevelNormal OverloadLevel = iota
	// LevelBurst: no RestartHandshake and no VersionUpgrade replies.
	LevelBurst
	// LevelFlood: as Burst, and Challenge replies capped per loop at
	// ChallengeCaps[0] per second.
	LevelFlood
	// LevelSevere: as Burst, and Challenge replies capped per loop at
	// ChallengeCaps[1] per second.
	LevelSevere
	numLevels
)

func (l OverloadLevel) String() string {
	switch l {
	case LevelNormal:
		return "normal"
	case LevelBurst:
		return "burst"
	case LevelFlood:
		return "flood"
	case LevelSevere:
		return "severe"
	}
	return "unknown"
}

// OverloadConfig tunes overload control. Zero fields take the defaults of
// params.go.
type OverloadConfig struct {
	// Enabled turns overload control on. It is off by default because the
	// protocol's default is that RestartHandshake and Challenge replies
	// are capped by overload control only when an operator asks for it
	// (docs/protocol.md §5: "unlimited by default"); per-source rate limits
	// apply either way. Internet-facing servers should enable it.
	Enabled bool
	// Thresholds are the connectionless datagrams per second, summed over
	// all sockets, at which LevelBurst, LevelFlood and LevelSevere begin
	// (0: 5 000, 50 000 and 200 000).
	Thresholds [3]float64
	// ChallengeCaps are the Challenge replies per second per receive loop
	// allowed at LevelFlood and LevelSevere (0: 10 000 and 1 000).
	ChallengeCaps [2]float64
	// Cooloff: the rate must stay below the current level's threshold this
	// long before the level steps down by one (0: 10 s).
	Cooloff time.Duration
}

func (o OverloadConfig) withDefaults() OverloadConfig {
	for i, d := range [3]float64{defaultBurstThreshold, defaultFloodThreshold, defaultSevereThreshold} {
		if o.Thresholds[i] <= 0 {
			o.Thresholds[i] = d
		}
	}
	for i, d := range [2]float64{defaultFloodChallengeCap, defaultSevereChallengeCap} {
		if o.ChallengeCaps[i] <= 0 {
			o.ChallengeCaps[i] = d
		}
	}
	if o.Cooloff <= 0 {
		o.Cooloff = defaultOverloadCooloff
	}
	return o
}

// overload tracks the level. Housekeeping is its only writer; loops read
// level once per batch.
type overload struct {
	cfg OverloadConfig
	// enabled is cfg.Enabled, switchable live (Server.SetOverload).
	enabled atomic.Bool
	level   atomic.Int32

	// Rate window: connectionless count and time a second or so ago.
	prevCount uint64
	prevAt    time.Time
	rate      float64
	calmSince time.Time

	changes    atomic.Uint64
	lastLog    time.Time
	suppressed int
}

// update recomputes the rate from the loops' connectionless counter and
// moves the level: up at once to the highest threshold crossed, down one
// level after Cooloff below the current threshold. It reports a change.
func (o *overload) update(count uint64, now time.Time) (from, to OverloadLevel, changed bool) {
	if o.prevAt.IsZero() {
		o.prevCount, o.prevAt, o.calmSince = count, now, now
		return 0, 0, false
	}
	dt := now.Sub(o.prevAt).Seconds()
	if dt < 0.25 {
		return 0, 0, false // too short a window to be a rate
	}
	o.rate = float64(count-o.prevCount) / dt
	o.prevCount, o.prevAt = count, now

	cur := OverloadLevel(o.level.Load())
	target := LevelNormal
	for i, th := range o.cfg.Thresholds {
		if o.rate >= th {
			target = OverloadLevel(i + 1)
		}
	}
	next := cur
	switch {
	case target > cur:
		next = target
		o.calmSince = now
	case target == cur:
		o.calmSince = now
	case now.Sub(o.calmSince) >= o.cfg.Cooloff:
		next = cur - 1
		o.calmSince = now
	}
	if next == cur {
		return cur, cur, false
	}
	o.level.Store(int32(next))
	o.changes.Add(1)
	return cur, next, true
}

// challengeCap is the per-loop Challenge budget per second at a level, or
// -1 for no cap.
func (o *overload) challengeCap(l OverloadLevel) float64 {
	switch {
	case l >= LevelSevere:
		return o.cfg.ChallengeCaps[1]
	case l == LevelFlood:
		return o.cfg.ChallengeCaps[0]
	}
	return -1
}
