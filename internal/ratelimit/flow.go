package ratelimit

import (
	"math"
	"time"
)

// flowShift is the fixed point of Flow.byteCost: nanoseconds per byte,
// times 2^16, so that a byte costing 15.6 ns (64 MiB/s) is not rounded to
// 15 or 16.
const flowShift = 16

// flowOpen is the window of an unlimited bucket: far beyond any clock, yet
// now+flowOpen cannot overflow before the year 2200.
const flowOpen = math.MaxInt64 / 4

// Flow is a budget of packets and bytes per second for one stream of
// packets, such as what one connection sends a server: a packet passes when
// both its buckets have room, one token of the packet bucket and its length
// in tokens of the byte bucket, and then spends them. Each bucket holds
// burst worth of its rate, and at least one packet (maxPacket bytes), and
// starts full.
//
// It is the GCRA of Limit in integer nanoseconds: a FlowState keeps, per
// bucket, the time it will be full again, so Allow is two loads, a few
// integer operations and two stores, with no division. The rule is shared by
// every stream (immutable once made); each stream keeps its FlowState.
type Flow struct {
	pktCost  int64  // ns a packet costs; 0: packets unlimited
	byteCost uint64 // ns a byte costs << flowShift; 0: bytes unlimited
	pktWin   int64  // how far past now the packet bucket's full time may be
	byteWin  int64  // the same for the byte bucket
	open     bool   // both unlimited: Allow only says yes
}

// maxFlowCost bounds a unit's cost (13 days a packet, or a byte) so that
// a datagram's cost in bytes cannot overflow.
const maxFlowCost = 1 << 50

// NewFlow returns the Flow of packets and bytes per second (a rate that is
// not positive, such as Unlimited, or so high that a unit costs less than a
// nanosecond, leaves its bucket unlimited), bursts of burst worth of each
// rate but at least one packet of maxPacket bytes.
func NewFlow(packets, bytes float64, burst time.Duration, maxPacket int) Flow {
	f := Flow{pktCost: cost(packets, 1), byteCost: uint64(cost(bytes, 1<<flowShift)), pktWin: flowOpen, byteWin: flowOpen}
	if f.pktCost > 0 {
		f.pktWin = max(int64(burst), f.pktCost)
	}
	if f.byteCost > 0 {
		f.byteWin = max(int64(burst), int64(uint64(max(maxPacket, 1))*f.byteCost>>flowShift))
	}
	f.open = f.pktCost == 0 && f.byteCost == 0
	return f
}

// cost is scale nanoseconds per unit at rate units per second, rounded
// (at most maxFlowCost); 0, unlimited, when rate is not positive.
func cost(rate, scale float64) int64 {
	if !(rate > 0) {
		return 0
	}
	return int64(min(math.Round(1e9*scale/rate), maxFlowCost))
}

// FlowState is one stream's buckets under a Flow: when each is full again,
// in Unix nanoseconds. The zero FlowState is two full buckets.
//
// Allow may run for one stream on several goroutines at once (a
// connection's packets can reach two receive loops, rarely): of two packets
// that pass at the same moment only one spend may count, which lets the
// stream through a little faster, never slower. The fields are read and
// written as plain words, since an atomic store (XCHG on amd64) would cost
// every packet within budget five times what Allow costs otherwise; a
// word-sized store is never torn on 64-bit platforms, and whatever a torn
// one on a 32-bit platform leaves is bounded by Allow's clamp to one
// window. Race builds make the accesses atomic, so that the detector
// reports only real races.
type FlowState struct {
	pkts, bytes int64
}

// Allow reports whether a packet of n bytes fits s's buckets at now (Unix
// nanoseconds) and, if so, spends it. A clock that steps back leaves the
// buckets empty for at most one window, not until the clock catches up.
func (f *Flow) Allow(s *FlowState, n int, now int64) bool {
	if f.open {
		return true
	}
	pf, bf := flowLoad(&s.pkts), flowLoad(&s.bytes)
	pe, be := now+f.pktWin, now+f.byteWin // the latest full times a bucket can have
	p := min(max(pf, now), pe) + f.pktCost
	b := min(max(bf, now), be) + int64(uint64(n)*f.byteCost>>flowShift)
	if p-now > f.pktWin || b-now > f.byteWin {
		// A full time past the latest means the clock stepped back:
		// bring it to the latest, an empty bucket from now on.
		if pf > pe {
			flowStore(&s.pkts, pe)
		}
		if bf > be {
			flowStore(&s.bytes, be)
		}
		return false
	}
	flowStore(&s.pkts, p)
	flowStore(&s.bytes, b)
	return true
}
