package congestion

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// A packet-level simulation of flows through one bottleneck: a drop-tail
// queue drained at a fixed rate, a one-way delay each way, random loss on
// top, and a receiver that acknowledges every packet at once. Senders are
// greedy, paced by the controller, and learn a packet's loss when a later
// one is acknowledged (the link keeps order). Time moves in steps of
// simStep, the sender's timer granularity.

const (
	simMSS  = 1200
	simStep = int64(100 * time.Microsecond)
)

type simPkt struct {
	seq      int64
	sent     int64
	arrive   int64 // at the sender, as an ack; 0: dropped
	received bool
}

// simCC is what a simulated sender asks of its controller.
type simCC interface {
	CanSend() bool
	OnSent(n int, now int64)
	OnAcked(n int, sent, now, srtt int64)
	OnLost(n int, sent, now int64)
	PacingRate(srtt int64) int64
}

// reno is a loss-based competitor in the shape of quic-go's NewReno with
// its pacer: slow start, one packet a round trip, half the window at a
// loss (once a round trip), paced at 1.25 windows a round trip. It fills
// any queue before it backs off.
type reno struct {
	cwnd, inflight, ssthresh int64
	recovery                 int64
}

func (r *reno) CanSend() bool           { return r.inflight < r.cwnd }
func (r *reno) OnSent(n int, now int64) { r.inflight += int64(n) }
func (r *reno) OnAcked(n int, sent, now, srtt int64) {
	r.inflight -= int64(n)
	if r.cwnd < r.ssthresh {
		r.cwnd += int64(n)
	} else {
		r.cwnd += simMSS * int64(n) / r.cwnd
	}
}
func (r *reno) OnLost(n int, sent, now int64) {
	r.inflight -= int64(n)
	if sent < r.recovery {
		return
	}
	r.cwnd = max(r.cwnd/2, 2*simMSS)
	r.ssthresh, r.recovery = r.cwnd, now
}
func (r *reno) PacingRate(srtt int64) int64 { return r.cwnd * 1e9 / max(srtt, 1) * 5 / 4 }

// cubic is a loss-based competitor in the shape of quic-go's default
// sender (CUBIC, RFC 8312, with its Reno-friendly region and fast
// convergence; β 0.7, C 0.4), paced at 1.25 windows a round trip: what
// bench's bn-vs-quic runs against.
type cubic struct {
	cwnd, inflight, ssthresh int64
	recovery                 int64
	wmax, lastMax, k         float64 // packets; k in seconds
	epoch                    int64   // start of the growth since the last loss; 0: none yet
	minRTT                   int64
}

func (c *cubic) CanSend() bool           { return c.inflight < c.cwnd }
func (c *cubic) OnSent(n int, now int64) { c.inflight += int64(n) }
func (c *cubic) OnAcked(n int, sent, now, srtt int64) {
	c.inflight -= int64(n)
	if rtt := now - sent; c.minRTT == 0 || rtt < c.minRTT {
		c.minRTT = rtt
	}
	if c.cwnd < c.ssthresh {
		c.cwnd += int64(n)
		return
	}
	if c.epoch == 0 {
		c.epoch = now
		w := float64(c.cwnd) / simMSS
		if w < c.wmax {
			c.k = math.Cbrt((c.wmax - w) / 0.4)
		} else {
			c.k, c.wmax = 0, w
		}
	}
	t := float64(now-c.epoch+c.minRTT) / 1e9
	target := 0.4*math.Pow(t-c.k, 3) + c.wmax
	// The Reno-friendly window: what AIMD with β 0.7 would have.
	reno := c.wmax*0.7 + 3*(1-0.7)/(1+0.7)*float64(now-c.epoch)/float64(max(srtt, 1))
	target = max(target, reno)
	w := float64(c.cwnd) / simMSS
	if target > w {
		c.cwnd += int64((target - w) / w * float64(n))
	} else {
		c.cwnd += int64(float64(n) / (100 * w))
	}
}
func (c *cubic) OnLost(n int, sent, now int64) {
	c.inflight -= int64(n)
	if sent < c.recovery {
		return
	}
	w := float64(c.cwnd) / simMSS
	if w < c.lastMax {
		c.lastMax, c.wmax = w, w*(1+0.7)/2 // fast convergence
	} else {
		c.lastMax, c.wmax = w, w
	}
	c.cwnd = max(c.cwnd*7/10, 2*simMSS)
	c.ssthresh, c.recovery, c.epoch = c.cwnd, now, 0
}
func (c *cubic) PacingRate(srtt int64) int64 { return c.cwnd * 1e9 / max(srtt, 1) * 5 / 4 }

