package message

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

var simChannels = []ChannelConfig{{Kind: ReliableOrdered}, {Kind: ReliableOrdered}, {Kind: Unreliable}, {Kind: Sequenced}}

// TestSimReliableExactlyOnceInOrder: every reliable message arrives once,
// in order, per channel, under loss, duplicates and reordering, both ways.
func TestSimReliableExactlyOnceInOrder(t *testing.T) {
	for _, loss := range []float64{0, 0.1, 0.3} {
		t.Run(fmt.Sprintf("loss%.0f", loss*100), func(t *testing.T) {
			sm := newSim(t, Config{Channels: simChannels}, uint64(loss*1000)+1)
			sm.loss, sm.dup, sm.jitter = loss, 0.1, int64(15*time.Millisecond)
			const n0, n1 = 200, 400
			sizes := make([]int, n0)
			for k := range sizes {
				sizes[k] = 8 + sm.rng.IntN(4000) // up to 4 fragments
			}
			var next [2][2]int // side, channel
			for step := 0; step < 300_000; step++ {
				for side := 0; side < 2; side++ {
					for ch, total := range []int{n0, n1} {
						for next[side][ch] < total {
							k := next[side][ch]
							size := 8 + k%200
							if ch == 0 {
								size = sizes[k]
							}
							if err := sm.s[side].ep.Send(ch, simMsg(ch, k, size), sm.now); err != nil {
								if err != ErrQueueFull {
									t.Fatal(err)
								}
								break
							}
							next[side][ch]++
						}
					}
					// Unreliable chatter alongside.
					if step%5 == 0 {
						sm.s[side].ep.Send(2, simMsg(2, step, 30), sm.now)
						sm.s[side].ep.Send(3, simMsg(3, step, 30), sm.now)
					}
				}
				sm.step(time.Millisecond)
				if len(sm.s[0].recv[0]) == n0 && len(sm.s[1].recv[0]) == n0 &&
					len(sm.s[0].recv[1]) == n1 && len(sm.s[1].recv[1]) == n1 &&
					sm.s[0].ep.Stats().InFlight == 0 && sm.s[1].ep.Stats().InFlight == 0 {
					break
				}
				for side := range sm.s {
					if sm.s[side].ep.Stalled(sm.now) {
						for ci, c := range sm.s[side].ep.ch {
							if c != nil {
								t.Logf("ch %d: ua %d sendNext %d nextID %d pend %d; peer next %d expect %d slots %d asm %v", ci, c.ua, c.sendNext, c.nextID, c.pend, sm.s[1-side].ep.ch[ci].next, sm.s[1-side].ep.ch[ci].expect, len(sm.s[1-side].ep.ch[ci].slots), sm.s[1-side].ep.ch[ci].asmOn)
								if c.ua != c.sendNext {
									u := c.units[c.ua&uint16(len(c.units)-1)]
									t.Logf("unit %+v now %d", u, sm.now)
								}
							}
						}
						t.Logf("seq stats %+v / %+v", sm.s[side].seq.Stats(), sm.s[1-side].seq.Stats())
						t.Fatalf("side %d stalled at step %d: recv %d %d refused %d stats %+v drops %v", side, step, len(sm.s[1-side].recv[0]), len(sm.s[1-side].recv[1]), sm.s[1-side].refused, sm.s[side].ep.Stats(), sm.s[side].ep.l.Drops())
					}
				}
			}
			for side := range sm.s {
				for ch, total := range []int{n0, n1} {
					got := sm.s[side].recv[ch]
					if len(got) != total {
						t.Fatalf("side %d channel %d: %d of %d delivered", side, ch, len(got), total)
					}
					for k, m := range got {
						if j := checkSimMsg(t, ch, m); j != k {
							t.Fatalf("side %d channel %d: message %d at position %d", side, ch, j, k)
						}
						if ch == 0 && len(m) != sizes[k] {
							t.Fatalf("message %d: %d bytes, sent %d", k, len(m), sizes[k])
						}
					}
				}
				st := sm.s[side].ep.Stats()
				if st.Acked != n0+n1 || st.InFlight != 0 {
					t.Fatalf("side %d stats %+v", side, st)
				}
				if h := sm.s[side].ep.l.Held(); h != 0 {
					t.Fatalf("side %d holds %d bytes after delivery", side, h)
				}
			}
			t.Logf("loss %.0f%%: %.2f s simulated, packets %d/%d, resent %d/%d, drops %v",
				loss*100, float64(sm.now-simStart)/1e9, sm.s[0].sent, sm.s[1].sent,
				sm.s[0].ep.Stats().Resent, sm.s[1].ep.Stats().Resent, sm.s[1].ep.l.Drops())
		})
	}
}

