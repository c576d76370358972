package congestion

import (
	"sync/atomic"
	"time"
)

// Parameters (docs/decisions.md, "Congestion control"; tuning.md,
// "Bandwidth").
const (
	// TargetDelay is the queueing delay the controller holds the
	// bottleneck at: enough queue to keep the link busy between a
	// sender's timer ticks, little enough that a game message behind it
	// waits a frame or two.
	TargetDelay = int64(12 * time.Millisecond)
	// InitialWindow and MinWindow are in packets.
	InitialWindow = 10
	MinWindow     = 2
	// minPace: outside competing, the window the pacing rate follows
	// (cwnd) may fall to 1/minPace of a packet, below MinWindow, which
	// then bounds only what may be in flight. Ten connections through a
	// 2 Mbit/s link with a 50 ms base round trip need about one packet
	// each a round trip; at two the queue never came down to the
	// target, stayed three targets deep and made them compete (22 % of
	// the datagrams dropped, a 257 ms queue: issue 28, tuning.md "Many
	// connections through a slow link").
	minPace = 8
	// holdAfter: when the queue has stayed above the target this long,
	// the window's floor goes back to MinWindow packets. The queue of
	// many connections of ours comes back under the target within a
	// second of their cuts; one that does not is another flow's (a
	// quic-go flow creeping a packet a round trip), and yielding to it
	// below two packets only slows the rounds that would show it
	// (beside quic-go started 1 s after ours: 0.05 of the link over 5-15
	// s instead of 0.37).
	holdAfter = int64(time.Second)
	// gateWindow: below this many packets, an ack whose own sample is
	// more than the target (and the peer's AckDelay) above the standing
	// round trip does not grow the window. A connection that sends a
	// packet or two a round trip gets its four standing samples over
	// several round trips, and grows on a standing delay that many round
	// trips old (ten through 2 Mbit/s: queue p99 65 ms without the gate,
	// 51 with it). The gate is against the standing round trip, not the
	// base, so that a connection whose base holds part of the queue is
	// not gated less than the others (against the base: 0.69 to 1.34 of
	// an equal share; against the standing: 0.77 to 1.14). Above four
	// packets the standing delay is fresh enough, and a gate there only
	// unsettled the shares (two through 5 Mbit/s, all windows gated:
	// 0.24 and 1.75 of an equal share).
	gateWindow = 4
	// MaxWindow bounds the window in bytes (the sender has its own caps
	// in packets and units).
	MaxWindow = 64 << 20
	// probeInterval: a connection with no sample near its base for this
	// long drains its queue to measure the base again.
	probeInterval = int64(10 * time.Second)
	// firstSlot: a connection's first drain comes at the first multiple
	// of firstSlot of the Unix time at least two smoothed round trips
	// after its slow start ended (LEDBAT++'s initial slowdown, on a
	// clock shared with the others). A connection that starts while
	// others hold the queue takes that queue for the path's base, and
	// holds the queue at the target above it, which the others, whose
	// base is right, read as twice the target and yield to, down to a
	// packet: its drain at 10 s (probeInterval) found the queue gone
	// only once theirs had emptied. Draining in the same slot, the
	// connections started within a second or so of one another empty
	// the queue together, and each sees the path's base (ten through
	// 10 Mbit/s started 1 s apart: 0.45 to 5.59 of an equal share over
	// the last 10 s, 0.88 to 1.16 with it). A connection's own first
	// drain after 1 s without a sample near its base, at a time of its
	// own, reached fewer of the staggered starts (92 of 117 against 94)
	// and cost a lone flow more at 5 % loss (98.1 % of the link against
	// 99.9; tuning.md, "Many connections through a slow link").
	firstSlot = int64(time.Second)
	// baseBucket is the length of each of the two buckets whose minimum
	// is the base round trip: a path that really got longer is learnt
	// within two buckets.
	baseBucket = int64(30 * time.Second)
	// heavyLoss: when more than 1/heavyLoss of the packets of the rounds
	// that reported at least heavyRound packets were lost, that is
	// congestion whatever the delay (a queue shallower than the target
	// overflows before it shows); fewer are the path's noise.
	heavyLoss  = 4
	heavyRound = 16
	// competeRounds: rounds in a row with the queueing delay above 3 ×
	// the target, each of them cutting the window, after which another
	// flow is taken to fill the queue (compete). Four cuts of at least an
	// eighth leave at most 0.59 of the window, a third of it at the
	// largest cuts: a queue that stays three targets deep through them
	// is not this connection's. (Ten rounds, about 2 s at a full 256 KiB
	// queue's 150 ms round trip, let a CUBIC flow settle at 0.75 of a 20
	// Mbit/s link before the controller answered.) As many rounds below
	// half the target end it, or a drain that shows the queue empty.
	competeRounds = 4
	// competeAlpha and competeBeta: while competing the window grows by
	// competeAlpha packets a round trip and a loss keeps competeBeta
	// tenths of it. β 0.7 is CUBIC's (and this controller's own loss
	// cut); α 2 stands in for CUBIC's faster regrowth: beside CUBIC
	// AIMD(1, 0.5) (NewReno) settles near 0.3 of the link, AIMD(2, 0.7)
	// near 0.45, and beside NewReno AIMD(2, 0.7) takes 0.6-0.7.
	competeAlpha = 2
	competeBeta  = 7
	// competeProbe: a competing connection drains (to see whether the
	// queue filler left) each time the Unix time crosses a multiple of
	// competeProbe, so that all of a host's competing connections drain
	// together: two of ours that compete with each other once the filler
	// left then see the queue empty and both go back to the delay
	// target, where drains at times of their own each found the other's
	// queue (and a lone one went back only 30 s later).
	competeProbe = probeInterval
	// competeMemory: for this long after it stopped competing, a
	// connection competes again once the queue stays above the target
	// (not three targets) through competeRounds cuts. A drain beside a
	// NewReno flow just halved below the path's BDP finds the queue
	// empty, and the delay target then yields to a queue that NewReno
	// refills one packet a round trip, for seconds below three targets
	// (0.20 of the link instead of 0.67 with drains every 10 s).
	competeMemory = 3 * competeProbe
	// ssAcks: slow start ends after this many acks in a row whose
	// smallest sample (the newest packet's) is more than ssExitDelay
	// above the base. Four acks cover about the 8 packets that ended it
	// when each was judged alone; at 8 acks the queue left at the exit
	// put the game's p99 through 20 Mbit/s 29 ms above idle (netsim)
	// instead of 20.
	ssAcks = 4
	// ssExitDelay: the early exit's threshold, half the target. At a
	// quarter (3 ms) the delays of a loaded host ended the slow start of
	// every bench msg-bulk run on loopback, 12 of 12, most in the first
	// or second 1 MiB message (their windows fell to 0.26–1.9 MB, later
	// messages took 0.16 s median against kcp-go's 0.12); at half, 4 of
	// 12 (0.135 s), while netsim's 20 Mbit/s link kept the game's p99
	// within 20 ms of idle (15.6 at a quarter).
	ssExitDelay = TargetDelay / 2
	// promptAck: an ack that acknowledges this many packets or more was
	// sent at once, on the last of them (docs/protocol.md §14.4: a
	// receiver acks every fourth packet with reliable units at once, the
	// rest after up to AckDelay), so its newest packet's sample carries no
	// ack delay. Slow start's early exit allows a smaller ack the peer's
	// AckDelay above its threshold (ssExitDelay): one that
	// waited for AckDelay reads as a queue of up to AckDelay, and with a
	// small window, whose paced packets come fewer than four to an
	// AckDelay, every ack waits (a 1 MiB message over 50 ms then left
	// slow start at a 36 KB window in 5 of 8 loaded runs).
	promptAck = 4
	// maxVelocity bounds the window's growth, packets per round trip.
	maxVelocity = 16
	// standSamples: a standing-RTT window holds at least this many
	// samples, so that at a few packets a round trip one sample's
	// jitter is not taken for a queue.
	standSamples = 4
	// ssRateWindow bounds from below slow start's delivery-rate samples
	// (SRTT/4): four times the receiver's default AckDelay, so that acks
	// it held and sent together do not read as a burst of delivery.
	ssRateWindow = int64(20 * time.Millisecond)
	// ssPartialMin: at the exit, the slow start's delivery-rate sample
	// in progress counts once it holds this many packets.
	ssPartialMin = 16
	// minStandWindow bounds the standing-RTT window from below.
	minStandWindow = int64(2 * time.Millisecond)
)

