package seqwin

import (
	"testing"

	"github.com/udpgate/udpgate/internal/protocol"
)

// FuzzSeqReceive drives a SeqState with arbitrary sends and arbitrary
// (hostile) Seq, Ack and AckBits: nothing may panic, every number NextSend
// handed out is reported at most once, a dropped packet reports nothing, and
// the counters agree with the reports.
func FuzzSeqReceive(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 0x40, 0x1f, 0xff, 0x3f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 0x41, 0x1f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var s SeqState
		var rep AckReport
		s.Init(16380, 100, 0)
		reported := make(map[uint16]bool) // within one lap of 16384: numbers are unique
		sent, nrep := 0, 0
		now := 0.0
		take := func(ps []SentPacket) {
			for _, p := range ps {
				if reported[p.Seq] {
					t.Fatalf("seq %d reported twice", p.Seq)
				}
				reported[p.Seq] = true
				nrep++
			}
		}
		for len(ops) >= 13 && sent < protocol.SeqModulus-1 {
			op := ops[0]
			seq := uint16(ops[1]) | uint16(ops[2])<<8
			ack := uint16(ops[3]) | uint16(ops[4])<<8
			var bits uint64
			for i := range 8 {
				bits |= uint64(ops[5+i]) << (8 * i)
			}
			ops = ops[13:]
			now += float64(op>>1) / 1000
			if op&1 == 0 {
				for range seq & 7 {
					s.NextSend(now, &rep)
					sent++
					take(rep.LostPackets())
				}
				continue
			}
			before := s.Stats()
			r := s.Receive(seq, ack, bits, now, &rep)
			if r != protocol.DropNone && (rep.NumDelivered != 0 || rep.NumLost != 0 || s.Stats().Received != before.Received) {
				t.Fatalf("dropped packet (%v) counted or reported", r)
			}
			take(rep.DeliveredPackets())
			take(rep.LostPackets())
		}
		st := s.Stats()
		if st.Sent != uint64(sent) || st.Delivered+st.Lost != uint64(nrep) || s.InFlight() != sent-nrep {
			t.Fatalf("stats %+v, sent %d, reported %d, in flight %d", st, sent, nrep, s.InFlight())
		}
	})
}
