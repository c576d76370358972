package conn

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/netsim"
)

// deliveryLog records a client's delivery reports by sequence number.
type deliveryLog struct {
	NopHandler
	mu      sync.Mutex
	reports map[uint16][]bool
	ev      conntest.Signal
}

func (d *deliveryLog) OnDelivery(_ *Conn, seq uint16, delivered bool) {
	d.mu.Lock()
	d.reports[seq] = append(d.reports[seq], delivered)
	d.mu.Unlock()
	d.ev.Fire()
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

// Over a network with 25% loss, 10% duplication and reordering, every
// client connects within the connect timeout, and every delivery and loss
// report agrees with what the network really did.
func TestLossyNetwork(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		lossyNetwork(t, n)
	})
}

func lossyNetwork(t *testing.T, n *testNet) {
	app := &payloadSet{seen: map[string]int{}}
	s := n.listen(Config{Handler: app, Timeout: 30 * time.Second})
	n.nw.SetLink(netsim.Link{Duplicate: 0.10, Reorder: 0.10, Latency: time.Millisecond, Jitter: 3 * time.Millisecond, Seed: 42})
	n.nw.QueueLen = 1 << 16 // no queue drops: Drop below is the only loss
	// The loss, and the ground truth: whether each Data payload reached
	// the server (in one copy or, duplicated, two).
	var truthMu sync.Mutex
	loss := rand.New(rand.NewPCG(42, 0))
	truth := map[string]int{}
	n.nw.Drop = func(_, to netip.AddrPort, b []byte) bool {
		truthMu.Lock()
		defer truthMu.Unlock()
		lost := loss.Float64() < 0.25
		var h protocol.ConnHeader
		if p, r := wire.DecodeConn(wire.Magic{}, b, &h); !lost && to == s.Addr() && r == protocol.DropNone && h.Kind == protocol.KindData {
			truth[string(p)]++
		}
		return lost
	}

	const clients, checked, filler = 100, 200, 80
	type sent struct {
		seq     uint16
		payload string
	}
	logs := make([]*deliveryLog, clients)
	for i := range logs {
		logs[i] = &deliveryLog{reports: map[uint16][]bool{}}
	}
	sents := make([][]sent, clients)
	eachClient(t, clients, func(i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Dial fails with ErrTimedOut if the handshake ever goes a
		// connect timeout without progress: success is the check.
		// At 25% loss each way a round trip fails with p = 0.44, so
		// ten in a row (the default 10 s timeout) happen to one of
		// 100 clients in ~5% of runs; with 20 s, in ~1e-5.
		c, err := Dial(ctx, s.Addr().String(), n.config(Config{Handler: logs[i], LocalAddr: fmt.Sprintf("127.0.1.%d:0", 1+i),
			ConnectTimeout: 20 * time.Second, Timeout: 30 * time.Second}))
		if err != nil {
			return fmt.Errorf("client %d: %v", i, err)
		}
		defer c.Close()
		pace := time.NewTicker(2 * time.Millisecond) // 500 packets/s
		defer pace.Stop()
		for k := range checked + filler {
			msg := fmt.Sprintf("c%d-%d", i, k)
			seq, err := c.Send([]byte(msg))
			if err != nil {
				return err
			}
			if k < checked {
				sents[i] = append(sents[i], sent{seq, msg})
			}
			<-pace.C
		}
		// Wait until every checked packet is reported (the filler
		// pushes the window past them); keepalives carry late acks.
		logs[i].ev.Await(15*time.Second, func() bool {
			for _, p := range sents[i] {
				if len(logs[i].get(p.seq)) == 0 {
					return false
				}
			}
			return true
		})
		return nil
	})
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
					t.Fatalf("%s reported delivered, but the network delivered %d copies and the server got it %d times", p.payload, copies, got)
				}
				continue
			}
			lost++
			if copies == 0 {
				dropped++
				if got != 0 {
					t.Fatalf("%s dropped by the network yet received", p.payload)
				}
			} else {
				falseLoss++ // arrived, but every ack naming it was lost
			}
		}
	}
	total := clients * checked
	t.Logf("%d packets: %d delivered, %d lost (%d dropped by the network, %d arrived but all their acks were lost); %+v",
		total, delivered, lost, dropped, falseLoss, n.nw.Stats())
	if st := n.nw.Stats(); st.QueueDrops != 0 || st.Lost != 0 {
		t.Fatalf("losses the ground truth missed: %+v", st)
	}
	if dropped < total/8 {
		t.Fatalf("only %d of %d dropped: the network did not impair", dropped, total)
	}
	// An arrived packet is acked by up to 64 later replies; losing them all
	// at 25% loss is rare.
	if falseLoss > total/50 {
		t.Fatalf("%d arrived packets reported lost", falseLoss)
	}
}
