package conn

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
	"github.com/udpgate/udpgate/netsim"
	"github.com/udpgate/udpgate/token"
)

// Messages over the simulated network, in virtual time: what a player
// sees (every message, in order, and how long its round trip took) under
// loss, duplicates and reordering, with nothing slept and nothing left to
// a real clock.

// stamped is message i of a client's stream with its send time (virtual
// Unix ns) in its first bytes, then filler to size bytes.
func stamped(i int, at time.Time, size int) []byte {
	b := make([]byte, max(size, 12))
	binary.LittleEndian.PutUint32(b, uint32(i))
	binary.LittleEndian.PutUint64(b[4:], uint64(at.UnixNano()))
	return b
}

// rttLog collects the round trips of a client's echoed messages and checks
// their order per channel.
type rttLog struct {
	NopHandler
	mu     sync.Mutex
	next   [3]uint32
	faults []string
	rtts   []time.Duration
	count  [3]int
	done   chan struct{}
	want   int
}

func (r *rttLog) OnMessage(_ *Conn, ch int, msg []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := binary.LittleEndian.Uint32(msg)
	if ch == 0 {
		if i != r.next[0] {
			r.faults = append(r.faults, fmt.Sprintf("reliable message %d arrived when %d was due", i, r.next[0]))
		}
		r.next[0] = i + 1
		r.rtts = append(r.rtts, time.Since(time.Unix(0, int64(binary.LittleEndian.Uint64(msg[4:])))))
	}
	r.count[ch]++
	if ch == 0 && r.count[0] == r.want && r.done != nil {
		close(r.done)
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// Every reliable message arrives exactly once and in order under 0–30 %
// loss each way with duplicates and reordering, sealed and unsealed; the
// round trips a player would see are logged.
func TestSimMessagesLossy(t *testing.T) {
	for _, loss := range []float64{0, 0.05, 0.2, 0.3} {
		for _, sealed := range []bool{false, true} {
			t.Run(fmt.Sprintf("loss=%v/sealed=%v", loss, sealed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { simMessagesLossy(t, loss, sealed) })
			})
		}
	}
}

func simMessagesLossy(t *testing.T, loss float64, sealed bool) {
	nw := netsim.New()
	nw.SetLink(netsim.Link{Loss: loss, Duplicate: 0.02, Reorder: 0.02,
		Latency: 25 * time.Millisecond, Jitter: 4 * time.Millisecond, Seed: uint64(loss*1000) + 1})
	cfg := Config{Handler: &msgEcho{}, Messages: testChannels, Timeout: time.Minute, ConnectTimeout: time.Minute}
	if sealed {
		cfg.PrivateKey, cfg.ProtocolID = &testKey, testProtocolID
		cfg.PublicAddresses = []netip.AddrPort{simServerAddr}
	}
	simListen(t, nw, cfg)
	const n, rate = 600, 60 // ten seconds of a 60 Hz stream
	log := &rttLog{done: make(chan struct{}), want: n}
	ccfg := Config{Handler: log, Messages: testChannels, Timeout: time.Minute, ConnectTimeout: time.Minute}
	if sealed {
		ccfg.Token = makeToken(t, nil, token.Params{ServerAddresses: []netip.AddrPort{simServerAddr}, Timeout: time.Minute})
	}
	cli, err := simDial(t, nw, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	c := cli.Conn()
	tk := time.NewTicker(time.Second / rate)
	for i := range n {
		<-tk.C
		if err := c.SendMessage(0, stamped(i, time.Now(), 100)); err != nil {
			t.Fatal(err)
		}
		if err := c.SendMessage(1, stamped(i, time.Now(), 40)); err != nil {
			t.Fatal(err)
		}
	}
	tk.Stop()
	select {
	case <-log.done:
	case <-time.After(time.Minute):
		t.Fatalf("%d of %d reliable echoes within a minute", log.count[0], n)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.faults) > 0 {
		t.Fatalf("out of order: %v", log.faults[:min(5, len(log.faults))])
	}
	st := c.MessageStats()
	t.Logf("loss %.0f%%: reliable round trip p50 %v p99 %v max %v; unreliable %d of %d; %+v",
		loss*100, percentile(log.rtts, 0.5), percentile(log.rtts, 0.99), percentile(log.rtts, 1), log.count[1], n, st)
	if st.InFlight != 0 {
		t.Errorf("%d reliable messages still in flight after every echo came back", st.InFlight)
	}
}

// An unreliable message is never held back by a reliable one: with the
// first packet of a reliable message lost, unreliable messages sent after
// it come back before its resend does.
func TestSimUnreliableNotHeldBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 25 * time.Millisecond})
		var dropped atomic.Bool // Drop runs on every sender's goroutine
		nw.Drop = func(from, to netip.AddrPort, p []byte) bool {
			var h protocol.ConnHeader
			if to != simServerAddr || dropped.Load() {
				return false
			}
			if _, r := wire.DecodeConn(wire.Magic{}, p, &h); r == protocol.DropNone && h.Kind == protocol.KindMessages {
				return dropped.CompareAndSwap(false, true) // the first Messages packet: the reliable one
			}
			return false
		}
		simListen(t, nw, Config{Handler: &msgEcho{}, Messages: testChannels})
		var mu sync.Mutex
		var order []int
		arrived := make(chan struct{}, 8)
		cli, err := simDial(t, nw, Config{Messages: testChannels, Handler: messageFunc(func(_ *Conn, ch int, _ []byte) {
			mu.Lock()
			order = append(order, ch)
			mu.Unlock()
			arrived <- struct{}{}
		})})
		if err != nil {
			t.Fatal(err)
		}
		c := cli.Conn()
		if err := c.SendMessage(0, []byte("reliable, first packet lost")); err != nil {
			t.Fatal(err)
		}
		advance(time.Millisecond) // the next send is a packet of its own
		if err := c.SendMessage(1, []byte("unreliable")); err != nil {
			t.Fatal(err)
		}
		<-arrived
		<-arrived
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(order, []int{1, 0}) {
			t.Fatalf("echoes by channel %v, want the unreliable one (1) before the reliable one (0)", order)
		}
	})
}

