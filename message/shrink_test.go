package message

import (
	"testing"
	"time"
	"unsafe"
)

// ringBytes is the storage an endpoint's rings hold (their lengths, not
// the chunks in them).
func ringBytes(e *Endpoint) int {
	n := 0
	for _, c := range e.ch {
		if c == nil {
			continue
		}
		n += len(c.units)*int(unsafe.Sizeof(sunit{})) + len(c.pq)*8 + len(c.slots)*int(unsafe.Sizeof(rslot{})) + cap(c.asm)*8
	}
	if r := e.recs; r != nil {
		n += len(r.recs)*int(unsafe.Sizeof(record{})) + len(r.ents)*int(unsafe.Sizeof(entRef{}))
	}
	return n
}

var pumpBuf = make([]byte, 2000)

// pump sends what e has, a packet a millisecond, each acknowledged at
// once, until nothing is in flight or queued; it returns the time after.
func pump(t testing.TB, e *Endpoint, seq *uint16, now int64) int64 {
	t.Helper()
	buf := pumpBuf[:e.l.maxPayload]
	for range 100_000 {
		if e.InFlight() == 0 && e.sendMask == 0 {
			return now
		}
		now += ms
		if e.WritePayload(buf, *seq, now) > 0 {
			e.PacketSent(now)
			e.Acked(*seq, now)
			*seq++
		}
	}
	t.Fatalf("still %d in flight", e.InFlight())
	return now
}

// TestRingsShrinkAfterBurst: the send rings (units, the unreliable queue,
// the packet records) that a burst grew give their memory back when they
// empty, and a flow of one message at a time afterwards allocates nothing.
func TestRingsShrinkAfterBurst(t *testing.T) {
	l := testLayer(t, nil)
	e := l.NewEndpoint()
	e.SetRTT(time.Millisecond)
	now, seq := t0, uint16(0)
	idle := 0
	// One message through first: the rings' small steady size.
	e.Send(0, []byte("hello"), now)
	now = pump(t, e, &seq, now)
	idle = ringBytes(e)
	for i := range 1000 {
		if err := e.Send(0, []byte("burst of reliable messages"), now); err != nil {
			t.Fatal(i, err)
		}
	}
	for i := range 500 {
		if err := e.Send(1, []byte("and unreliable ones"), now); err != nil {
			t.Fatal(i, err)
		}
	}
	big := ringBytes(e)
	now = pump(t, e, &seq, now)
	after := ringBytes(e)
	t.Logf("rings: %d bytes before the burst, %d during, %d after", idle, big, after)
	if big < 16*idle || after > 2*idle {
		t.Fatalf("rings: %d bytes before the burst, %d with it queued, %d once it was acknowledged: want the memory back", idle, big, after)
	}
	checkSteadyAllocs(t, "message after the burst", func() {
		e.Send(0, []byte("one at a time"), now)
		now = pump(t, e, &seq, now)
	})
}

// TestRingsSteadyLargeMessages: a flow of large messages, each as large
// as the one before, keeps its rings: it allocates nothing per message.
func TestRingsSteadyLargeMessages(t *testing.T) {
	l := testLayer(t, func(c *Config) { c.MaxMessageSize = 10000 }) // 110 fragments
	e := l.NewEndpoint()
	e.SetRTT(time.Millisecond)
	now, seq := t0, uint16(0)
	msg := make([]byte, 10000)
	checkSteadyAllocs(t, "large message", func() {
		if err := e.Send(0, msg, now); err != nil {
			t.Fatal(err)
		}
		now = pump(t, e, &seq, now)
	})
}

// TestReceiveRingsShrink: the receive slots that a window of out-of-order
// units grew, and a large message's reassembly list, are given back once
// delivered.
func TestReceiveRingsShrink(t *testing.T) {
	l := testLayer(t, func(c *Config) { c.MaxMessageSize = 10000 })
	e := l.NewEndpoint()
	kinds := []Kind{ReliableOrdered, Unreliable, Sequenced}
	mustReceive(t, e, payloadOf(kinds, entry{ch: 0, id: 0, data: []byte("first")}))
	drain(e)
	idle := ringBytes(e)
	for id := uint16(2); id < 250; id++ {
		mustReceive(t, e, payloadOf(kinds, entry{ch: 0, id: id, data: []byte("out of order")}))
	}
	big := ringBytes(e)
	mustReceive(t, e, payloadOf(kinds, entry{ch: 0, id: 1, data: []byte("the gap")}))
	if chs, _ := drain(e); len(chs) != 249 {
		t.Fatalf("%d messages delivered, want 249", len(chs))
	}
	if after := ringBytes(e); big < 16*idle || after > 2*idle {
		t.Fatalf("receive slots: %d bytes before, %d with 248 units out of order, %d once delivered", idle, big, after)
	}
	// A message of 100 fragments, one a packet.
	const cnt = 100
	for i := range cnt {
		mustReceive(t, e, payloadOf(kinds, frag(250+uint16(i), uint16(i), cnt, string(make([]byte, 91)))))
	}
	if chs, msgs := drain(e); len(chs) != 1 || len(msgs[0]) != cnt*91 {
		t.Fatalf("reassembly: %d messages", len(chs))
	}
	if c := e.ch[0]; cap(c.asm) != 0 {
		t.Fatalf("after a %d-fragment message: a reassembly list of %d kept", cnt, cap(c.asm))
	}
	// Its slots came right after the burst's, a use as large: they stay
	// until a smaller use has shown the flow's size again.
	for id := uint16(250 + cnt); id < 250+cnt+2; id++ {
		mustReceive(t, e, payloadOf(kinds, entry{ch: 0, id: id, data: []byte("small again")}))
		drain(e)
	}
	if after := ringBytes(e); after > 2*idle {
		t.Fatalf("rings: %d bytes once small messages flow again, %d before the burst", after, idle)
	}
}