// TestSimLargeMessages: 1 MiB messages are fragmented and reassembled
// under loss, and the receive budgets hold meanwhile.
func TestSimLargeMessages(t *testing.T) {
	cfg := Config{Channels: simChannels, MaxMessageSize: 2 << 20}
	sm := newSim(t, cfg, 7)
	sm.loss, sm.dup, sm.jitter = 0.1, 0.05, int64(5*time.Millisecond)
	const size = 1 << 20
	for k := 0; k < 2; k++ {
		if err := sm.s[0].ep.Send(0, simMsg(0, k, size), sm.now); err != nil {
			t.Fatal(err)
		}
	}
	l1 := sm.s[1].ep.l
	var maxHeld int64
	for step := 0; step < 60_000 && len(sm.s[1].recv[0]) < 2; step++ {
		sm.step(time.Millisecond)
		maxHeld = max(maxHeld, l1.Held())
		if sm.s[1].ep.held > l1.connBudget {
			t.Fatalf("endpoint holds %d > budget %d", sm.s[1].ep.held, l1.connBudget)
		}
	}
	got := sm.s[1].recv[0]
	if len(got) != 2 {
		t.Fatalf("%d of 2 large messages delivered", len(got))
	}
	for k, m := range got {
		if len(m) != size || checkSimMsg(t, 0, m) != k {
			t.Fatalf("message %d: %d bytes", k, len(m))
		}
	}
	t.Logf("2 × 1 MiB in %.2f s simulated, max held %d (budget %d), resent %d", float64(sm.now-simStart)/1e9, maxHeld, l1.connBudget, sm.s[0].ep.Stats().Resent)
}

// TestSimUnreliableNotHeldBack: unreliable messages keep flowing at the
// path's latency while a large reliable message fills the send budget.
func TestSimUnreliableNotHeldBack(t *testing.T) {
	sm := newSim(t, Config{Channels: simChannels, MaxMessageSize: 2 << 20}, 3)
	sm.loss = 0.1
	sentAt := map[int]int64{}
	var worst int64
	sm.onMsg = func(to, ch int, msg []byte) {
		if to == 1 && ch == 2 {
			k := checkSimMsg(t, 2, msg)
			worst = max(worst, sm.now-sentAt[k])
		}
	}
	if err := sm.s[0].ep.Send(0, simMsg(0, 0, 1<<20), sm.now); err != nil {
		t.Fatal(err)
	}
	k := 0
	for step := 0; step < 30_000 && len(sm.s[1].recv[0]) == 0; step++ {
		if step%10 == 0 {
			sentAt[k] = sm.now
			if err := sm.s[0].ep.Send(2, simMsg(2, k, 40), sm.now); err != nil {
				t.Fatal(err)
			}
			k++
		}
		sm.step(time.Millisecond)
	}
	n := len(sm.s[1].recv[2])
	if len(sm.s[1].recv[0]) != 1 || n < k*8/10 {
		t.Fatalf("reliable %d, unreliable %d of %d", len(sm.s[1].recv[0]), n, k)
	}
	if worst > sm.latency+int64(3*time.Millisecond) {
		t.Fatalf("an unreliable message took %v (latency %v)", time.Duration(worst), time.Duration(sm.latency))
	}
	t.Logf("1 MiB took %.2f s; %d/%d unreliable delivered, worst %v", float64(sm.now-simStart)/1e9, n, k, time.Duration(worst))
}

// TestSimSequencedDropsStale: under heavy reordering a sequenced channel
// delivers a strictly newer message each time and drops the stale ones.
func TestSimSequencedDropsStale(t *testing.T) {
	sm := newSim(t, Config{Channels: simChannels}, 5)
	sm.jitter, sm.dup = int64(40*time.Millisecond), 0.2
	sm.sendEachMs(t, 3, 500, 20, 200)
	got := sm.s[1].recv[3]
	last := -1
	for _, m := range got {
		k := checkSimMsg(t, 3, m)
		if k <= last {
			t.Fatalf("sequenced message %d after %d", k, last)
		}
		last = k
	}
	stale := sm.s[1].ep.l.Drops()[DropStale]
	if stale == 0 || len(got) < 100 || last != 499 {
		t.Fatalf("delivered %d (last %d), stale drops %d", len(got), last, stale)
	}
}

// TestSimCleanPath: no loss, no reordering: nothing is lost, and the
// resends the default ResendFactor makes are logged.
func TestSimCleanPath(t *testing.T) {
	sm := newSim(t, Config{Channels: simChannels}, 9)
	sm.sendEachMs(t, 1, 300, 100, 500)
	if len(sm.s[1].recv[1]) != 300 || sm.s[0].ep.Stats().InFlight != 0 {
		t.Fatalf("delivered %d, stats %+v", len(sm.s[1].recv[1]), sm.s[0].ep.Stats())
	}
	t.Logf("stats %+v, drops %v", sm.s[0].ep.Stats(), sm.s[1].ep.l.Drops())
}

