package seqwin

import (
	"math"
	"math/bits"

	"github.com/udpgate/udpgate/internal/protocol"
)

// Connection sequence and acknowledgement state (docs/protocol.md §7), after Glenn
// Fiedler's "Reliability and Congestion Avoidance over UDP": every packet
// carries its own sequence number, the newest sequence number received from
// the peer (Ack) and a 64-bit history of the 64 before it (AckBits). Nothing
// is retransmitted here; the sender only learns, per packet, whether it was
// delivered or lost, and takes RTT samples on the way.

const (
	// seqMask reduces a sequence number modulo SeqModulus.
	seqMask = protocol.SeqModulus - 1
	// seqHalf: a is newer than b when it is ahead by 1..seqHalf-1. A distance
	// of exactly seqHalf is ambiguous and counts as older, so it is dropped.
	seqHalf = protocol.SeqModulus / 2

	// seqWindow is the receive window: a packet more than seqWindow behind the
	// newest received one is too old, and AckBits describes exactly the
	// seqWindow sequence numbers before Ack.
	seqWindow = 64

	// seqMaxJump is the largest step ahead of the newest received packet
	// that is believed at once. A packet further ahead is a jump: it is
	// dropped and remembered, and believed only when a second, different
	// packet within seqWindow of it confirms it. A lone stale or forged
	// packet therefore cannot move the window: 14-bit numbers repeat every
	// 16384 packets, so a Data packet replayed 8193–16383 packets later
	// looks up to 8191 ahead, and a forged one may claim anything.
	//
	// It equals seqWindow so that every believed step keeps the numbers it
	// skips inside the window: a legitimate packet the step passed over is
	// still accepted when it arrives, so no step can make the peer's next
	// packets look too old. The cost is one packet after a run of more than
	// seqWindow consecutive losses (the first packet after the gap waits for
	// the second to confirm it).
	seqMaxJump = seqWindow

	// SeqRingSize is how many consecutive sequence numbers of ours are
	// tracked, from the oldest unreported packet on. It bounds the time a
	// packet can wait for its ack: the send of the number SeqRingSize ahead
	// of it reports it lost (eviction). 128 is two ack windows, about 2 s at
	// 60 Hz; a send time is 4 bytes, so the ring is 512 bytes and SeqState
	// 600 (a connection's whole budget is about 1 KiB). A power of two that
	// divides SeqModulus, so a sequence number's slot survives wraparound.
	SeqRingSize = 128

	// maxDeliveredPerReport bounds AckReport.delivered: one packet's ack info
	// names at most Ack and the seqWindow numbers before it.
	maxDeliveredPerReport = seqWindow + 1
	// maxLostPerReport bounds AckReport.lost. Receive reports lost exactly
	// the tracked packets more than seqWindow behind Ack; Ack is itself
	// tracked, so at most SeqRingSize-1 sit before it and seqWindow of those
	// are within the window. (Send loses at most one, by eviction, and
	// reports it itself.)
	maxLostPerReport = SeqRingSize - seqWindow - 1

	ringMask  = SeqRingSize - 1
	ringWords = SeqRingSize / 64
)

// Compile-time checks of the geometry the ring arithmetic relies on: a
// constant index out of range, or a negative array length, fails the build.
var (
	_ = [1]struct{}{}[protocol.SeqModulus%SeqRingSize] // slots are stable across wraparound
	_ = [1]struct{}{}[SeqRingSize%64]                  // the pending bitmap is whole words
	_ [seqHalf - SeqRingSize]struct{}                  // tracked offsets never look "ahead"
	_ [SeqRingSize - seqWindow - 1]struct{}            // maxLostPerReport ≥ 0
	_ [seqWindow - seqMaxJump]struct{}                 // believed steps stay in the window
)

// seqNewer reports whether sequence number a is newer than b modulo
// SeqModulus: ahead of it by 1..8191.
func seqNewer(a, b uint16) bool {
	d := (a - b) & seqMask
	return d != 0 && d < seqHalf
}