// Controller is one connection's congestion controller. The zero value is
// not ready: use Init. Not safe for concurrent use. The sender reports
// every packet it sends that the controller should govern (OnSent), and
// each such packet's fate exactly once (OnAcked or OnLost).
type Controller struct {
	mss      int64 // bytes: the largest packet
	cwnd     int64 // bytes
	inflight int64 // bytes sent and not yet reported
	ssthresh int64 // 0: none; slow start ends when cwnd reaches it
	ceiling  int64 // bytes per second: the pacing rate's cap

	// base: the smallest RTT sample of the current bucket (0) and the
	// last one (1); baseAt: when bucket 0 began.
	base   [2]int64
	baseAt int64
	// standing: the smallest sample of the current window (standCur,
	// from standAt) and of the last one (standPrev).
	standCur, standPrev, standAt int64
	standN                       int64 // samples in the current window
	standPrevAt                  int64 // when the last window began
	cutAt                        int64 // the last cut for the delay
	withinAt                     int64 // the last round whose queue was within the target
	latest                       int64
	// instAt, instMin: the time of the ack being read and its smallest
	// sample (its newest packet's, the one its delay least inflates).
	instAt, instMin int64
	instN           int64 // the packets it acknowledged so far
	ackDelay        int64 // the peer's AckDelay (Init)
	// peak, peakPrev: the most bytes in flight in this round and the last.
	peak, peakPrev int64

	// Rounds: a round ends when a packet sent after roundStart is
	// acknowledged or lost.
	roundStart            int64
	roundAcked, roundLost int64
	recoveryUntil         int64 // losses of packets sent before this are one event
	// roundMin, roundMinPrev: the smallest sample of this round and the
	// last (0: none).
	roundMin, roundMinPrev int64
	// undo: the window before the last cut for loss (0: none to undo),
	// whose event took the losses of packets sent from undoFrom to
	// recoveryUntil, undoN of them not yet acknowledged late.
	undo, undoFrom         int64
	drainUntil, drainSaved int64 // a drain of the queue in progress, and the window before it
	firstAt                int64 // when a drain in a shared slot is due: the first, or one before competing (firstSlot; 0: to be set once slow start has ended, -1: none due)
	slotAt                 int64 // when the last drain in a shared slot (firstAt) began
	lostAt                 int64 // when a packet was last reported lost
	overAt                 int64 // when the rounds toward competing began to count (over)
	nearBase               int64 // the last sample within a quarter of the target of the base

	// Delivery rate: bytes acknowledged since delivAt, and the last
	// window's rate.
	delivered, delivAt, deliveryRate int64

	maxRate int64 // the largest delivery rate seen in slow start
	// ssDelivered: bytes acknowledged in slow start since ssAt, for maxRate.
	ssDelivered, ssAt int64
	yielded           int64 // the window at the last round whose queue was within the target (delay mode)
	left              int64 // when competing last ended (0: never)
	velocity          int64 // packets per round trip the window may grow by
	// rate: the last PacingRate, for the window, RTT and mode it was
	// worked out for.
	rate, rateW, rateRTT int64
	rateSS               bool
	held                 bool           // the queue stayed above the target for holdAfter: the floor is MinWindow
	events               uint64         // congestion events
	sink                 *atomic.Uint64 // counts them too, when set (CountEvents)
	ups                  uint8          // rounds of growth in a row
	ssHigh               uint8          // acks in a row above the base in slow start
	over                 uint8          // rounds in a row with the queue far above the target (near empty, competing)
	competing            bool           // beside a flow that fills the queue: loss-based (compete)
	grew                 bool           // the window grew in this round
	slowStart            bool
	undoN                uint16 // (undo) at most the packets in flight, 960
}

