package congestion

import (
	"testing"
	"time"
)

// round sends a window's packets at now and has them all acknowledged a
// round trip later; it returns the time then and the packets sent.
func round(c *Controller, mss, now, rtt int64) (int64, int64) {
	w := c.Stats().Window / mss
	for range w {
		c.OnSent(int(mss), now)
	}
	now += rtt
	for range w {
		c.OnAcked(int(mss), now-rtt, now, rtt)
	}
	return now, w
}

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
	c.Init(mss, 0, 0, now)
	// Grow the window: a window's packets a round trip, all acknowledged.
	for range 5 {
		now, _ = round(&c, mss, now, rtt)
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
		now, _ = round(&c, mss, now, rtt)
	}
	if st := c.Stats(); st.SlowStart || st.Window < before/2 {
		t.Fatalf("after 20 rounds of acks: window %d slow start %v, want ≥ %d out of slow start", st.Window, st.SlowStart, before/2)
	}
}

// TestSlowStartReadsEachAckByItsNewestPacket: an ack that covers several
// packets gives one sample per packet, and the receiver's delay inflates
// them all when it acked after its AckDelay rather than at once (every
// fourth packet). Slow start judges each ack by its smallest sample: on an
// empty path, acks sent after the delay (eight packets, all 4–5 ms late)
// between prompt ones do not end it, as eight late samples in a row did;
// a queue, which every ack shows, does.
func TestSlowStartReadsEachAckByItsNewestPacket(t *testing.T) {
	const mss = 1200
	rtt := int64(50 * time.Millisecond)
	us := int64(time.Microsecond)
	for _, tc := range []struct {
		name  string
		queue int64 // added to every sample
		exit  bool
	}{
		{"ack delay only", 0, false},
		{"a queue", ssExitDelay + TargetDelay/6, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Controller
			now := int64(1e9)
			c.Init(mss, 0, 0, now)
			c.OnSent(mss, now)
			now += rtt
			c.OnAcked(mss, now-rtt, now, rtt) // the base
			ack := func(n int, late int64) {  // n packets 100 µs apart, the newest late
				for k := range n {
					sent := now - rtt - tc.queue - late - int64(n-1-k)*100*us
					c.OnSent(mss, sent)
					c.OnAcked(mss, sent, now, rtt)
				}
				now += 5 * int64(time.Millisecond)
			}
			for range 20 {
				ack(8, 4000*us) // after AckDelay
				ack(4, 300*us)  // at once, on the fourth packet
			}
			if got := !c.Stats().SlowStart; got != tc.exit {
				t.Fatalf("slow start ended: %v, want %v", got, tc.exit)
			}
		})
	}
}

// TestSlowStartGrowsOnAFlightsTail: in slow start, the acks of a flight's
// tail (the sender has nothing more to send) still grow the window up to
// twice the most that was in flight in the round, as Linux's
// tcp_is_cwnd_limited allows: the next flight (the next 1 MiB message)
// finds the window the path showed it can take, not the one it had when
// the flight started to drain. Beyond twice the peak nothing grows.
func TestSlowStartGrowsOnAFlightsTail(t *testing.T) {
	const mss = 1200
	rtt := int64(50 * time.Millisecond)
	var c Controller
	now := int64(1e9)
	c.Init(mss, 0, 0, now)
	// Flights in slow start, the last of at least 64 packets, each
	// acknowledged a round trip after it was sent.
	var last int64
	for range 8 {
		var w int64
		now, w = round(&c, mss, now, rtt)
		if last = w * mss; w >= 64 {
			break
		}
	}
	if c.Stats().InFlight != 0 || !c.Stats().SlowStart {
		t.Fatalf("in flight %d, slow start %v: want an idle connection in slow start", c.Stats().InFlight, c.Stats().SlowStart)
	}
	if w := c.Stats().Window; w < 2*last-mss || w > 2*last+mss {
		t.Fatalf("window %d after the last flight's tail, want twice that flight (%d)", w, 2*last)
	}
}

// TestSlowStartAllowsTheAckDelay: acks of fewer than four packets may
// have waited the peer's AckDelay at the receiver, their newest packet
// too; slow start's early exit allows them that delay above its
// threshold. Acks of four packets or more left on the fourth (the
// receiver's prompt ack) and are judged against the threshold alone.
// (With the threshold at half the target, 6 ms, the default AckDelay of
// 5 ms alone stays below it; at a quarter it did not.)
func TestSlowStartAllowsTheAckDelay(t *testing.T) {
	const mss = 1200
	rtt := int64(50 * time.Millisecond)
	ackDelay := int64(5 * time.Millisecond)
	for _, tc := range []struct {
		name        string
		pkts        int   // per ack
		late        int64 // the newest packet's sample above the base
		ackDelayArg int64
		exit        bool
	}{
		{"small acks after AckDelay", 2, ackDelay, ackDelay, false},
		// Below the threshold (half the target) even without the
		// allowance: the default AckDelay alone no longer ends slow start.
		{"small acks after AckDelay, no AckDelay given", 2, ackDelay, 0, false},
		{"small acks above AckDelay and the threshold", 2, ackDelay + ssExitDelay + TargetDelay/6, ackDelay, true},
		{"prompt acks behind a queue", 4, ssExitDelay + TargetDelay/6, ackDelay, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Controller
			now := int64(1e9)
			c.Init(mss, 0, tc.ackDelayArg, now)
			c.OnSent(mss, now)
			now += rtt
			c.OnAcked(mss, now-rtt, now, rtt) // the base
			for range 20 {
				for range tc.pkts {
					c.OnSent(mss, now-rtt-tc.late)
					c.OnAcked(mss, now-rtt-tc.late, now, rtt)
				}
				now += 3 * int64(time.Millisecond)
			}
			if got := !c.Stats().SlowStart; got != tc.exit {
				t.Fatalf("slow start ended: %v, want %v", got, tc.exit)
			}
		})
	}
}