// quicReno is quic-go v0.65's sender as bench's bn-vs-quic meets it
// (sent_packet_handler.go makes its cubicSender with reno true): 32
// packets to start, slow start left at a loss or by HyStart (a round's
// smallest of its first 8 samples more than minRTT/8, clamped to 4-16 ms,
// above the smallest ever, once the window is 16 packets), then one packet
// a round trip, 0.7 of the window at a loss (renoBeta), no growth in
// recovery, paced at 1.25 windows a round trip.
type quicReno struct {
	cwnd, inflight, ssthresh int64
	recovery                 int64
	acked                    int64 // packets acknowledged since the last increase
	minRTT                   int64
	roundStart, roundMin     int64
	roundN                   int
}

func newQuicReno() *quicReno { return &quicReno{cwnd: 32 * simMSS, ssthresh: 1 << 40} }

func (r *quicReno) CanSend() bool           { return r.inflight < r.cwnd }
func (r *quicReno) OnSent(n int, now int64) { r.inflight += int64(n) }
func (r *quicReno) OnAcked(n int, sent, now, srtt int64) {
	r.inflight -= int64(n)
	rtt := now - sent
	if r.minRTT == 0 || rtt < r.minRTT {
		r.minRTT = rtt
	}
	if r.cwnd < r.ssthresh {
		if sent >= r.roundStart { // a packet of the next round: a new round
			r.roundStart, r.roundMin, r.roundN = now, 0, 0
		}
		if r.roundN < 8 {
			r.roundN++
			if r.roundMin == 0 || rtt < r.roundMin {
				r.roundMin = rtt
			}
			thr := min(max(r.minRTT/8, int64(4*time.Millisecond)), int64(16*time.Millisecond))
			if r.roundN == 8 && r.cwnd >= 16*simMSS && r.roundMin > r.minRTT+thr {
				r.ssthresh = r.cwnd
				return
			}
		}
		r.cwnd += int64(n)
		return
	}
	if sent < r.recovery {
		return
	}
	if r.acked++; r.acked >= r.cwnd/simMSS {
		r.cwnd += simMSS
		r.acked = 0
	}
}
func (r *quicReno) OnLost(n int, sent, now int64) {
	r.inflight -= int64(n)
	if sent < r.recovery {
		return
	}
	r.cwnd = max(r.cwnd*7/10, 2*simMSS)
	r.ssthresh, r.recovery, r.acked = r.cwnd, now, 0
}
func (r *quicReno) PacingRate(srtt int64) int64 { return r.cwnd * 1e9 / max(srtt, 1) * 5 / 4 }

type simFlow struct {
	c        simCC
	rtt      RTTStats
	p        Pacer
	out      []simPkt // sent, not yet reported, in order
	lastAck  int64
	next     int64
	start    int64
	got      []int64 // bytes delivered to the receiver per 100 ms bucket
	sentN    uint64
	lostRand uint64
}

type simLink struct {
	rate    int64 // bytes per second
	queue   int64 // bytes
	delay   int64 // one way
	loss    float64
	lastDep int64
	offered uint64
	dropped uint64
	// offeredLate, droppedLate: from qFrom.
	offeredLate, droppedLate uint64
	qdelays                  []int64 // the queue's delay at each packet's arrival at it, from qFrom
	qFrom                    int64
	rng                      *rand.Rand
}

func (l *simLink) enqueue(now int64) (recv int64, ok bool) {
	l.offered++
	late := now >= l.qFrom
	if late {
		l.offeredLate++
	}
	if l.loss > 0 && l.rng.Float64() < l.loss {
		return 0, false
	}
	wait := max(l.lastDep-now, 0)
	if wait*l.rate/1e9+simMSS > l.queue {
		l.dropped++
		if late {
			l.droppedLate++
		}
		return 0, false
	}
	if now >= l.qFrom {
		l.qdelays = append(l.qdelays, wait)
	}
	l.lastDep = max(l.lastDep, now) + simMSS*1e9/l.rate
	return l.lastDep + l.delay, true
}

