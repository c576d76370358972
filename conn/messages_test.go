package conn

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/internal/testkit/netem"
	"github.com/udpgate/udpgate/message"
	"github.com/udpgate/udpgate/token"
)

// testChannels: 0 reliable-ordered, 1 unreliable, 2 sequenced.
var testChannels = message.Config{Channels: []message.ChannelConfig{
	{Kind: message.ReliableOrdered}, {Kind: message.Unreliable}, {Kind: message.Sequenced},
}}

// msgEcho echoes every message on its channel and every Data payload.
type msgEcho struct {
	NopHandler
	connected atomic.Int32
}

func (e *msgEcho) OnConnect(*Conn) { e.connected.Add(1) }

func (e *msgEcho) OnMessage(c *Conn, ch int, msg []byte) { _ = c.SendMessage(ch, msg) }

func (e *msgEcho) OnPacket(c *Conn, p []byte) { _, _ = c.Send(p) }

// msgLog is a client's record of the messages that came back.
type msgLog struct {
	NopHandler
	mu   sync.Mutex
	got  map[int][][]byte
	more chan struct{}
}

func newMsgLog() *msgLog {
	return &msgLog{got: map[int][][]byte{}, more: make(chan struct{}, 1)}
}

func (l *msgLog) OnMessage(_ *Conn, ch int, msg []byte) {
	l.mu.Lock()
	l.got[ch] = append(l.got[ch], bytes.Clone(msg))
	l.mu.Unlock()
	select {
	case l.more <- struct{}{}:
	default:
	}
}

func (l *msgLog) count(ch int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.got[ch])
}

// waitCount waits until channel ch holds n messages, or fails after d.
func (l *msgLog) waitCount(t *testing.T, ch, n int, d time.Duration) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for l.count(ch) < n {
		select {
		case <-l.more:
		case <-deadline.C:
			t.Fatalf("channel %d: %d of %d messages came back within %v", ch, l.count(ch), n, d)
		}
	}
}

// numbered is message i of a test stream: its number, then filler up to
// size bytes.
func numbered(i, size int) []byte {
	b := make([]byte, max(size, 4))
	binary.LittleEndian.PutUint32(b, uint32(i))
	for j := 4; j < len(b); j++ {
		b[j] = byte(i + j)
	}
	return b
}

// Every reliable message comes back exactly once and in order, large ones
// included, through loss, duplicates and reordering, sealed or not; the
// unreliable channel keeps flowing beside it.
func TestMessagesLossy(t *testing.T) {
	for _, loss := range []float64{0, 0.1, 0.3} {
		for _, sealed := range []bool{false, true} {
			t.Run(fmt.Sprintf("loss=%v/sealed=%v", loss, sealed), func(t *testing.T) {
				testMessagesLossy(t, loss, sealed)
			})
		}
	}
}

func testMessagesLossy(t *testing.T, loss float64, sealed bool) {
	cfg := Config{Handler: &msgEcho{}, Messages: testChannels, Timeout: 60 * time.Second}
	if sealed {
		cfg.PrivateKey, cfg.ProtocolID = &testKey, testProtocolID
	}
	s := listen(t, cfg)
	proxy, err := netem.New(s.Addr(), netem.Config{Loss: loss, Duplicate: 0.05, Reorder: 0.05,
		Delay: time.Millisecond, Jitter: 2 * time.Millisecond, Seed: uint64(loss*100) + 7})
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	log := newMsgLog()
	ccfg := Config{Handler: log, Messages: testChannels, Timeout: 60 * time.Second, ConnectTimeout: 30 * time.Second}
	var cli *Client
	if sealed {
		tok := makeToken(t, nil, token.Params{ServerAddresses: []netip.AddrPort{s.Addr()}})
		if cli, err = dialToken(t, proxy.Addr(), tok, ccfg); err != nil {
			t.Fatal(err)
		}
	} else {
		cli = dialAddr(t, proxy.Addr(), ccfg)
	}
	c := cli.Conn()
	const n = 300
	sizes := func(i int) int {
		switch {
		case i%100 == 50:
			return 100 << 10 // fragmented: about 90 packets
		case i%10 == 3:
			return 3000 // two or three fragments
		}
		return 100
	}
	for i := range n {
		for {
			err := c.SendMessage(0, numbered(i, sizes(i)))
			if err == nil {
				break
			}
			if !errors.Is(err, message.ErrQueueFull) {
				t.Fatal(err)
			}
			// The queue drains as acks arrive: wait for an echo.
			select {
			case <-log.more:
			case <-time.After(time.Second):
			}
		}
		_ = c.SendMessage(1, numbered(i, 50))
	}
	log.waitCount(t, 0, n, 60*time.Second)
	log.mu.Lock()
	defer log.mu.Unlock()
	for i, m := range log.got[0] {
		if !bytes.Equal(m, numbered(i, sizes(i))) {
			t.Fatalf("reliable echo %d is message %d (%d bytes): out of order or corrupt",
				i, binary.LittleEndian.Uint32(m), len(m))
		}
	}
	if len(log.got[0]) != n {
		t.Fatalf("%d reliable echoes, want exactly %d", len(log.got[0]), n)
	}
	// Unreliable: each at most once. (How many arrive depends on the
	// proxy's socket buffers under the bursts of large messages too.)
	seen := map[uint32]bool{}
	for _, m := range log.got[1] {
		k := binary.LittleEndian.Uint32(m)
		if seen[k] {
			t.Fatalf("unreliable message %d delivered twice", k)
		}
		seen[k] = true
	}
	t.Logf("loss %v: %d unreliable of %d came back; client %+v", loss, len(seen), n, c.MessageStats())
}

