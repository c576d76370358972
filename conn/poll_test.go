package conn

import (
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
	"github.com/udpgate/udpgate/netsim"
)

// frame is the poll loops' frame, 60 Hz.
const frame = 16 * time.Millisecond

// pollAll reads every message ready on c into got, per channel.
func pollAll(t *testing.T, c *Conn, buf []byte, got map[int][][]byte) {
	t.Helper()
	for {
		ch, n, err := c.ReceiveMessage(buf)
		if errors.Is(err, ErrNoMessage) {
			return
		}
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err)
		}
		got[ch] = append(got[ch], append([]byte(nil), buf[:n]...))
	}
}

// A client that polls (Config.ReceiveQueue, a Handler without OnMessage)
// reads every reliable message the server echoes, once and in order,
// through 10 % loss; a buffer too small is told the size it needs and
// the message stays first in line.
func TestReceiveMessagePoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 10 * time.Millisecond, Loss: 0.1, Seed: 3})
		simListen(t, nw, Config{Handler: &msgEcho{}, Messages: testChannels})
		cli, err := simDial(t, nw, Config{Messages: testChannels, ReceiveQueue: 16 << 10})
		if err != nil {
			t.Fatal(err)
		}
		c := cli.Conn()
		if _, _, err := c.ReceiveMessage(make([]byte, 10)); !errors.Is(err, ErrNoMessage) {
			t.Fatalf("before any message: %v, want ErrNoMessage", err)
		}
		const n = 300
		for i := range n {
			if err := c.SendMessage(0, numbered(i, 40+i%300)); err != nil {
				t.Fatal(err)
			}
		}
		// The first message, at a buffer too small: told, and kept.
		small := make([]byte, 8)
		for {
			time.Sleep(frame)
			ch, need, err := c.ReceiveMessage(small)
			if errors.Is(err, ErrNoMessage) {
				continue
			}
			if !errors.Is(err, io.ErrShortBuffer) || ch != 0 || need != 40 {
				t.Fatalf("a buffer of 8 bytes: channel %d, n %d, %v; want channel 0, n 40, io.ErrShortBuffer", ch, need, err)
			}
			t.Logf("the error: %v", err)
			break
		}
		got := map[int][][]byte{}
		buf := make([]byte, c.MaxMessageSize(0))
		for deadline := time.Now().Add(10 * time.Second); len(got[0]) < n && time.Now().Before(deadline); {
			pollAll(t, c, buf, got)
			time.Sleep(frame)
		}
		if len(got[0]) != n {
			t.Fatalf("polled %d of %d reliable messages", len(got[0]), n)
		}
		for i, m := range got[0] {
			if string(m) != string(numbered(i, 40+i%300)) {
				t.Fatalf("message %d is %q..., want message %d", i, m[:8], i)
			}
		}
	})
}

