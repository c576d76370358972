// Package egress divides a server's egress budget (conn.Config.EgressRate)
// between its connections' bulk sending, the game's traffic first: the
// game's entries, acks, Data and handshake replies are never held, and
// bulk units get what they leave of the budget, in max-min fair shares.
//
// One Budget per server. Every few milliseconds its owner (conn's message
// timer) hands it, for each connection that sends messages, the bulk bytes
// the connection wrote since the last sample and whether its bulk waited
// on the ceiling (Add), then the server's total egress bytes so far
// (Update). Update steers the bulk budget so that the total egress meets
// the budget (an integral controller: the headers, acks and game traffic
// need no model), and water-fills it over the connections' demands: a
// connection that waited on the ceiling wants more than it got, one that
// did not wants what it sent. The result is one level, the ceiling every
// connection's bulk honours (Level, read by message.Layer.LimitBulk): the
// light connections stay below it, the heavy ones share what the light
// ones leave equally. Each connection's bulk so goes at the smaller of its
// path's rate (its congestion controller) and its share.
//
// Like internal/congestion it does no I/O and reads no clock: times are
// Unix nanoseconds passed in.
package egress

import "sync/atomic"

// Gain is the share of the egress error (budget − measured rate, times
// the period's length in Periods) the bulk budget moves by at each
// Update: an integral controller, which holds the long-run egress at the
// budget whatever the packets' headers and the game's traffic add to the
// bulk bytes. Below 1, so the loop is stable with the one-period delay
// between a level and its measure.
const Gain = 0.25

// MinShare is the smallest part of the budget (1/MinShare) the bulk keeps
// when the game's traffic alone fills it, so that bulk transfers still
// progress (and lost bulk units are resent) rather than stall.
const MinShare = 16

// MaxOver bounds the bulk budget at this many times the budget. It may
// pass the budget: the water-filling reads each connection's demand from
// one period, and a connection that sends in bursts (a light one whose
// burst waits on the ceiling, then idles) leaves part of the share it was
// given unused, and under a busy CPU the message timer's late ticks
// leave connections' buckets full; the controller then raises the bulk
// budget until the total egress meets the budget after all.
const MaxOver = 4

// Period is the recomputation's nominal interval (conn's message timer
// ticks every 5 ms), the unit of Gain.
const Period = int64(5e6)

// MinPeriod is the shortest interval between two recomputations: shorter
// calls to Update only keep their samples for the next.
const MinPeriod = int64(2e6) // 2 ms

// Budget is one server's egress budget. Add and Update are called by one
// goroutine; Level and the Stats fields may be read from any.
type Budget struct {
	rate  int64   // the budget, bytes per second
	bulk  float64 // the bulk budget the controller steers, bytes per second
	level atomic.Int64

	at     int64  // ns of the last recomputation; 0: none yet
	tx     uint64 // total egress bytes then
	dem    []int64
	heavy  int
	sent   int64
	queued int64 // bulk bytes queued at the held connections of this period

	stats statsAtomic
}

// statsAtomic are Stats, readable while the owner updates.
type statsAtomic struct {
	bulk, bulkBytes, heldNs, heldBytes, held, egress atomic.Int64
}

// Stats are a Budget's figures for metrics.
type Stats struct {
	Rate       int64 // the budget, bytes per second
	BulkBudget int64 // what the bulk may use now (the budget less the game's traffic), bytes per second
	Level      int64 // the ceiling of each connection's bulk now (its share), bytes per second
	Egress     int64 // the total egress rate last measured, bytes per second
	BulkBytes  int64 // bulk bytes written, cumulative (message payload)
	HeldNs     int64 // connection-nanoseconds of bulk held by the budget, cumulative
	HeldBytes  int64 // bytes queued at the connections held now
	Held       int64 // connections whose bulk the budget holds now
}

// New returns the budget of rate bytes per second (rate > 0).
func New(rate int64) *Budget {
	b := &Budget{rate: rate, bulk: float64(rate)}
	b.level.Store(rate)
	b.stats.bulk.Store(rate)
	return b
}

// Level is the ceiling on each connection's bulk rate, bytes per second,
// updated in place.
func (b *Budget) Level() *atomic.Int64 { return &b.level }

