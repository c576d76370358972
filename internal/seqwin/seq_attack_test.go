package seqwin

import (
	"fmt"
	"reflect"
	"testing"
	"unsafe"

	"github.com/udpgate/udpgate/internal/protocol"
)

// The attacks of issue 12 item 4 against the receive filter, and the size
// budget of issue 11.

// seqHdr is a captured packet's sequence fields.
type seqHdr struct {
	seq, ack uint16
	bits     uint64
}

// seqWrapLink drives two SeqStates: each round A sends ra packets, which B
// receives at once, and B sends rb, which A receives lag rounds later. hist
// keeps every packet A sent, for replays.
type seqWrapLink struct {
	t        *testing.T
	a, b     SeqState
	ra, rb   int
	lag      int
	now      float64
	rep      AckReport
	hist     []seqHdr
	inFlight [][]seqHdr // B's packets on their way to A, by round
	// legitDrops counts A's packets that B dropped, backDrops B's that A
	// dropped.
	legitDrops, backDrops int
}

func newSeqWrapLink(t *testing.T, ra, rb, lag int) *seqWrapLink {
	l := &seqWrapLink{t: t, ra: ra, rb: rb, lag: lag}
	l.a.Init(1000, 5000, 0)
	l.b.Init(5000, 1000, 0)
	return l
}

func (l *seqWrapLink) round() {
	l.now += 1.0 / 60
	for range l.ra {
		seq, ack, bits := l.a.NextSend(l.now, &l.rep)
		l.hist = append(l.hist, seqHdr{seq, ack, bits})
		if r := l.b.Receive(seq, ack, bits, l.now, &l.rep); r != protocol.DropNone {
			l.legitDrops++
		}
	}
	var out []seqHdr
	for range l.rb {
		seq, ack, bits := l.b.NextSend(l.now, &l.rep)
		out = append(out, seqHdr{seq, ack, bits})
	}
	l.inFlight = append(l.inFlight, out)
	if len(l.inFlight) > l.lag {
		for _, p := range l.inFlight[0] {
			if r := l.a.Receive(p.seq, p.ack, p.bits, l.now, &l.rep); r != protocol.DropNone {
				l.backDrops++
			}
		}
		l.inFlight = l.inFlight[1:]
	}
}

// TestSeqReplayAfterWrap replays, into the receiver, a packet captured k
// packets earlier, for every k from 8193 to 16383: once per round, between
// legitimate packets. Before, each was accepted and delivered a second time
// (its number looks up to 8191 ahead) and the next legitimate packets were
// dropped. Now none is accepted and no legitimate packet is lost, except in
// one case that no receiver without a MAC can tell: the peers send at the
// same rate, and the replay lands where both its Seq and its Ack have come
// round to the values the next packet will carry (k within the packets in
// flight of 16384). There it takes the place of up to lag+1 legitimate
// packets, and the connection goes on.
func TestSeqReplayAfterWrap(t *testing.T) {
	for _, tc := range []struct {
		ra, rb, lag int
		band        int // the indistinguishable k: 16384-band .. 16383
	}{
		{1, 1, 0, 1},
		{1, 1, 3, 4},
		{2, 1, 0, 0}, // the client sends twice as often as the server
		{1, 2, 0, 1},
		{2, 1, 5, 0},
	} {
		t.Run(fmt.Sprintf("rates %d:%d lag %d", tc.ra, tc.rb, tc.lag), func(t *testing.T) {
			l := newSeqWrapLink(t, tc.ra, tc.rb, tc.lag)
			for len(l.hist) <= 16383 {
				l.round()
			}
			if l.legitDrops != 0 || l.backDrops != 0 {
				t.Fatalf("%d and %d legitimate packets dropped without any attack", l.legitDrops, l.backDrops)
			}
			accepted := 0
			for k := 8193; k <= 16383; k++ {
				l.round()
				p := l.hist[len(l.hist)-1-k]
				before := l.b.Stats().Received
				r := l.b.Receive(p.seq, p.ack, p.bits, l.now, &l.rep)
				if r == protocol.DropNone {
					if k < protocol.SeqModulus-tc.band {
						t.Fatalf("replay of the packet %d earlier (seq %d) accepted", k, p.seq)
					}
					accepted++
				} else if got := l.b.Stats().Received; got != before {
					t.Fatalf("dropped replay counted as received")
				}
			}
			for range 200 {
				l.round()
			}
			// An accepted replay makes B acknowledge a packet A has not sent
			// yet, so A drops B's packets until it has: both directions
			// lose at most the packets in flight.
			if max := accepted * (tc.lag + 1) * max(tc.ra, tc.rb); l.legitDrops > max || l.backDrops > max {
				t.Errorf("%d and %d legitimate packets dropped after %d accepted replays, want at most %d",
					l.legitDrops, l.backDrops, accepted, max)
			}
			t.Logf("replays accepted %d (band %d), legitimate packets dropped %d and %d, stats %+v",
				accepted, tc.band, l.legitDrops, l.backDrops, l.b.Stats())
		})
	}
}