// SentPacket is one of our packets as reported by an AckReport. Its send
// time is not reported: the state keeps send times only as 16-bit stamps
// for RTT samples (see stampUnit), too coarse in range to date a packet
// reported lost seconds later.
type SentPacket struct {
	Seq uint16
}

// AckReport is what one Receive call learned about our own
// packets. It is caller-owned and reused: each call resets the counts and
// overwrites the entries, and the fixed arrays are sized for the worst case,
// so nothing is ever left out and nothing is allocated.
type AckReport struct {
	// delivered and lost are filled up to NumDelivered and NumLost, each in
	// ascending sequence order (oldest first).
	delivered    [maxDeliveredPerReport]SentPacket
	lost         [maxLostPerReport]SentPacket
	NumDelivered int
	NumLost      int
	// RTTSample is now minus the send time of the packet equal to Ack, when
	// that packet was newly delivered by this call; otherwise it is -1.
	RTTSample float64
}

// DeliveredPackets returns the delivered entries (a view, no copy).
func (r *AckReport) DeliveredPackets() []SentPacket { return r.delivered[:r.NumDelivered] }

// LostPackets returns the lost entries (a view, no copy).
func (r *AckReport) LostPackets() []SentPacket { return r.lost[:r.NumLost] }

func (r *AckReport) reset() {
	r.NumDelivered = 0
	r.NumLost = 0
	r.RTTSample = -1
}

// SeqStats counts a SeqState's traffic since Init.
type SeqStats struct {
	Sent       uint64 // sequence numbers allocated by Send
	Received   uint64 // packets accepted by Receive
	Delivered  uint64 // our packets reported delivered
	Lost       uint64 // our packets reported lost, Evicted included
	Evicted    uint64 // lost because SeqRingSize packets were outstanding
	Duplicates uint64 // dropped: already received
	TooOld     uint64 // dropped: older than the window
	// Suspect: dropped as DropSuspectSequence, an unconfirmed jump or ack
	// fields that contradict the state (see Receive).
	Suspect uint64
}

// seqCounters is SeqStats as stored: the per-packet counters in 64 bits,
// the drop counters, which only hostile or broken traffic moves, in 32
// (they wrap after 4 billion drops rather than cost a connection 16 bytes).
type seqCounters struct {
	sent, received, delivered, lost      uint64
	evicted, duplicates, tooOld, suspect uint32
}

// flags bits of SeqState.
const (
	seqRecvAny  = 1 << iota // something was accepted
	seqRTTValid             // srtt holds a sample
	seqJumpHeld             // jump holds an unconfirmed jump
)

