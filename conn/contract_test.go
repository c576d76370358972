package conn

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
	"github.com/udpgate/udpgate/netsim"
	"github.com/udpgate/udpgate/token"
)

// Issue 31's silent failures: each test here failed before its fix.

// recordLog is a slog.Handler that keeps every record's level and
// message, and fires sig at each.
type recordLog struct {
	mu   sync.Mutex
	recs []slog.Record
	sig  conntest.Signal
}

func (*recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *recordLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.recs = append(l.recs, r)
	l.mu.Unlock()
	l.sig.Fire()
	return nil
}
func (l *recordLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *recordLog) WithGroup(string) slog.Handler      { return l }

// count returns how many records at level or above contain s.
func (l *recordLog) count(level slog.Level, s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if r.Level >= level && strings.Contains(r.Message, s) {
			n++
		}
	}
	return n
}

// lines returns every record, for failure messages.
func (l *recordLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		out = append(out, r.Level.String()+" "+r.Message)
	}
	return out
}

// TestSimUnhandledMessages: a server configured with channels whose
// Handler has no OnMessage still acknowledges the messages that arrive
// (their sender's reliable channel must not stall), but counts each as
// the message drop unhandled, in Stats and so in the metrics, and says
// so in its log once, however many arrive.
func TestSimUnhandledMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 5 * time.Millisecond})
		logs := &recordLog{}
		s, err := Listen(simServerAddr.String(), Config{Network: nw, Sockets: 2, Logger: slog.New(logs),
			Handler: NopHandler{}, Messages: testChannels})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		cli, err := simDial(t, nw, Config{Messages: testChannels})
		if err != nil {
			t.Fatal(err)
		}
		c := cli.Conn()
		for i := range 3 {
			if err := c.SendMessage(0, []byte("reliable")); err != nil {
				t.Fatal(err)
			}
			if err := c.SendMessage(1, []byte("unreliable")); err != nil {
				t.Fatal(err)
			}
			advance(time.Duration(i+1) * 10 * time.Millisecond)
		}
		advance(time.Second)
		if st := c.MessageStats(); st.InFlight != 0 || st.Acked != 3 {
			t.Errorf("the client's reliable messages: %d in flight, %d acknowledged; want 0 and 3", st.InFlight, st.Acked)
		}
		if got := s.Stats().MessageDrops[message.DropUnhandled]; got != 6 {
			t.Errorf("%d messages counted unhandled, want 6", got)
		}
		if n := logs.count(slog.LevelWarn, "no OnMessage"); n != 1 {
			t.Errorf("%d warnings that the Handler has no OnMessage, want 1; the log:\n%s", n, strings.Join(logs.lines(), "\n"))
		}
	})
}

// TestSealedLateProof: a late proof (the client missed the sealed
// KeepAlive that told it it is in) is answered as docs/protocol.md §11.3
// step 4 says: with a new sealed KeepAlive, the connection's next Counter
// and Seq, not the first one again; and a late proof that comes within
// half the proof resend interval (125 ms) of the connection's last packet
// is counted but gets no reply.
func TestSealedLateProof(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		clk := &clock{}
		s := n.sealed(Config{Now: clk.Now})
		tok := makeToken(t, nil, token.Params{ClientID: 42, ServerAddresses: []netip.AddrPort{s.Addr()}})
		p := n.peer(s, "127.0.0.1:0")
		pc := p.handshake()
		next, rx := rawProofs(t, p.clientID, &pc, tok)
		serverSeq, _ := cookie.Sequences(&pc.Cookie)
		keepAlive := func(what string) (uint64, uint16) {
			t.Helper()
			reply, ok := p.recv(time.Nanosecond)
			if !ok {
				t.Fatalf("no answer to the %s", what)
			}
			var h protocol.ConnHeader
			if _, r := wire.DecodeSealed(wire.Magic{}, reply, &h); r != protocol.DropNone {
				t.Fatalf("answer to the %s: %v", what, r)
			}
			_, ctr, r := wire.OpenConn(wire.Magic{}, reply, &h, rx)
			if r != protocol.DropNone || h.Kind != protocol.KindKeepAlive {
				t.Fatalf("answer to the %s: %v, kind %v", what, r, h.Kind)
			}
			return ctr, h.Seq
		}
		p.send(next())
		if ctr, seq := keepAlive("proof"); ctr != 0 || seq != serverSeq {
			t.Fatalf("the first KeepAlive: counter %d, Seq %d; want 0 and ServerSeq %d", ctr, seq, serverSeq)
		}
		lateProofs := func() uint64 { synctest.Wait(); return s.Stats().Drops[protocol.DropLateProof] }
		before := lateProofs()
		clk.Advance(proofResendInterval/2 - time.Millisecond)
		p.send(next())
		p.silentFor("a late proof 124 ms after the KeepAlive", time.Millisecond)
		if d := lateProofs() - before; d != 1 {
			t.Fatalf("late proofs counted: %d, want 1", d)
		}
		clk.Advance(time.Millisecond)
		p.send(next())
		if ctr, seq := keepAlive("late proof 125 ms after the KeepAlive"); ctr != 1 || seq != (serverSeq+1)%protocol.SeqModulus {
			t.Fatalf("the KeepAlive for the late proof: counter %d, Seq %d; want the next ones, 1 and %d", ctr, seq, (serverSeq+1)%protocol.SeqModulus)
		}
		if d := lateProofs() - before; d != 2 || s.Len() != 1 {
			t.Fatalf("late proofs counted: %d, want 2; connections %d, want 1", d, s.Len())
		}
	})
}

