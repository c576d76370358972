package conn

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
	"github.com/udpgate/udpgate/netsim"
)

// Receivers that never acknowledge (issue 29, target 2), in virtual
// time: clients that acknowledge for a second and then freeze the ack
// fields of their packets (what a client that receives its echoes and
// never acknowledges sends), while they keep sending messages for the
// server to echo, beside players, one on a path that loses 5 % each way.

// noackServer records when and why each connection ended, by address.
type noackServer struct {
	msgEcho
	mu    sync.Mutex
	conns map[netip.AddrPort]*Conn
	ended map[netip.AddrPort]noackEnd
}

type noackEnd struct {
	at     time.Time
	reason DisconnectReason
}

func (h *noackServer) OnConnect(c *Conn) {
	h.mu.Lock()
	h.conns[c.RemoteAddr()] = c
	h.mu.Unlock()
}

func (h *noackServer) OnDisconnect(c *Conn, r DisconnectReason, _ bool) {
	h.mu.Lock()
	h.ended[c.RemoteAddr()] = noackEnd{time.Now(), r}
	h.mu.Unlock()
}

// noackPeer is what the network knows of one client.
type noackPeer struct {
	silent   bool
	ack      uint16 // the ack fields of its last packet before the silence
	bits     uint64
	lastSent time.Time     // the last packet sent with its own ack fields
	bytes    map[int64]int // bytes the server sent it, by 10 ms from the start
}

func TestSimNoAckReceivers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			oneWay  = 60 * time.Millisecond
			rtt     = 2 * oneWay
			silent  = 4
			players = 2
			every   = 20 * time.Millisecond
			size    = 1000
		)
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: oneWay})
		start := time.Now()
		var silenceAt time.Time // set before the silence, read by Drop
		var mu sync.Mutex
		peers := map[netip.AddrPort]*noackPeer{}
		nw.Drop = func(from, to netip.AddrPort, p []byte) bool {
			mu.Lock()
			defer mu.Unlock()
			if from == simServerAddr {
				if pe := peers[to]; pe != nil {
					pe.bytes[int64(time.Since(start)/(10*time.Millisecond))] += len(p)
				}
				return false
			}
			pe := peers[from]
			var h protocol.ConnHeader
			payload, r := wire.DecodeConn(wire.Magic{}, p, &h)
			if pe == nil || !pe.silent || r != protocol.DropNone {
				return false
			}
			if silenceAt.IsZero() || time.Now().Before(silenceAt) {
				pe.ack, pe.bits, pe.lastSent = h.Ack, h.AckBits, time.Now()
				return false
			}
			// Silent: the ack fields of its last packet before, forever.
			h.Ack, h.AckBits = pe.ack, pe.bits
			if wire.EncodeConn(p, wire.Magic{}, &h, payload) == 0 {
				t.Error("re-encoding a packet failed")
			}
			return false
		}
		srv := &noackServer{conns: map[netip.AddrPort]*Conn{}, ended: map[netip.AddrPort]noackEnd{}}
		simListen(t, nw, Config{Handler: srv, Messages: testChannels})

		type client struct {
			cli  *Client
			log  *msgLog
			sent int
		}
		var clients []*client
		for i := range silent + players {
			log := &msgLog{got: map[int][][]byte{}, more: make(chan struct{}, 1)}
			cli, err := simDial(t, nw, Config{Messages: testChannels, Handler: log})
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			peers[cli.LocalAddr()] = &noackPeer{silent: i < silent, bytes: map[int64]int{}}
			mu.Unlock()
			if i == silent {
				l := netsim.Link{Latency: oneWay, Loss: 0.05, Seed: 7}
				nw.SetPath(cli.LocalAddr(), simServerAddr, l)
				nw.SetPath(simServerAddr, cli.LocalAddr(), l)
			}
			clients = append(clients, &client{cli: cli, log: log})
		}
		connected := time.Now()
		mu.Lock()
		silenceAt = connected.Add(time.Second)
		mu.Unlock()
		// Everyone sends a reliable message every 20 ms for 5 s (the
		// silent ones until the server ends them).
		tk := time.NewTicker(every)
		var rttRead bool
		srvRTT := map[netip.AddrPort]time.Duration{}
		for i := 0; time.Since(connected) < 5*time.Second; i++ {
			<-tk.C
			for _, c := range clients {
				msg := make([]byte, size)
				binary.LittleEndian.PutUint32(msg, uint32(i))
				if c.cli.Conn().SendMessage(0, msg) == nil {
					c.sent++
				}
			}
			if !rttRead && time.Since(silenceAt) > rtt {
				// The server's smoothed round trip of each silent one:
				// no sample comes after the silence.
				rttRead = true
				srv.mu.Lock()
				for a, c := range srv.conns {
					srvRTT[a] = c.MessageStats().Path.RTT
				}
				srv.mu.Unlock()
			}
		}
		tk.Stop()
		time.Sleep(2 * time.Second) // virtual: the last echoes come back

		mu.Lock()
		defer mu.Unlock()
		srv.mu.Lock()
		defer srv.mu.Unlock()
		for i, c := range clients {
			a := c.cli.LocalAddr()
			pe := peers[a]
			end, ended := srv.ended[a]
			if !pe.silent {
				c.log.mu.Lock()
				got := len(c.log.got[0])
				c.log.mu.Unlock()
				if ended || got != c.sent {
					t.Errorf("player %d: ended %v (%v); %d of %d echoes back", i, ended, end.reason, got, c.sent)
				}
				continue
			}
			if !ended || end.reason != ReasonStalled {
				t.Errorf("silent %d: ended %v, reason %v; want stalled", i, ended, end.reason)
				continue
			}
			// The server's last ack from it arrived one way after its last
			// packet with ack fields of its own.
			lastAck := pe.lastSent.Add(oneWay)
			bound := max(message.DefaultStallSilence, time.Duration(message.DefaultStallRTTs)*srvRTT[a])
			if d := end.at.Sub(lastAck); d < bound || d > bound+messageTick {
				t.Errorf("silent %d: stalled %v after its last ack, want the bound max(2 s, 20 × %v) = %v (+ the %v tick)", i, d, srvRTT[a], bound, messageTick)
			}
			first, after := 0, 0
			from := silenceAt.Add(2 * rtt)
			for b, n := range pe.bytes {
				at := start.Add(time.Duration(b) * 10 * time.Millisecond)
				if !at.Before(connected) && at.Before(silenceAt) {
					first += n
				}
				if !at.Before(from) && at.Before(end.at) {
					after += n
				}
			}
			rate := float64(after) / end.at.Sub(from).Seconds()
			t.Logf("silent %d: first second %d B; from 2 RTT after the silence to the stall %.0f B/s (%.1f %%); stalled %v after its last ack (bound %v)",
				i, first, rate, 100*rate/float64(first), end.at.Sub(lastAck), bound)
			if rate > float64(first)/10 {
				t.Errorf("silent %d: %.0f B/s from 2 RTT after its silence, want ≤ 10 %% of its first second's %d B", i, rate, first)
			}
		}
	})
}

