package conn

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/message"
	"github.com/udpgate/udpgate/netsim"
)

// The egress budget (Config.EgressRate) over the simulated network, in
// virtual time: the server sends bulk to receivers that want far more than
// the budget, to two that want less than their share, and to a player
// whose game messages it echoes beside the player's own bulk download.
// What the target 4 asks is asserted over an exact interval: the
// server's total egress within 5 % of the budget; each heavy receiver
// within 0.75–1.33× of an equal share of what the light ones leave, the
// light ones served in full; the player's game round trip as when idle.

// egServer echoes the game's channels and hands its connections to the
// test's bulk feeder.
type egServer struct {
	NopHandler
	mu    sync.Mutex
	conns map[netip.AddrPort]*Conn
}

func (h *egServer) OnConnect(c *Conn) {
	h.mu.Lock()
	h.conns[c.RemoteAddr()] = c
	h.mu.Unlock()
}

func (h *egServer) OnMessage(c *Conn, ch int, msg []byte) {
	if ch != msgcfg.Bulk {
		_ = c.SendMessage(ch, msg)
	}
}

// egClient counts the bulk bytes it receives and the game's round trips.
type egClient struct {
	bwClient
	bulk atomic.Int64
}

func (h *egClient) OnMessage(c *Conn, ch int, msg []byte) {
	if ch == msgcfg.Bulk {
		h.bulk.Add(int64(len(msg)))
		return
	}
	h.bwClient.OnMessage(c, ch, msg)
}

func TestSimEgressBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			budget    = 2_000_000 // bytes a second
			heavy     = 6         // bulk receivers that want everything
			light     = 2         // and ones that want lightRate
			bulkSize  = 16 << 10
			lightRate = bulkSize * 1000 / 160 // one message every 160 ms: 102 kB/s
		)
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 10 * time.Millisecond})
		mc := message.Config{Channels: msgcfg.Channels(), MaxMessageSize: 1 << 20, SendRate: 1 << 30}
		h := &egServer{conns: map[netip.AddrPort]*Conn{}}
		srv := simListen(t, nw, Config{Handler: h, Messages: mc, EgressRate: budget, Timeout: time.Minute})

		var player *Conn
		dial := func(addr string) *egClient {
			ch := &egClient{bwClient: bwClient{more: make(chan struct{}, 1)}}
			cli, err := simDial(t, nw, Config{Handler: ch, Messages: mc, Timeout: time.Minute, LocalAddr: addr, Linger: -1})
			if err != nil {
				t.Fatal(err)
			}
			player = cli.Conn()
			return ch
		}
		pl := dial("10.0.1.1:50000")
		playerConn := player
		var heavies, lights []*egClient
		isLight := map[netip.AddrPort]bool{}
		for i := range heavy {
			heavies = append(heavies, dial(fmt.Sprintf("10.0.2.%d:50000", i+1)))
		}
		for i := range light {
			a := netip.MustParseAddrPort(fmt.Sprintf("10.0.3.%d:50000", i+1))
			isLight[a] = true
			lights = append(lights, dial(a.String()))
		}
		heavies = append(heavies, pl) // the player downloads too

		// The feeder keeps every heavy connection's bulk queue two
		// messages deep and sends a light one's message every 160 ms.
		var bulkOn atomic.Bool
		done, stopped := make(chan struct{}), make(chan struct{})
		t.Cleanup(func() { close(done); <-stopped })
		go func() {
			defer close(stopped)
			msg := make([]byte, bulkSize)
			tk := time.NewTicker(5 * time.Millisecond)
			defer tk.Stop()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				case <-tk.C:
				}
				if !bulkOn.Load() {
					continue
				}
				h.mu.Lock()
				for a, c := range h.conns {
					if isLight[a] {
						if i%32 == 0 {
							_ = c.SendMessage(msgcfg.Bulk, msg)
						}
						continue
					}
					for c.MessageStats().Queued[msgcfg.Bulk] < 2*bulkSize {
						if c.SendMessage(msgcfg.Bulk, msg) != nil {
							break
						}
					}
				}
				h.mu.Unlock()
			}
		}()

		// The player: a reliable game message 25 times a second; 1 s
		// idle, then the bulk for 1 s to settle, then the measured 3 s.
		tk := time.NewTicker(time.Second / 25)
		defer tk.Stop()
		var idleP99 time.Duration
		var tx0 uint64
		var at0 time.Time
		bulk0 := map[*egClient]int64{}
		for i := 1; i <= 125; i++ {
			<-tk.C
			if err := playerConn.SendMessage(msgcfg.Reliable, stamped(i, time.Now(), 100)); err != nil {
				t.Fatal(err)
			}
			switch i {
			case 25:
				idleP99 = percentile(pl.take(), 0.99)
				bulkOn.Store(true)
			case 50:
				pl.take()
				at0, tx0 = time.Now(), srv.Stats().Sockets.TxBytes
				for _, cl := range append(append([]*egClient(nil), heavies...), lights...) {
					bulk0[cl] = cl.bulk.Load()
				}
			}
		}
		span := time.Since(at0)
		if span != 3*time.Second {
			t.Fatalf("measured over %v, want exactly 3s", span)
		}
		st := srv.Stats()
		egress := float64(st.Sockets.TxBytes-tx0) / span.Seconds()
		var heavyGot, lightGot []float64
		var heavySum float64
		for _, cl := range heavies {
			r := float64(cl.bulk.Load()-bulk0[cl]) / span.Seconds()
			heavyGot = append(heavyGot, r)
			heavySum += r
		}
		for _, cl := range lights {
			lightGot = append(lightGot, float64(cl.bulk.Load()-bulk0[cl])/span.Seconds())
		}
		p99 := percentile(pl.take(), 0.99)
		t.Logf("egress %.0f B/s of a budget of %d (%+.1f %%); heavy receivers %.0f B/s; light %.0f B/s; share now %d B/s, bulk budget %d B/s, held %d connections, %v held; player p99 %v (idle %v)",
			egress, budget, 100*(egress-budget)/budget, heavyGot, lightGot, st.EgressShare, st.EgressBulkBudget, st.EgressHeldConns, st.EgressHeld, p99, idleP99)
		if egress < budget*0.95 || egress > budget*1.05 {
			t.Errorf("total egress %.0f B/s, want within 5 %% of the budget %d", egress, budget)
		}
		equal := heavySum / float64(len(heavies))
		for i, r := range heavyGot {
			if r < 0.75*equal || r > 1.33*equal {
				t.Errorf("heavy receiver %d got %.0f B/s, outside 0.75–1.33× of the equal share %.0f", i, r, equal)
			}
		}
		for i, r := range lightGot {
			if r < 0.9*lightRate {
				t.Errorf("light receiver %d got %.0f B/s of the %d it asks for, below its share", i, r, lightRate)
			}
		}
		if st.EgressBudget != budget || st.EgressHeldConns < int64(len(heavies)) || st.EgressHeld <= 0 || st.EgressBulkBytes <= 0 {
			t.Errorf("egress stats: budget %d, %d connections held (want at least %d), held %v, bulk bytes %d",
				st.EgressBudget, st.EgressHeldConns, len(heavies), st.EgressHeld, st.EgressBulkBytes)
		}
		if p99 > 2*idleP99 || p99 > idleP99+5*time.Millisecond {
			t.Errorf("player's p99 %v beside the bulk, idle %v", p99, idleP99)
		}
	})
}