type simResult struct {
	share     []float64 // each flow's goodput ÷ link, from measureFrom
	total     float64
	dropPct   float64
	dropLate  float64       // % from measureFrom
	qdelayP99 time.Duration // from measureFrom
	first85   time.Duration // when the total goodput of a 100 ms bucket first reached 85 %
}

func simulate(t *testing.T, rate, queue int64, loss float64, flows int, dur, measureFrom time.Duration, seed uint64) simResult {
	return simulateStaggered(t, rate, queue, loss, flows, 0, dur, measureFrom, seed, nil)
}

// simulateStaggered starts flow i at i × stagger; others[i], when given
// and not nil, is flow i's controller instead of a Controller (a
// loss-based competitor).
func simulateStaggered(t *testing.T, rate, queue int64, loss float64, flows int, stagger, dur, measureFrom time.Duration, seed uint64, others []simCC) simResult {
	t.Helper()
	l := &simLink{rate: rate, queue: queue, delay: int64(25 * time.Millisecond), loss: loss,
		rng: rand.New(rand.NewPCG(seed, seed+1)), qFrom: int64(measureFrom)}
	fs := make([]*simFlow, flows)
	buckets := int(dur / (100 * time.Millisecond))
	for i := range fs {
		f := &simFlow{got: make([]int64, buckets+1), start: int64(i) * int64(stagger)}
		if i < len(others) && others[i] != nil {
			f.c = others[i]
		} else {
			c := new(Controller)
			c.Init(simMSS, 0, 0, f.start)
			f.c = c
		}
		fs[i] = f
	}
	end := int64(dur)
	for now := int64(0); now < end; now += simStep {
		for _, f := range fs {
			if now < f.start {
				continue
			}
			// Acks and losses due by now.
			for len(f.out) > 0 {
				p := f.out[0]
				if p.received {
					if p.arrive > now {
						break
					}
					f.rtt.Update(now - p.sent)
					f.c.OnAcked(simMSS, p.sent, now, f.rtt.Smoothed())
					f.lastAck = now
				} else {
					// Lost: known once a later packet's ack is back,
					// or, when none comes (every packet of the flight
					// lost), at the sender's timeout: no ack for the
					// RTO and a quarter round trip since it was sent
					// (message.Endpoint's age).
					later := now-max(f.lastAck, p.sent) > f.rtt.RTO()+f.rtt.Smoothed()/4
					for _, q := range f.out[1:] {
						if q.received && q.arrive <= now {
							later = true
							break
						}
					}
					if !later {
						break
					}
					f.c.OnLost(simMSS, p.sent, now)
				}
				f.out = f.out[1:]
			}
			// Send what the window and the pacer allow.
			f.p.Refill(now, f.c.PacingRate(f.rtt.Smoothed()), 2*simMSS)
			for f.c.CanSend() && f.p.Positive() {
				recv, ok := l.enqueue(now)
				p := simPkt{seq: f.next, sent: now, received: ok}
				if ok {
					p.arrive = recv + l.delay
					if b := int((recv) / int64(100*time.Millisecond)); b < len(f.got) {
						f.got[b] += simMSS
					}
				}
				f.next++
				f.sentN++
				f.out = append(f.out, p)
				f.c.OnSent(simMSS, now)
				f.p.Spend(simMSS)
			}
		}
	}
	var r simResult
	from := int(measureFrom / (100 * time.Millisecond))
	perBucket := float64(rate) / 10
	r.first85 = -1
	for b := 0; b < buckets; b++ {
		var sum int64
		for _, f := range fs {
			sum += f.got[b]
		}
		if r.first85 < 0 && float64(sum) >= 0.85*perBucket {
			r.first85 = time.Duration(b+1) * 100 * time.Millisecond
		}
	}
	for _, f := range fs {
		var sum int64
		for b := from; b < buckets; b++ {
			sum += f.got[b]
		}
		s := float64(sum) / (perBucket * float64(buckets-from))
		r.share = append(r.share, s)
		r.total += s
	}
	r.dropPct = 100 * float64(l.dropped) / float64(l.offered)
	r.dropLate = 100 * float64(l.droppedLate) / float64(max(l.offeredLate, 1))
	q := slices.Clone(l.qdelays)
	slices.Sort(q)
	r.qdelayP99 = time.Duration(q[len(q)*99/100])
	return r
}

