package conn

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/message"
	"github.com/udpgate/udpgate/netsim"
)

// twoReliable has two reliable channels around an unreliable one.
var twoReliable = message.Config{Channels: []message.ChannelConfig{
	{Kind: message.ReliableOrdered}, {Kind: message.Unreliable}, {Kind: message.ReliableOrdered},
}}

// msgSink takes messages and does nothing with them.
type msgSink struct{ NopHandler }

func (msgSink) OnMessage(*Conn, int, []byte) {}

// msgDeliveryLog records a MessageDeliveryHandler's reports and the end.
type msgDeliveryLog struct {
	NopHandler
	mu      sync.Mutex
	reports []string // "ch id delivered", and "end" at OnDisconnect
	next    map[int]uint64
	errs    []string
	ended   chan struct{}
}

func newMsgDeliveryLog() *msgDeliveryLog {
	return &msgDeliveryLog{next: map[int]uint64{0: 1, 2: 1}, ended: make(chan struct{})}
}

func (l *msgDeliveryLog) OnMessageDelivery(_ *Conn, ch int, id uint64, delivered bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if id != l.next[ch] {
		l.errs = append(l.errs, fmt.Sprintf("channel %d: id %d reported, want %d", ch, id, l.next[ch]))
	}
	l.next[ch] = id + 1
	l.reports = append(l.reports, fmt.Sprintf("%d %d %v", ch, id, delivered))
}

func (l *msgDeliveryLog) OnDisconnect(*Conn, DisconnectReason, bool) {
	l.mu.Lock()
	l.reports = append(l.reports, "end")
	l.mu.Unlock()
	close(l.ended)
}

// count returns the reports on ch that say delivered, and not.
func (l *msgDeliveryLog) count(ch int) (yes, no int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.reports {
		var c int
		var id uint64
		var d bool
		if _, err := fmt.Sscanf(r, "%d %d %t", &c, &id, &d); err == nil && c == ch {
			if d {
				yes++
			} else {
				no++
			}
		}
	}
	return yes, no
}

// Through 10 % loss, every reliable message sent is reported delivered
// exactly once, in order per channel (fragmented ones too), and no
// unreliable one is.
func TestMessageDeliveryReports(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 10 * time.Millisecond, Loss: 0.1, Seed: 5})
		simListen(t, nw, Config{Handler: msgSink{}, Messages: twoReliable})
		h := newMsgDeliveryLog()
		cli, err := simDial(t, nw, Config{Handler: h, Messages: twoReliable})
		if err != nil {
			t.Fatal(err)
		}
		c := cli.Conn()
		const n = 200
		for i := range n {
			size := 50 + i%200
			if i%20 == 0 {
				size = 3000 // fragmented
			}
			for _, ch := range []int{0, 2} {
				if err := c.QueueMessage(ch, numbered(i, size)); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.QueueMessage(1, numbered(i, 20)); err != nil {
				t.Fatal(err)
			}
			if i%10 == 9 {
				_ = c.Flush()
				time.Sleep(5 * time.Millisecond)
			}
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if a, _ := h.count(0); a == n {
				if b, _ := h.count(2); b == n {
					break
				}
			}
		}
		for _, ch := range []int{0, 1, 2} {
			yes, no := h.count(ch)
			want := n
			if ch == 1 {
				want = 0
			}
			if yes != want || no != 0 {
				t.Errorf("channel %d: %d reported delivered and %d not, want %d and 0", ch, yes, no, want)
			}
		}
		if st := c.MessageStats(); st.InFlight != 0 || st.Resent == 0 {
			t.Errorf("InFlight %d, Resent %d: want all acknowledged, after resends", st.InFlight, st.Resent)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, e := range h.errs {
			t.Error(e)
		}
	})
}

// A connection that ends with reliable messages unacknowledged reports
// them not delivered, in order after the delivered ones, before
// OnDisconnect: every id once.
func TestMessageDeliveryAtEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 10 * time.Millisecond})
		simListen(t, nw, Config{Handler: msgSink{}, Messages: twoReliable})
		h := newMsgDeliveryLog()
		cli, err := simDial(t, nw, Config{Handler: h, Messages: twoReliable, Linger: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		c := cli.Conn()
		const before, after = 30, 40
		for i := range before {
			if err := c.SendMessage(0, numbered(i, 100)); err != nil {
				t.Fatal(err)
			}
		}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if a, _ := h.count(0); a == before {
				break
			}
		}
		if a, _ := h.count(0); a != before {
			t.Fatalf("%d of %d reported delivered on a clean link", a, before)
		}
		nw.SetLink(netsim.Link{Loss: 1}) // from now on nothing arrives
		for i := range after {
			if err := c.SendMessage(0, numbered(before+i, 100)); err != nil {
				t.Fatal(err)
			}
			if err := c.SendMessage(2, numbered(i, 100)); err != nil {
				t.Fatal(err)
			}
		}
		if err := cli.Close(); !errors.Is(err, ErrUndelivered) {
			t.Fatalf("Close: %v, want ErrUndelivered", err)
		}
		<-h.ended
		if yes, no := h.count(0); yes != before || no != after {
			t.Errorf("channel 0: %d delivered and %d not, want %d and %d", yes, no, before, after)
		}
		if yes, no := h.count(2); yes != 0 || no != after {
			t.Errorf("channel 2: %d delivered and %d not, want 0 and %d", yes, no, after)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if last := h.reports[len(h.reports)-1]; last != "end" {
			t.Errorf("the last report is %q, want OnDisconnect's", last)
		}
		for _, e := range h.errs {
			t.Error(e)
		}
	})
}
