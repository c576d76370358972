package message

import (
	"testing"
	"time"
)

// checkSteadyAllocs runs round 100 times to reach a steady state, then
// checks that a round allocates nothing (each round one per of them).
func checkSteadyAllocs(t *testing.T, per string, round func()) {
	t.Helper()
	if raceEnabled {
		t.Skip("the race runtime allocates")
	}
	for range 100 {
		round()
	}
	if a := testing.AllocsPerRun(1000, round); a != 0 {
		t.Fatalf("%v allocations per %s", a, per)
	}
}

// TestSendWriteAckAlloc: Send, WritePayload and Acked of a message that
// fits one packet allocate nothing in steady state.
func TestSendWriteAckAlloc(t *testing.T) {
	l := testLayer(t, nil)
	e := l.NewEndpoint()
	e.SetRTT(time.Millisecond) // a pacing rate above the round's bytes
	msg := make([]byte, 50)
	buf := make([]byte, 100)
	now := t0
	seq := uint16(0)
	round := func() {
		now += int64(time.Millisecond)
		seq++
		if err := e.Send(0, msg, now); err != nil {
			t.Fatal(err)
		}
		e.Send(1, msg[:10], now)
		if e.WritePayload(buf, seq, now) == 0 {
			t.Fatal("nothing written")
		}
		e.PacketSent(now)
		e.Acked(seq, now)
		e.Deadline()
		e.WantsSend(now)
	}
	checkSteadyAllocs(t, "message", round)
}

// TestReceiveNextAlloc: Check, Receive and Next of reliable, unreliable
// and sequenced messages allocate nothing in steady state.
func TestReceiveNextAlloc(t *testing.T) {
	l := testLayer(t, nil)
	e := l.NewEndpoint()
	id := uint16(0)
	buf := make([]byte, 100)
	data := make([]byte, 40)
	round := func() {
		en := entry{ch: 0, id: id, data: data}
		n := putEntry(buf, ReliableOrdered, &en)
		en = entry{ch: 1, data: data[:5]}
		n += putEntry(buf[n:], Unreliable, &en)
		en = entry{ch: 2, id: id, data: data[:5]}
		n += putEntry(buf[n:], Sequenced, &en)
		p := buf[:n]
		id++
		mustReceive(t, e, p)
		k := 0
		for {
			if _, _, ok := e.Next(); !ok {
				break
			}
			k++
		}
		if k != 3 {
			t.Fatal(k)
		}
		e.PacketSent(t0)
	}
	checkSteadyAllocs(t, "packet", round)
}

func BenchmarkSendWriteAck(b *testing.B) {
	l, _ := NewLayer(Config{Channels: []ChannelConfig{{Kind: ReliableOrdered}}}, 1180)
	e := l.NewEndpoint()
	e.SetRTT(time.Millisecond) // acks at the instant of the send give no sample
	msg := make([]byte, 100)
	buf := make([]byte, 1180)
	now := t0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now += 100_000 // 1 MB/s, inside the default send rate
		if err := e.Send(0, msg, now); err != nil {
			b.Fatal(err)
		}
		if e.WritePayload(buf, uint16(i), now) == 0 {
			b.Fatal("nothing written")
		}
		e.Acked(uint16(i), now)
	}
}

func BenchmarkReceiveNext(b *testing.B) {
	l, _ := NewLayer(Config{Channels: []ChannelConfig{{Kind: ReliableOrdered}, {Kind: Unreliable}}}, 1180)
	e := l.NewEndpoint()
	buf := make([]byte, 1180)
	data := make([]byte, 100)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		en := entry{ch: 0, id: uint16(i), data: data}
		n := putEntry(buf, ReliableOrdered, &en)
		en = entry{ch: 1, data: data}
		n += putEntry(buf[n:], Unreliable, &en)
		if e.Check(buf[:n]) != DropNone {
			b.Fatal("refused")
		}
		e.Receive(buf[:n], t0)
		for {
			if _, _, ok := e.Next(); !ok {
				break
			}
		}
	}
}