// SeqState is one side's sequence state for one connection: the sequence
// numbers it sends and the in-flight packets awaiting an ack (send side), and
// the window of sequence numbers received from the peer (receive side). The
// server and the client use it alike.
//
// It is a fixed-size value of 600 bytes with no pointers, so a connection
// embeds it, the garbage collector need not scan it, and a copy is an
// independent snapshot. It is not safe for concurrent use; it never reads
// the clock (now is Unix seconds passed in) and never allocates.
//
// Every sequence number Send hands out is reported exactly once: in a later
// Receive's AckReport, delivered when the peer's ack info names it or lost
// when the peer's Ack moves more than seqWindow past it unacknowledged; or
// by a later Send, lost when SeqRingSize newer packets were sent first.
//
// The receive side defends the window against packets that are not what
// their 14-bit number says, a replay from 16384 packets earlier or a forgery
// (see Receive): it only moves by believable steps, and a packet's ack
// fields must agree with what was sent and acknowledged before. Without a
// MAC this stops single stale or forged packets, not an on-path attacker who
// keeps sending crafted ones (docs/threat-model.md).
type SeqState struct {
	// Receive side. recvHistory bit i means recvNewest-1-i was received.
	recvHistory uint64
	// Send side: the tracked packets are sendBase .. nextSeq-1, at most
	// SeqRingSize of them; a packet's ring slot is seq % SeqRingSize. A
	// pending bit is set exactly for tracked, not yet reported packets, and
	// sendBase itself is pending whenever anything is tracked.
	pending [ringWords]uint64
	stats   seqCounters
	srtt    float32 // seconds; valid with seqRTTValid
	// recvNewest: the newest accepted sequence number; ackNewest: the Ack
	// that packet carried (the peer's acks never go back, so a newer packet
	// with an older Ack is not what it claims); jump: the unconfirmed jump,
	// with seqJumpHeld.
	recvNewest uint16
	ackNewest  uint16
	jump       uint16
	nextSeq    uint16
	sendBase   uint16
	flags      uint8

	// sentAt comes last: every packet touches the fields above and one
	// slot of this ring, so the scalars share two cache lines instead of
	// each sitting on its own past the ring (with 100k connections each
	// visit to a connection misses the cache). A slot's send time is a
	// 24-bit stamp (see stamp): its low 16 bits in sentLo, its high 8 in
	// sentHi, which the per-packet path reads only for an RTT sample.
	sentLo [SeqRingSize]uint16
	sentHi [SeqRingSize]uint8
}

// stampUnit is the resolution of send times, in seconds. A send time is
// kept in 3 bytes, the low 24 bits of Unix time in these units, so the ring
// costs 384 bytes a connection instead of 1 KiB as float64 (issue 11: at
// most 1 KiB of heap per connection in all). Differences of two stamps span
// ±134 s, far beyond the connection timeout, so an RTT sample never
// aliases, and sub-millisecond loopback RTTs keep 16 µs precision.
const stampUnit = 16e-6

// stampBits is a stamp's width; stampMask keeps its bits.
const (
	stampBits = 24
	stampMask = 1<<stampBits - 1
)

// stamp is now in units of stampUnit, modulo 2^24.
func stamp(now float64) uint32 { return uint32(int64(math.Floor(now/stampUnit))) & stampMask }

// since is the time in seconds from stamp t to stamp now; negative when the
// clock stepped back.
func since(now, t uint32) float64 {
	d := int32((now-t)<<(32-stampBits)) >> (32 - stampBits) // sign-extended
	return float64(d) * stampUnit
}

// sentAt is the stamp of ring slot i.
func (s *SeqState) sentAt(i uint16) uint32 {
	return uint32(s.sentHi[i])<<16 | uint32(s.sentLo[i])
}

// Init starts the state for a new connection: localSeq is our initial
// sequence number (server: ServerSeq, client: ClientSeq), remoteSeq the
// peer's; both are taken modulo SeqModulus. now is not kept: the state has
// no clock of its own, send times are stamped by Send, and a connection
// tracks its keepalive and timeout itself.
//
// The receive window starts as if remoteSeq-1 and the seqWindow numbers
// before it had been received. That one rule gives docs/protocol.md §7's "accept
// only sequence numbers newer than the peer's initial sequence − 1" (anything
// else is a duplicate or too old) and, once something arrives, AckBits set for
// the numbers before the peer's first packet, which it never sent: the peer
// ignores acks for packets it has not got in flight. This is what
// vectors.json's keepalive (Ack 8166, AckBits 0xfffffffffffffff5 after a
// first packet 8159) encodes. Until something is received, Ack and AckBits
// still go out as remoteSeq-1 and 0.
func (s *SeqState) Init(localSeq, remoteSeq uint16, now float64) {
	_ = now
	*s = SeqState{
		recvNewest:  (remoteSeq - 1) & seqMask,
		recvHistory: ^uint64(0),
		// The peer's Ack before it has received anything (§7).
		ackNewest: (localSeq - 1) & seqMask,
		nextSeq:   localSeq & seqMask,
		sendBase:  localSeq & seqMask,
	}
}