// TestSimTailRepair: a packet lost near the end of a flight, with nothing
// sent after the flight to expose it by fast repair (packets sent more
// than SRTT/8 later acknowledged first), is repaired by the time-based
// rule (rack): once its ack is SRTT/4 + AckDelay later than the round
// trip of a packet sent after it. Without it, a bulk unit waited for
// twice the retransmission timeout. Here a 30 KB message's second to last
// packet is lost: its fragment arrives a round trip (40 ms) + 15 ms + the
// one-way 20 ms after that packet was sent, within a few ms (the
// endpoint's timer granularity here is the simulation's 1 ms step).
func TestSimTailRepair(t *testing.T) {
	cfg := Config{Channels: simChannels, MaxMessageSize: 64 << 10}
	sm := newSim(t, cfg, 11)
	// Round-trip samples first.
	sm.sendEachMs(t, 0, 20, 100, 100)
	const size = 30 << 10
	frags := (size + sm.s[0].ep.l.fragSize - 1) / sm.s[0].ep.l.fragSize
	n, dropped := 0, false
	var lostAt int64
	sm.drop = func(p simPacket) bool {
		if p.to != 1 || len(p.payload) < 1000 {
			return false
		}
		if n++; n == frags-1 && !dropped {
			dropped, lostAt = true, sm.now
			return true
		}
		return false
	}
	if err := sm.s[0].ep.Send(0, simMsg(0, 20, size), sm.now); err != nil {
		t.Fatal(err)
	}
	for step := 0; step < 2000 && len(sm.s[1].recv[0]) < 21; step++ {
		sm.step(time.Millisecond)
	}
	if !dropped || len(sm.s[1].recv[0]) != 21 {
		t.Fatalf("dropped %v, %d of 21 messages delivered", dropped, len(sm.s[1].recv[0]))
	}
	took := time.Duration(sm.now - lostAt)
	t.Logf("a %d-fragment message with its fragment %d lost: delivered %v after that fragment's first send, resent %d", frags, frags-1, took, sm.s[0].ep.Stats().Resent)
	if want := 40*time.Millisecond + 15*time.Millisecond + 20*time.Millisecond + 5*time.Millisecond; took > want {
		t.Fatalf("delivered %v after the lost fragment's send, want ≤ %v", took, want)
	}
}

// TestSimGrowingQueueRepairsOnlyLosses: beside a loss-based flow the
// queue at the bottleneck fills and drains (here the delay grows by 100 ms
// over a second, then falls back, ten times) and drops some packets (one
// bulk packet in 40): only what is lost is sent again, a unit or two more
// when a resend is lost too. The time-based rule (rack) judges only
// packets sent before an acknowledged one. It once went on judging every
// later packet by the round trip of the ack that armed it, so each packet
// that met a fuller queue than that ack went twice: here 138 units resent
// for 24 lost, and beside quic-go on loopback up to 2,434 units a run,
// 13 points of the link (tuning.md, "Repairs beside a filling queue").
func TestSimGrowingQueueRepairsOnlyLosses(t *testing.T) {
	cfg := Config{Channels: simChannels, MaxMessageSize: 64 << 10}
	sm := newSim(t, cfg, 12)
	sm.sendEachMs(t, 0, 20, 100, 100) // round-trip samples at 20 ms each way
	const size = 60 << 10
	base := sm.latency
	n, dropped := 0, 0
	sm.drop = func(p simPacket) bool {
		if p.to != 1 || len(p.payload) < 1000 {
			return false
		}
		if n++; n%40 == 0 {
			dropped++
			return true
		}
		return false
	}
	queued, up := 0, true
	for step := 0; step < 10000; step++ {
		for {
			if err := sm.s[0].ep.Send(0, simMsg(0, 20+queued, size), sm.now); errors.Is(err, ErrQueueFull) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			queued++
		}
		if up {
			sm.latency += int64(100 * time.Microsecond) // slower than time: no reordering
			up = sm.latency < base+int64(100*time.Millisecond)
		} else {
			sm.latency = max(base, sm.latency-int64(500*time.Microsecond))
			up = sm.latency == base
		}
		sm.step(time.Millisecond)
	}
	sm.drop = nil
	for step := 0; step < 20000 && len(sm.s[1].recv[0]) < 20+queued; step++ {
		sm.step(time.Millisecond)
	}
	if got := len(sm.s[1].recv[0]); got != 20+queued {
		t.Fatalf("%d of %d messages delivered, stats %+v", got, 20+queued, sm.s[0].ep.Stats())
	}
	st := sm.s[0].ep.Stats()
	t.Logf("%d messages of %d KiB; %d bulk packets lost of %d; resent %d", queued, size>>10, dropped, n, st.Resent)
	if st.Resent > uint64(dropped)+2 {
		t.Fatalf("%d units resent for %d lost: a growing delay was taken for loss", st.Resent, dropped)
	}
}