// Init readies c for packets of at most mss bytes, paced at most at
// ceiling bytes per second (0: MaxRate), acknowledged by a peer that may
// hold an ack for up to ackDelay ns (its AckDelay, docs/protocol.md
// §14.4).
func (c *Controller) Init(mss int, ceiling, ackDelay int64, now int64) {
	if ceiling <= 0 || ceiling > MaxRate {
		ceiling = MaxRate
	}
	*c = Controller{mss: int64(mss), cwnd: InitialWindow * int64(mss), ceiling: ceiling, ackDelay: max(ackDelay, 0),
		slowStart: true, velocity: 1, baseAt: now, nearBase: now, standAt: now, delivAt: now, ssAt: now, roundStart: now,
		withinAt: now}
}

// CanSend reports whether the window has room for another packet.
func (c *Controller) CanSend() bool { return c.inflight < c.window() }

// window is what may be in flight: cwnd, at least MinWindow packets, or
// the drain's while one runs.
func (c *Controller) window() int64 {
	if c.drainUntil != 0 {
		return MinWindow * c.mss
	}
	return max(c.cwnd, MinWindow*c.mss)
}

// paceWindow is the window the pacing rate follows: cwnd, which may be
// below MinWindow, or, while a drain runs, half of it and at most
// MinWindow packets (a connection already below two packets drains too).
func (c *Controller) paceWindow() int64 {
	if c.drainUntil != 0 {
		return min(c.cwnd/2, MinWindow*c.mss)
	}
	return c.cwnd
}

