package seal

// ReplayWindow is how far behind the newest counter a packet may arrive and
// still be accepted once: netcode.io's replay buffer size.
const ReplayWindow = 256

// replayWords is the ring of 64-bit words holding the window's bits: the
// window spans at most ReplayWindow/64 + 1 = 5 words, rounded up to a power
// of two.
const replayWords = 8

// Replay is netcode.io's replay protection (netcode.c, replay_protection):
// a counter is refused if it is older than the newest counter received minus
// ReplayWindow, or was received already. netcode keeps a ring of 256 u64
// counters; this keeps the same rule in a ring of bits, 72 bytes instead of
// 2 KiB per direction of each connection. The zero value is empty.
type Replay struct {
	last uint64 // newest counter marked: netcode's most_recent_sequence
	bits [replayWords]uint64
}

// Seen reports whether c must be refused: at or below last − ReplayWindow,
// or already marked. netcode's already_received.
func (r *Replay) Seen(c uint64) bool {
	if r.last >= ReplayWindow && c <= r.last-ReplayWindow {
		return true
	}
	if c > r.last {
		return false
	}
	return r.bits[c/64%replayWords]&(1<<(c%64)) != 0
}

// Mark records c as received, after its packet authenticated: netcode's
// advance_sequence. A counter Seen would refuse as too old is ignored.
func (r *Replay) Mark(c uint64) {
	if c > r.last {
		// The words of the blocks the window now enters held counters
		// 512 or more behind: clear them.
		from, to := r.last/64+1, c/64 // blocks entered, if to ≥ from
		if to >= from && to-from >= replayWords-1 {
			r.bits = [replayWords]uint64{}
		} else {
			for blk := from; blk <= to; blk++ {
				r.bits[blk%replayWords] = 0
			}
		}
		r.last = c
	} else if r.last >= ReplayWindow && c <= r.last-ReplayWindow {
		return
	}
	r.bits[c/64%replayWords] |= 1 << (c % 64)
}