// A receiver that never acknowledges, from its first packet on, gets its
// echoes for two handshake round trips, AckDelay and a timer tick after
// the first (the overdue-ack check on the round trip its handshake gave
// the server), then only the first timeout's probe (a whole unit) and
// pings. Without the handshake's sample the check waited on the
// 100 ms assumed before one, and the echoes went on for 225 ms (22
// whole echoes against 10).
func TestSimNeverAckCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			oneWay = 20 * time.Millisecond
			rtt    = 2 * oneWay
			every  = 20 * time.Millisecond
			size   = 1000
		)
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: oneWay})
		type sent struct {
			at time.Time
			n  int
		}
		var mu sync.Mutex
		var cliAddr netip.AddrPort
		var frozen bool
		var ack uint16
		var bits uint64
		var toCli []sent
		nw.Drop = func(from, to netip.AddrPort, p []byte) bool {
			mu.Lock()
			defer mu.Unlock()
			if from == simServerAddr && to == cliAddr {
				toCli = append(toCli, sent{time.Now(), len(p)})
				return false
			}
			if from != cliAddr {
				return false
			}
			var h protocol.ConnHeader
			payload, r := wire.DecodeConn(wire.Magic{}, p, &h)
			if r != protocol.DropNone {
				return false
			}
			if !frozen { // its first connection packet's ack fields, forever
				frozen, ack, bits = true, h.Ack, h.AckBits
				return false
			}
			h.Ack, h.AckBits = ack, bits
			if wire.EncodeConn(p, wire.Magic{}, &h, payload) == 0 {
				t.Error("re-encoding a packet failed")
			}
			return false
		}
		srv := &noackServer{conns: map[netip.AddrPort]*Conn{}, ended: map[netip.AddrPort]noackEnd{}}
		simListen(t, nw, Config{Handler: srv, Messages: testChannels})
		cli, err := simDial(t, nw, Config{Messages: testChannels, Handler: &msgLog{got: map[int][][]byte{}, more: make(chan struct{}, 1)}})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		cliAddr = cli.LocalAddr()
		mu.Unlock()
		tk := time.NewTicker(every)
		for range 50 { // a second of messages
			<-tk.C
			_ = cli.Conn().SendMessage(0, make([]byte, size))
		}
		tk.Stop()

		mu.Lock()
		defer mu.Unlock()
		var first time.Time
		for _, s := range toCli {
			if s.n >= size {
				first = s.at
				break
			}
		}
		if first.IsZero() {
			t.Fatal("the server echoed nothing")
		}
		cut := first.Add(2*rtt + message.DefaultAckDelay + 2*messageTick)
		var whole, after, bytesAfter int
		var last time.Time
		for _, s := range toCli {
			if s.n < size {
				continue
			}
			whole++
			if s.at.After(cut) {
				after++
				bytesAfter += s.n
			}
			last = s.at
		}
		t.Logf("%d whole echoes, the last %v after the first; %d (%d B) after %v", whole, last.Sub(first), after, bytesAfter, cut.Sub(first))
		if after > 1 {
			t.Errorf("%d packets with a whole echo left after %v (2 × the %v round trip + AckDelay + 2 ticks after the first), the last %v after it; want at most one, the first timeout's probe", after, cut.Sub(first), rtt, last.Sub(first))
		}
	})
}
