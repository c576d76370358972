package conn

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/message"
	"github.com/udpgate/udpgate/netsim"
)

// Receive memory in shares (docs/protocol.md §14.5), end to end in
// virtual time: connections that hold what the receive budget allows do
// not take messaging from the others.

// rawEntry encodes one reliable entry on channel 0 (§14.2): a fragment
// (cnt ≥ 2) or, with cnt 0, a whole unit.
func rawEntry(id, idx, cnt uint16, data []byte) []byte {
	b := []byte{0}
	b = binary.LittleEndian.AppendUint16(b, id)
	if cnt != 0 {
		b[0] |= 1 << 5
		b = binary.LittleEndian.AppendUint16(b, idx)
		b = binary.LittleEndian.AppendUint16(b, cnt)
	}
	if n := len(data); n < 0x80 {
		b = append(b, byte(n))
	} else {
		b = append(b, byte(n)|0x80, byte(n>>7))
	}
	return append(b, data...)
}

// holdPackets are the Messages payloads of a connection that holds all
// the server lets it: every fragment but the last of a largest message,
// then a window of out-of-order units after it (the gap: the last
// fragment), each packet full but the last few.
func holdPackets(s *Server) [][]byte {
	p := s.st.msgPayload
	frag := p - 9
	cnt := (s.st.Messages.MaxMessageSize + frag - 1) / frag
	var out [][]byte
	for i := range cnt - 1 {
		out = append(out, rawEntry(uint16(i), uint16(i), uint16(cnt), make([]byte, frag)))
	}
	for id := cnt; id < cnt-1+message.Window; id++ {
		n := p - 5
		if id >= cnt+message.Window-56 {
			n = 1 // small units last, to fill the pool to its last bytes
		}
		out = append(out, rawEntry(uint16(id), 0, 0, make([]byte, n)))
	}
	return out
}

// holder dials a connection without channels of its own and sends the
// server's Messages payloads made by hand, one a millisecond.
func holder(t *testing.T, nw *netsim.Network, h Handler, pkts [][]byte) *Client {
	t.Helper()
	// KeepAlives every 250 ms: the server's Timeout here is 3 s and the
	// link loses 2 %; at the default 1 s a holder was once ended as timed
	// out in a loaded run of the whole suite (two or three KeepAlives lost
	// in a row can do that), which is not what this test asks about.
	cli, err := simDial(t, nw, Config{Handler: h, Timeout: time.Minute, ConnectTimeout: time.Minute, Linger: -1, KeepAlive: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkts {
		if _, err := cli.Conn().sendKind(protocol.KindMessages, p); err != nil {
			break // ended: the server reclaimed its storage
		}
		time.Sleep(time.Millisecond)
	}
	return cli
}

// playerLog is a player's rttLog that also counts its disconnects.
type playerLog struct {
	rttLog
	gone atomic.Int32
}

func (p *playerLog) OnDisconnect(*Conn, DisconnectReason, bool) { p.gone.Add(1) }

// TestSimReceiveShares: 24 connections each hold an unfinished largest
// message and a full window of out-of-order units (together four times
// the server's receive budget) while 4 players exchange reliable
// messages over links that lose 2 %. Every player message comes back, in
// order; no player is disconnected; their round trip's p99 stays within
// twice what it is without the holders; the held storage never exceeds
// the budget; the holders are refused beyond their share (over_share) and
// the heaviest are ended (over_budget) when the full pool refuses a
// player.
func TestSimReceiveShares(t *testing.T) {
	var p99 [2]time.Duration
	for i, holders := range []int{0, 24} {
		t.Run(fmt.Sprintf("holders=%d", holders), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { p99[i] = simReceiveShares(t, holders) })
		})
	}
	if p99[1] > 2*p99[0] {
		t.Errorf("players' p99 %v beside the holders, %v without", p99[1], p99[0])
	}
}