// messageFunc is a MessageHandler from a function.
type messageFunc func(c *Conn, ch int, msg []byte)

func (messageFunc) OnConnect(*Conn)                            {}
func (messageFunc) OnPacket(*Conn, []byte)                     {}
func (messageFunc) OnDisconnect(*Conn, DisconnectReason, bool) {}
func (f messageFunc) OnMessage(c *Conn, ch int, msg []byte)    { f(c, ch, msg) }

// A receiver that has nothing to send acknowledges a lone reliable
// packet at once, and packets in a run every fourth or after AckDelay
// (plus at most one message timer tick), not at its next KeepAlive a
// second later.
func TestSimPromptAck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const oneWay = 25 * time.Millisecond
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: oneWay})
		simListen(t, nw, Config{Messages: testChannels}) // no echo: acks only
		reports := &deliveryLog{reports: map[uint16][]bool{}}
		cli, err := simDial(t, nw, Config{Messages: testChannels, Handler: reports})
		if err != nil {
			t.Fatal(err)
		}
		c := cli.Conn()
		sent := time.Now()
		if err := c.SendMessage(0, []byte("ack me")); err != nil {
			t.Fatal(err)
		}
		// The ack that reports the message's packet delivered is the one
		// that takes the message out of flight.
		if !reports.ev.Await(10*time.Second, func() bool { return c.MessageStats().InFlight == 0 }) {
			t.Fatal("the message was never acknowledged")
		}
		acked := time.Since(sent)
		if acked != 2*oneWay {
			t.Fatalf("acknowledged after %v, want exactly %v: a lone packet is acknowledged at once", acked, 2*oneWay)
		}

		// Packets closer together than AckDelay are acknowledged every
		// fourth, or AckDelay (plus at most a timer tick) after the
		// first: three in a row wait.
		sent = time.Now()
		for i := range 3 {
			if err := c.SendMessage(0, []byte("ack us")); err != nil {
				t.Fatal(err)
			}
			if i < 2 {
				time.Sleep(time.Millisecond)
			}
		}
		if !reports.ev.Await(10*time.Second, func() bool { return c.MessageStats().InFlight == 0 }) {
			t.Fatal("the messages were never acknowledged")
		}
		acked = time.Since(sent)
		lo, hi := 2*oneWay+message.DefaultAckDelay, 2*oneWay+message.DefaultAckDelay+messageTick+time.Millisecond
		if acked < lo || acked > hi {
			t.Fatalf("three packets 1 ms apart acknowledged after %v, want %v..%v", acked, lo, hi)
		}
	})
}