func TestSimFitsTheLink(t *testing.T) {
	for _, tc := range []struct {
		mbit  int64
		queue int64
	}{{2, 64 << 10}, {20, 256 << 10}, {100, 1 << 20}} {
		t.Run(fmt.Sprintf("%dMbit", tc.mbit), func(t *testing.T) {
			r := simulate(t, tc.mbit*1e6/8, tc.queue, 0, 1, 10*time.Second, 2*time.Second, 1)
			t.Logf("goodput %.1f %% of the link, drops %.2f %%, queue p99 %v, 85 %% reached at %v", 100*r.total, r.dropPct, r.qdelayP99, r.first85)
			if r.total < 0.85 || r.dropPct > 2 || r.qdelayP99 > 25*time.Millisecond || r.first85 < 0 || r.first85 > 2*time.Second {
				t.Errorf("want goodput ≥ 85 %% within 2 s, drops ≤ 2 %%, queue p99 ≤ 25 ms")
			}
		})
	}
}

func TestSimRandomLossIsNotCongestion(t *testing.T) {
	r := simulate(t, 50e6/8, 1<<20, 0.05, 1, 10*time.Second, 2*time.Second, 2)
	t.Logf("goodput %.1f %% of the link at 5 %% loss, queue p99 %v", 100*r.total, r.qdelayP99)
	if r.total < 0.70 {
		t.Errorf("goodput %.1f %%, want ≥ 70 %%", 100*r.total)
	}
}

func TestSimFair(t *testing.T) {
	for _, n := range []int{2, 10} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			r := simulate(t, 20e6/8, 256<<10, 0, n, 15*time.Second, 5*time.Second, 3)
			t.Logf("shares of an equal share: %v; total %.1f %%, queue p99 %v", scaled(r.share, float64(n)), 100*r.total, r.qdelayP99)
			for i, s := range r.share {
				if x := s * float64(n); x < 0.75 || x > 1.33 {
					t.Errorf("flow %d got %.2f × an equal share, want 0.75–1.33", i, x)
				}
			}
		})
	}
}

func scaled(v []float64, k float64) []string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprintf("%.2f", x*k))
	}
	return s
}

// A connection that starts while another holds the queue at the target
// measures a base round trip that includes that queue; the drain that
// ends a bucket whose minimum never came back down shows both the path's
// base again.
func TestSimLatecomer(t *testing.T) {
	r := simulateStaggered(t, 20e6/8, 256<<10, 0, 2, 10*time.Second, 100*time.Second, 75*time.Second, 4, nil)
	t.Logf("shares of an equal share after 65 s together: %v; total %.1f %%, queue p99 %v", scaled(r.share, 2), 100*r.total, r.qdelayP99)
	if r.qdelayP99 > 25*time.Millisecond {
		t.Errorf("queue p99 %v: the two took each other for a queue filler (compete), want ≤ 25 ms", r.qdelayP99)
	}
	for i, s := range r.share {
		if x := s * 2; x < 0.75 || x > 1.33 {
			t.Errorf("flow %d got %.2f × an equal share, want 0.75–1.33", i, x)
		}
	}
}

// stopAt ends a flow's sending at a time (a competitor that leaves).
type stopAt struct {
	simCC
	at, now int64
}

func (s *stopAt) CanSend() bool { return s.now < s.at && s.simCC.CanSend() }
func (s *stopAt) OnAcked(n int, sent, now, srtt int64) {
	s.now = now
	s.simCC.OnAcked(n, sent, now, srtt)
}
func (s *stopAt) OnLost(n int, sent, now int64) {
	s.now = now
	s.simCC.OnLost(n, sent, now)
}