// floor is cwnd's least: 1/minPace of a packet, or MinWindow packets
// while competing (loss-based, as TCP's) or held (holdAfter).
func (c *Controller) floor() int64 {
	if c.competing || c.held {
		return MinWindow * c.mss
	}
	return c.mss / minPace
}

// OnSent counts a packet of n bytes sent at now.
func (c *Controller) OnSent(n int, now int64) {
	c.inflight += int64(n)
	c.peak = max(c.peak, c.inflight)
}

// inUse reports whether the window is in use, so that an ack may grow
// it: half of it in flight, or, in slow start, half of it in flight at
// some point of this round or the last (as Linux's tcp_is_cwnd_limited
// reads its max_packets_out), so that the acks of a flight's tail still
// grow the window the next flight will find.
func (c *Controller) inUse() bool {
	return c.inflight >= c.cwnd/2 || c.slowStart && max(c.peak, c.peakPrev) >= c.cwnd/2
}

// OnAcked reports a packet of n bytes sent at sent acknowledged at now;
// srtt is the connection's smoothed round trip.
func (c *Controller) OnAcked(n int, sent, now, srtt int64) {
	b := int64(n)
	limited := c.inUse() // the window was in use: it may grow
	c.inflight = max(c.inflight-b, 0)
	c.sample(now-sent, now, srtt)
	c.delivered += b
	if w := max(srtt, int64(50*time.Millisecond)); now-c.delivAt >= w {
		c.deliveryRate = c.delivered * 1e9 / (now - c.delivAt)
		c.delivered, c.delivAt = 0, now
	}
	if c.slowStart {
		// Slow start's own, shorter, samples of the delivery rate: the
		// queue that ends slow start began less than a round trip ago,
		// and a round trip's sample mostly averages the ramp before it.
		c.ssDelivered += b
		if now-c.ssAt >= max(srtt/4, ssRateWindow) {
			c.maxRate = max(c.maxRate, c.ssDelivered*1e9/(now-c.ssAt))
			c.ssDelivered, c.ssAt = 0, now
		}
	}
	c.round(sent, now, false)
	if c.drainUntil != 0 {
		if now < c.drainUntil {
			return
		}
		// Drained: climb back to the window the drain saved.
		c.drainUntil, c.slowStart, c.ssthresh = 0, true, c.drainSaved
	}
	qd := c.QueueDelay()
	switch {
	case c.competing:
		// Loss-based, as the flow that fills the queue is, whatever the
		// delay: a slow start from the window it had before it yielded
		// until the first loss (the queue is the other flow's, and the
		// window a yielding connection kept is a few packets), then
		// competeAlpha packets a round trip. (Growing as CUBIC does far
		// from its last loss took 0.87 of a link from NewReno; a
		// velocity that doubles up to 16 packets, 0.8.)
		if !limited {
			break
		}
		if c.slowStart {
			c.cwnd += b
			if c.ssthresh != 0 && c.cwnd >= c.ssthresh { // the window a drain saved
				c.slowStart, c.ssthresh = false, 0
			}
		} else {
			c.cwnd += competeAlpha * c.mss * b / c.cwnd
		}
	case c.slowStart:
		if qd > TargetDelay/2 || c.ssHigh >= ssAcks {
			c.exitSlowStart(now)
			break
		}
		if limited {
			c.cwnd += b
		}
		if c.ssthresh != 0 && c.cwnd >= c.ssthresh {
			c.slowStart, c.ssthresh = false, 0
		}
	case qd <= TargetDelay && limited && (c.cwnd >= gateWindow*c.mss || now-sent-c.StandingRTT() <= TargetDelay+c.ackDelay):
		// velocity packets per round trip, half that in the upper
		// half of the target. Decreases are decided once a round
		// (round).
		// The velocity is at most an eighth of the window, so that a
		// small window (a slow link) grows gently past its queue: below
		// eight packets an eighth of it (down to an eighth of a packet),
		// not a whole packet, because ten connections that each add a
		// packet a round trip to a 2 Mbit/s link's ten add a whole BDP.
		// A fixed eighth of a packet below eight (additive, which
		// converges where a proportional growth only keeps the shares)
		// kept that queue lower (p99 46 ms against 51) but left
		// connections near eight packets growing sixteen times as fast
		// as those just under it: two through 5 Mbit/s got 0.15 and
		// 1.82 of an equal share.
		v := min(c.velocity, c.cwnd/(8*c.mss)) * c.mss // whole packets from eight on
		if v == 0 {
			v = max(c.cwnd/8, c.mss/minPace)
		}
		inc := v * b / c.cwnd
		if qd > TargetDelay/2 {
			inc /= 2
		}
		c.cwnd += inc
		c.grew = true
	}
	c.cwnd = min(max(c.cwnd, c.floor()), MaxWindow)
}