// The raw pipe: a SequencedPacketHandler learns each Data packet's
// sequence number, and with reordering on the path it can keep only the
// newest update.
func TestSimSequencedPackets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 10 * time.Millisecond, Jitter: 8 * time.Millisecond, Seed: 3})
		got := make(chan uint16, 100)
		simListen(t, nw, Config{Handler: seqFunc(func(_ *Conn, seq uint16, _ []byte) { got <- seq })})
		cli, err := simDial(t, nw, Config{})
		if err != nil {
			t.Fatal(err)
		}
		var sent []uint16
		pace := time.NewTicker(time.Millisecond)
		defer pace.Stop()
		for range 50 {
			seq, err := cli.Send([]byte("position"))
			if err != nil {
				t.Fatal(err)
			}
			sent = append(sent, seq)
			<-pace.C
		}
		var recv []uint16
		for range 50 {
			recv = append(recv, <-got)
		}
		slices.Sort(recv)
		slices.Sort(sent)
		if !slices.Equal(recv, sent) {
			t.Fatalf("sequence numbers delivered %v, sent %v", recv, sent)
		}
	})
}

type seqFunc func(c *Conn, seq uint16, p []byte)

func (seqFunc) OnConnect(*Conn)                                         {}
func (seqFunc) OnPacket(*Conn, []byte)                                  { panic("OnPacket with a SequencedPacketHandler") }
func (seqFunc) OnDisconnect(*Conn, DisconnectReason, bool)              {}
func (f seqFunc) OnSequencedPacket(c *Conn, seq uint16, payload []byte) { f(c, seq, payload) }

// What players see on the lossy path (5 % loss each way, 25 ms
// +0–4 ms each way, 4 clients × 60 messages/s × 100 bytes, echoed), in
// virtual time: message round-trip percentiles and the bytes on the wire
// per echoed payload byte. The bench compares the same path with kcp-go
// over real sockets (tuning.md, "Messages"); this is its deterministic
// twin, bounded loosely so that a regression fails here first.
//
// UDPGATE_RESEND_FACTORS (e.g. "0.25,0.5,1") sweeps Config.Messages's
// ResendFactor instead of taking the default, for tuning.md's table:
//
//	UDPGATE_RESEND_FACTORS=0.25,0.5,0.75,1 go test ./conn -run TestSimMessageLatency -v
func TestSimMessageLatency(t *testing.T) {
	factors := []float64{0} // the default
	if env := os.Getenv("UDPGATE_RESEND_FACTORS"); env != "" {
		factors = factors[:0]
		for _, f := range strings.Split(env, ",") {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				t.Fatalf("UDPGATE_RESEND_FACTORS: %v", err)
			}
			factors = append(factors, v)
		}
	}
	for _, loss := range []float64{0.05, 0.2} {
		for _, f := range factors {
			t.Run(fmt.Sprintf("loss=%v/factor=%v", loss, f), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					p50, p99, wire := simLatency(t, loss, message.Config{ResendFactor: f})
					t.Logf("loss %.0f%% each way, resend factor %v: round trip p50 %v p99 %v; %.2f wire bytes (UDP payload) per echoed payload byte",
						loss*100, f, p50.Round(time.Millisecond/10), p99.Round(time.Millisecond/10), wire)
					if bound := 4 * 54 * time.Millisecond; f == 0 && loss <= 0.05 && p99 > bound {
						t.Errorf("p99 %v over %v (4 round trips)", p99, bound)
					}
				})
			})
		}
	}
}

// simLatency runs the latency scenario with the messages configuration mc
// (its channels are replaced by testChannels).
func simLatency(t *testing.T, loss float64, mc message.Config) (p50, p99 time.Duration, wirePerByte float64) {
	r := simLatencyTally(t, loss, mc, nil)
	return r.p50, r.p99, r.wire
}

// latencyRun is what simLatencyTally measured: round-trip percentiles,
// wire bytes (UDP payload, lost datagrams included) per echoed payload
// byte, and the messages echoed.
type latencyRun struct {
	p50, p99 time.Duration
	wire     float64
	echoed   int
	// resent and copies: message.Stats's, of the clients [0] and of the
	// server's connections [1].
	resent, copies [2]uint64
}

// statsEcho is msgEcho keeping its connections, for their MessageStats.
type statsEcho struct {
	msgEcho
	mu    sync.Mutex
	conns []*Conn
}

func (e *statsEcho) OnConnect(c *Conn) {
	e.mu.Lock()
	e.conns = append(e.conns, c)
	e.mu.Unlock()
}

// simLatencyTally is simLatency, counting the wire into tally too when it
// is not nil.
func simLatencyTally(t *testing.T, loss float64, mc message.Config, tally *wireTally) latencyRun {
	return simLatencySeed(t, loss, mc, tally, 11)
}