// Add is one connection's sample since its last: sent bulk bytes, held
// whether its bulk waited on the ceiling, queued the bytes it holds for
// sending (counted only when held).
func (b *Budget) Add(sent int64, held bool, queued int64) {
	b.sent += sent
	if held {
		b.heavy++
		b.queued += queued
		return
	}
	if sent > 0 {
		b.dem = append(b.dem, sent)
	}
}

// Update recomputes the level at now from the samples added since the
// last recomputation and tx, the server's total egress bytes so far, and
// reports whether it did (not before MinPeriod has passed).
func (b *Budget) Update(now int64, tx uint64) bool {
	if b.at == 0 {
		b.at, b.tx = now, tx
		b.reset()
		return true
	}
	dt := now - b.at
	if dt < MinPeriod {
		return false
	}
	egress := float64(tx-b.tx) * 1e9 / float64(dt)
	b.at, b.tx = now, tx
	if b.heavy > 0 || egress > float64(b.rate) {
		// Steer only while the bulk presses on the ceiling, or the
		// total is over: with every connection below its share the
		// error says nothing about the bulk's room, and would wind the
		// controller up.
		// Weighted by the period's length, so that the sum of the
		// corrections is the bytes sent less the budget's over the
		// whole time, however irregular the periods: the long-run
		// egress meets the budget exactly, not the mean of the
		// periods' rates.
		w := float64(dt) / float64(Period)
		b.bulk += Gain * w * (float64(b.rate) - egress)
	} else {
		b.bulk = float64(b.rate)
	}
	b.bulk = min(max(b.bulk, float64(b.rate)/MinShare), MaxOver*float64(b.rate))
	// Demands as rates: the same dt for every sample.
	for i, d := range b.dem {
		b.dem[i] = int64(float64(d) * 1e9 / float64(dt))
	}
	lvl := Fair(int64(b.bulk), b.dem, b.heavy)
	b.level.Store(max(lvl, 1))
	s := &b.stats
	s.bulk.Store(int64(b.bulk))
	s.egress.Store(int64(egress))
	s.bulkBytes.Add(b.sent)
	s.heldNs.Add(int64(b.heavy) * dt)
	s.heldBytes.Store(b.queued)
	s.held.Store(int64(b.heavy))
	b.reset()
	return true
}

func (b *Budget) reset() {
	b.dem, b.heavy, b.sent, b.queued = b.dem[:0], 0, 0, 0
}

// Stats returns the budget's figures.
func (b *Budget) Stats() Stats {
	s := &b.stats
	return Stats{Rate: b.rate, BulkBudget: s.bulk.Load(), Level: b.level.Load(), Egress: s.egress.Load(),
		BulkBytes: s.bulkBytes.Load(), HeldNs: s.heldNs.Load(), HeldBytes: s.heldBytes.Load(), Held: s.held.Load()}
}

// Fair is the max-min fair level of budget over the demands of the light
// connections (their rates) and heavy connections that want more than any
// level: the level L at which every light connection gets min(demand, L)
// and every heavy one L, in total budget. When even every demand met
// leaves budget spare, L is the largest demand plus the spare (or the
// budget, with no demand): a connection that grows may take what nobody
// uses, until the next recomputation shares it.
//
// It rises to L from below without sorting: an equal split, then again
// among those who want more than the last level, each pass O(n), until no
// demand falls under the level (a few passes for any real mix; at most
// maxPasses, whose level is then a little low, which the controller's
// next corrections make up).
func Fair(budget int64, demands []int64, heavy int) int64 {
	n := int64(len(demands) + heavy)
	if n == 0 {
		return budget
	}
	lvl := budget / n
	for range maxPasses {
		// The demands under lvl take what they want; the others share
		// the rest.
		left, above := budget, int64(heavy)
		var most int64
		for _, d := range demands {
			if d < lvl {
				left -= d
			} else {
				above++
			}
			most = max(most, d)
		}
		if above == 0 {
			return most + left // everyone is served, with budget spare
		}
		next := left / above
		if next <= lvl {
			return lvl
		}
		lvl = next
	}
	return lvl
}

// maxPasses bounds Fair's passes over the demands.
const maxPasses = 16
