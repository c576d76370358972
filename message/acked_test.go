package message

import (
	"fmt"
	"testing"
)

// NextAcked reports a reliable message once it and every earlier one of
// its channel were acknowledged, whatever order the packets' acks come
// in; a fragmented message once its last fragment is; Unacked gives the
// rest, once.
func TestNextAcked(t *testing.T) {
	l, err := NewLayer(Config{Channels: []ChannelConfig{{Kind: ReliableOrdered}, {Kind: Unreliable}, {Kind: ReliableOrdered}}}, 200)
	if err != nil {
		t.Fatal(err)
	}
	e := l.NewEndpoint()
	now := t0
	acked := func() (got []string) {
		for {
			ch, id, ok := e.NextAcked()
			if !ok {
				return got
			}
			got = append(got, fmt.Sprintf("%d:%d", ch, id))
		}
	}
	// One message per packet: 1, 2 on channel 0, an unreliable one, a
	// fragmented 3 (three packets) on channel 0, 1 on channel 2.
	sends := []struct {
		ch   int
		size int
	}{{0, 10}, {0, 10}, {1, 10}, {0, 500}, {2, 10}}
	// Each message's packets, sent as soon as it is queued.
	var pkts [][]uint16
	buf := make([]byte, 200)
	seq := uint16(0)
	for _, s := range sends {
		if err := e.Send(s.ch, make([]byte, s.size), now); err != nil {
			t.Fatal(err)
		}
		var mine []uint16
		for {
			seq++
			n := e.WritePayload(buf, seq, now)
			e.PacketSent(now)
			now += ms
			if n == 0 {
				break
			}
			mine = append(mine, seq)
		}
		pkts = append(pkts, mine)
	}
	t.Logf("packets of each message: %v", pkts)
	if len(pkts[3]) < 2 {
		t.Fatalf("the 500-byte message went in %d packets", len(pkts[3]))
	}
	if got := acked(); got != nil {
		t.Fatalf("before any ack: %v", got)
	}
	for _, step := range []struct {
		seq  uint16
		want string
	}{
		{pkts[1][0], "[]"},              // message 2 of channel 0 waits for 1
		{pkts[0][0], "[0:1 0:2]"},       // both, in order
		{pkts[2][0], "[]"},              // the unreliable one: never reported
		{pkts[4][0], "[2:1]"},           // channel 2's first
		{pkts[3][len(pkts[3])-1], "[]"}, // the last fragment, not the first
	} {
		e.Acked(step.seq, now)
		if got := fmt.Sprint(acked()); got != step.want {
			t.Fatalf("after packet %d's ack: %s, want %s", step.seq, got, step.want)
		}
	}
	var rest []string
	e.Unacked(func(ch int, from, ack, to uint64) { rest = append(rest, fmt.Sprintf("%d:%d-%d-%d", ch, from, ack, to)) })
	if fmt.Sprint(rest) != "[0:3-2-3]" {
		t.Fatalf("Unacked: %v, want channel 0's message 3, unacknowledged", rest)
	}
	e.Acked(pkts[3][0], now) // too late: reported already
	if got := acked(); got != nil {
		t.Fatalf("after Unacked: %v", got)
	}
	e.Unacked(func(ch int, from, ack, to uint64) { t.Errorf("reported twice: channel %d %d..%d", ch, from, to) })
}
