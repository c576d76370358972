package seqwin

import "math/bits"

// Test-only hooks: what the tests check that no caller of the package
// needs.

// NextSend is Send reporting into rep, as Receive does: rep is reset, and
// a packet that Send evicts is its one Lost entry.
func (s *SeqState) NextSend(now float64, rep *AckReport) (seq, ack uint16, ackBits uint64) {
	rep.reset()
	seq, ack, ackBits, lost, evicted := s.Send(now)
	if evicted {
		rep.lost[0] = lost
		rep.NumLost = 1
	}
	return seq, ack, ackBits
}

// Ack returns the Ack and AckBits fields for a packet sent now.
func (s *SeqState) Ack() (ack uint16, ackBits uint64) { return s.ack() }

// InFlight is how many sent packets are not reported yet.
func (s *SeqState) InFlight() int {
	n := 0
	for _, w := range s.pending {
		n += bits.OnesCount64(w)
	}
	return n
}

// Received returns the newest sequence number received from the peer, and
// whether anything was received at all.
func (s *SeqState) Received() (newest uint16, any bool) {
	return s.recvNewest, s.flags&seqRecvAny != 0
}