// A server that polls and stops reading for a second loses no reliable
// message: they wait in the receive window, the packets beyond it are
// refused (over_budget) and resent; its unreliable messages beyond
// ReceiveQueue are dropped and counted (queue_full), the others read.
func TestReceiveMessageBackpressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 10 * time.Millisecond})
		const queue = 8 << 10
		srv := simListen(t, nw, Config{Messages: testChannels, ReceiveQueue: queue})
		cli, err := simDial(t, nw, Config{Messages: testChannels})
		if err != nil {
			t.Fatal(err)
		}
		c := cli.Conn()
		// Unreliable: 40 of 1000 bytes, 5 times what the queue holds.
		const unrel = 40
		for i := range unrel {
			if err := c.SendMessage(1, numbered(i, 1000)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
		// Reliable: 2 MB in 2000 messages, more than the receive window
		// (1024 units) holds, sent as the queue takes them.
		const rel = 2000
		sent := 0
		start := time.Now()
		for sent < rel && time.Since(start) < time.Second {
			if err := c.QueueMessage(0, numbered(sent, 1000)); err == nil {
				sent++
				continue
			} else if !errors.Is(err, ErrQueueFull) {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(time.Second - time.Since(start))
		drops := srv.Stats().MessageDrops
		if drops[message.DropOverBudget] == 0 {
			t.Errorf("no packet refused while the window was full: drops %v", dropsByLabel(drops))
		}
		if d := drops[message.DropQueueFull]; d < unrel-queue/1005 {
			t.Errorf("%d unreliable messages dropped for the queue, want at least %d", d, unrel-queue/1005)
		}
		var sc *Conn
		srv.Range(func(c *Conn) bool { sc = c; return false })
		got := map[int][][]byte{}
		buf := make([]byte, sc.MaxMessageSize(0))
		for deadline := time.Now().Add(20 * time.Second); len(got[0]) < rel && time.Now().Before(deadline); {
			for sent < rel {
				if err := c.QueueMessage(0, numbered(sent, 1000)); err != nil {
					break
				}
				sent++
			}
			pollAll(t, sc, buf, got)
			time.Sleep(frame)
		}
		if len(got[0]) != rel {
			t.Fatalf("polled %d of %d reliable messages (drops %v)", len(got[0]), rel, dropsByLabel(srv.Stats().MessageDrops))
		}
		for i, m := range got[0] {
			if string(m) != string(numbered(i, 1000)) {
				t.Fatalf("reliable message %d is another", i)
			}
		}
		drops = srv.Stats().MessageDrops
		if uint64(len(got[1]))+drops[message.DropQueueFull] != unrel {
			t.Errorf("unreliable: %d read and %d dropped for the queue, want %d in all", len(got[1]), drops[message.DropQueueFull], unrel)
		}
		for i := 1; i < len(got[1]); i++ {
			if binary.BigEndian.Uint32(got[1][i]) <= binary.BigEndian.Uint32(got[1][i-1]) {
				t.Fatalf("unreliable messages out of order")
			}
		}
		if q := sc.MessageStats().QueueFull; q != drops[message.DropQueueFull] {
			t.Errorf("MessageStats().QueueFull %d, the server's drops %d", q, drops[message.DropQueueFull])
		}
		t.Logf("unreliable: %d read, %d dropped; reliable packets refused: %d", len(got[1]), drops[message.DropQueueFull], drops[message.DropOverBudget])
		if sc.closed.Load() {
			t.Fatal("the connection ended")
		}
	})
}

// pollSide is a polling side's Handler: no OnMessage; it passes its
// connections and their ends on.
type pollSide struct {
	NopHandler
	conns chan *Conn
	gone  chan DisconnectReason
}

func (h pollSide) OnConnect(c *Conn) { h.conns <- c }

func (h pollSide) OnDisconnect(_ *Conn, r DisconnectReason, _ bool) { h.gone <- r }

// The messages that arrived before the connection ended are still read,
// then ErrClosed; a Handler with OnMessage gets them, and ReceiveMessage
// says why it has none.
func TestReceiveMessageAfterClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 10 * time.Millisecond})
		h := pollSide{conns: make(chan *Conn, 1), gone: make(chan DisconnectReason, 1)}
		simListen(t, nw, Config{Messages: testChannels, ReceiveQueue: 1 << 10, Handler: h})
		cli, err := simDial(t, nw, Config{Messages: testChannels, Handler: &msgEcho{}, ReceiveQueue: 1 << 10})
		if err != nil {
			t.Fatal(err)
		}
		c := cli.Conn()
		if _, _, err := c.ReceiveMessage(nil); !errors.Is(err, errNotPolling) {
			t.Fatalf("ReceiveMessage with OnMessage: %v, want errNotPolling", err)
		}
		sc := <-h.conns
		const n = 50
		for i := range n {
			if err := c.SendMessage(0, numbered(i, 3000)); err != nil { // fragmented
				t.Fatal(err)
			}
			if err := c.SendMessage(1, numbered(i, 100)); err != nil {
				t.Fatal(err)
			}
		}
		if err := cli.Close(); err != nil { // lingers until all are acknowledged
			t.Fatal(err)
		}
		if r := <-h.gone; r != ReasonClosed {
			t.Fatalf("the server's connection ended with %v", r)
		}
		got := map[int][][]byte{}
		buf := make([]byte, 3000)
		for {
			ch, k, err := sc.ReceiveMessage(buf)
			if errors.Is(err, ErrClosed) {
				break
			}
			if err != nil {
				t.Fatalf("ReceiveMessage after the end: %v", err)
			}
			got[ch] = append(got[ch], append([]byte(nil), buf[:k]...))
		}
		if len(got[0]) != n {
			t.Fatalf("read %d of %d reliable messages after the end", len(got[0]), n)
		}
		for i, m := range got[0] {
			if string(m) != string(numbered(i, 3000)) {
				t.Fatalf("reliable message %d is another", i)
			}
		}
		// The queue (1 KiB) kept some unreliable ones, dropped the rest.
		if len(got[1]) == 0 || len(got[1]) >= n {
			t.Errorf("read %d of %d unreliable messages; the queue holds 9", len(got[1]), n)
		}
		if _, _, err := sc.ReceiveMessage(buf); !errors.Is(err, ErrClosed) {
			t.Fatalf("ReceiveMessage once read out: %v, want ErrClosed", err)
		}
	})
}