// A sequenced channel delivers only messages newer than the last one.
func TestMessagesSequenced(t *testing.T) {
	s := listen(t, Config{Handler: &msgEcho{}, Messages: testChannels})
	log := newMsgLog()
	cli := dial(t, s, Config{Handler: log, Messages: testChannels})
	for i := range 50 {
		if err := cli.Conn().SendMessage(2, numbered(i, 20)); err != nil {
			t.Fatal(err)
		}
	}
	if err := cli.Conn().SendMessage(0, []byte("fence")); err != nil {
		t.Fatal(err)
	}
	log.waitCount(t, 0, 1, 10*time.Second)
	log.mu.Lock()
	defer log.mu.Unlock()
	last := -1
	for _, m := range log.got[2] {
		k := int(binary.LittleEndian.Uint32(m))
		if k <= last {
			t.Fatalf("sequenced message %d delivered after %d", k, last)
		}
		last = k
	}
}

// Messages and Data packets share a connection: a peer that sends only
// Data keeps working against a server with channels.
func TestMessagesBesideData(t *testing.T) {
	s := listen(t, Config{Handler: &msgEcho{}, Messages: testChannels})
	rec := &clientRecorder{ch: make(chan []byte, 4)}
	cli := dial(t, s, Config{Handler: rec})
	if _, err := cli.Send([]byte("raw")); err != nil {
		t.Fatal(err)
	}
	if got := recvOne(t, rec.ch); string(got) != "raw" {
		t.Fatalf("echo %q", got)
	}
	if err := cli.Conn().SendMessage(0, []byte("x")); !errors.Is(err, message.ErrNoChannel) {
		t.Fatalf("SendMessage without channels: %v, want message.ErrNoChannel", err)
	}
}

// Limits and errors a user meets.
func TestMessagesLimits(t *testing.T) {
	cfg := Config{Handler: &msgEcho{}, Messages: message.Config{
		Channels:       []message.ChannelConfig{{Kind: message.ReliableOrdered, MaxQueued: 64 << 10}, {Kind: message.Unreliable}},
		MaxMessageSize: 32 << 10,
	}}
	s := listen(t, cfg)
	cli := dial(t, s, Config{Messages: cfg.Messages})
	c := cli.Conn()
	if got := c.MaxMessageSize(0); got != 32<<10 {
		t.Errorf("MaxMessageSize(0) = %d, want %d", got, 32<<10)
	}
	one := c.MaxMessageSize(1)
	if one <= 0 || one >= c.MaxPayload() {
		t.Errorf("MaxMessageSize(1) = %d, want under one packet's payload %d", one, c.MaxPayload())
	}
	if err := c.SendMessage(1, make([]byte, one+1)); !errors.Is(err, message.ErrMessageSize) {
		t.Errorf("unreliable message over one packet: %v, want message.ErrMessageSize", err)
	}
	if err := c.SendMessage(0, make([]byte, 32<<10+1)); !errors.Is(err, message.ErrMessageSize) {
		t.Errorf("reliable message over MaxMessageSize: %v, want message.ErrMessageSize", err)
	}
	if err := c.SendMessage(5, []byte("x")); !errors.Is(err, message.ErrNoChannel) {
		t.Errorf("channel 5: %v, want message.ErrNoChannel", err)
	}
	// The queue bound holds: queued messages wait for acks.
	var full bool
	for range 1000 {
		if err := c.QueueMessage(0, make([]byte, 16<<10)); errors.Is(err, message.ErrQueueFull) {
			full = true
			break
		}
	}
	if !full {
		t.Error("1000 queued 16 KiB messages never filled a 64 KiB queue")
	}
}