// exitSlowStart ends slow start on the first sign of a queue. The delay
// that shows it is a round trip old, and the window doubled since: the
// window falls back to what the path delivers, the delivery rate times
// the base round trip plus half the target (or half the window, before a
// rate is known). The rate is the largest slow start measured, or the
// sample in progress if larger (once it holds ssPartialMin packets): a
// flight after an idle time (the next message) may show its queue in its
// first acks, before a sample of its own closes, and the samples before
// it are the previous flights' ramp (through 200 Mbit/s in netsim, 11
// MB/s measured against 19.6 in progress: the window fell to half the
// path's and every later 1 MiB message took two round trips).
func (c *Controller) exitSlowStart(now int64) {
	c.slowStart, c.ssthresh = false, 0
	w := c.cwnd / 2
	r := c.maxRate
	if c.ssDelivered >= ssPartialMin*c.mss && now > c.ssAt {
		r = max(r, c.ssDelivered*1e9/(now-c.ssAt))
	}
	if r > 0 && c.BaseRTT() > 0 {
		w = max(w, min(c.cwnd, r*(c.BaseRTT()+TargetDelay/2)/1e9))
	}
	c.cwnd = w
}

// OnLost reports a packet of n bytes sent at sent declared lost at now.
func (c *Controller) OnLost(n int, sent, now int64) {
	c.inflight = max(c.inflight-int64(n), 0)
	c.lostAt = now
	c.round(sent, now, true)
	switch {
	case sent >= c.recoveryUntil && (c.competing || c.QueueDelay() > 2*TargetDelay):
		// Far above the target: the queue overflows. Nearer it, a loss
		// is as likely the path's noise, and the delay rule acts.
		before, from := c.cwnd, c.recoveryUntil
		c.congestion(now)
		c.undo, c.undoFrom, c.undoN = before, from, 1
	case c.undo != 0 && sent >= c.undoFrom && sent < c.recoveryUntil:
		c.undoN++ // one more loss of the event that cut the window
	}
}

// OnTimeout reports a retransmission timeout: packets were in flight and
// none was acknowledged for a whole timeout (the sender's, backed off as
// it repeats). A lost packet among acknowledged ones is the path's noise
// (OnLost); a timeout is a peer that receives nothing or acknowledges
// nothing, and the window falls to MinWindow, as TCP's does on its RTO
// (RFC 5681 §3.1): the first timeout keeps half the window as the slow
// start's threshold, so that a path that comes back climbs to it in a
// few round trips; repeated ones keep that threshold. The sender stops
// counting the packets in flight as such (OnLost, before OnTimeout) and
// sends one probe per doubled timeout until an ack returns.
func (c *Controller) OnTimeout(now int64) {
	c.events++
	if c.sink != nil {
		c.sink.Add(1)
	}
	if c.cwnd > MinWindow*c.mss {
		c.ssthresh = max(c.cwnd/2, MinWindow*c.mss)
	}
	c.cwnd, c.slowStart, c.drainUntil, c.undo = MinWindow*c.mss, true, 0, 0
	// The losses of the flight the timeout ended (reported before it) are
	// this event, not a heavy round after it.
	c.recoveryUntil, c.roundStart, c.roundAcked, c.roundLost = now, now, 0, 0
	c.velocity, c.ups, c.grew = 1, 0, false
}

