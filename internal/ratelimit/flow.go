package ratelimit

import "math"

// DefaultInboundPacketRate and DefaultInboundByteRate are a server's
// budget of each proven connection's inbound datagrams and bytes per
// second (docs/protocol.md §7.8; conn.Config.InboundPacketRate and
// InboundByteRate). A game sends tens to a few hundred packets a second; a
// download at the message layer's default ceiling (32 MiB/s, about 28.4k
// full datagrams a second) is acknowledged by about 7.1k packets a second
// (an ack every 4 packets), 21 % below the budget; an upload in full
// 1200-byte datagrams passes at up to 10.8 MB/s. A client at 100k packets
// a second gets 9 % through, so at least 90 % of it is dropped before
// parsing (issue 29). The byte rate binds only where the packet rate is
// raised: 9k of the largest datagrams, 1472 bytes, are 12.6 MiB/s
// (tuning.md, "Issue 29").
const (
	DefaultInboundPacketRate = 9_000
	DefaultInboundByteRate   = 16 << 20
)

// flowUnit is the tick of a FlowState's times, in nanoseconds: a uint32 of
// them wraps every 429 s, which Allow reads modulo 2^32.
const flowUnit = 100

// flowShift is the fixed point of Flow.byteCost: ticks per byte, times
// 2^16, so that a byte of 16 MiB/s (0.596 ticks) is not rounded to 0 or 1.
const flowShift = 16

// maxFlowWin bounds a bucket's window and a packet's cost, in ticks (27 s):
// the sum of the two stays far below the 2^31 ticks (214 s) within which a
// full time is told from a past one.
const maxFlowWin = 1 << 28

// Flow is a budget of packets and bytes per second for one stream of
// packets, such as what one connection sends a server: a packet passes when
// both its buckets have room, one token of the packet bucket and its length
// in tokens of the byte bucket, and then spends them. Each bucket holds
// burst worth of its rate, and at least one packet (maxPacket bytes), and
// starts full.
//
// It is Limit's GCRA in integer ticks of 100 ns: a FlowState keeps, per
// bucket, the time it will be full again, so Allow is two loads, a few
// integer operations and two stores, no division but one by a constant.
// The rule is shared by every stream (immutable once made); each stream
// keeps its FlowState, 8 bytes.
type Flow struct {
	pktCost  int64  // ticks a packet costs; 0: packets unlimited
	byteCost uint64 // ticks a byte costs << flowShift; 0: bytes unlimited
	pktWin   int64  // how far past now the packet bucket's full time may be
	byteWin  int64  // the same for the byte bucket
	open     bool   // both unlimited: Allow only says yes
}

// NewFlow returns the Flow of packets and bytes per second, bursts of burst
// seconds' worth of each rate but at least one packet of maxPacket bytes. A rate
// that is not positive (Unlimited), or so high that a unit costs less than
// half a tick, leaves its bucket unlimited; a rate so low that one packet
// (of maxPacket bytes) would cost more than 27 s costs 27 s, and a burst
// beyond 27 s holds 27 s.
func NewFlow(packets, bytes, burst float64, maxPacket int) Flow {
	maxPacket = max(maxPacket, 1)
	burstTicks := int64(min(max(burst*1e9/flowUnit, 0), maxFlowWin))
	f := Flow{
		pktCost:  min(ticks(packets, 1), maxFlowWin),
		byteCost: uint64(min(ticks(bytes, 1<<flowShift), (maxFlowWin<<flowShift)/int64(maxPacket))),
	}
	f.pktWin, f.byteWin = maxFlowWin, maxFlowWin
	if f.pktCost > 0 {
		f.pktWin = max(burstTicks, f.pktCost)
	}
	if f.byteCost > 0 {
		f.byteWin = max(burstTicks, f.bytesCost(maxPacket))
	}
	f.open = f.pktCost == 0 && f.byteCost == 0
	return f
}

// ticks is scale ticks per unit at rate units per second, rounded; 0,
// unlimited, when rate is not positive.
func ticks(rate, scale float64) int64 {
	if !(rate > 0) {
		return 0
	}
	return int64(min(math.Round(1e9/flowUnit*scale/rate), math.MaxInt64/4))
}

// bytesCost is what a packet of n bytes costs the byte bucket, in ticks,
// rounded.
func (f *Flow) bytesCost(n int) int64 {
	return int64((uint64(n)*f.byteCost + 1<<(flowShift-1)) >> flowShift)
}

// FlowState is one stream's buckets under a Flow: when each is full again,
// in ticks of 100 ns modulo 2^32. NewFlowState makes one.
//
// A time more than 214 s old reads as up to 214 s ahead: Allow then holds
// it to the window, so a stream silent for minutes (a connection sends a
// KeepAlive every second) meets at worst one window of empty bucket; the
// same bound holds after the clock steps back.
//
// Allow may run for one stream on several goroutines at once (a
// connection's packets can reach two receive loops, rarely): of two packets
// that pass at the same moment only one spend may count, which lets the
// stream through a little faster, never slower. The words are read and
// written plainly, since an atomic store (XCHG on amd64) would cost every
// packet within budget several times what Allow costs otherwise; a 32-bit
// store is never torn. Race builds make the accesses atomic, so that the
// detector reports only real races.
type FlowState struct {
	pkts, bytes uint32
}

// NewFlowState returns a stream's buckets, full at now (Unix nanoseconds).
func NewFlowState(now int64) FlowState {
	t := uint32(now / flowUnit)
	return FlowState{pkts: t, bytes: t}
}

// Allow reports whether a packet of n bytes fits s's buckets at now (Unix
// nanoseconds) and, if so, spends it.
func (f *Flow) Allow(s *FlowState, n int, now int64) bool {
	if f.open {
		return true
	}
	t := uint32(now / flowUnit)
	pf, bf := flowLoad(&s.pkts), flowLoad(&s.bytes)
	// How far ahead of now each bucket is full, in ticks, held to its
	// window, plus this packet.
	p := min(max(int64(int32(pf-t)), 0), f.pktWin) + f.pktCost
	b := min(max(int64(int32(bf-t)), 0), f.byteWin) + f.bytesCost(n)
	if p > f.pktWin || b > f.byteWin {
		// A full time beyond the window is stale (see FlowState): bring
		// it to the window, an empty bucket from now on.
		if int64(int32(pf-t)) > f.pktWin {
			flowStore(&s.pkts, t+uint32(f.pktWin))
		}
		if int64(int32(bf-t)) > f.byteWin {
			flowStore(&s.bytes, t+uint32(f.byteWin))
		}
		return false
	}
	flowStore(&s.pkts, t+uint32(p))
	flowStore(&s.bytes, t+uint32(b))
	return true
}