// simLatencySeed is simLatencyTally on a network seeded with seed.
func simLatencySeed(t *testing.T, loss float64, mc message.Config, tally *wireTally, seed uint64) latencyRun {
	mc.Channels = testChannels.Channels
	nw := netsim.New()
	nw.SetLink(netsim.Link{Loss: loss, Latency: 25 * time.Millisecond, Jitter: 4 * time.Millisecond, Seed: seed})
	var wire sync.Mutex
	var bytes int
	nw.Drop = func(from, to netip.AddrPort, p []byte) bool {
		wire.Lock()
		bytes += len(p)
		wire.Unlock()
		if tally != nil {
			tally.observe(from, to, p)
		}
		return false
	}
	echo := &statsEcho{}
	simListen(t, nw, Config{Handler: echo, Messages: mc, Timeout: time.Minute})
	const clients, rate, n = 4, 60, 1200 // 20 s each
	var cstats []*Conn
	logs := make([]*rttLog, clients)
	var wg sync.WaitGroup
	for i := range clients {
		logs[i] = &rttLog{done: make(chan struct{}), want: n}
		cli, err := simDial(t, nw, Config{Handler: logs[i], Messages: mc, Timeout: time.Minute, ConnectTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		cstats = append(cstats, cli.Conn())
		wg.Go(func() {
			tk := time.NewTicker(time.Second / rate)
			defer tk.Stop()
			for j := range n {
				<-tk.C
				if err := cli.Conn().SendMessage(0, stamped(j, time.Now(), 100)); err != nil {
					t.Error(err)
					return
				}
			}
			<-logs[i].done
		})
	}
	wire.Lock()
	bytes = 0 // the handshakes are not the messages' cost
	wire.Unlock()
	if tally != nil {
		tally.reset()
	}
	wg.Wait()
	var all []time.Duration
	for _, l := range logs {
		l.mu.Lock()
		if len(l.faults) > 0 {
			t.Fatalf("out of order: %v", l.faults[0])
		}
		all = append(all, l.rtts...)
		l.mu.Unlock()
	}
	wire.Lock()
	defer wire.Unlock()
	r := latencyRun{p50: percentile(all, 0.5), p99: percentile(all, 0.99),
		wire: float64(bytes) / float64(2*100*clients*n), echoed: clients * n}
	for _, c := range cstats {
		st := c.MessageStats()
		r.resent[0] += st.Resent
		r.copies[0] += st.Copies
	}
	echo.mu.Lock()
	for _, c := range echo.conns {
		st := c.MessageStats()
		r.resent[1] += st.Resent
		r.copies[1] += st.Copies
	}
	echo.mu.Unlock()
	return r
}

// The message timer ticks only while a connection has message timers
// pending: every messageTick from the first message until its echo's ack
// is in, then not at all (not 200 times a second on an idle server), or
// every idleBudgetTick with an egress budget. Counted in virtual time.
func TestSimMessageTimerSleeps(t *testing.T) {
	for _, budget := range []bool{false, true} {
		t.Run(fmt.Sprintf("egress-budget=%v", budget), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nw := netsim.New()
				nw.SetLink(netsim.Link{Latency: 10 * time.Millisecond})
				cfg := Config{Handler: &msgEcho{}, Messages: testChannels}
				if budget {
					cfg.EgressRate = 1 << 20
				}
				srv := simListen(t, nw, cfg)
				got := make(chan struct{}, 1)
				cli, err := simDial(t, nw, Config{Messages: testChannels, Handler: messageFunc(func(*Conn, int, []byte) {
					got <- struct{}{}
				})})
				if err != nil {
					t.Fatal(err)
				}
				st, ct := srv.msgTimer, cli.msgTimer
				synctest.Wait()
				idle := func(what string) {
					t.Helper()
					s0, c0 := st.ticks.Load(), ct.ticks.Load()
					time.Sleep(10 * time.Second)
					synctest.Wait()
					want := uint64(0)
					if budget {
						want = uint64(10 * time.Second / idleBudgetTick)
					}
					if n := st.ticks.Load() - s0; n != want {
						t.Errorf("%s: the server's message timer ticked %d times in 10 s, want %d", what, n, want)
					}
					if n := ct.ticks.Load() - c0; n != 0 {
						t.Errorf("%s: the client's message timer ticked %d times in 10 s, want 0", what, n)
					}
				}
				idle("connected, no message yet")
				if err := cli.Conn().SendMessage(0, []byte("ping")); err != nil {
					t.Fatal(err)
				}
				<-got
				if st.ticks.Load() == 0 || ct.ticks.Load() == 0 {
					t.Fatalf("ticks during the echo: server %d, client %d; want both above 0", st.ticks.Load(), ct.ticks.Load())
				}
				// The client acknowledges the echo and the server hears it.
				time.Sleep(time.Second)
				idle("after the echo")
			})
		})
	}
}
