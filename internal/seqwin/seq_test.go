package seqwin

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"testing"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire/wiretest"
)

func TestSeqNewer(t *testing.T) {
	for _, tc := range []struct {
		a, b uint16
		want bool
	}{
		{1, 0, true},
		{0, 1, false},
		{5, 5, false},
		{0, 16383, true}, // wraparound
		{16383, 0, false},
		{3, 16380, true},
		{8191, 0, true}, // the farthest "ahead"
		{0, 8191, false},
		{8192, 0, false}, // exactly half way: neither is newer
		{0, 8192, false},
		{100, 8293, true}, // 100 is 8191 ahead of 8293 modulo 16384
		{100, 8292, false},
	} {
		if got := seqNewer(tc.a, tc.b); got != tc.want {
			t.Errorf("seqNewer(%d, %d) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// The connection-state values TestSeqVectors reproduces, as in vectors.json.
var seqVectorWant = struct {
	cookie               string
	serverSeq, clientSeq uint16
	firstSeq, firstAck   uint16
	firstBits            uint64
	keepSeq, keepAck     uint16
	keepBits             uint64
}{"30e4dfdfbcabc556b51fc2c41933b4237531c81b", 9264, 8159, 8159, 9263, 0, 9267, 8166, 0xfffffffffffffff5}

// TestSeqVectorsMatchFile checks the constants above against the
// repository's fastpath/testdata/vectors.json.
func TestSeqVectorsMatchFile(t *testing.T) {
	data, err := os.ReadFile(wiretest.Vectors)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cookies []struct {
			Cookie    string `json:"cookie"`
			ServerSeq uint16 `json:"server_seq"`
			ClientSeq uint16 `json:"client_seq"`
		} `json:"cookies"`
		Packets []struct {
			Name   string `json:"name"`
			Fields struct {
				Seq     uint16 `json:"seq"`
				Ack     uint16 `json:"ack"`
				AckBits string `json:"ack_bits"`
			} `json:"fields"`
		} `json:"packets"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	w := seqVectorWant
	if len(f.Cookies) == 0 || f.Cookies[0].Cookie != w.cookie || f.Cookies[0].ServerSeq != w.serverSeq || f.Cookies[0].ClientSeq != w.clientSeq {
		t.Errorf("cookies[0] = %+v", f.Cookies)
	}
	found := 0
	for _, p := range f.Packets {
		var seq, ack uint16
		var bits uint64
		switch p.Name {
		case "data_first_from_client":
			seq, ack, bits = w.firstSeq, w.firstAck, w.firstBits
		case "keepalive":
			seq, ack, bits = w.keepSeq, w.keepAck, w.keepBits
		default:
			continue
		}
		found++
		if got := fmt.Sprintf("0x%016x", bits); p.Fields.Seq != seq || p.Fields.Ack != ack || p.Fields.AckBits != got {
			t.Errorf("%s: file has %+v, test uses seq %d ack %d ack_bits %s", p.Name, p.Fields, seq, ack, got)
		}
	}
	if found != 2 {
		t.Errorf("found %d of the 2 connection vectors", found)
	}
}

// seqVectorSeqs returns ServerSeq and ClientSeq of vectors.json's first cookie.
func seqVectorSeqs(t *testing.T) (serverSeq, clientSeq uint16) {
	t.Helper()
	var c cookie.Cookie
	if _, err := hex.Decode(c[:], []byte(seqVectorWant.cookie)); err != nil {
		t.Fatal(err)
	}
	serverSeq, clientSeq = cookie.Sequences(&c)
	if serverSeq != seqVectorWant.serverSeq || clientSeq != seqVectorWant.clientSeq {
		t.Fatalf("cookie sequences = %d, %d, want %d, %d", serverSeq, clientSeq, seqVectorWant.serverSeq, seqVectorWant.clientSeq)
	}
	return serverSeq, clientSeq
}

// TestSeqVectors rebuilds the Seq/Ack/AckBits of vectors.json's connection
// packets from a real exchange between a client and a server state.
func TestSeqVectors(t *testing.T) {
	serverSeq, clientSeq := seqVectorSeqs(t)
	var rep AckReport

	// data_first_from_client: nothing received yet, so Ack is the server's
	// initial sequence − 1 and AckBits 0.
	var client SeqState
	client.Init(clientSeq, serverSeq, 10)
	w := seqVectorWant
	if seq, ack, bits := client.NextSend(10, &rep); seq != w.firstSeq || ack != w.firstAck || bits != w.firstBits {
		t.Fatalf("data_first_from_client: got seq %d ack %d bits %#x, want %d %d %#x",
			seq, ack, bits, w.firstSeq, w.firstAck, w.firstBits)
	}

	// keepalive: seq 9267, ack 8166, ack_bits 0xfffffffffffffff5. The server
	// sent 9264..9266; the client sent 8159..8166 of which 8162 and 8164 were
	// lost (AckBits bits 1 and 3 clear: 8166−2 and 8166−4). Bits 7..63 name
	// 8158 and before, never sent: the window starts out "all received"
	// (see SeqState.Init). Arrival order does not matter.
	arrivals := [][]uint16{
		{8159, 8160, 8161, 8163, 8165, 8166},
		{8166, 8165, 8163, 8161, 8160, 8159},
		{8163, 8159, 8166, 8160, 8165, 8161},
	}
	for _, order := range arrivals {
		var server SeqState
		server.Init(serverSeq, clientSeq, 10)
		if ack, bits := server.Ack(); ack != 8158 || bits != 0 {
			t.Fatalf("server before receiving: ack %d bits %#x, want 8158 0", ack, bits)
		}
		for want := uint16(9264); want <= 9266; want++ {
			if seq, _, _ := server.NextSend(10, &rep); seq != want {
				t.Fatalf("server seq %d, want %d", seq, want)
			}
		}
		for _, seq := range order {
			if r := server.Receive(seq, 9263, 0, 10.1, &rep); r != protocol.DropNone {
				t.Fatalf("order %v: Receive(%d) = %v", order, seq, r)
			}
		}
		seq, ack, bits := server.NextSend(10.2, &rep)
		if seq != w.keepSeq || ack != w.keepAck || bits != w.keepBits {
			t.Errorf("order %v: keepalive got seq %d ack %d bits %#x, want %d %d %#x",
				order, seq, ack, bits, w.keepSeq, w.keepAck, w.keepBits)
		}
		if newest, any := server.Received(); newest != 8166 || !any {
			t.Errorf("Received() = %d, %v", newest, any)
		}
	}
}

type seqStep struct {
	seq  uint16
	want protocol.DropReason
}

// TestSeqReceiveWindow drives the receive filter through table cases; each
// ends with the expected Ack/AckBits. Alive is checked against every step.
func TestSeqReceiveWindow(t *testing.T) {
	ok, stale, jump := protocol.DropNone, protocol.DropStaleSequence, protocol.DropSuspectSequence
	seqRange := func(from, to int) []seqStep { // from..to inclusive, mod 16384, all accepted
		var s []seqStep
		for i := from; i <= to; i++ {
			s = append(s, seqStep{uint16(i & seqMask), ok})
		}
		return s
	}
	cat := func(parts ...[]seqStep) []seqStep { return slices.Concat(parts...) }
	for _, tc := range []struct {
		name     string
		remote   uint16
		steps    []seqStep
		wantAck  uint16
		wantBits uint64
	}{
		{"nothing received", 100, nil, 99, 0},
		{"before first: initial-1 and older dropped", 100,
			[]seqStep{{99, stale}, {98, stale}, {36, stale}, {35, stale}, {100 + 8192, stale}},
			99, 0},
		{"first packet is the initial", 100, []seqStep{{100, ok}}, 100, ^uint64(0)},
		{"first packet lost", 100, []seqStep{{101, ok}}, 101, 0xfffffffffffffffe},
		{"first packets late, then older still dropped", 100,
			[]seqStep{{103, ok}, {101, ok}, {100, ok}, {99, stale}, {102, ok}, {102, stale}},
			103, ^uint64(0)},
		{"duplicate of newest and of history", 100,
			[]seqStep{{100, ok}, {101, ok}, {101, stale}, {100, stale}},
			101, ^uint64(0)},
		{"63 and 64 back accepted once, 65 back dropped", 0,
			cat(seqRange(0, 10), []seqStep{{74, ok}, {134, ok}, {198, ok}, {200, ok},
				{137, ok}, {137, stale}, {136, ok}, {136, stale}, {135, stale}}),
			200, 1<<1 | 1<<62 | 1<<63},
		{"reordering within the window", 0,
			[]seqStep{{0, ok}, {5, ok}, {3, ok}, {4, ok}, {1, ok}, {5, stale}, {2, ok}, {6, ok}},
			6, ^uint64(0)},
		{"wraparound 16383 -> 0", 16380,
			cat(seqRange(16380, 16384+2), []seqStep{{16383, stale}, {16379, stale}, {4, ok}}),
			4, ^uint64(0) &^ (1 << 0)},
		{"wraparound with reordering", 16382,
			[]seqStep{{1, ok}, {16383, ok}, {0, ok}, {16382, ok}, {16381, stale}, {1, stale}},
			1, ^uint64(0)},
		{"a step of seqMaxJump is believed at once", 0,
			[]seqStep{{0, ok}, {seqMaxJump, ok}},
			seqMaxJump, 1 << 63},
		{"a jump needs a second packet; the first is not delivered", 0,
			[]seqStep{{0, ok}, {1, ok}, {1 + seqMaxJump + 1, jump}, {1 + seqMaxJump + 1, jump}, {1 + seqMaxJump + 3, ok},
				{1 + seqMaxJump + 1, ok}, {1 + seqMaxJump + 2, ok}, {1, stale}},
			1 + seqMaxJump + 3, 0b11},
		{"the same jump twice confirms nothing", 0,
			[]seqStep{{0, ok}, {500, jump}, {500, jump}, {500, jump}, {1, ok}},
			1, ^uint64(0)},
		{"a confirmation may come from just before the jump", 0,
			[]seqStep{{0, ok}, {500, jump}, {500 - seqWindow, ok}, {500, ok}},
			500, 1 << 63},
		{"a packet too far from the jump replaces it", 0,
			[]seqStep{{0, ok}, {500, jump}, {600, jump}, {500, jump}, {501, ok}},
			501, 0},
		{"a believable step forgets the jump", 0,
			[]seqStep{{0, ok}, {500, jump}, {1, ok}, {501, jump}, {2, ok}, {500, jump}},
			2, ^uint64(0)},
		{"a late packet within the window keeps the jump", 0,
			cat(seqRange(0, 4), seqRange(6, 10), []seqStep{{500, jump}, {5, ok}, {501, ok}}),
			501, 0},
		{"8191 ahead is a jump, 8192 ahead is old", 0,
			[]seqStep{{0, ok}, {8192, stale}, {8191, jump}, {0, stale}, {8191 + 8192, stale}, {8190, ok}, {8191, ok}},
			8191, 1},
		{"out of range numbers", 0,
			[]seqStep{{protocol.SeqModulus, protocol.DropBadBody}, {0xffff, protocol.DropBadBody}, {0, ok}},
			0, ^uint64(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s SeqState
			var rep AckReport
			s.Init(7, tc.remote, 0)
			for i, st := range tc.steps {
				// Alive agrees with Receive but for jumps, which it
				// believes, and changes nothing.
				alive := s.Alive(st.seq, 6)
				if alive != (st.want == ok) && st.want != jump && s.flags&seqJumpHeld == 0 {
					t.Fatalf("step %d: Alive(%d) = %v, Receive wants %v", i, st.seq, alive, st.want)
				}
				if got := s.Receive(st.seq, 6, 0, 1, &rep); got != st.want {
					t.Fatalf("step %d: Receive(%d) = %v, want %v", i, st.seq, got, st.want)
				}
			}
			if ack, bits := s.Ack(); ack != tc.wantAck || bits != tc.wantBits {
				t.Errorf("Ack() = %d %#x, want %d %#x", ack, bits, tc.wantAck, tc.wantBits)
			}
			_, bits := s.Ack()
			_, _, sendBits := s.NextSend(2, &rep)
			if sendBits != bits {
				t.Errorf("NextSend AckBits %#x != Ack() %#x", sendBits, bits)
			}
		})
	}
}

func TestSeqReceiveStats(t *testing.T) {
	var s SeqState
	var rep AckReport
	s.Init(0, 0, 5)
	if s.RTT() != 0 {
		t.Fatalf("after Init: RTT %v", s.RTT())
	}
	if _, any := s.Received(); any {
		t.Fatal("Received() reports something before any Receive")
	}
	s.Receive(0, 16383, 0, 6, &rep)
	s.Receive(0, 16383, 0, 7, &rep) // duplicate: not a valid packet
	s.Receive(60, 16383, 0, 8, &rep)
	s.Receive(1, 16383, 0, 9, &rep)    // 59 back: never received, accepted
	s.Receive(1000, 16383, 0, 9, &rep) // an unconfirmed jump
	s.Receive(61, 0, 0, 9, &rep)       // acks a packet never sent
	s.Receive(62, 16383, 0, 9, &rep)
	s.Receive(16380, 16383, 0, 9, &rep) // 66 back: too old
	s.NextSend(9.5, &rep)
	want := SeqStats{Sent: 1, Received: 4, Duplicates: 1, TooOld: 1, Suspect: 2}
	if got := s.Stats(); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
}

func seqSentSeqs(ps []SentPacket) []uint16 {
	out := make([]uint16, len(ps))
	for i, p := range ps {
		out[i] = p.Seq
	}
	return out
}

func seqSpan(from, n int) []uint16 {
	out := make([]uint16, n)
	for i := range out {
		out[i] = uint16((from + i) & seqMask)
	}
	return out
}

// seqAckStep is one packet from the peer in TestSeqAcks: it is accepted (the
// peer's seq always advances) and carries ack/bits.
type seqAckStep struct {
	sendBefore    int // our packets to send first, one per 0.01 s
	ack           uint16
	bits          uint64
	wantDelivered []uint16
	wantLost      []uint16
	wantEvicted   []uint16 // reported by the sends before this step
	wantRTT       float64  // -1: no sample
	wantDrop      protocol.DropReason
}

func TestSeqAcks(t *testing.T) {
	all := ^uint64(0)
	for _, tc := range []struct {
		name  string
		local uint16
		steps []seqAckStep
	}{
		{"ack of the newest gives the RTT sample", 1000, []seqAckStep{
			{sendBefore: 3, ack: 1002, bits: all, wantDelivered: seqSpan(1000, 3), wantRTT: 0.1},
			{ack: 1002, bits: all, wantRTT: -1}, // already reported: nothing twice
		}},
		{"ack of an older packet only", 1000, []seqAckStep{
			{sendBefore: 3, ack: 1001, bits: 0, wantDelivered: []uint16{1001}, wantRTT: 0.11},
			{ack: 1002, bits: 0b10, wantDelivered: []uint16{1000, 1002}, wantRTT: 0.2},
		}},
		{"holes in AckBits stay in flight until out of the window", 0, []seqAckStep{
			{sendBefore: 10, ack: 9, bits: all &^ (1<<1 | 1<<4), wantDelivered: []uint16{0, 1, 2, 3, 5, 6, 8, 9}, wantRTT: 0.1},
			// 7 is still unacknowledged (AckBits bit 63), 4 is out of the window.
			{sendBefore: 64, ack: 71, bits: all &^ (1 << 63), wantDelivered: seqSpan(10, 62), wantLost: []uint16{4}, wantRTT: 0.12},
			{ack: 72, bits: all, wantDelivered: []uint16{72}, wantLost: []uint16{7}, wantRTT: 0.21},
		}},
		{"ack ahead of our newest sent drops the packet", 0, []seqAckStep{
			{sendBefore: 10, ack: 10, bits: all, wantRTT: -1, wantDrop: protocol.DropSuspectSequence},
			{ack: 5000, bits: all, wantRTT: -1, wantDrop: protocol.DropSuspectSequence},
			{ack: 9, bits: 0, wantDelivered: []uint16{9}, wantRTT: 0.3},
		}},
		{"ack before anything was sent", 50, []seqAckStep{
			{ack: 49, bits: all, wantRTT: -1}, // the peer's "nothing received yet": ignored
			{ack: 50, bits: all, wantRTT: -1, wantDrop: protocol.DropSuspectSequence},
			{sendBefore: 1, ack: 49, bits: 0, wantRTT: -1},
			{ack: 50, bits: all, wantDelivered: []uint16{50}, wantRTT: 0.2},
		}},
		{"ack older than the newest packet's drops the packet", 0, []seqAckStep{
			{sendBefore: 100, ack: 99, bits: 0, wantDelivered: []uint16{99}, wantLost: seqSpan(0, 35), wantRTT: 0.1},
			{ack: 20, bits: all, wantRTT: -1, wantDrop: protocol.DropSuspectSequence},
			{ack: 98, bits: 0, wantRTT: -1, wantDrop: protocol.DropSuspectSequence},
			{ack: 99, bits: all, wantDelivered: seqSpan(35, 64), wantRTT: -1},
		}},
		{"ack older than everything tracked is ignored", 0, []seqAckStep{
			{sendBefore: SeqRingSize + 10, ack: 5, bits: 0, wantEvicted: seqSpan(0, 10), wantRTT: -1},
			{ack: 98, bits: 0, wantDelivered: []uint16{98}, wantLost: seqSpan(10, 24), wantRTT: 0.59},
		}},
		{"wraparound", 16380, []seqAckStep{
			{sendBefore: 10, ack: 5, bits: all, wantDelivered: seqSpan(16380, 10), wantRTT: 0.1},
			{sendBefore: 100, ack: 16384 + 105 - protocol.SeqModulus, bits: 0, wantDelivered: []uint16{105}, wantLost: seqSpan(6, 35), wantRTT: 0.1},
		}},
		{"eviction when the ring is full", 16300, []seqAckStep{
			{sendBefore: SeqRingSize + 3, ack: 16300 + SeqRingSize + 2 - protocol.SeqModulus, bits: all,
				wantEvicted:   seqSpan(16300, 3),
				wantDelivered: seqSpan(16300+SeqRingSize+2-seqWindow, seqWindow+1),
				wantLost:      seqSpan(16303, SeqRingSize-seqWindow-1),
				wantRTT:       0.1},
		}},
		{"worst case report: both arrays full", 0, []seqAckStep{
			{sendBefore: SeqRingSize, ack: SeqRingSize - 1, bits: all,
				wantDelivered: seqSpan(SeqRingSize-1-seqWindow, maxDeliveredPerReport),
				wantLost:      seqSpan(0, maxLostPerReport),
				wantRTT:       0.1},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s SeqState
			var rep AckReport
			const peer = 500
			s.Init(tc.local, peer, 0)
			now, peerSeq := 0.0, uint16(peer)
			var sent, reported int
			for i, st := range tc.steps {
				var evicted []uint16
				for range st.sendBefore {
					now += 0.01
					s.NextSend(now, &rep)
					sent++
					evicted = append(evicted, seqSentSeqs(rep.LostPackets())...)
					if rep.NumDelivered != 0 || rep.RTTSample != -1 {
						t.Fatalf("NextSend reported %+v", rep.DeliveredPackets())
					}
				}
				now += 0.1
				if r := s.Receive(peerSeq, st.ack, st.bits, now, &rep); r != st.wantDrop {
					t.Fatalf("step %d: Receive = %v, want %v", i, r, st.wantDrop)
				}
				peerSeq++
				if got := seqSentSeqs(rep.DeliveredPackets()); !slices.Equal(got, st.wantDelivered) {
					t.Errorf("step %d: delivered %v, want %v", i, got, st.wantDelivered)
				}
				if got := seqSentSeqs(rep.LostPackets()); !slices.Equal(got, st.wantLost) {
					t.Errorf("step %d: lost %v, want %v", i, got, st.wantLost)
				}
				if !slices.Equal(evicted, st.wantEvicted) {
					t.Errorf("step %d: evicted %v, want %v", i, evicted, st.wantEvicted)
				}
				if d := rep.RTTSample - st.wantRTT; d > stampUnit || d < -stampUnit { // stamps are stampUnit
					t.Errorf("step %d: RTTSample %v, want %v", i, rep.RTTSample, st.wantRTT)
				}
				reported += rep.NumDelivered + rep.NumLost + len(evicted)
			}
			if got := s.InFlight(); got != sent-reported {
				t.Errorf("InFlight() = %d, want %d sent − %d reported", got, sent, reported)
			}
			st := s.Stats()
			if st.Sent != uint64(sent) || st.Delivered+st.Lost != uint64(reported) {
				t.Errorf("Stats() = %+v; sent %d reported %d", st, sent, reported)
			}
		})
	}
}

func TestSeqRTTSmoothing(t *testing.T) {
	var s SeqState
	var rep AckReport
	s.Init(0, 0, 0)
	samples := []float64{0.1, 0.2, 0.2, 0.05}
	want := []float64{0.1, 0.1125, 0.1234375, 0.11425781250}
	now := 0.0
	for i, sample := range samples {
		seq, _, _ := s.NextSend(now, &rep)
		now += sample
		s.Receive(uint16(i), seq, 0, now, &rep)
		// Send times are stamps of stampUnit, the smoothed RTT a float32:
		// each is within one unit.
		if rep.RTTSample < sample-stampUnit || rep.RTTSample > sample+stampUnit {
			t.Fatalf("sample %d: RTTSample %v, want %v", i, rep.RTTSample, sample)
		}
		if got := s.RTT(); got < want[i]-stampUnit || got > want[i]+stampUnit {
			t.Errorf("after sample %d: RTT %v, want %v", i, got, want[i])
		}
	}
	// A clock that steps back yields a zero sample, never a negative one.
	seq, _, _ := s.NextSend(now, &rep)
	s.Receive(uint16(len(samples)), seq, 0, now-1, &rep)
	if rep.RTTSample != 0 {
		t.Errorf("backwards clock: RTTSample %v, want 0", rep.RTTSample)
	}
}

// TestSeqStaleAckIgnored: ack fields of a dropped packet count for nothing.
func TestSeqStaleAckIgnored(t *testing.T) {
	var s SeqState
	var rep AckReport
	s.Init(0, 0, 0)
	for range 5 {
		s.NextSend(0, &rep)
	}
	if s.Receive(0, 16383, 0, 1, &rep) != protocol.DropNone {
		t.Fatal("first packet dropped")
	}
	if r := s.Receive(0, 4, ^uint64(0), 1, &rep); r != protocol.DropStaleSequence || rep.NumDelivered != 0 || rep.NumLost != 0 {
		t.Fatalf("duplicate: %v, report %+v %+v", r, rep.DeliveredPackets(), rep.LostPackets())
	}
	if s.InFlight() != 5 {
		t.Fatalf("InFlight() = %d, want 5", s.InFlight())
	}
}

// --- Randomized two-sided simulation ---------------------------------------

// seqSimChannel is one direction's network behaviour.
type seqSimChannel struct {
	loss, dup          float64 // probabilities per packet
	minDelay, maxDelay float64 // uniform one-way delay: reordering when wider than a tick
	// blackouts: packets sent during [start, end) are all lost.
	blackouts [][2]float64
}

type seqSimRecord struct {
	seq          uint16
	sentAt       float64
	peerAccepted bool // ground truth: the peer's Receive accepted it
	arrivedLate  bool // a copy reached the peer after its window had passed it
	status       int  // 0 unreported, then seqSimDelivered, seqSimLost or seqSimEvicted
}

type seqSimEnd struct {
	name     string
	s        SeqState
	local    uint16
	remote   uint16
	sent     []seqSimRecord // our packets by absolute index
	accepted []bool         // peer's packets we accepted, by absolute index
	maxAcc   int            // newest accepted absolute index, -1 before any
	jump     int            // the jump held (absolute index), -1 for none
	oldest   int            // every packet before it is reported
}

type seqSimPacket struct {
	from       int
	idx        int // absolute index among from's packets
	seq, ack   uint16
	bits       uint64
	arrive     float64
	tiebreaker int
}

// absIndex maps a sequence number of ours to the absolute index of the
// newest packet we sent with it, relative to our newest: ok is false when seq
// is ahead of the newest (never sent). The result may be negative (before
// our first packet).
func (e *seqSimEnd) absIndex(seq uint16) (int, bool) {
	last := len(e.sent) - 1
	lastSeq := uint16((int(e.local) + last) & seqMask)
	if seqNewer(seq, lastSeq) || last < 0 {
		return 0, false
	}
	return last - int((lastSeq-seq)&seqMask), true
}

// wantAck is the reference model of our Ack/AckBits from absolute indices.
func (e *seqSimEnd) wantAck() (uint16, uint64) {
	if e.maxAcc < 0 {
		return (e.remote - 1) & seqMask, 0
	}
	var bits uint64
	for b := range 64 {
		i := e.maxAcc - 1 - b
		if i < 0 || e.accepted[i] {
			bits |= 1 << b
		}
	}
	return uint16((int(e.remote) + e.maxAcc) & seqMask), bits
}

const (
	seqSimDelivered = 1 + iota
	seqSimLost      // Ack moved more than seqWindow past it
	seqSimEvicted   // SeqRingSize newer packets were sent first
)

// seqSimTally classifies every report by what really happened, once the run is
// over (a packet may reach the peer after it was reported lost).
type seqSimTally struct {
	delivered, lostNeverArrived, lostArrivedTooLate, lostAckedTooLate, evicted int
	dropped, duplicatesSent                                                    int
}

// TestSeqSimulation runs two SeqStates against each other over lossy,
// duplicating, reordering channels and checks every report against a
// reference model built on absolute packet indices (which never wrap), and
// against what really happened on the wire:
//
//   - the receive filter accepts a packet iff it was not accepted before and
//     is at most seqWindow behind the newest accepted one; Ack/AckBits on
//     every send equal the model's;
//   - each call reports exactly the model's delivered set (our unreported
//     packets named by an accepted packet's Ack/AckBits) and lost set (our
//     unreported packets more than seqWindow behind that Ack), in order;
//     evictions are the oldest unreported packet when SeqRingSize are
//     tracked;
//   - delivered ⇒ the peer really accepted the packet (its Receive returned
//     DropNone) before the acknowledging packet was sent;
//   - lost ⇒ the peer never accepted it (dropped by the channel, or every
//     copy arrived after the peer's window had passed it), or it was accepted but no
//     accepted packet from the peer named it while it was tracked (all such
//     acks were lost or late, or it was evicted). The second case is implied
//     by the exact delivered-set check, which would have reported it;
//   - after a lossless drain every packet but the last unanswered one was
//     reported exactly once.
func TestSeqSimulation(t *testing.T) {
	for _, sc := range []struct {
		name   string
		seed   uint64
		ticks  int
		sendP  float64
		ch     [2]seqSimChannel // ch[i]: from end i to the other
		locals [2]uint16
		// require asserts that the scenario exercised these outcomes.
		requireAckedTooLate, requireEvicted, requireArrivedLate, requireJump bool
	}{
		{name: "mild", seed: 1, ticks: 20000, sendP: 0.9,
			ch: [2]seqSimChannel{
				{loss: 0.05, dup: 0.02, minDelay: 0.02, maxDelay: 0.08},
				{loss: 0.05, dup: 0.02, minDelay: 0.02, maxDelay: 0.08},
			},
			locals: [2]uint16{16384 - 100, 4000}},
		{name: "harsh", seed: 2, ticks: 20000, sendP: 0.7,
			ch: [2]seqSimChannel{
				{loss: 0.3, dup: 0.1, minDelay: 0.01, maxDelay: 0.5},
				{loss: 0.4, dup: 0.2, minDelay: 0.05, maxDelay: 2.5},
			},
			locals:             [2]uint16{5, 16383},
			requireArrivedLate: true},
		{name: "blackouts", seed: 3, ticks: 30000, sendP: 0.95,
			ch: [2]seqSimChannel{
				{loss: 0.1, dup: 0.05, minDelay: 0.03, maxDelay: 0.2, blackouts: [][2]float64{{40, 50}, {200, 203}}},
				{loss: 0.1, dup: 0.05, minDelay: 0.03, maxDelay: 0.2, blackouts: [][2]float64{{100, 107}, {300, 301.5}}},
			},
			locals:              [2]uint16{16000, 8191},
			requireAckedTooLate: true, requireEvicted: true, requireJump: true},
	} {
		t.Run(sc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(sc.seed, 0x5eed))
			const dt = 1.0 / 60
			ends := [2]*seqSimEnd{{name: "A", maxAcc: -1, jump: -1}, {name: "B", maxAcc: -1, jump: -1}}
			for i, e := range ends {
				e.local, e.remote = sc.locals[i], sc.locals[1-i]
				e.s.Init(e.local, e.remote, 0)
			}
			var tally [2]seqSimTally
			var queue []seqSimPacket
			var rep AckReport
			tie := 0

			// checkReport matches rep against the model's expected sets and
			// records the reports.
			// RTT samples are exact to a stamp unit.
			const tick = stampUnit + 1e-9
			near := func(a, b float64) bool { return a-b <= tick && b-a <= tick }
			samePackets := func(got []SentPacket, want []int, e *seqSimEnd) bool {
				if len(got) != len(want) {
					return false
				}
				for k, i := range want {
					if got[k].Seq != e.sent[i].seq {
						return false
					}
				}
				return true
			}
			checkReport := func(e *seqSimEnd, wantDelivered, wantLost []int, how int, wantRTT float64, ctx string) {
				t.Helper()
				if !samePackets(rep.DeliveredPackets(), wantDelivered, e) {
					t.Fatalf("%s %s: delivered %v, want indices %v", e.name, ctx, rep.DeliveredPackets(), wantDelivered)
				}
				if !samePackets(rep.LostPackets(), wantLost, e) {
					t.Fatalf("%s %s: lost %v, want indices %v", e.name, ctx, rep.LostPackets(), wantLost)
				}
				if (wantRTT < 0) != (rep.RTTSample < 0) || !near(rep.RTTSample, wantRTT) {
					t.Fatalf("%s %s: RTTSample %v, want %v", e.name, ctx, rep.RTTSample, wantRTT)
				}
				for _, i := range wantDelivered {
					if !e.sent[i].peerAccepted {
						t.Fatalf("%s %s: packet %d (seq %d) reported delivered, never accepted by the peer",
							e.name, ctx, i, e.sent[i].seq)
					}
					e.sent[i].status = seqSimDelivered
				}
				for _, i := range wantLost {
					e.sent[i].status = how
				}
			}

			oldestUnreported := func(e *seqSimEnd) int {
				for e.oldest < len(e.sent) && e.sent[e.oldest].status != 0 {
					e.oldest++
				}
				return e.oldest
			}

			send := func(from int, now float64, ch *seqSimChannel) {
				e := ends[from]
				// Model: eviction when SeqRingSize numbers are tracked.
				var wantEvict []int
				if o := oldestUnreported(e); len(e.sent)-o == SeqRingSize {
					wantEvict = []int{o}
				}
				seq, ack, bits := e.s.NextSend(now, &rep)
				checkReport(e, nil, wantEvict, seqSimEvicted, -1, "NextSend")
				wantSeq := uint16((int(e.local) + len(e.sent)) & seqMask)
				if seq != wantSeq {
					t.Fatalf("%s: NextSend seq %d, want %d", e.name, seq, wantSeq)
				}
				if wa, wb := e.wantAck(); ack != wa || bits != wb {
					t.Fatalf("%s: NextSend ack %d bits %#x, want %d %#x", e.name, ack, bits, wa, wb)
				}
				e.sent = append(e.sent, seqSimRecord{seq: seq, sentAt: now})
				p := seqSimPacket{from: from, idx: len(e.sent) - 1, seq: seq, ack: ack, bits: bits}
				if ch == nil { // drain: lossless, in order
					p.arrive, p.tiebreaker = now, tie
					tie++
					queue = append(queue, p)
					return
				}
				for _, b := range ch.blackouts {
					if now >= b[0] && now < b[1] {
						tally[from].dropped++
						return
					}
				}
				if rng.Float64() < ch.loss {
					tally[from].dropped++
					return
				}
				copies := 1
				if rng.Float64() < ch.dup {
					copies = 2
					tally[from].duplicatesSent++
				}
				for range copies {
					p.arrive = now + ch.minDelay + rng.Float64()*(ch.maxDelay-ch.minDelay)
					p.tiebreaker = tie
					tie++
					queue = append(queue, p)
				}
			}

			receive := func(p seqSimPacket, now float64) {
				e, peer := ends[1-p.from], ends[p.from]
				for len(e.accepted) <= p.idx {
					e.accepted = append(e.accepted, false)
				}
				// Model of the receive filter: within the window and not
				// accepted before; more than seqMaxJump ahead only when it
				// confirms the jump held (a different packet within
				// seqWindow of it), else it becomes the jump held. A step
				// forward of at most seqMaxJump forgets the jump. The
				// channels never forge, so the ack checks never fire.
				wantAccept, wantDrop := !e.accepted[p.idx] && p.idx >= e.maxAcc-seqWindow, protocol.DropStaleSequence
				if d := p.idx - e.maxAcc; d > seqMaxJump {
					dj := p.idx - e.jump
					wantAccept = e.jump >= 0 && dj != 0 && dj >= -seqWindow && dj <= seqWindow
					if !wantAccept {
						e.jump, wantDrop = p.idx, protocol.DropSuspectSequence
					}
				}
				if wantAccept && p.idx > e.maxAcc {
					e.jump = -1
				}
				got := e.s.Receive(p.seq, p.ack, p.bits, now, &rep)
				if (got == protocol.DropNone) != wantAccept || (got != protocol.DropNone && got != wantDrop) {
					t.Fatalf("%s: Receive(seq %d, abs %d, newest abs %d, jump abs %d) = %v, want accept %v or %v",
						e.name, p.seq, p.idx, e.maxAcc, e.jump, got, wantAccept, wantDrop)
				}
				if got != protocol.DropNone {
					if !e.accepted[p.idx] {
						peer.sent[p.idx].arrivedLate = true
					}
					if rep.NumDelivered+rep.NumLost != 0 {
						t.Fatalf("%s: dropped packet reported acks", e.name)
					}
					return
				}
				e.accepted[p.idx] = true
				e.maxAcc = max(e.maxAcc, p.idx)
				peer.sent[p.idx].peerAccepted = true

				// Model of the ack processing, on absolute indices.
				var wantDelivered, wantLost []int
				wantRTT := -1.0
				if a, ok := e.absIndex(p.ack); ok {
					for i := max(0, a-seqWindow); i <= a && i < len(e.sent); i++ {
						if e.sent[i].status == 0 && (i == a || p.bits&(1<<(a-1-i)) != 0) {
							wantDelivered = append(wantDelivered, i)
						}
					}
					for i := oldestUnreported(e); i < a-seqWindow && i < len(e.sent); i++ {
						if e.sent[i].status == 0 {
							wantLost = append(wantLost, i)
						}
					}
					if a >= 0 && e.sent[a].status == 0 {
						wantRTT = max(now-e.sent[a].sentAt, 0)
					}
				}
				checkReport(e, wantDelivered, wantLost, seqSimLost, wantRTT, "Receive")
			}

			deliverUntil := func(now float64) {
				sort.Slice(queue, func(i, j int) bool {
					if queue[i].arrive != queue[j].arrive {
						return queue[i].arrive < queue[j].arrive
					}
					return queue[i].tiebreaker < queue[j].tiebreaker
				})
				n := 0
				for n < len(queue) && queue[n].arrive <= now {
					receive(queue[n], queue[n].arrive)
					n++
				}
				queue = append(queue[:0], queue[n:]...)
			}

			now := 0.0
			for range sc.ticks {
				now += dt
				deliverUntil(now)
				for from := range 2 {
					if rng.Float64() < sc.sendP {
						send(from, now, &sc.ch[from])
					}
				}
			}
			var rtt [2]float64
			for i, e := range ends {
				rtt[i] = e.s.RTT()
			}
			// Let everything in the air land, then exchange losslessly, in
			// order, until both windows have moved past every old packet.
			now += 10
			deliverUntil(now)
			for range SeqRingSize + seqWindow {
				now += dt
				send(0, now, nil)
				deliverUntil(now)
				send(1, now, nil)
				deliverUntil(now)
			}

			for i, e := range ends {
				tl := &tally[i]
				reported := 0
				for j, r := range e.sent {
					switch {
					case r.status == 0:
						if j != len(e.sent)-1 || i != 1 {
							t.Errorf("%s: packet %d (seq %d) never reported", e.name, j, r.seq)
						}
						continue
					case r.status == seqSimDelivered:
						tl.delivered++
					case r.status == seqSimEvicted:
						tl.evicted++
					case r.peerAccepted:
						tl.lostAckedTooLate++
					case r.arrivedLate:
						tl.lostArrivedTooLate++
					default:
						tl.lostNeverArrived++
					}
					reported++
				}
				if got, want := e.s.InFlight(), len(e.sent)-reported; got != want {
					t.Errorf("%s: InFlight() = %d, want %d", e.name, got, want)
				}
				st := e.s.Stats()
				if st.Sent != uint64(len(e.sent)) || st.Delivered != uint64(tl.delivered) ||
					st.Lost != uint64(tl.lostNeverArrived+tl.lostArrivedTooLate+tl.lostAckedTooLate+tl.evicted) || st.Evicted != uint64(tl.evicted) {
					t.Errorf("%s: Stats() = %+v, tally %+v", e.name, st, tl)
				}
				if sc.requireAckedTooLate && tl.lostAckedTooLate == 0 {
					t.Errorf("%s: scenario never lost the acks of an arrived packet", e.name)
				}
				if sc.requireArrivedLate && i == 1 && tl.lostArrivedTooLate == 0 {
					t.Errorf("%s: scenario never had a packet arrive after the window", e.name)
				}
				if sc.requireEvicted && tl.evicted == 0 {
					t.Errorf("%s: scenario never evicted", e.name)
				}
				if sc.requireJump && st.Suspect == 0 {
					t.Errorf("%s: scenario never lost more than seqMaxJump in a row", e.name)
				}
				if tl.lostNeverArrived == 0 || tl.delivered == 0 {
					t.Errorf("%s: scenario too tame: %+v", e.name, tl)
				}
				// Before the instant drain, every RTT sample was at least both
				// minimum delays and at most both maximum ones plus the
				// peer's wait for its next send.
				lo, hi := sc.ch[0].minDelay+sc.ch[1].minDelay, sc.ch[0].maxDelay+sc.ch[1].maxDelay+1
				if rtt[i] < lo || rtt[i] > hi {
					t.Errorf("%s: RTT %v outside [%v, %v]", e.name, rtt[i], lo, hi)
				}
				t.Logf("%s: sent %d, %+v, stats %+v, rtt %.3f", e.name, len(e.sent), tl, st, rtt[i])
			}
			wrapped := false
			for _, e := range ends {
				wrapped = wrapped || int(e.local)+len(e.sent) > protocol.SeqModulus
			}
			if !wrapped {
				t.Error("no end wrapped around 16383 -> 0")
			}
		})
	}
}

// --- Allocations and benchmarks ---------------------------------------------

func TestSeqZeroAlloc(t *testing.T) {
	var a, b SeqState
	var rep AckReport
	a.Init(16380, 200, 0)
	b.Init(200, 16380, 0)
	now := 0.0
	exchange := func() {
		now += 0.01
		seq, ack, bits := a.NextSend(now, &rep)
		if seq%7 != 0 { // some loss, so both lost and delivered paths run
			b.Receive(seq, ack, bits, now+0.02, &rep)
		}
		seq, ack, bits = b.NextSend(now, &rep)
		a.Receive(seq, ack, bits, now+0.03, &rep)
		a.Receive(seq, ack, bits, now+0.03, &rep) // duplicate
	}
	if n := testing.AllocsPerRun(20000, exchange); n != 0 {
		t.Errorf("exchange allocates %v per run", n)
	}
	if n := testing.AllocsPerRun(1000, func() { now += 0.01; a.NextSend(now, &rep) }); n != 0 {
		t.Errorf("NextSend (evicting) allocates %v per run", n)
	}
	if a.Stats().Evicted == 0 {
		t.Error("eviction path not exercised")
	}
	if n := testing.AllocsPerRun(1000, func() { _ = a.Stats(); _ = a.InFlight(); _ = a.RTT() }); n != 0 {
		t.Errorf("getters allocate %v per run", n)
	}
}

func TestSeqStateIsPlainValue(t *testing.T) {
	// Copying snapshots the whole state: no shared backing storage.
	var a AckReport
	var s SeqState
	s.Init(0, 0, 0)
	s.NextSend(0, &a)
	c := s
	s.Receive(0, 0, 0, 1, &a)
	if c.InFlight() != 1 || s.InFlight() != 0 {
		t.Errorf("copy shares state: copy InFlight %d, original %d", c.InFlight(), s.InFlight())
	}
}

func BenchmarkSeqReceive(b *testing.B) {
	// Steady state: each received packet is new and acknowledges our newest
	// undelivered packet with a full AckBits (RTT sample, bitmap work). Our
	// sends are refilled outside the timer.
	var s SeqState
	var rep AckReport
	s.Init(100, 9000, 0)
	now := 0.0
	var ours []uint16
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%SeqRingSize == 0 {
			b.StopTimer()
			ours = ours[:0]
			for range SeqRingSize {
				seq, _, _ := s.NextSend(now, &rep)
				ours = append(ours, seq)
			}
			b.StartTimer()
		}
		now += 0.001
		s.Receive(uint16((9000+i)&seqMask), ours[i%SeqRingSize], ^uint64(0), now, &rep)
	}
}

func BenchmarkSeqNextSend(b *testing.B) {
	for _, evicting := range []bool{false, true} {
		b.Run(fmt.Sprintf("evicting=%v", evicting), func(b *testing.B) {
			var s SeqState
			var rep AckReport
			s.Init(100, 9000, 0)
			now := 0.0
			peerSeq := uint16(9000)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if !evicting && i%seqWindow == 0 && i > 0 {
					b.StopTimer()
					newest := uint16((100 + i - 1) & seqMask)
					s.Receive(peerSeq, newest, ^uint64(0), now, &rep)
					peerSeq = (peerSeq + 1) & seqMask
					b.StartTimer()
				}
				now += 0.001
				s.NextSend(now, &rep)
			}
		})
	}
}
