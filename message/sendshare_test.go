package message

import (
	"errors"
	"testing"
)

// shareLayer is a layer of 1200-byte packets (grants of 9,600 bytes) with
// one reliable channel whose own queue is not the limit, and a send
// budget of 20 grants.
func shareLayer(t *testing.T) (*Layer, int64) {
	t.Helper()
	l, err := NewLayer(Config{Channels: []ChannelConfig{{Kind: ReliableOrdered, MaxQueued: 1 << 20}}, SendBudget: 20 * 9600}, 1200)
	if err != nil {
		t.Fatal(err)
	}
	if g := l.sendGrant(); g != 9600 {
		t.Fatalf("grant %d", g)
	}
	return l, 9600
}

// fill sends 1000-byte messages (1,024 bytes of storage each) on e until
// Send refuses one, and returns the error.
func fill(t *testing.T, e *Endpoint) error {
	t.Helper()
	for range 2000 {
		if err := e.Send(0, make([]byte, 1000), t0); err != nil {
			return err
		}
	}
	t.Fatal("never refused")
	return nil
}

// TestSendShareFair: endpoints that queue without end in turn each get
// their share of the send budget, within a grant; the refusal is
// ErrSendShare, which is ErrQueueFull; nothing passes the budget.
func TestSendShareFair(t *testing.T) {
	l, g := shareLayer(t)
	eps := make([]*Endpoint, 4)
	for i := range eps {
		eps[i] = l.NewEndpoint()
	}
	open := len(eps)
	for round := 0; open > 0 && round < 1000; round++ {
		for _, e := range eps {
			if e.blocked != 0 {
				continue
			}
			if err := e.Send(0, make([]byte, 1000), t0); err != nil {
				if !errors.Is(err, ErrQueueFull) || err != ErrSendShare {
					t.Fatalf("refused with %v, want ErrSendShare (ErrQueueFull)", err)
				}
				open--
			}
		}
	}
	share := l.sendBudget / int64(len(eps))
	for i, e := range eps {
		if q := int64(e.Queued()); q > share || q < share-2*g {
			t.Errorf("endpoint %d holds %d bytes, want its share %d within two grants", i, q, share)
		}
	}
	if r := l.SendReserved(); r > l.sendBudget {
		t.Errorf("reserved %d, above the budget %d", r, l.sendBudget)
	}
	if l.SendRefused() != uint64(len(eps)) {
		t.Errorf("refused %d, want %d", l.SendRefused(), len(eps))
	}
	for _, e := range eps {
		e.Release()
	}
	if r := l.SendReserved(); r != 0 || l.senders.Load() != 0 {
		t.Fatalf("after Release: %d reserved by %d", r, l.senders.Load())
	}
}

// TestSendShareHog: one endpoint that queued the whole budget before
// anyone else came leaves every newcomer its floor (one grant: a
// player's messages), and is refused from then on, since it holds more
// than its share; once it is gone (its peer stalled, Release), the
// others grow again.
func TestSendShareHog(t *testing.T) {
	l, g := shareLayer(t)
	hog := l.NewEndpoint()
	if err := fill(t, hog); err != ErrSendShare {
		t.Fatal(err)
	}
	if q := int64(hog.Queued()); q < l.sendBudget-g || q > l.sendBudget+g {
		t.Fatalf("alone, the hog holds %d of %d and its floor of %d", q, l.sendBudget, g)
	}
	players := make([]*Endpoint, 5)
	for i := range players {
		players[i] = l.NewEndpoint()
		for j := range 9 { // 9 × 1,024 bytes: within one grant
			if err := players[i].Send(0, make([]byte, 1000), t0); err != nil {
				t.Fatalf("player %d, message %d: %v, want the floor", i, j, err)
			}
		}
		// Past the floor, what the hog's last grant left, if anything.
		if err := fill(t, players[i]); err != ErrSendShare || int64(players[i].Queued()) > 2*g {
			t.Fatalf("player %d past its floor: %v with %d bytes, want ErrSendShare within the floor and the pool's rest", i, err, players[i].Queued())
		}
	}
	if r := l.SendReserved(); r > l.sendBudget {
		t.Fatalf("reserved %d, above the budget %d", r, l.sendBudget)
	}
	before := hog.Queued()
	if err := fill(t, hog); err != ErrSendShare || int64(hog.Queued()-before) >= g {
		t.Fatalf("hog: %v after %d more bytes, want ErrSendShare within its grant", err, hog.Queued()-before)
	}
	hog.Release()
	if err := players[0].Send(0, make([]byte, 1000), t0); err != nil {
		t.Fatalf("after the hog left: %v", err)
	}
}

// TestSendShareFreed: acknowledged and sent storage goes back to the
// budget: an endpoint that sends and is acknowledged holds nothing after.
func TestSendShareFreed(t *testing.T) {
	l, _ := shareLayer(t)
	e := l.NewEndpoint()
	buf := make([]byte, 1200)
	now, seq := t0, uint16(0)
	for i := range 50 {
		if err := e.Send(0, make([]byte, 1000), now); err != nil {
			t.Fatal(i, err)
		}
	}
	for range 1000 {
		now += ms
		if e.Queued() == 0 {
			break
		}
		if !e.WantsSend(now) || e.WritePayload(buf, seq, now) == 0 {
			continue
		}
		e.PacketSent(now)
		e.Acked(seq, now+ms/2)
		seq++
	}
	if q, r := e.Queued(), l.SendReserved(); q != 0 || r != 0 || l.senders.Load() != 0 {
		t.Fatalf("all acknowledged: queued %d, reserved %d by %d", q, r, l.senders.Load())
	}
}