// TestLateAcksUndoACut: a window cut for loss comes back when every loss
// of that event is acknowledged after all (the sender's timeout declared
// packets lost while the queue grew faster than it), as quic-go's Reno
// undoes a spurious cut; one loss that stays lost keeps the cut, and late
// acks of an older event do not undo a newer one.
func TestLateAcksUndoACut(t *testing.T) {
	const mss = 1200
	rtt := int64(50 * time.Millisecond)
	for _, tc := range []struct {
		name     string
		lateAcks int  // of the event's 5 losses
		newEvent bool // a second event before the late acks
		want     int64
	}{
		{"all late", 5, false, 100 * mss},
		{"one lost", 4, false, 70 * mss},
		{"a newer event", 5, true, 49 * mss},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Controller
			now := int64(1e9)
			c.Init(mss, 0, 0, now)
			c.slowStart, c.competing, c.cwnd = false, true, 100*mss // loss-based: every loss event cuts
			t0 := now
			for range 100 {
				c.OnSent(mss, t0)
			}
			now += 2 * rtt
			for range 5 {
				c.OnLost(mss, t0, now)
			}
			if w := c.Stats().Window; w != 70*mss {
				t.Fatalf("window %d after the loss event, want %d", w, 70*mss)
			}
			if tc.newEvent {
				c.OnSent(mss, now)
				now += 2 * rtt
				c.OnLost(mss, now-2*rtt, now)
			}
			for range tc.lateAcks {
				c.OnLateAck(t0, now, rtt)
			}
			if w := c.Stats().Window; w != tc.want {
				t.Fatalf("window %d after %d late acks, want %d", w, tc.lateAcks, tc.want)
			}
		})
	}
}

// TestPacingFallsBelowMinWindow: a queue above the target that does not
// fall takes the window, and with it the pacing rate, below MinWindow
// packets a round trip, while MinWindow packets may still be in flight;
// a queue that stays above the target for holdAfter all the same is
// another flow's, and the window goes back to MinWindow.
func TestPacingFallsBelowMinWindow(t *testing.T) {
	const mss = 1200
	base := int64(50 * time.Millisecond)
	var c Controller
	now := int64(1e9)
	c.Init(mss, 0, 0, now)
	for range 3 {
		now, _ = round(&c, mss, now, base)
	}
	c.firstAt = -1 // no first drain here (TestFirstDrainInSlot)
	// A queue of 20 ms (above the target, below twice it): cuts.
	rtt := base + int64(20*time.Millisecond)
	start := now
	for c.cwnd >= MinWindow*mss && now-start < holdAfter {
		now, _ = round(&c, mss, now, rtt)
	}
	if c.cwnd >= MinWindow*mss {
		t.Fatalf("window %d after %v above the target, want below %d", c.cwnd, time.Duration(now-start), MinWindow*mss)
	}
	if r, most := c.PacingRate(rtt), MinWindow*mss*int64(time.Second)/rtt; r >= most {
		t.Fatalf("pacing rate %d B/s, want below two packets a round trip (%d)", r, most)
	}
	c.OnSent(mss, now)
	if !c.CanSend() {
		t.Fatal("one packet in flight fills the window, want MinWindow packets allowed")
	}
	now += rtt
	c.OnAcked(mss, now-rtt, now, rtt)
	// The queue stays: after holdAfter the floor is MinWindow again.
	for now-start < holdAfter+int64(time.Second) {
		now, _ = round(&c, mss, now, rtt)
	}
	if st := c.Stats(); c.cwnd < MinWindow*mss || st.Competing {
		t.Fatalf("window %d (competing %v) with the queue above the target for %v, want at least %d, not competing", c.cwnd, st.Competing, time.Duration(now-start), MinWindow*mss)
	}
}

// TestFirstDrainInSlot: a connection drains once in the first firstSlot
// slot of the clock at least two round trips after its slow start ended,
// whatever its samples, so that connections started near one another
// drain together (a latecomer whose base holds the others' queue then
// sees the path's); after that only a base not seen for probeInterval
// drains it.
func TestFirstDrainInSlot(t *testing.T) {
	const mss = 1200
	base := int64(50 * time.Millisecond)
	var c Controller
	now := int64(7*time.Second + 300*time.Millisecond)
	c.Init(mss, 0, 0, now)
	for range 3 {
		now, _ = round(&c, mss, now, base)
	}
	// A queue of 8 ms, within the target, that never comes near the
	// base: slow start ends on it.
	rtt := base + int64(8*time.Millisecond)
	for c.slowStart {
		now, _ = round(&c, mss, now, rtt)
	}
	slot := (now+2*rtt)/firstSlot*firstSlot + firstSlot
	var drains []int64
	for end := now + 5*int64(time.Second); now < end; {
		was := c.drainUntil != 0
		w := c.Stats().Window / mss
		for range w {
			c.OnSent(mss, now)
		}
		now += rtt
		for range w {
			c.OnAcked(mss, now-rtt, now, rtt)
			if c.drainUntil != 0 && !was {
				drains, was = append(drains, now), true
			}
		}
	}
	if len(drains) != 1 || drains[0] < slot || drains[0] > slot+rtt {
		t.Fatalf("drains at %v, want one in the slot at %v, within a round trip", drains, time.Duration(slot))
	}
}