// The message errors are reachable from conn: errors.Is with conn's names.
func TestMessageErrorAliases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		mc := message.Config{Channels: []message.ChannelConfig{{Kind: message.ReliableOrdered, MaxQueued: 4 << 10}}, MaxMessageSize: 2 << 10}
		simListen(t, nw, Config{Messages: mc, Handler: &msgEcho{}})
		cli, err := simDial(t, nw, Config{Messages: mc, Linger: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		c := cli.Conn()
		if err := c.SendMessage(1, []byte("x")); !errors.Is(err, ErrNoChannel) {
			t.Errorf("channel 1: %v, want ErrNoChannel", err)
		}
		if err := c.SendMessage(0, make([]byte, 3<<10)); !errors.Is(err, ErrMessageSize) {
			t.Errorf("3 KiB: %v, want ErrMessageSize", err)
		}
		nw.SetLink(netsim.Link{Loss: 1}) // nothing is acknowledged now
		var full error
		for range 10 {
			if full = c.QueueMessage(0, make([]byte, 1<<10)); full != nil {
				break
			}
		}
		if !errors.Is(full, ErrQueueFull) {
			t.Errorf("a full queue: %v, want ErrQueueFull", full)
		}
		if err := cli.Close(); !errors.Is(err, ErrUndelivered) {
			t.Errorf("Close with messages unacknowledged: %v, want ErrUndelivered", err)
		}
	})
}

// receiveRig is a server with one connection, fed Messages packets by a
// raw peer straight into a receive loop: round sends one packet with a
// reliable and an unreliable message and reads them, with ReceiveMessage
// (poll) or through OnMessage.
func receiveRig(tb testing.TB, poll bool) (round func(), read *int) {
	mc := testChannels
	mc.SendRate = 1 << 30
	cfg := Config{Sockets: 1, Messages: mc, InboundPacketRate: -1}
	var h *countMessages
	if poll {
		cfg.ReceiveQueue = 4 << 10
	} else {
		h = &countMessages{}
		cfg.Handler = h
	}
	s := listen(tb, cfg)
	p := newRawPeer(tb, s, "127.0.0.1:0")
	ck := p.connect()
	sc, ok := s.Conn(p.addr())
	if !ok {
		tb.Fatal("no connection")
	}
	pe, seq, rep, l := msgPeer(tb, s, mc, &ck)
	msg := []byte("chat: a hundred bytes of a reliable message, give or take, for the allocation test!!")
	pos := []byte("position: x 12.5 y 3.25 z 0")
	buf := make([]byte, 256)
	n := new(int)
	if h != nil {
		n = &h.n
	}
	// A clock of 100 µs a round: the peer's pacing, not the CPU, would
	// otherwise set how many rounds its queue takes.
	clock := time.Now()
	round = func() {
		clock = clock.Add(100 * time.Microsecond)
		now := clock
		ns := now.UnixNano()
		if err := pe.Send(0, msg, ns); err != nil {
			tb.Fatal(err)
		}
		if err := pe.Send(1, pos, ns); err != nil {
			tb.Fatal(err)
		}
		sq, ack, bits, _, _ := seq.Send(seconds(now))
		hdr := protocol.ConnHeader{ClientID: p.clientID, Tag: cookie.SessionTag(&ck),
			Seq: sq, Ack: ack, AckBits: bits, Kind: protocol.KindMessages}
		var pl [protocol.MaxDatagramLimit]byte
		k := pe.WritePayload(pl[:s.st.msgPayload], sq, ns)
		pe.PacketSent(ns)
		m := &l.rb.Msgs[0]
		m.N = wire.EncodeConn(m.Buf, s.st.magic, &hdr, pl[:k])
		m.Addr = p.addr()
		l.batch(1, now)
		pe.Acked(sq, ns) // as the server's ack would say
		// The server's ack-only packets, as the peer receives them, so
		// that its Ack field follows the server's sequence.
		if out := &l.sb.Msgs[0]; out.N > 0 {
			var h protocol.ConnHeader
			if _, r := wire.DecodeConn(s.st.magic, out.Buf[:out.N], &h); r == protocol.DropNone {
				seq.Receive(h.Seq, h.Ack, h.AckBits, seconds(now), rep)
			}
			out.N = 0
		}
		for poll {
			_, k, err := sc.ReceiveMessage(buf)
			if err != nil {
				break
			}
			if k == len(msg) || k == len(pos) {
				*n++
			}
		}
	}
	return round, n
}