// TestClientLocalAddr: a client that binds no particular address (the
// default) reports the address in use, the one the server holds its
// connection at, not the socket's unspecified "[::]:port". On loopback
// sockets: the answer is the kernel's.
func TestClientLocalAddr(t *testing.T) {
	s := listen(t, Config{})
	cli := dial(t, s, Config{})
	la := cli.LocalAddr()
	if la.Addr().IsUnspecified() || !la.Addr().IsLoopback() {
		t.Fatalf("LocalAddr %v, want the loopback address the client sends from", la)
	}
	if _, ok := s.Conn(la); !ok {
		var at []netip.AddrPort
		s.Range(func(c *Conn) bool { at = append(at, c.RemoteAddr()); return true })
		t.Fatalf("LocalAddr %v, but the server holds the connection at %v", la, at)
	}
}

// TestListenLogsNoInfo: Listen, and the steering switch a load of
// connection packets makes from spreadHold after the start (told to the
// spreader here as the loops would), write nothing at Info or above into
// the application's log on a healthy host (they went to Info, where an
// application's own lines are; now Debug). On loopback sockets: steering
// is the kernel's.
func TestListenLogsNoInfo(t *testing.T) {
	logs := &recordLog{}
	s := listen(t, Config{Logger: slog.New(logs)})
	if s.spread != nil {
		spread := func() bool { return logs.count(slog.LevelDebug, "spread over every socket") > 0 }
		if !loadUntilSpread(s, func(time.Duration) {}, &logs.sig, spread) {
			t.Fatalf("connection packets never spread over every socket:\n%s", strings.Join(logs.lines(), "\n"))
		}
	}
	// Warnings are the host's problems (a kernel that refuses steering);
	// Info lines are what must not be there.
	if n := logs.count(slog.LevelInfo, "") - logs.count(slog.LevelWarn, ""); n != 0 {
		t.Fatalf("Listen logged %d lines at Info:\n%s", n, strings.Join(logs.lines(), "\n"))
	}
}

// TestSimByteCounters: ConnStats' byte counters count message traffic as
// they count Data: the payload bytes of the Messages packets each side
// sent and accepted (they read 0 for messages before). On a loss-free
// path what one side sent is what the other accepted.
func TestSimByteCounters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 5 * time.Millisecond})
		s := simListen(t, nw, Config{Handler: &msgEcho{}, Messages: testChannels})
		got := make(chan struct{}, 16)
		cli, err := simDial(t, nw, Config{Messages: testChannels, Handler: messageFunc(func(*Conn, int, []byte) { got <- struct{}{} })})
		if err != nil {
			t.Fatal(err)
		}
		c := cli.Conn()
		const size, n = 300, 4
		for i := range n {
			if err := c.SendMessage(i%2, make([]byte, size)); err != nil {
				t.Fatal(err)
			}
			advance(20 * time.Millisecond)
		}
		for range n {
			<-got
		}
		advance(time.Second) // the last acks
		sc, ok := s.Conn(cli.LocalAddr())
		if !ok {
			t.Fatal("no server connection at the client's address")
		}
		cs, ss := c.Stats(), sc.Stats()
		if cs.BytesOut < n*size || ss.BytesOut < n*size {
			t.Errorf("bytes out: client %d, server %d; want at least the %d bytes of messages each sent", cs.BytesOut, ss.BytesOut, n*size)
		}
		if cs.BytesOut != ss.BytesIn || ss.BytesOut != cs.BytesIn {
			t.Errorf("client out %d in %d, server out %d in %d: a loss-free path delivers what was sent", cs.BytesOut, cs.BytesIn, ss.BytesOut, ss.BytesIn)
		}
	})
}

