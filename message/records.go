package message

// record is one sent packet that carried reliable units: its entries are
// ents[start : start+n] (ring positions).
type record struct {
	sent     int64
	start, n uint32
	seq      uint16
	size     uint16 // bytes of entries: what the congestion controller counts
	done     bool   // reported (Acked or Lost)
	repaired bool   // made due by fast repair already
	gone     bool   // out of the congestion controller's flight: lost, by inference or timeout
	evicted  bool   // the packet layer no longer tracks it: Acks reads its fate
}

// entRef names one unit sent in a packet.
type entRef struct {
	ch uint8
	id uint16
}

// records is the FIFO of packet records, in send order, and the ring of
// their entries. Positions grow monotonically; index with the mask.
type records struct {
	recs         []record
	ents         []entRef
	rHead, rTail uint32
	eHead, eTail uint32
	// aged: records before it are reported or gone (Endpoint.age).
	aged    uint32
	live    int // records not yet reported
	evicted int // of them, those the packet layer no longer tracks (Endpoint.Evicted)
	// recPeaks and entPeaks: the rings' use, for shrinking (ring.go).
	recPeaks, entPeaks ringPeaks[uint32]

	// The peer's silence (Endpoint.timeout, Endpoint.Stalled): lastAck is
	// when a packet was last acknowledged, timedAt when the last
	// retransmission timeout fired; backoff counts the timeouts since
	// that ack (each doubles the next), and probed says that the one
	// packet a backed-off sender may send per timeout went.
	lastAck, timedAt int64
	// checkAt: no timeout can fire before it (a lower bound of
	// timeoutAt, cached so that refill's check is one comparison). An
	// ack moves the timeout later, but for the reset of backoff and for
	// its round-trip sample, which may shorten the timeout: both clear
	// it (Acked, SetRTT). With only the first, a deviation that spiked
	// and settled left the bound where the spike put it: on a loaded
	// loopback, 500 silent receivers' timeouts came up to 1 s late.
	checkAt int64
	backoff uint8
	probed  bool
	// hushed: the peer's acks were overdue at the last refill
	// (Endpoint.quiet); an ack clears it.
	hushed bool
	// newest: the sequence number of the newest packet acknowledged
	// (anyAcked: there is one); reorder: the most packets by which a
	// packet taken as lost (fast repair or RACK) was overtaken, and
	// acknowledged after all: the path's reordering, which fast repair's
	// packet threshold waits out (lossThreshold; Endpoint.Acked).
	newest, reorder uint16
	anyAcked        bool

	// Time-based repair (Endpoint.rack, RACK's reorder timer): rackAt is
	// when a packet sent shortly before an acknowledged one (within fast
	// repair's threshold) is next due to be judged lost; rackRTT the
	// round trip of the newest-sent acknowledged packet.
	rackAt, rackRTT int64
	// rackPos: the position of the newest acknowledged packet that
	// armed the timer; only packets sent before it are judged.
	rackPos uint32

	// lossEst: the share of the packets with reliable units found lost
	// (repaired or reported lost), a moving average over about 64
	// packets (2^lossShift), in 2^-24 (sampleLoss, lossy).
	lossEst uint32

	// The send budget (Endpoint.reserve): queued is the storage all
	// channels hold for sending (the sum of their queued), sendRes what
	// of it beyond the floor (one grant) is reserved from the Layer's
	// budget, in grants.
	queued, sendRes int64
	// lim: the endpoint's bucket under Layer.LimitBulk, kept here, with
	// the first packet sent, so that an idle Endpoint stays small.
	lim bulkLimit
}

// newRecords returns the records of an endpoint's first reliable send,
// its loss estimate at lossStart: a path is taken as lossy until its
// packets show otherwise.
func newRecords() *records { return &records{lossEst: lossStart} }

const (
	// lossShift: the loss estimate is a moving average over about
	// 2^lossShift packets.
	lossShift = 6
	// lossStart (1 %) and lossFloor (0.1 %), in 2^-24: a new endpoint
	// copies (lossy) until its estimate falls below the floor, after
	// about 150 packets delivered in a row; one loss turns copies back
	// on for about 175 packets. (An average over 32 packets cost the p99
	// at 1 % loss 10 ms; over 128, copies at 0 % loss went on for 300
	// packets: tuning.md, "Messages".)
	lossStart = 1 << 24 / 100
	lossFloor = 1 << 24 / 1000
)

// lossThreshold is how many sequence numbers after a packet with reliable
// units an acknowledged packet must be for that packet to be taken as lost
// (Endpoint.Acked): packetThreshold, or one more than the reordering seen,
// as Linux's TCP raises its duplicate-ack threshold to the reordering it
// measures.
func (r *records) lossThreshold() uint16 { return max(packetThreshold, r.reorder+1) }

// sampleLoss folds one packet's fate into the loss estimate: delivered,
// or lost (found by fast repair, RACK or the packet layer's report; a
// packet repaired and then acknowledged counts once, as lost).
func (r *records) sampleLoss(lost bool) {
	r.lossEst -= r.lossEst >> lossShift
	if lost {
		r.lossEst += 1 << (24 - lossShift)
	}
}

// lossy reports whether the path loses packets, so that speculative
// copies of the game's reliable units are worth their bytes: on a path
// that loses nothing every copy is waste (at 0 % loss they were 45 % of
// the wire in the echo scenario: tuning.md, "Messages").
func (r *records) lossy() bool { return r.lossEst >= lossFloor }

func (r *records) pushEntry(ch uint8, id uint16) {
	if r.eTail-r.eHead == uint32(len(r.ents)) {
		r.ents = grownRing(r.ents, r.eHead, r.eTail, 64)
	}
	r.ents[r.eTail&uint32(len(r.ents)-1)] = entRef{ch, id}
	r.eTail++
	r.entPeaks.note(int(r.eTail - r.eHead))
}

func (r *records) pushRecord(rec record) {
	if r.rTail-r.rHead == uint32(len(r.recs)) {
		r.recs = grownRing(r.recs, r.rHead, r.rTail, 16)
	}
	r.recs[r.rTail&uint32(len(r.recs)-1)] = rec
	r.rTail++
	r.live++
	r.recPeaks.note(int(r.rTail - r.rHead))
}

// find returns the unreported record of packet seq, nil when none.
func (r *records) find(seq uint16) *record {
	mask := uint32(len(r.recs) - 1)
	for p := r.rHead; p != r.rTail; p++ {
		rec := &r.recs[p&mask]
		if rec.seq == seq && !rec.done {
			return rec
		}
	}
	return nil
}

// report marks rec reported and drops reported records from the head.
func (r *records) report(rec *record) {
	rec.done = true
	r.live--
	if rec.evicted {
		r.evicted--
	}
	r.popDone()
}

// popDone drops reported records from the head, and their entries.
func (r *records) popDone() {
	mask := uint32(len(r.recs) - 1)
	for r.rHead != r.rTail {
		rec := &r.recs[r.rHead&mask]
		if !rec.done {
			return
		}
		r.eHead = rec.start + rec.n
		*rec = record{}
		r.rHead++
	}
	r.eHead = r.eTail
	// Every record reported: both rings are empty.
	if size := r.recPeaks.emptied(len(r.recs), 16); size > 0 {
		r.recs = make([]record, size)
	}
	if size := r.entPeaks.emptied(len(r.ents), 64); size > 0 {
		r.ents = make([]entRef, size)
	}
}
