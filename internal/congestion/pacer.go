package congestion

import "time"

// Quantum is the pacer's burst in time: the bucket holds this much of the
// pacing rate (and at least two packets), the granularity of a sender
// woken by a 5 ms timer or by an ack.
const Quantum = int64(5 * time.Millisecond)

// Pacer is a token bucket in nanobytes (bytes × 1e9) refilled at a rate
// the caller gives on each call, so the rate may change between calls.
// The balance may go below zero by a debt the caller allows (the game's
// messages may borrow from the bulk's next slots); the bucket then earns
// it back before anything that needs a positive balance goes. 24 bytes.
type Pacer struct {
	tokens int64 // nanobytes; may be negative
	at     int64 // ns of the last refill
	init   bool
}

// MaxRate bounds a rate given to the pacer (8 Gbit/s), so that nanobyte
// arithmetic stays within int64.
const MaxRate = int64(1e9)

// Refill adds what rate (bytes per second, at most MaxRate) earned since
// the last call, up to a bucket of max(rate × Quantum, burstMin) bytes.
func (p *Pacer) Refill(now, rate int64, burstMin int) {
	rate = min(rate, MaxRate)
	depth := max(rate*Quantum, int64(burstMin)*1e9)
	if !p.init {
		p.init, p.tokens, p.at = true, depth, now
		return
	}
	dt := now - p.at
	if dt <= 0 {
		return
	}
	p.at = now
	// A second earns the whole bucket at any rate; min keeps dt × rate in range.
	p.tokens = min(p.tokens+min(dt, 1e9)*rate, depth)
}

// Positive reports whether the balance is above zero.
func (p *Pacer) Positive() bool { return p.tokens > 0 }

// Above reports whether the balance is above −debt bytes.
func (p *Pacer) Above(debt int64) bool { return p.tokens > -debt*1e9 }

// Spend takes n bytes.
func (p *Pacer) Spend(n int) { p.tokens -= int64(n) * 1e9 }

// When is the time at which the balance, refilled at rate, passes
// −debt bytes (debt 0: becomes positive); now when it is there already.
func (p *Pacer) When(rate, debt int64) int64 {
	rate = min(rate, MaxRate)
	need := -debt*1e9 - p.tokens
	if need < 0 || rate <= 0 {
		return p.at
	}
	return p.at + need/rate + 1
}