// TestSeqForgedJump: one forged packet far ahead (issue 12: a KeepAlive
// 8000 ahead made the server drop the client's next 51 packets until it
// timed out) is dropped, and the legitimate packets that follow are all
// accepted, for every distance past seqMaxJump. The forger copies the Ack of
// the last packet it saw, the most believable one.
func TestSeqForgedJump(t *testing.T) {
	l := newSeqWrapLink(t, 1, 1, 2)
	for range 100 {
		l.round()
	}
	for d := seqMaxJump + 1; d < seqHalf; d++ {
		last := l.hist[len(l.hist)-1]
		if r := l.b.Receive((last.seq+uint16(d))&seqMask, last.ack, last.bits, l.now, &l.rep); r != protocol.DropSuspectSequence {
			t.Fatalf("forged packet %d ahead: %v, want %v", d, r, protocol.DropSuspectSequence)
		}
		l.round()
		l.round()
		if l.legitDrops != 0 || l.backDrops != 0 {
			t.Fatalf("forged packet %d ahead: the next legitimate packets were dropped", d)
		}
	}
	// Two forged packets that agree are believed: an on-path attacker who
	// keeps forging can still desynchronise the connection (see
	// docs/threat-model.md); the legitimate packets then look too old.
	last := l.hist[len(l.hist)-1]
	l.b.Receive((last.seq+8000)&seqMask, last.ack, 0, l.now, &l.rep)
	if r := l.b.Receive((last.seq+8001)&seqMask, last.ack, 0, l.now, &l.rep); r != protocol.DropNone {
		t.Fatalf("confirmed jump: %v", r)
	}
}

// TestSeqForgedStep: a forged packet within seqMaxJump of the newest,
// with the tag, cannot be told from a legitimate one (without a MAC nothing
// can). It is delivered, and the connection then stalls only briefly: the
// forged Ack (here the largest believable, our newest packet) makes the
// legitimate packets, whose Acks are older, look replayed; and the receiver
// now acknowledges a number the sender has not reached, so the sender drops
// its packets until it has sent that number. Both directions flow again
// within the forged distance plus the packets in flight, and nothing is
// left desynchronised.
func TestSeqForgedStep(t *testing.T) {
	const lag = 2
	l := newSeqWrapLink(t, 1, 1, lag)
	for range 100 {
		l.round()
	}
	for d := 1; d <= seqMaxJump; d++ {
		last := l.hist[len(l.hist)-1]
		newestOfB := (l.b.nextSeq - 1) & seqMask
		if r := l.b.Receive((last.seq+uint16(d))&seqMask, newestOfB, 0, l.now, &l.rep); r != protocol.DropNone {
			t.Fatalf("forged step %d: %v", d, r)
		}
		l.legitDrops, l.backDrops = 0, 0
		for range d + lag + 2 {
			l.round()
		}
		if bound := d + lag + 1; l.legitDrops > bound || l.backDrops > bound {
			t.Fatalf("forged step %d: %d and %d legitimate packets dropped, want at most %d",
				d, l.legitDrops, l.backDrops, bound)
		}
		l.legitDrops, l.backDrops = 0, 0
		for range 10 {
			l.round()
		}
		if l.legitDrops != 0 || l.backDrops != 0 {
			t.Fatalf("forged step %d: still dropping after recovery: %d and %d", d, l.legitDrops, l.backDrops)
		}
	}
}

// TestSeqStateSize keeps SeqState within its share of the 1 KiB per
// connection (issue 11) and free of pointers, so the garbage collector never
// scans it.
func TestSeqStateSize(t *testing.T) {
	var s SeqState
	if n := unsafe.Sizeof(s); n > 472 {
		t.Errorf("SeqState is %d bytes, want at most 472", n)
	}
	// The scalars every packet touches fit two cache lines before the ring.
	if off := unsafe.Offsetof(s.sentLo); off > 128 {
		t.Errorf("the ring starts at byte %d, want the scalars within 128", off)
	}
	var walk func(reflect.Type) bool
	walk = func(ty reflect.Type) bool {
		switch ty.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Chan, reflect.Func,
			reflect.Interface, reflect.String, reflect.UnsafePointer:
			return true
		case reflect.Array:
			return walk(ty.Elem())
		case reflect.Struct:
			for i := range ty.NumField() {
				if walk(ty.Field(i).Type) {
					return true
				}
			}
		}
		return false
	}
	if walk(reflect.TypeOf(s)) {
		t.Error("SeqState holds a pointer")
	}
}

// TestSeqRTTStamps: send times are 24-bit stamps of stampUnit, so an RTT
// keeps stampUnit's precision at today's Unix time and across the stamp's
// wraparound (every 2^24 units), and the smoothed RTT of samples at random
// phases converges on a loopback RTT below one unit.
func TestSeqRTTStamps(t *testing.T) {
	const wrap = float64(1<<stampBits) * stampUnit
	for _, start := range []float64{1.7e9, 400 * wrap, 400*wrap - stampUnit/3} {
		var s SeqState
		var rep AckReport
		s.Init(0, 0, start)
		seq, _, _ := s.NextSend(start, &rep)
		s.Receive(0, seq, 0, start+0.001234, &rep)
		if d := rep.RTTSample - 0.001234; d > stampUnit || d < -stampUnit {
			t.Errorf("start %v: RTTSample %v, want 0.001234", start, rep.RTTSample)
		}
		if p := rep.DeliveredPackets(); len(p) != 1 || p[0].Seq != seq {
			t.Errorf("start %v: delivered %+v, want seq %d", start, p, seq)
		}
	}
	var s SeqState
	var rep AckReport
	s.Init(0, 0, 0)
	now := 1.7e9
	const rtt = 0.000007 // below one unit
	for i := range 4000 {
		now += 0.0161803 // a period unrelated to the unit
		seq, _, _ := s.NextSend(now, &rep)
		s.Receive(uint16(i), seq, 0, now+rtt, &rep)
	}
	if got := s.RTT(); got < rtt/2 || got > 2*rtt {
		t.Errorf("smoothed RTT %v for a steady %v", got, rtt)
	}
}