// OnLateAck reports that a packet sent at sent, reported lost before
// (OnLost), was acknowledged at now after all: its loss is not counted.
func (c *Controller) OnLateAck(sent, now, srtt int64) {
	c.sample(now-sent, now, srtt)
	if c.undo != 0 && sent >= c.undoFrom && sent < c.recoveryUntil {
		// Every loss of the event that cut the window was acknowledged
		// after all (declared lost while the queue grew faster than the
		// sender's timeout): the cut is undone, as quic-go's Reno does.
		if c.undoN--; c.undoN <= 0 {
			c.cwnd, c.undo = max(c.cwnd, c.undo), 0
		}
	}
	if c.roundLost > 0 {
		c.roundLost--
		c.roundAcked++
	}
}

// round counts a packet's fate in the current round, and ends the round
// once a packet sent after its start is reported: a round that lost
// heavily is congestion.
func (c *Controller) round(sent, now int64, lost bool) {
	if lost {
		c.roundLost++
	} else {
		c.roundAcked++
	}
	if sent < c.roundStart {
		return
	}
	heavy := false
	if n := c.roundLost + c.roundAcked; n >= heavyRound {
		heavy = c.roundLost*heavyLoss > n && sent >= c.recoveryUntil
		c.roundAcked, c.roundLost = 0, 0
	}
	qd := c.QueueDelay()
	if qd <= TargetDelay {
		c.withinAt = now
	}
	c.held = now-c.withinAt > holdAfter
	if !c.competing && !c.slowStart && qd <= TargetDelay {
		// The window before the cuts that a queue filler forces: the
		// one competing starts from. (The window when the queue first
		// passed three targets came after the cuts between one and
		// three, a few packets when the other flow's slow start was
		// steep: 0.30 of the link instead of 0.42 beside a CUBIC flow
		// of 32 packets started 1 s after ours.)
		c.yielded = c.cwnd
	}
	// The queue falls: the round's smallest sample is a quarter target
	// below the last round's.
	falling := c.roundMin != 0 && c.roundMin < c.roundMinPrev-TargetDelay/4
	c.roundMinPrev, c.roundMin = c.roundMin, 0
	c.compete(qd, falling, now)
	if heavy {
		c.congestion(now)
	} else if !c.competing && !c.slowStart && c.drainUntil == 0 && qd > TargetDelay && c.standPrevAt >= c.cutAt {
		// Above the target: a cut in proportion to the excess, at
		// least 1/8 and at most half the window. Once a round,
		// because the delay that says so lags the window by a round
		// trip, and only once the standing delay is made of samples
		// taken after the last cut (the last standing window began
		// after it): a connection that sends a packet a round trip
		// takes several round trips to fill a standing window, and cut
		// again each round on the delay the cut already answered (ten
		// through 2 Mbit/s used 90 % of the link, 93 % with this).
		// Every connection through the queue sees the same delay and
		// cuts the same fraction: with the constant growth below the
		// target, that is AIMD, and the shares converge.
		cut := max(min(qd-TargetDelay, TargetDelay)*c.cwnd/(2*TargetDelay), c.cwnd/8)
		c.cwnd = max(c.cwnd-cut, c.floor())
		c.cutAt = now
		c.velocity, c.ups = 1, 0
	} else if c.grew {
		// Three rounds of growth in a row double the velocity: a
		// path much faster than the window is found in a few round
		// trips, not hundreds.
		if c.ups++; c.ups >= 3 {
			c.velocity, c.ups = min(2*c.velocity, maxVelocity), 0
		}
	}
	c.grew = false
	c.roundStart = now
	c.peakPrev, c.peak = c.peak, c.inflight
}

// CountEvents makes the controller add its congestion events to p too
// (a server's total, for its metrics).
func (c *Controller) CountEvents(p *atomic.Uint64) { c.sink = p }