// ack returns the Ack and AckBits fields for a packet sent now.
func (s *SeqState) ack() (ack uint16, ackBits uint64) {
	if s.flags&seqRecvAny == 0 {
		return s.recvNewest, 0
	}
	return s.recvNewest, s.recvHistory
}

// Send allocates the sequence number of a packet about to be sent (the
// first call returns localSeq, then each call the next modulo SeqModulus),
// records now as its send time and tracks it until it is reported. It
// returns the header's Seq, Ack and AckBits.
//
// When the oldest unreported packet is SeqRingSize numbers behind the new
// one, it is evicted and comes back as lost, with evicted set (at most one
// per call), so an ack that never comes cannot leave a packet unreported.
// It returns that loss rather than fill an AckReport, which is kilobytes a
// sender would zero on every packet only to learn about one loss.
func (s *SeqState) Send(now float64) (seq, ack uint16, ackBits uint64, lost SentPacket, evicted bool) {
	t := stamp(now)
	if s.tracked() == SeqRingSize { // sendBase is pending: the invariant
		s.settle(s.sendBase)
		lost, evicted = SentPacket{Seq: s.sendBase}, true
		s.stats.lost++
		s.stats.evicted++
		s.advanceBase()
	}
	seq = s.nextSeq
	slot := seq & ringMask
	s.sentLo[slot], s.sentHi[slot] = uint16(t), uint8(t>>16)
	s.pending[slot>>6] |= 1 << (slot & 63)
	s.nextSeq = (seq + 1) & seqMask
	s.stats.sent++
	ack, ackBits = s.ack()
	return seq, ack, ackBits, lost, evicted
}

// Receive runs a connection packet's Seq, Ack and AckBits through the state.
// It returns DropNone when the packet is accepted: only then do its ack
// fields count, so a replayed, stale or forged packet can neither keep the
// connection alive nor move acks, and rep (reset on every call) tells which
// of our packets it reports delivered or lost. Otherwise, in the order
// checked:
//
//   - DropBadBody: Seq or Ack above 16383;
//   - DropStaleSequence: a duplicate, or more than seqWindow behind the
//     newest accepted packet;
//   - DropSuspectSequence: Ack names a packet newer than any we sent (the
//     peer can only acknowledge what exists); or the packet is newer than
//     the newest accepted one but its Ack is older than that one's (the
//     peer's Ack never goes back, so the packet is older than its number
//     says: a replay from a wrap earlier); or it is more than seqMaxJump
//     ahead and not confirmed. A jump is confirmed by the next such packet
//     within seqWindow of it that is not the same number; until then each
//     jump is dropped and remembered in place of the last one, and any
//     believable step forward forgets it. The jump that a confirmation
//     believes moves the window to the confirming packet; the first packet
//     of the jump is not delivered (it is acknowledged as missing).
//
// Ack info that names a number outside the packets we have in flight is
// otherwise ignored as a whole: older than all we track, it has nothing left
// to say.
func (s *SeqState) Receive(seq, ack uint16, ackBits uint64, now float64, rep *AckReport) protocol.DropReason {
	rep.reset()
	if seq > seqMask || ack > seqMask {
		return protocol.DropBadBody
	}
	d := (seq - s.recvNewest) & seqMask
	newer := d != 0 && d < seqHalf
	var back uint16
	if !newer {
		back = (s.recvNewest - seq) & seqMask // 0 (the newest itself) .. seqHalf
		if back > seqWindow {
			s.stats.tooOld++
			return protocol.DropStaleSequence
		}
		if back == 0 || s.recvHistory&(1<<(back-1)) != 0 {
			s.stats.duplicates++
			return protocol.DropStaleSequence
		}
	}
	if seqNewer(ack, (s.nextSeq-1)&seqMask) || newer && seqNewer(s.ackNewest, ack) {
		s.stats.suspect++
		return protocol.DropSuspectSequence
	}
	if newer && d > seqMaxJump && !s.confirmsJump(seq) {
		s.jump = seq
		s.flags |= seqJumpHeld
		s.stats.suspect++
		return protocol.DropSuspectSequence
	}
	if newer {
		// Slide the window. Shifts of 64 or more give 0 in Go, so a jump
		// past the whole window clears the history.
		s.recvHistory = s.recvHistory<<d | 1<<(d-1)
		s.recvNewest = seq
		s.ackNewest = ack
		s.flags &^= seqJumpHeld
	} else {
		s.recvHistory |= 1 << (back - 1)
	}
	s.flags |= seqRecvAny
	s.stats.received++
	s.processAck(ack, ackBits, now, rep)
	return protocol.DropNone
}