func simReceiveShares(t *testing.T, holders int) (p99 time.Duration) {
	{
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 10 * time.Millisecond, Loss: 0.02, Seed: 29})
		const budget = 2 << 20
		mc := testChannels
		mc.MaxMessageSize = 32 << 10
		mc.ReceiveBudget = budget
		s := simListen(t, nw, Config{Handler: &msgEcho{}, Messages: mc, Timeout: 3 * time.Second, MaxClientsPerIP: 1000})
		pkts := holdPackets(s)

		var peak atomic.Int64
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() { // the held storage, every 5 ms
			defer close(sampled)
			for {
				peak.Store(max(peak.Load(), s.Stats().MessageHeld))
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		}()

		const players, n = 4, 100
		var wg sync.WaitGroup
		var ended atomic.Int32
		for range holders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				holder(t, nw, disconnectFunc(func(r DisconnectReason) {
					if r == reasonOverBudget {
						ended.Add(1)
					}
				}), pkts)
			}()
		}
		time.Sleep(100 * time.Millisecond) // the holders' first units are in
		logs := make([]*playerLog, players)
		for i := range logs {
			logs[i] = &playerLog{rttLog: rttLog{done: make(chan struct{}), want: n}}
			wg.Add(1)
			go func() {
				defer wg.Done()
				// The server's layout: layouts are agreed at connect
				// (docs/protocol.md §3.7).
				pm := testChannels
				pm.MaxMessageSize = mc.MaxMessageSize
				cli, err := simDial(t, nw, Config{Handler: logs[i], Messages: pm, Timeout: time.Minute, ConnectTimeout: time.Minute, Linger: -1})
				if err != nil {
					t.Error(err)
					return
				}
				tk := time.NewTicker(50 * time.Millisecond)
				defer tk.Stop()
				for j := range n {
					<-tk.C
					if err := cli.Conn().SendMessage(0, stamped(j, time.Now(), 100)); err != nil {
						t.Error(err)
						return
					}
				}
				select {
				case <-logs[i].done:
				case <-time.After(30 * time.Second):
				}
			}()
		}
		wg.Wait()
		close(stop)
		<-sampled

		st := s.Stats()
		for i, l := range logs {
			l.mu.Lock()
			if l.count[0] != n || len(l.faults) > 0 || l.gone.Load() != 0 {
				t.Errorf("player %d: %d of %d echoes, faults %v, %d disconnects", i, l.count[0], n, l.faults, l.gone.Load())
			} else {
				t.Logf("player %d: round trip p50 %v p99 %v", i, percentile(l.rtts, 0.5), percentile(l.rtts, 0.99))
				p99 = max(p99, percentile(l.rtts, 0.99))
			}
			l.mu.Unlock()
		}
		t.Logf("held peak %d of %d; holders %d; drops %v; ended %d (%d seen by holders)",
			peak.Load(), budget, st.MessageHolders, dropsByLabel(st.MessageDrops), st.Disconnects[reasonOverBudget], ended.Load())
		if peak.Load() > budget {
			t.Errorf("held %d, over the budget %d", peak.Load(), budget)
		}
		if holders > 0 && st.MessageDrops[message.DropOverShare] == 0 {
			t.Error("no holder was refused beyond its share")
		}
		if st.Disconnects[ReasonTimedOut] != 0 || st.Disconnects[ReasonStalled] != 0 {
			t.Errorf("disconnects %v", st.Disconnects)
		}
	}
	return p99
}

// dropsByLabel formats the nonzero message drops.
func dropsByLabel(d [message.NumDropReasons]uint64) string {
	s := ""
	for r, v := range d {
		if v != 0 {
			s += fmt.Sprintf("%s=%d ", message.DropReason(r).Label(), v)
		}
	}
	return s
}

// disconnectFunc is a Handler that reports its disconnect reason.
type disconnectFunc func(DisconnectReason)

func (disconnectFunc) OnConnect(*Conn)                                    {}
func (disconnectFunc) OnPacket(*Conn, []byte)                             {}
func (f disconnectFunc) OnDisconnect(_ *Conn, r DisconnectReason, _ bool) { f(r) }

// TestSimRefusedStaysAlive: a connection whose every Messages packet is
// refused (over its budget) for three times the timeout, and that sends
// nothing else, is not timed out: a refused packet that authenticates and
// is fresh still proves the peer alive. A replayed one does not.
func TestSimRefusedStaysAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 10 * time.Millisecond})
		mc := testChannels
		mc.MaxMessageSize = 4 << 10
		// The reserve (4 fragments + 32 units of ~1170 bytes) and
		// about a dozen out-of-order units.
		mc.ConnReceiveBudget = 48 * 1200
		const timeout = 2 * time.Second
		s := simListen(t, nw, Config{Handler: &msgEcho{}, Messages: mc, Timeout: timeout})
		pkts := holdPackets(s)
		cli := holder(t, nw, NopHandler{}, pkts) // fills its own budget
		if cli.Conn().closed.Load() {
			t.Fatal("the holder was ended")
		}
		refused := s.Stats().MessageDrops[message.DropOverBudget]
		beyond := pkts[len(pkts)-1] // refused: the budget holds a dozen
		if refused < 200 {
			t.Fatalf("%d of the holder's packets refused", refused)
		}
		start := time.Now()
		for time.Since(start) < 3*timeout {
			if _, err := cli.Conn().sendKind(protocol.KindMessages, beyond); err != nil {
				t.Fatalf("after %v: %v", time.Since(start), err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		st := s.Stats()
		if st.Connections != 1 || st.Disconnects[ReasonTimedOut] != 0 {
			t.Fatalf("connections %d, disconnects %v", st.Connections, st.Disconnects)
		}
		if got := st.MessageDrops[message.DropOverBudget] - refused; got < 25 {
			t.Fatalf("%d packets refused over budget, want every one sent", got)
		}
	})
}