// compete switches between the delay target and competing, once a round.
// A queue that stays far above the target for competeRounds rounds while
// the window is cut each of them is not this connection's: another flow
// fills it (a loss-based TCP or QUIC flow), and one that yields to it gets
// nothing. The connection then competes by loss, as that flow does, in
// slow start from the window it had before it yielded, until the queue
// stays near empty as many rounds, or a drain shows it near empty (the
// other flow left).
//
// Nor does a round before the connection's first drain (firstSlot):
// until then a queue three targets deep is as likely connections of ours
// that started into one another's queue and took it for their base, and
// the first drain, which all of them run within a slot or two, shows
// which (ten through 5 Mbit/s started 50 ms apart: two of them competed
// 1.1 s after the start, with seven still holding the queue on bases 70
// to 90 ms too high, and then all of them, with the queue full until
// their competing drains at 10 s; the guard costs beside CUBIC started
// together 0.35 of the link over 5-15 s, not 0.38).
//
// A round whose queue falls (falling) does not count: the queue is
// going, so this connection's cuts, or others', work. Ten of ours that
// overfilled a 64 KiB queue together in slow start otherwise counted
// four rounds three targets deep while it drained, and competed.
func (c *Controller) compete(qd int64, falling bool, now int64) {
	switch {
	case c.slowStart:
	case c.drainUntil != 0:
		if c.competing && qd < TargetDelay/2 {
			c.competing, c.over, c.left = false, 0, now
			// The window competing built is the other flow's share:
			// back at the delay target, climb to the last window the
			// target held (yielded), not to it.
			c.drainSaved = min(c.drainSaved, max(c.yielded, MinWindow*c.mss))
			c.cwnd = min(c.cwnd, c.drainSaved)
		}
	case c.competing:
		if qd >= TargetDelay/2 {
			c.over = 0
		} else if c.over++; c.over >= competeRounds {
			c.competing, c.over, c.left = false, 0, now
		}
	case qd > 3*TargetDelay || c.left != 0 && now-c.left < competeMemory && qd > TargetDelay:
		if falling || c.firstAt >= 0 {
			break
		}
		if c.over == 0 {
			c.overAt = now
		}
		if c.over++; c.over >= competeRounds {
			if c.slotAt < c.overAt && c.lostAt < c.overAt && (c.left == 0 || now-c.left >= competeMemory) {
				// A queue that deep and no loss: as likely connections
				// of ours that started into one another's queue and
				// hold it on bases too high. Drain first, in the next
				// shared slot (firstAt), where theirs drain too; the
				// next round still that deep, after it, competes. (Not
				// within competeMemory: the filler was seen before.)
				c.firstAt, c.over = 0, competeRounds-1
				break
			}
			c.competing, c.over = true, 0
			c.cwnd = max(c.cwnd, c.yielded)
			c.slowStart, c.ssthresh = true, 0
			c.nearBase = now // drains from the next competeProbe slot on
		}
	default:
		c.over = 0
	}
}

// congestion cuts the window once per round trip of losses.
func (c *Controller) congestion(now int64) {
	c.events++
	if c.sink != nil {
		c.sink.Add(1)
	}
	c.slowStart, c.ssthresh, c.undo = false, 0, 0
	c.cwnd = max(c.cwnd*competeBeta/10, c.floor()) // CUBIC's β, competing or not
	c.recoveryUntil = now
	c.velocity, c.ups = 1, 0
}

// sample folds an RTT sample into the base and standing minimums.
func (c *Controller) sample(s, now, srtt int64) {
	if s <= 0 {
		return
	}
	c.latest = s
	if c.roundMin == 0 || s < c.roundMin {
		c.roundMin = s
	}
	// Slow start's early exit: the standing RTT lags by up to a round
	// trip while the window doubles; ssAcks acks in a row a quarter
	// of the target above the base show the queue sooner. An ack is
	// judged by its smallest sample, its newest packet's: the older ones
	// it covers waited at the receiver for the newest, up to its
	// AckDelay, and read one by one they ended slow starts on empty
	// paths (a 1 MiB message over 50 ms then took 1.0 s instead of 0.5:
	// docs/decisions.md, "The early exit"). The samples of one ack share
	// its arrival time (now); the ack is judged when the next one comes.
	if now != c.instAt {
		// A new ack: judge the last one's smallest sample, allowing
		// for the peer's AckDelay unless it acknowledged a prompt ack's
		// packets (promptAck).
		thr := ssExitDelay
		if c.instN < promptAck {
			thr += c.ackDelay
		}
		if c.slowStart && c.base[0] != 0 && c.instMin-c.BaseRTT() > thr {
			c.ssHigh++
		} else {
			c.ssHigh = 0
		}
		c.instAt, c.instMin, c.instN = now, s, 1
	} else {
		c.instMin = min(c.instMin, s)
		c.instN++
	}
	if c.base[0] == 0 || s < c.base[0] {
		c.base[0] = s
	}
	if s-c.BaseRTT() <= TargetDelay/4 {
		c.nearBase = now
	}
	due := now-c.nearBase >= probeInterval
	first := false
	if c.firstAt >= 0 && !c.slowStart && !c.competing {
		// The first drain, in the first firstSlot slot two round trips
		// after slow start ended. (A connection does not compete before
		// it, see compete; competing drains have slots of their own.)
		if c.firstAt == 0 {
			c.firstAt = (now+2*srtt)/firstSlot*firstSlot + firstSlot
		}
		first = now >= c.firstAt && c.drainUntil == 0
	}
	if c.competing {
		// The queue is another flow's: a drain tells only whether it
		// left, and all of this host's competing connections drain in
		// the same slot (competeProbe).
		due = now/competeProbe != c.nearBase/competeProbe
	}
	if first || due && !c.slowStart && c.drainUntil == 0 {
		// No sample near the base for probeInterval: drain for two
		// round trips, so that this connection's own queue is gone.
		// A connection that started while another held the queue took
		// that queue for the path's base; when it drains, the queue
		// the other (starved by it, near two packets) leaves is next
		// to nothing, and its base comes right (BBR's ProbeRTT).
		c.drainSaved, c.drainUntil, c.nearBase = c.cwnd, now+2*max(srtt, c.StandingRTT()), now
		if first {
			c.firstAt, c.slotAt = -1, now
		}
	}
	if now-c.baseAt >= baseBucket {
		c.base[1], c.base[0], c.baseAt = c.base[0], s, now
	}
	if c.standCur == 0 || s < c.standCur {
		c.standCur = s
	}
	c.standN++
	if now-c.standAt >= max(srtt/2, minStandWindow) && c.standN >= standSamples {
		c.standPrev, c.standCur, c.standPrevAt, c.standAt, c.standN = c.standCur, 0, c.standAt, now, 0
	}
}

