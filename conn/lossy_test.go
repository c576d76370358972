package conn

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/netem"
	"github.com/udpgate/udpgate/internal/wire"
)

// deliveryLog records a client's delivery reports by sequence number.
type deliveryLog struct {
	NopHandler
	mu      sync.Mutex
	reports map[uint16][]bool
}

func (d *deliveryLog) OnDelivery(_ *Conn, seq uint16, delivered bool) {
	d.mu.Lock()
	d.reports[seq] = append(d.reports[seq], delivered)
	d.mu.Unlock()
}

func (d *deliveryLog) get(seq uint16) []bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reports[seq]
}

// payloadSet records what the server application received.
type payloadSet struct {
	NopHandler
	mu   sync.Mutex
	seen map[string]int
}

func (p *payloadSet) OnPacket(c *Conn, b []byte) {
	p.mu.Lock()
	p.seen[string(b)]++
	p.mu.Unlock()
	_, _ = c.Send(b) // echo: the replies carry the acks
}

// Through a proxy with 25% loss, 10% duplication and reordering, every
// client connects within the connect timeout, and every delivery and loss
// report agrees with what the proxy really did.
func TestLossyNetwork(t *testing.T) {
	app := &payloadSet{seen: map[string]int{}}
	// Timeouts long enough that no connection times out here: the test
	// is about delivery reports, and a loaded machine (the race pass
	// beside other packages) can starve a connection for 5 s.
	s := listen(t, Config{Handler: app, Timeout: 30 * time.Second})
	proxy, err := netem.New(s.Addr(), netem.Config{Loss: 0.25, Duplicate: 0.10, Reorder: 0.10,
		Delay: time.Millisecond, Jitter: 3 * time.Millisecond, Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	// Ground truth: how many copies of each Data payload reached the server.
	var truthMu sync.Mutex
	truth := map[string]int{}
	proxy.Observe(func(f netem.Fate, b []byte) {
		if f.Dir != netem.ToServer {
			return
		}
		var h protocol.ConnHeader
		if p, r := wire.DecodeConn(wire.Magic{}, b, &h); r == protocol.DropNone && h.Kind == protocol.KindData {
			truthMu.Lock()
			truth[string(p)] += f.Copies
			truthMu.Unlock()
		}
	})

	const clients, checked, filler = 100, 200, 80
	type sent struct {
		seq     uint16
		payload string
	}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	logs := make([]*deliveryLog, clients)
	sents := make([][]sent, clients)
	for i := range clients {
		logs[i] = &deliveryLog{reports: map[uint16][]bool{}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// Dial fails with ErrTimedOut if the handshake ever goes a
			// connect timeout without progress: success is the check.
			// At 25% loss each way a round trip fails with p = 0.44, so
			// ten in a row (the default 10 s timeout) happen to one of
			// 100 clients in ~5% of runs; with 20 s, in ~1e-5.
			c, err := Dial(ctx, proxy.Addr().String(), Config{Handler: logs[i], ConnectTimeout: 20 * time.Second, Timeout: 30 * time.Second})
			if err != nil {
				errs <- fmt.Errorf("client %d: %v", i, err)
				return
			}
			defer c.Close()
			for k := range checked + filler {
				msg := fmt.Sprintf("c%d-%d", i, k)
				seq, err := c.Send([]byte(msg))
				if err != nil {
					errs <- err
					return
				}
				if k < checked {
					sents[i] = append(sents[i], sent{seq, msg})
				}
				time.Sleep(2 * time.Millisecond)
			}
			// Wait until every checked packet is reported (the filler
			// pushes the window past them); keepalives carry late acks.
			deadline := time.Now().Add(15 * time.Second)
			for _, p := range sents[i] {
				for len(logs[i].get(p.seq)) == 0 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}

	truthMu.Lock()
	defer truthMu.Unlock()
	app.mu.Lock()
	defer app.mu.Unlock()
	var delivered, lost, dropped, falseLoss int
	for i := range clients {
		for _, p := range sents[i] {
			reps := logs[i].get(p.seq)
			if len(reps) != 1 {
				t.Fatalf("client %d seq %d (%s): %d reports, want exactly 1", i, p.seq, p.payload, len(reps))
			}
			copies := truth[p.payload]
			got := app.seen[p.payload]
			if got > 1 {
				t.Fatalf("%s reached the application %d times", p.payload, got)
			}
			if reps[0] {
				delivered++
				if copies == 0 || got != 1 {
					t.Fatalf("%s reported delivered, but the proxy forwarded %d copies and the server got it %d times", p.payload, copies, got)
				}
				continue
			}
			lost++
			if copies == 0 {
				dropped++
				if got != 0 {
					t.Fatalf("%s dropped by the proxy yet received", p.payload)
				}
			} else {
				falseLoss++ // arrived, but every ack naming it was lost
			}
		}
	}
	total := clients * checked
	t.Logf("%d packets: %d delivered, %d lost (%d dropped by the proxy, %d arrived but all their acks were lost)",
		total, delivered, lost, dropped, falseLoss)
	if dropped < total/8 {
		t.Fatalf("only %d of %d dropped: the proxy did not impair", dropped, total)
	}
	// An arrived packet is acked by up to 64 later replies; losing them all
	// at 25% loss is rare.
	if falseLoss > total/50 {
		t.Fatalf("%d arrived packets reported lost", falseLoss)
	}
}