// Alive reports whether a packet numbered seq with Ack ack, which the
// layer above refuses before Receive (conn: a Messages packet the message
// layer has no room for), still proves the peer alive: not a duplicate,
// not too old, its Ack not contradicting what was sent and acknowledged.
// It changes nothing. Refused packets move no window, so a run of them
// may be any distance ahead (less than half the sequence space): unlike
// Receive it believes jumps. A replay of an old packet is not alive; a
// replay of a refused one is, which only an on-path attacker can send
// (sealed connections drop replays before: their counter window).
func (s *SeqState) Alive(seq, ack uint16) bool {
	if seq > seqMask || ack > seqMask {
		return false
	}
	d := (seq - s.recvNewest) & seqMask
	newer := d != 0 && d < seqHalf
	if !newer {
		back := (s.recvNewest - seq) & seqMask
		if back > seqWindow || back == 0 || s.recvHistory&(1<<(back-1)) != 0 {
			return false
		}
	}
	return !seqNewer(ack, (s.nextSeq-1)&seqMask) && !(newer && seqNewer(s.ackNewest, ack))
}

// confirmsJump reports whether seq, itself a jump, confirms the one held: a
// different number within seqWindow of it, on either side. Two packets that
// agree on a far position are what a peer that really moved on sends; one
// packet, or the same one twice, is what a replay or a forgery is.
func (s *SeqState) confirmsJump(seq uint16) bool {
	if s.flags&seqJumpHeld == 0 {
		return false
	}
	dd := (seq - s.jump) & seqMask
	return dd != 0 && (dd <= seqWindow || dd >= protocol.SeqModulus-seqWindow)
}

// processAck reports the tracked packets that Ack/AckBits names as
// delivered, then those more than seqWindow behind Ack as lost: the peer's
// window has moved past them, so no later packet can acknowledge them.
func (s *SeqState) processAck(ack uint16, ackBits uint64, now float64, rep *AckReport) {
	off := int((ack - s.sendBase) & seqMask) // Ack's position among the tracked
	if off >= s.tracked() {
		return
	}
	// Delivered: candidate k (0..63) is ack-seqWindow+k, AckBits bit 63-k.
	// Intersect with the pending bitmap in one go; mask off candidates
	// before sendBase, whose ring slots may hold newer packets.
	first := (ack - seqWindow) & seqMask
	cand := bits.Reverse64(ackBits) & s.pendingRun(first)
	if off < seqWindow {
		cand &= ^uint64(0) << (seqWindow - off)
	}
	for cand != 0 {
		k := bits.TrailingZeros64(cand)
		cand &= cand - 1
		s.reportDelivered((first+uint16(k))&seqMask, rep)
	}
	if s.isPending(ack) {
		rep.RTTSample = max(since(stamp(now), s.sentAt(ack&ringMask)), 0)
		s.addRTTSample(rep.RTTSample)
		s.reportDelivered(ack, rep)
	}
	// Lost: everything tracked before ack-seqWindow. Each packet is passed
	// once here, since sendBase moves beyond it.
	for n := off - seqWindow; n > 0; n-- {
		if s.isPending(s.sendBase) {
			s.reportLost(s.sendBase, rep)
		}
		s.sendBase = (s.sendBase + 1) & seqMask
	}
	s.advanceBase()
}

