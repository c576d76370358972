package message

import (
	"testing"
	"time"
)

// TestSimConcurrentLargeMessages: four reliable channels each sending
// large messages at once complete under loss, within the receiver's
// default budget, without refusals (the sender starts one fragmented
// message at a time; see canSendNew).
func TestSimConcurrentLargeMessages(t *testing.T) {
	chans := []ChannelConfig{{Kind: ReliableOrdered}, {Kind: ReliableOrdered}, {Kind: ReliableOrdered}, {Kind: ReliableOrdered}}
	sm := newSim(t, Config{Channels: chans}, 11)
	sm.loss, sm.dup, sm.jitter = 0.1, 0.05, int64(10*time.Millisecond)
	const per = 2
	for ch := range chans {
		for k := 0; k < per; k++ {
			if err := sm.s[0].ep.Send(ch, simMsg(ch, k, 200_000+ch*1000), sm.now); err != nil {
				t.Fatal(err)
			}
		}
		// Small messages behind them on the same channel.
		if err := sm.s[0].ep.Send(ch, simMsg(ch, per, 50), sm.now); err != nil {
			t.Fatal(err)
		}
	}
	r := sm.s[1].ep
	for step := 0; step < 60_000 && r.l.Held() >= 0; step++ {
		sm.step(time.Millisecond)
		done := true
		for ch := range chans {
			done = done && len(sm.s[1].recv[ch]) == per+1
		}
		if done {
			break
		}
		if sm.s[0].ep.Stalled(sm.now) {
			t.Fatalf("stalled at step %d", step)
		}
		if r.held > r.l.connBudget {
			t.Fatalf("held %d > %d", r.held, r.l.connBudget)
		}
	}
	for ch := range chans {
		got := sm.s[1].recv[ch]
		if len(got) != per+1 {
			t.Fatalf("channel %d: %d delivered", ch, len(got))
		}
		for k, m := range got {
			if checkSimMsg(t, ch, m) != k {
				t.Fatal(ch, k)
			}
		}
	}
	if sm.s[1].refused != 0 {
		t.Fatalf("%d packets refused", sm.s[1].refused)
	}
	t.Logf("%.2f s simulated, drops %v", float64(sm.now-simStart)/1e9, r.l.Drops())
}