// Beside a loss-based flow that fills the queue, a delay-based controller
// that only yields gets nothing (0.01 of the link here, before compete).
// Once the queue stays three targets deep through four of its cuts, it
// competes (loss-based itself: a slow start to the first loss, then
// AIMD(2, 0.7)) and gets 30-70 % of the link. Through 20 Mbit/s and a
// 256 KiB queue (2 BDP), as bench's bn-vs-quic runs it, against NewReno,
// CUBIC and the sender bench meets (quic-go v0.65: Reno with β 0.7 and
// HyStart), with our flow starting first by 1 s or both together, over
// bench's window (5 s to 15 s after the later flow's start) and over a
// longer one (10 s to 30 s).
//
// Limits (docs/decisions.md): a queue shallower than the path's BDP is
// emptied by every loss cut of the other flow and never stays three
// targets deep, so there the controller keeps yielding; at 4 BDP (512
// KiB) CUBIC's longer cycles leave it about 0.15 over bench's window; a
// connection that starts after the other flow filled the queue takes part
// of that queue for its base and detects it late; and a flow that grows
// one packet a round trip from a window HyStart left short of the link
// (quic-go's, started 0.5 s or 2 s after ours) creeps the queue up near
// the target for seconds, below the three targets that show a queue
// filler, while the controller yields: 0.26-0.33 of the link over bench's
// window then, 0.61 over the longer one.
func TestSimBesideLossBased(t *testing.T) {
	for _, tc := range []struct {
		name    string
		other   func() simCC
		stagger time.Duration // our flow starts this much before the other
	}{
		{"CUBIC/together", func() simCC { return &cubic{cwnd: 10 * simMSS, ssthresh: 1 << 40} }, 0},
		{"CUBIC/ours-first", func() simCC { return &cubic{cwnd: 10 * simMSS, ssthresh: 1 << 40} }, time.Second},
		{"NewReno/together", func() simCC { return &reno{cwnd: 10 * simMSS, ssthresh: 1 << 40} }, 0},
		{"NewReno/ours-first", func() simCC { return &reno{cwnd: 10 * simMSS, ssthresh: 1 << 40} }, time.Second},
		{"quic-go/together", func() simCC { return newQuicReno() }, 0},
		{"quic-go/ours-first", func() simCC { return newQuicReno() }, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, w := range []struct{ from, to time.Duration }{{5 * time.Second, 15 * time.Second}, {10 * time.Second, 30 * time.Second}} {
				r := simulateStaggered(t, 20e6/8, 256<<10, 0, 2, tc.stagger, tc.stagger+w.to, tc.stagger+w.from, 5, []simCC{nil, tc.other()})
				t.Logf("%v to %v after the later start: delay-based %.2f, other %.2f of the link; queue p99 %v", w.from, w.to, r.share[0], r.share[1], r.qdelayP99)
				if r.share[0] < 0.30 || r.share[0] > 0.70 {
					t.Errorf("%v to %v: the delay-based flow got %.2f of the link, want 0.30–0.70", w.from, w.to, r.share[0])
				}
			}
		})
	}
}

// Once the queue filler leaves, a competing connection goes back to the
// delay target within a drain slot (competeProbe): the queue empties as
// it is cut below the path's BDP, or at its next drain. Two of ours that
// compete with each other once the filler left drain in the same slot,
// see the queue empty and both go back.
func TestSimCompetitorLeaves(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			others := make([]simCC, n+1)
			others[n] = &stopAt{simCC: &cubic{cwnd: 10 * simMSS, ssthresh: 1 << 40}, at: int64(15 * time.Second)}
			// Ours start 3 s apart, the filler 3 s after the last.
			r := simulateStaggered(t, 20e6/8, 256<<10, 0, n+1, 3*time.Second, 40*time.Second, 27*time.Second, 5, others)
			t.Logf("from 27 s to 40 s (CUBIC left at 15 s): shares %v, queue p99 %v", scaled(r.share, 1), r.qdelayP99)
			if r.total-r.share[n] < 0.85 || r.qdelayP99 > 25*time.Millisecond {
				t.Errorf("ours got %.2f of the link and a queue p99 of %v after the competitor left, want ≥ 0.85 and ≤ 25 ms", r.total-r.share[n], r.qdelayP99)
			}
		})
	}
}

// competeWatch records whether its controller ever competed.
type competeWatch struct {
	*Controller
	competed bool
}

func (w *competeWatch) OnAcked(n int, sent, now, srtt int64) {
	w.Controller.OnAcked(n, sent, now, srtt)
	w.competed = w.competed || w.Stats().Competing
}