// addRTTSample folds a sample into the smoothed RTT like TCP's SRTT
// (RFC 6298): the first sample sets it, later ones move it by 1/8.
func (s *SeqState) addRTTSample(sample float64) {
	if s.flags&seqRTTValid == 0 {
		s.srtt = float32(sample)
		s.flags |= seqRTTValid
		return
	}
	s.srtt += float32((sample - float64(s.srtt)) / 8)
}

func (s *SeqState) reportDelivered(seq uint16, rep *AckReport) {
	s.settle(seq)
	rep.delivered[rep.NumDelivered] = SentPacket{Seq: seq}
	rep.NumDelivered++
	s.stats.delivered++
}

func (s *SeqState) reportLost(seq uint16, rep *AckReport) {
	s.settle(seq)
	rep.lost[rep.NumLost] = SentPacket{Seq: seq}
	rep.NumLost++
	s.stats.lost++
}

// advanceBase moves sendBase past reported packets, restoring the invariant
// that sendBase is pending whenever anything is tracked.
func (s *SeqState) advanceBase() {
	for s.sendBase != s.nextSeq && !s.isPending(s.sendBase) {
		s.sendBase = (s.sendBase + 1) & seqMask
	}
}

// tracked is how many sequence numbers sendBase .. nextSeq-1 spans.
func (s *SeqState) tracked() int { return int((s.nextSeq - s.sendBase) & seqMask) }

// settle ends the tracking of our packet seq: it has been reported.
func (s *SeqState) settle(seq uint16) {
	slot := seq & ringMask
	s.pending[slot>>6] &^= 1 << (slot & 63)
}

func (s *SeqState) isPending(seq uint16) bool {
	slot := seq & ringMask
	return s.pending[slot>>6]&(1<<(slot&63)) != 0
}

// pendingRun returns 64 pending bits starting at seq's slot: bit k is the
// slot of seq+k, wrapping around the ring.
func (s *SeqState) pendingRun(seq uint16) uint64 {
	slot := uint(seq & ringMask)
	w, sh := slot>>6, slot&63
	run := s.pending[w] >> sh
	if sh != 0 {
		run |= s.pending[(w+1)%ringWords] << (64 - sh)
	}
	return run
}

// Touch reads the cache lines the next Receive and Send will use, the
// scalars and the ring slot of the next send, and returns a value made from
// them so the loads are not optimised away. A receive loop calls it for a
// whole batch of connections before handling any, so that with many
// connections their cache misses overlap instead of stalling one by one.
// It may run without the lock that guards s, racing a writer: the values are
// meaningless then, and only the cache lines matter.
func (s *SeqState) Touch() uint64 {
	return s.recvHistory ^ s.pending[0] ^ s.stats.sent ^ uint64(s.sentLo[s.nextSeq&ringMask])
}

// RTT returns the smoothed round-trip time in seconds, 0 before any sample.
func (s *SeqState) RTT() float64 { return float64(s.srtt) }

// SeedRTT gives s a first round-trip sample in seconds from outside the
// packet layer (the handshake's), unless it has one already; the acks'
// samples then move it by 1/8 each.
func (s *SeqState) SeedRTT(sample float64) {
	if sample > 0 && s.flags&seqRTTValid == 0 {
		s.addRTTSample(sample)
	}
}

// Stats returns the counters since Init.
func (s *SeqState) Stats() SeqStats {
	c := &s.stats
	return SeqStats{
		Sent: c.sent, Received: c.received, Delivered: c.delivered, Lost: c.lost,
		Evicted: uint64(c.evicted), Duplicates: uint64(c.duplicates),
		TooOld: uint64(c.tooOld), Suspect: uint64(c.suspect),
	}
}