// TestSimResentCountsRepairs: on a path that loses nothing, the message
// counters show no resend (Resent 0) however many speculative copies rode
// along (Copies; the issue saw 1,178 "resent" of 1,199 messages on a
// loss-free link); a message whose packet is lost and that no other
// packet carries a copy of is resent, and counted so.
func TestSimResentCountsRepairs(t *testing.T) {
	t.Run("loss-free", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			nw := netsim.New()
			nw.SetLink(netsim.Link{Latency: 25 * time.Millisecond, Jitter: 2 * time.Millisecond, Seed: 3})
			simListen(t, nw, Config{Handler: &msgEcho{}, Messages: testChannels})
			const n = 300
			got := make(chan struct{}, n)
			cli, err := simDial(t, nw, Config{Messages: testChannels, Handler: messageFunc(func(*Conn, int, []byte) { got <- struct{}{} })})
			if err != nil {
				t.Fatal(err)
			}
			c := cli.Conn()
			tk := time.NewTicker(time.Second / 60)
			for i := range n {
				<-tk.C
				if err := c.SendMessage(0, stamped(i, time.Now(), 100)); err != nil {
					t.Fatal(err)
				}
			}
			tk.Stop()
			for range n {
				<-got
			}
			if st := c.MessageStats(); st.Resent != 0 || st.Copies == 0 {
				t.Errorf("%d messages over a loss-free path: resent %d, copies %d; want no resend, and the copies counted apart", n, st.Resent, st.Copies)
			}
		})
	})
	t.Run("one-lost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			nw := netsim.New()
			nw.SetLink(netsim.Link{Latency: 25 * time.Millisecond})
			var dropped atomic.Bool // Drop runs on every sender's goroutine
			nw.Drop = func(_, to netip.AddrPort, p []byte) bool {
				var h protocol.ConnHeader
				if to != simServerAddr || dropped.Load() {
					return false
				}
				if _, r := wire.DecodeConn(wire.Magic{}, p, &h); r == protocol.DropNone && h.Kind == protocol.KindMessages {
					return dropped.CompareAndSwap(false, true)
				}
				return false
			}
			simListen(t, nw, Config{Handler: &msgEcho{}, Messages: testChannels})
			got := make(chan struct{}, 1)
			cli, err := simDial(t, nw, Config{Messages: testChannels, Handler: messageFunc(func(*Conn, int, []byte) { got <- struct{}{} })})
			if err != nil {
				t.Fatal(err)
			}
			c := cli.Conn()
			if err := c.SendMessage(0, []byte("lost once")); err != nil {
				t.Fatal(err)
			}
			<-got
			if st := c.MessageStats(); st.Resent != 1 || st.Copies != 0 {
				t.Errorf("a message whose only packet was lost: resent %d, copies %d; want 1 and 0", st.Resent, st.Copies)
			}
		})
	})
}

// closeOnConnect closes each connection as soon as it connects.
type closeOnConnect struct{ NopHandler }

func (closeOnConnect) OnConnect(c *Conn) { go c.Close() }

// connectCounter counts OnConnect calls.
type connectCounter struct {
	NopHandler
	n atomic.Int32
}

func (h *connectCounter) OnConnect(*Conn) { h.n.Add(1) }

// TestSimSealedFirstPacketDisconnect: a sealed client whose first sealed
// packet from the server is a Disconnect (the KeepAlive that said it was
// in was lost, and the server closed the connection at once) is not
// connected: Dial fails with the Disconnect's reason, and the client's
// Handler never hears of a connection.
func TestSimSealedFirstPacketDisconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw, _ := simSealed(t, 10*time.Millisecond, Config{Handler: closeOnConnect{}, PublicAddresses: []netip.AddrPort{simServerAddr}})
		var dropped atomic.Bool
		nw.Drop = func(from, _ netip.AddrPort, p []byte) bool {
			pr, r := wire.DecodePrefix(wire.Magic{}, p)
			return from == simServerAddr && r == protocol.DropNone && !pr.Handshake && dropped.CompareAndSwap(false, true)
		}
		h := &connectCounter{}
		tok := makeToken(t, nil, token.Params{ServerAddresses: []netip.AddrPort{simServerAddr}})
		cli, err := simDial(t, nw, Config{Token: tok, Handler: h})
		var de *DisconnectedError
		if cli != nil || !errors.As(err, &de) || de.Reason != ReasonClosed || !de.Remote {
			t.Fatalf("Dial: client %v, error %v; want a *DisconnectedError, closed by the peer", cli != nil, err)
		}
		if !dropped.Load() || h.n.Load() != 0 {
			t.Fatalf("KeepAlive dropped %v, OnConnect called %d times; want true and 0", dropped.Load(), h.n.Load())
		}
	})
}