// A peer that stops acknowledging ends the connection with ReasonStalled.
func TestMessagesStall(t *testing.T) {
	s := listen(t, Config{Handler: &msgEcho{}, Messages: testChannels, Timeout: time.Minute})
	proxy, err := netem.New(s.Addr(), netem.Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	mc := testChannels
	mc.StallTimeout = 300 * time.Millisecond
	cli := dialAddr(t, proxy.Addr(), Config{Messages: mc, Timeout: time.Minute})
	proxy.Close() // nothing reaches the server any more
	if err := cli.Conn().SendMessage(0, []byte("never acked")); err != nil {
		t.Fatal(err)
	}
	if de := ended(t, cli, "stall", 30*time.Second); de.Reason != ReasonStalled {
		t.Fatalf("ended with %v, want ReasonStalled", cli.Err())
	}
}

// orderApp checks the Handler contract on the server: OnConnect returns
// before the connection's first packet or message reaches the Handler,
// and OnDisconnect comes last.
type orderApp struct {
	release  chan struct{}
	mu       sync.Mutex
	ready    map[*Conn]bool
	gone     map[*Conn]bool
	faults   []string
	received atomic.Int32
	ev       conntest.Signal // fired at each delivery
}

func (a *orderApp) OnConnect(c *Conn) {
	<-a.release // the client's first packets arrive meanwhile
	a.mu.Lock()
	a.ready[c] = true
	a.mu.Unlock()
}

func (a *orderApp) check(c *Conn, what string) {
	a.mu.Lock()
	if !a.ready[c] || a.gone[c] {
		a.faults = append(a.faults, what)
	}
	a.mu.Unlock()
	a.received.Add(1)
	a.ev.Fire()
}

func (a *orderApp) OnPacket(c *Conn, _ []byte)         { a.check(c, "OnPacket") }
func (a *orderApp) OnMessage(c *Conn, _ int, _ []byte) { a.check(c, "OnMessage") }

func (a *orderApp) OnDisconnect(c *Conn, _ DisconnectReason, _ bool) {
	a.mu.Lock()
	a.gone[c] = true
	a.mu.Unlock()
}

// It runs on real sockets: while OnConnect runs, the receive loop that
// takes the client's Data waits on the connection's mutex, which synctest
// does not count as durably blocked, so a bubble could not wait for it.
func TestHandlerOrder(t *testing.T) {
	app := &orderApp{release: make(chan struct{}), ready: map[*Conn]bool{}, gone: map[*Conn]bool{}}
	waiting := make(chan struct{})
	var once sync.Once
	s := listen(t, Config{Handler: app, Messages: testChannels, Sockets: 1})
	onAwaitReady(s, func(*Conn) { once.Do(func() { close(waiting) }) })
	cli := dial(t, s, Config{Messages: testChannels})
	if _, err := cli.Send([]byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := cli.Conn().SendMessage(0, []byte("message")); err != nil {
		t.Fatal(err)
	}
	// Wait until the server's loop has taken the client's first Data and
	// is about to wait for OnConnect, then let OnConnect return.
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		close(app.release) // or the server's Close would wait for OnConnect
		t.Fatal("no packet waited for OnConnect")
	}
	close(app.release)
	if !app.ev.Await(10*time.Second, func() bool { return app.received.Load() >= 2 }) {
		t.Fatalf("%d deliveries, want both", app.received.Load())
	}
	cli.Close()
	app.mu.Lock()
	defer app.mu.Unlock()
	if len(app.faults) > 0 {
		t.Fatalf("Handler calls before OnConnect returned or after OnDisconnect: %v", app.faults)
	}
}

// dialAddr dials addr (a proxy in front of a server) and closes the client
// when the test ends.
func dialAddr(t *testing.T, addr netip.AddrPort, cfg Config) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr.String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
