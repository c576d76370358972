package message

import (
	"testing"
	"time"
)

// More packets in flight than the packet layer tracks (128): the oldest
// are evicted unreported, and the endpoint reads their fate from the ack
// fields itself. A large message over a loss-free, long path then arrives
// whole with nothing sent twice (evictions reported as losses would resend
// every evicted packet's units), and over a lossy one still arrives.
func TestSimBeyondTrackedPackets(t *testing.T) {
	for _, loss := range []float64{0, 0.05} {
		sm := newSim(t, Config{Channels: []ChannelConfig{{Kind: ReliableOrdered, Bulk: true}}, MaxMessageSize: 1 << 20}, 21)
		sm.latency, sm.loss = int64(100*time.Millisecond), loss
		for i := range sm.s {
			sm.s[i].ep.SetRTT(200 * time.Millisecond)
		}
		const size = 600_000 // about 510 packets
		if err := sm.s[0].ep.Send(0, simMsg(0, 0, size), sm.now); err != nil {
			t.Fatal(err)
		}
		peak, evicted := 0, 0
		for step := 0; step < 20_000 && len(sm.s[1].recv[0]) == 0; step++ {
			sm.step(time.Millisecond)
			r := sm.s[0].ep.recs
			if r != nil {
				peak = max(peak, r.live)
				evicted = max(evicted, r.evicted)
			}
		}
		if len(sm.s[1].recv[0]) != 1 || checkSimMsg(t, 0, sm.s[1].recv[0][0]) != 0 {
			t.Fatalf("loss %v: the message did not arrive", loss)
		}
		st := sm.s[0].ep.Stats()
		t.Logf("loss %v: %.2f s, at most %d packets in flight (%d untracked at once), resent %d",
			loss, float64(sm.now-simStart)/1e9, peak, evicted, st.Resent)
		if peak <= 128 || evicted == 0 {
			t.Fatalf("loss %v: at most %d packets in flight, %d evicted: the test did not go past the packet layer's 128", loss, peak, evicted)
		}
		if loss == 0 && st.Resent != 0 {
			t.Fatalf("%d units resent on a loss-free path: evicted packets taken for lost", st.Resent)
		}
	}
}

// An evicted packet that the peer's ack names as its newest gives a round
// trip sample: the packet layer, which no longer tracks it, takes none, and
// with flights larger than it tracks the smoothed round trip otherwise
// stayed at what smaller flights had measured.
func TestEvictedNewestGivesRTT(t *testing.T) {
	l := testLayer(t, nil)
	e := l.NewEndpoint()
	for range 20 {
		e.SetRTT(10 * time.Millisecond)
	}
	buf := make([]byte, 1200)
	if err := e.Send(0, []byte("a"), t0); err != nil {
		t.Fatal(err)
	}
	if e.WritePayload(buf, 7, t0) == 0 {
		t.Fatal("nothing written")
	}
	e.PacketSent(t0)
	e.Evicted(7, t0+ms)
	before := e.rtt.Smoothed()
	e.Acks(7, 0, t0+200*ms)
	after := e.rtt.Smoothed()
	// One sample of 200 ms moves a 10 ms SRTT by an eighth of the gap.
	if want := before + (200*ms-before)/8; after < want-ms || after > want+ms {
		t.Fatalf("SRTT %v after the evicted packet's ack 200 ms on, want about %v (was %v)", time.Duration(after), time.Duration(want), time.Duration(before))
	}
	if e.recs.live != 0 {
		t.Fatalf("%d records unreported after the ack", e.recs.live)
	}
}