// countMessages counts the messages OnMessage gets (one receive loop).
type countMessages struct {
	NopHandler
	n int
}

func (c *countMessages) OnMessage(*Conn, int, []byte) { c.n++ }

// Polling allocates nothing per message: a packet with a reliable and an
// unreliable message received, both read with ReceiveMessage.
func TestReceiveMessageAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("the race runtime allocates; run without -race")
	}
	round, read := receiveRig(t, true)
	for range 300 {
		round()
	}
	if n := testing.AllocsPerRun(1000, round); n != 0 {
		t.Errorf("two messages received and polled: %v allocs", n)
	}
	if *read != 2*1301 {
		t.Fatalf("read %d of %d messages", *read, 2*1301)
	}
}

// BenchmarkReceiveMessage is one packet of two messages received and
// read: polled with ReceiveMessage, or taken by OnMessage.
func BenchmarkReceiveMessage(b *testing.B) {
	for _, poll := range []bool{true, false} {
		name := "onmessage"
		if poll {
			name = "poll"
		}
		b.Run(name, func(b *testing.B) {
			round, read := receiveRig(b, poll)
			for range 300 {
				round()
			}
			*read = 0
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				round()
			}
			if *read != 2*b.N {
				b.Fatalf("read %d of %d messages", *read, 2*b.N)
			}
		})
	}
}

// The poll queue's ring against a plain FIFO: random pushes and pops wrap
// around, grow up to the bound (and past it when forced), refuse what
// does not fit, and shrink when emptied far below their size.
func TestPollQueueRing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	q := &pollQueue{max: 16 << 10}
	type rec struct {
		ch   int
		data []byte
	}
	var model []rec
	used := 0
	buf := make([]byte, 70<<10)
	grew, shrank, wrapped, refused := false, false, false, 0
	for i := range 200_000 {
		size := rng.IntN(300)
		if rng.IntN(1000) == 0 {
			size = 40 << 10 // forced past the bound, as at a connection's end
		}
		if rng.IntN(2) == 0 {
			msg := make([]byte, size)
			for j := range msg {
				msg[j] = byte(i + j)
			}
			force := size > q.max
			before := len(q.ring)
			if q.push(i%32, msg, force) {
				model = append(model, rec{i % 32, msg})
				used += pollHeader + size
			} else {
				if used+pollHeader+size <= q.max {
					t.Fatalf("push %d refused with %d of %d bytes used", size, used, q.max)
				}
				refused++
			}
			grew = grew || len(q.ring) > before && before > 0
			wrapped = wrapped || q.head+q.used > len(q.ring)
			continue
		}
		ch, n, ok := q.peek()
		if ok != (len(model) > 0) {
			t.Fatalf("peek ok %v with %d queued", ok, len(model))
		}
		if !ok {
			continue
		}
		if ch != model[0].ch || n != len(model[0].data) {
			t.Fatalf("head is channel %d, %d bytes; want channel %d, %d bytes", ch, n, model[0].ch, len(model[0].data))
		}
		before := len(q.ring)
		q.pop(buf, n)
		if string(buf[:n]) != string(model[0].data) {
			t.Fatalf("message %d bytes differ", n)
		}
		used -= pollHeader + n
		model = model[1:]
		shrank = shrank || len(q.ring) < before
		if q.used != used {
			t.Fatalf("used %d, want %d", q.used, used)
		}
	}
	if !grew || !shrank || !wrapped || refused == 0 {
		t.Fatalf("grew %v, shrank %v, wrapped %v, refused %d: the run missed a case", grew, shrank, wrapped, refused)
	}
}
