package congestion

import (
	"testing"
	"time"
)

// TestTimeoutCollapsesWindow: a retransmission timeout drops the window
// to MinWindow whatever it was (a peer that acknowledges nothing gets no
// more than a probe's worth), keeps half the old window as the slow
// start's threshold across repeated timeouts, and an ack climbs back to
// that threshold in slow start and no further.
func TestTimeoutCollapsesWindow(t *testing.T) {
	const mss = 1200
	rtt := int64(20 * time.Millisecond)
	var c Controller
	now := int64(1e9)
	c.Init(mss, 0, now)
	// Grow the window: a window's packets a round trip, all acknowledged.
	for range 5 {
		w := c.Stats().Window / mss
		for range w {
			c.OnSent(mss, now)
		}
		now += rtt
		for range w {
			c.OnAcked(mss, now-rtt, now, rtt)
		}
	}
	before := c.Stats().Window
	if before < 4*InitialWindow*mss {
		t.Fatalf("window %d after 5 rounds of slow start, want ≥ %d", before, 4*InitialWindow*mss)
	}
	rateBefore := c.PacingRate(rtt)
	for range before / mss {
		c.OnSent(mss, now)
	}
	// The sender reports the flight lost (aged out), then the timeout.
	now += rtt
	for range before / mss {
		c.OnLost(mss, now-2*rtt, now)
	}
	ev := c.Stats().Events
	for i := range 3 {
		now += rtt << i
		c.OnTimeout(now)
		if st := c.Stats(); st.Window != MinWindow*mss || !st.SlowStart || st.Events != ev+uint64(i+1) {
			t.Fatalf("timeout %d: window %d slow start %v events %d, want %d, true, %d", i+1, st.Window, st.SlowStart, st.Events, MinWindow*mss, ev+uint64(i+1))
		}
		if c.ssthresh != before/2 {
			t.Fatalf("timeout %d: threshold %d, want half the window before the first, %d", i+1, c.ssthresh, before/2)
		}
	}
	if r := c.PacingRate(rtt); r*10 > rateBefore {
		t.Fatalf("pacing rate %d after the timeouts, want ≤ 10 %% of %d", r, rateBefore)
	}
	// Acks return.
	for range 20 {
		w := c.Stats().Window / mss
		for range w {
			c.OnSent(mss, now)
		}
		now += rtt
		for range w {
			c.OnAcked(mss, now-rtt, now, rtt)
		}
	}
	if st := c.Stats(); st.SlowStart || st.Window < before/2 {
		t.Fatalf("after 20 rounds of acks: window %d slow start %v, want ≥ %d out of slow start", st.Window, st.SlowStart, before/2)
	}
}
