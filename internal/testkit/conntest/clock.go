package conntest

import (
	"sync"
	"time"
)

// Clock is a manual clock for conn.Config.Now: it stands still until the
// test advances it, so timeouts, rate windows and token buckets are reached
// exactly, without sleeping. It is safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{t: start} }

// Now is the clock's reading.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