// Connections of ours never take each other for a queue filler: a
// latecomer whose base includes the queue it found pushes the queue to
// about twice the target while the other yields to it, which a rule
// that competes on the queue above the target once the window fell to a
// quarter (tried: it took 0.26 to 0.55 of the link beside a quic-go flow
// started 0.5 s after ours) read as one, both then competing with the
// queue full until their drain.
func TestSimOwnLatecomersDoNotCompete(t *testing.T) {
	for _, lag := range []time.Duration{time.Second, 3 * time.Second} {
		for _, mbit := range []int64{10, 20, 100} {
			t.Run(fmt.Sprintf("%v/%dMbit", lag, mbit), func(t *testing.T) {
				var ws []*competeWatch
				var ccs []simCC
				for i := range 2 {
					w := &competeWatch{Controller: new(Controller)}
					w.Init(simMSS, 0, 0, int64(i)*int64(lag))
					ws, ccs = append(ws, w), append(ccs, w)
				}
				q := int64(256 << 10)
				if mbit >= 50 {
					q = 1 << 20
				}
				r := simulateStaggered(t, mbit*1e6/8, q, 0, 2, lag, lag+30*time.Second, lag+5*time.Second, 4, ccs)
				for i, w := range ws {
					if w.competed {
						t.Errorf("connection %d competed (shares %v, queue p99 %v)", i, scaled(r.share, 2), r.qdelayP99)
					}
				}
			})
		}
	}
}

// Many connections through a slow link: ten at 2 Mbit/s need about one
// packet each a 50 ms round trip (the link's BDP is about ten packets),
// below MinWindow, so the pacing rate, not only the window, must fall
// there for the queue to stay short (issue 28). Before the pacing window
// could fall below MinWindow, ten at 2 Mbit/s dropped 22 % of the
// datagrams with the queue full (257 ms): the queue stayed three targets
// deep, and they took each other for a queue filler (compete).
//
// The drops are counted after the warm-up: the ten slow starts at the
// same instant overfill the 64 KiB queue once (about 3 % of the whole
// run's datagrams at 2 Mbit/s), which no later control undoes. The queue
// is held to 55 ms, the "about 50 ms" and one 2 Mbit/s packet:
// the simulated queue moves in whole packets (4.8 ms each there).
func TestSimManyThroughSlowLink(t *testing.T) {
	for _, tc := range []struct {
		n    int
		mbit int64
	}{{5, 2}, {10, 2}, {10, 5}} {
		t.Run(fmt.Sprintf("%d/%dMbit", tc.n, tc.mbit), func(t *testing.T) {
			r := simulate(t, tc.mbit*1e6/8, 64<<10, 0, tc.n, 15*time.Second, 5*time.Second, 6)
			t.Logf("drops %.2f %% (%.2f %% after the warm-up), queue p99 %v, total %.1f %%, shares of an equal share %v", r.dropPct, r.dropLate, r.qdelayP99, 100*r.total, scaled(r.share, float64(tc.n)))
			if r.dropLate > 2 || r.qdelayP99 > 55*time.Millisecond || r.total < 0.80 {
				t.Errorf("want drops ≤ 2 %% after the warm-up, queue p99 ≤ 55 ms, goodput ≥ 80 %%")
			}
			for i, s := range r.share {
				if x := s * float64(tc.n); x < 0.75 || x > 1.33 {
					t.Errorf("flow %d got %.2f × an equal share, want 0.75–1.33", i, x)
				}
			}
		})
	}
}