// BaseRTT is the path's round trip without queue (0 before a sample).
func (c *Controller) BaseRTT() int64 {
	if c.base[1] != 0 && c.base[1] < c.base[0] {
		return c.base[1]
	}
	return c.base[0]
}

// StandingRTT is the smallest round trip of the last half to whole
// smoothed round trip (0 before a sample).
func (c *Controller) StandingRTT() int64 {
	s := c.standCur
	if s == 0 || c.standPrev != 0 && c.standPrev < s {
		s = c.standPrev
	}
	return s
}

// QueueDelay is the standing round trip less the base: the queue this
// connection's packets wait in.
func (c *Controller) QueueDelay() int64 { return max(c.StandingRTT()-c.BaseRTT(), 0) }

// PacingRate is the rate packets should leave at, in bytes per second:
// 1.5 (slow start) or 1.25 windows per smoothed round trip, at most the
// ceiling. A slow start paced at twice the window builds a round trip's
// worth of queue before its delay shows (the game's p99 through a 20
// Mbit/s link: +36 ms at 2, +16 ms at 1.5). The round trip is at least
// the standing one: the sender's smoothed round trip comes from the
// packet layer, which samples only the newest 128 packets it tracks, so
// with a larger window it holds the round trip of the last moment the
// flight was small (74 ms beside quic-go on real sockets, with 141 ms
// standing), and the pacer sent at twice the window a round trip.
func (c *Controller) PacingRate(srtt int64) int64 {
	srtt = max(srtt, c.StandingRTT(), int64(100*time.Microsecond))
	w := c.paceWindow()
	if w == c.rateW && srtt == c.rateRTT && c.slowStart == c.rateSS {
		return c.rate // a sender asks several times a packet: no division
	}
	c.rateW, c.rateRTT, c.rateSS = w, srtt, c.slowStart
	r := w * 1e9 / srtt
	if c.slowStart {
		r += r / 2
	} else {
		r += r / 4
	}
	c.rate = min(r, c.ceiling)
	return c.rate
}

// Stats is a snapshot of a controller.
type Stats struct {
	Window       int64 // bytes the sender may have in flight
	InFlight     int64 // bytes in flight
	DeliveryRate int64 // bytes per second acknowledged over the last round trip (at least 50 ms)
	BaseRTT      time.Duration
	QueueDelay   time.Duration
	SlowStart    bool
	Competing    bool   // beside a flow that fills the queue: loss-based for now
	Events       uint64 // congestion events (window cuts for loss)
}

// Stats returns the controller's state.
func (c *Controller) Stats() Stats {
	return Stats{Window: c.window(), InFlight: c.inflight, DeliveryRate: c.deliveryRate,
		BaseRTT: time.Duration(c.BaseRTT()), QueueDelay: time.Duration(c.QueueDelay()),
		SlowStart: c.slowStart, Competing: c.competing, Events: c.events}
}