// TestSimStartMatrix runs two to twenty connections through 2 to 20
// Mbit/s links with a 64 KiB queue, started together or 3 ms to 3 s
// apart: a case holds when the queue's p99 stays within 55 ms, the
// connections use 80 % of the link and each gets 0.75–1.33 of an equal
// share over the last 10 s (tuning.md, "Many connections through a slow
// link"). Every case holds but those of startMatrixFails, which the test
// logs (and names if one of them holds now, so that the list shrinks). It
// logs the whole table, and takes about 2 s.
func TestSimStartMatrix(t *testing.T) {
	staggers := []time.Duration{0, 3 * time.Millisecond, 17 * time.Millisecond, 50 * time.Millisecond, 230 * time.Millisecond,
		500 * time.Millisecond, time.Second, 2 * time.Second, 3 * time.Second}
	pass, all := 0, 0
	for _, tc := range []struct {
		n    int
		mbit int64
	}{{5, 2}, {10, 2}, {10, 5}, {3, 2}, {20, 5}, {2, 2}, {2, 5}, {3, 5}, {4, 5}, {2, 3}, {5, 10}, {10, 10}, {10, 20}} {
		line := fmt.Sprintf("%d through %d Mbit/s:", tc.n, tc.mbit)
		for _, st := range staggers {
			end := 15*time.Second + time.Duration(tc.n)*st
			r := simulateStaggered(t, tc.mbit*1e6/8, 64<<10, 0, tc.n, st, end, end-10*time.Second, 1, nil)
			lo, hi := math.Inf(1), 0.0
			for _, s := range r.share {
				lo, hi = min(lo, s*float64(tc.n)), max(hi, s*float64(tc.n))
			}
			ok := r.qdelayP99 <= 55*time.Millisecond && r.total >= 0.80 && lo >= 0.75 && hi <= 1.33
			all++
			mark := ""
			if ok {
				pass++
			} else {
				mark = " ✗"
			}
			got := fmt.Sprintf("queue p99 %.1f ms, %.1f %% of the link, %.2f–%.2f of an equal share", float64(r.qdelayP99)/1e6, 100*r.total, lo, hi)
			line += fmt.Sprintf(" %v apart %.0f ms %.0f %% %.2f–%.2f%s;", st, float64(r.qdelayP99)/1e6, 100*r.total, lo, hi, mark)
			key := fmt.Sprintf("%d/%d/%v", tc.n, tc.mbit, st)
			if full := r.qdelayP99 > 60*time.Millisecond; full && !startMatrixFull[key] {
				t.Errorf("%d through %d Mbit/s started %v apart: %s; the queue held full (want its p99 ≤ 60 ms wherever the shares may still miss)", tc.n, tc.mbit, st, got)
			} else if !full && startMatrixFull[key] {
				t.Logf("%s no longer holds the queue full (%s): take it off startMatrixFull", key, got)
			}
			switch known := startMatrixFails[key]; {
			case !ok && !known:
				t.Errorf("%d through %d Mbit/s started %v apart: %s; want ≤ 55 ms, ≥ 80 %%, 0.75–1.33", tc.n, tc.mbit, st, got)
			case ok && known:
				t.Logf("%s holds now (%s): take it off startMatrixFails", key, got)
			}
		}
		t.Log(line)
	}
	t.Logf("%d of %d cases hold the queue p99 to 55 ms, 80 %% of the link and 0.75–1.33 of an equal share", pass, all)
}

// startMatrixFails: the cases of TestSimStartMatrix that do not hold yet
// (n/Mbit/s/apart). Ten or twenty connections through 2 or 5 Mbit/s send
// about a packet each a round trip: their windows grow and shrink in
// proportion below eight packets, which keeps the shares their starts
// left (0.66–0.74 of an equal share at the lowest), and their queue p99
// sits at 51–56 ms, a packet of 2 Mbit/s over the bound. Two through 2
// Mbit/s 3 s apart end at 0.74.
var startMatrixFails = map[string]bool{
	"10/2/3ms": true, "10/2/17ms": true, "10/2/50ms": true, "10/2/230ms": true, "10/2/500ms": true,
	"10/2/2s": true, "10/2/3s": true,
	"20/5/0s": true, "20/5/3ms": true, "20/5/17ms": true, "20/5/50ms": true, "20/5/230ms": true,
	"20/5/500ms": true, "20/5/1s": true, "20/5/2s": true, "20/5/3s": true,
	"2/2/3s": true,
}

// startMatrixFull: the cases whose queue stays full (its p99 over 60 ms;
// every other case must hold it under that even where its shares miss).
// Twenty through 5 Mbit/s started 17 or 230 ms apart: the starts span
// 0.3 or 4.4 s, and connections that started into the queue of the ones
// before still hold it on bases too high after the slot drain the first
// ones run before they compete, so those compete with them until their
// competing drains at 10 s (103 ms). Before that drain came first, ten
// through 2 Mbit/s 3 or 230 ms apart, ten through 5 Mbit/s 230 ms apart
// and twenty 2 s apart held it full too (257 and 102 ms).
var startMatrixFull = map[string]bool{"20/5/17ms": true, "20/5/230ms": true}
