package conn

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seqwin"
	"github.com/udpgate/udpgate/internal/wire"
)

// Issue 12 item 1 through a client. The attacker knows only the client's and
// the server's addresses and spoofs RestartHandshakes from the server's
// address. Here the "server" is a scripted one on the simulated network
// (fastpath's decisions, driven by hand), which sends both the valid
// connection packets and the spoofed RestartHandshakes: from the client's
// side that is exactly a server plus an attacker spoofing its address.

// scriptServer answers the handshake like a server, and on command sends
// valid connection packets or RestartHandshakes to the one client it saw.
type scriptServer struct {
	t   *testing.T
	pc  net.PacketConn
	fp  *handshake.Server
	cfg *handshake.ServerConfig

	mu       sync.Mutex
	client   netip.AddrPort
	clientID uint8
	ck       cookie.Cookie
	seq      seqwin.SeqState
	rnd      wire.Rand
	// migrate answers a RestartResponse: Ack (the connection moves) or,
	// when false, Denied(DeniedUnknownConnection), a server that
	// restarted and does not know the connection.
	migrate bool
	// holdRestart leaves restart Initials unanswered.
	holdRestart bool

	restartInitials  atomic.Int64
	restartResponses atomic.Int64
	connected        chan struct{}
}

func newScriptServer(t *testing.T, n *testNet) *scriptServer {
	t.Helper()
	pc := n.socket()
	sec, err := cookie.NewSecrets(seconds(time.Now()), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &scriptServer{t: t, pc: pc, rnd: wire.NewRand(7), connected: make(chan struct{})}
	s.fp = handshake.NewServer(handshake.ServerConfig{SessionID: 2}, sec, 5, seconds(time.Now()))
	s.cfg = s.fp.Config()
	done := make(chan struct{})
	go s.serve(done)
	t.Cleanup(func() { pc.Close(); <-done })
	return s
}

func (s *scriptServer) addr() string { return s.pc.LocalAddr().String() }

func (s *scriptServer) serve(done chan struct{}) {
	defer close(done)
	buf := make([]byte, 2048)
	out := make([]byte, handshake.MaxReplyLen)
	var d handshake.Decision
	var peer handshake.Peer
	for {
		n, a, err := s.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		from := a.(*net.UDPAddr).AddrPort()
		pkt := buf[:n]
		var h protocol.Handshake
		if wire.DecodeHandshake(s.cfg.Magic, pkt, &h) != protocol.DropNone {
			continue // the client's connection packets: not needed here
		}
		if h.Type == protocol.TypeInitial && h.Restart {
			s.restartInitials.Add(1)
			s.mu.Lock()
			hold := s.holdRestart
			s.mu.Unlock()
			if hold {
				continue
			}
		}
		now := seconds(time.Now())
		s.fp.Handle(&d, from, pkt, now, &peer, out)
		reply := 0
		s.mu.Lock()
		switch d.Action {
		case handshake.ActReply:
			reply = d.ReplyLen
		case handshake.ActPromote:
			s.client, s.clientID, s.ck = from, d.To.ClientID, d.Cookie
			sseq, cseq := cookie.Sequences(&s.ck)
			s.seq.Init(sseq, cseq, now)
			reply = s.cfg.BuildAck(out, &d.To, &s.ck, &s.rnd)
		case handshake.ActMigrate:
			s.restartResponses.Add(1)
			if s.migrate && d.OrigCookie == s.ck {
				s.client = from
				reply = s.cfg.BuildAck(out, &d.To, &s.ck, &s.rnd)
			} else {
				reply = s.cfg.BuildDenied(out, &d.To, handshake.DeniedUnknownConnection, &d.Cookie, &s.rnd)
			}
		}
		promoted := d.Action == handshake.ActPromote
		s.mu.Unlock()
		if reply > 0 {
			_, _ = s.pc.WriteTo(out[:reply], net.UDPAddrFromAddrPort(from))
		}
		if promoted {
			close(s.connected)
		}
	}
}

// sendValid sends the client one valid KeepAlive: right session, ClientID,
// tag and sequence numbers.
func (s *scriptServer) sendValid() {
	s.mu.Lock()
	seq, ack, bits, _, _ := s.seq.Send(seconds(time.Now()))
	h := protocol.ConnHeader{SessionID: s.cfg.SessionID, ClientID: s.clientID, Tag: cookie.SessionTag(&s.ck),
		Seq: seq, Ack: ack, AckBits: bits, Kind: protocol.KindKeepAlive}
	b := make([]byte, 64)
	n := wire.EncodeConn(b, s.cfg.Magic, &h, nil)
	to := s.client
	s.mu.Unlock()
	_, _ = s.pc.WriteTo(b[:n], net.UDPAddrFromAddrPort(to))
}

// sendRestart sends the client a RestartHandshake, as an attacker spoofing
// the server's address would: it needs only the ClientID (3 bits, or one
// packet per value).
func (s *scriptServer) sendRestart() {
	s.mu.Lock()
	h := protocol.Handshake{SessionID: s.cfg.SessionID, ClientID: s.clientID, Restart: true,
		MinVersion: 3, CurVersion: 4, Type: protocol.TypeRestartHandshake, RandomLen: 8}
	to := s.client
	s.mu.Unlock()
	b := make([]byte, 64)
	n := wire.EncodeHandshake(b, s.cfg.Magic, &h)
	_, _ = s.pc.WriteTo(b[:n], net.UDPAddrFromAddrPort(to))
}

// restartAfterSilence falls silent for longer than the client's
// RestartSilence, then sends it a RestartHandshake and lets the client act;
// hold leaves the client's restart Initials unanswered.
func (s *scriptServer) restartAfterSilence(hold bool) {
	s.mu.Lock()
	s.holdRestart = hold
	s.mu.Unlock()
	advance(1600 * time.Millisecond)
	s.sendRestart()
	synctest.Wait()
}

// dialScript connects a client to s.
func dialScript(t *testing.T, n *testNet, s *scriptServer) *Client {
	t.Helper()
	// A long Timeout, so that nothing but the restart rules can end the
	// connection within the test.
	c, err := Dial(context.Background(), s.addr(), n.config(Config{Timeout: time.Hour, KeepAlive: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	<-s.connected
	return c
}

// underAttack sends n rounds of a valid packet followed by a spoofed
// RestartHandshake, 50 ms apart (so the rounds span n/20 s), checking
// after each packet that the client has dealt with it.
func underAttack(t *testing.T, s *scriptServer, c *Client, n int) {
	t.Helper()
	for range n {
		in := c.Conn().Stats().PacketsIn
		s.sendValid()
		synctest.Wait()
		if c.Conn().Stats().PacketsIn != in+1 {
			t.Fatal("valid packet not accepted")
		}
		advance(50 * time.Millisecond)
		refused := c.Drops()[protocol.DropRestartUnneeded]
		s.sendRestart()
		synctest.Wait()
		if c.Drops()[protocol.DropRestartUnneeded] != refused+1 {
			t.Fatal("RestartHandshake not refused")
		}
	}
}

// restarting reports whether c has a restart under way.
func restarting(c *Client) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hs.Restarting()
}

// TestClientIgnoresSpoofedRestart: a client whose server still reaches it
// refuses every RestartHandshake and keeps its connection.
func TestClientIgnoresSpoofedRestart(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		s := newScriptServer(t, n)
		c := dialScript(t, n, s)
		underAttack(t, s, c, 100)
		advance(100 * time.Millisecond) // a few of the client's timer ticks
		if s.restartInitials.Load() != 0 || c.Restarts() != 0 || c.Err() != nil || restarting(c) {
			t.Fatalf("client restarted under spoofed RestartHandshakes: %d restart Initials, %d restarts, err %v",
				s.restartInitials.Load(), c.Restarts(), c.Err())
		}
	})
}

// TestClientRestartsAfterSilence: when the server falls silent, the
// RestartHandshake is honoured and the connection moves (a client whose
// address changed); the restart is given up at once if the server turns
// out to reach the client after all.
func TestClientRestartsAfterSilence(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		s := newScriptServer(t, n)
		s.migrate = true
		c := dialScript(t, n, s)
		underAttack(t, s, c, 10)

		// Silence: the attack's last RestartHandshake, refused 50 ms after
		// the server's last packet, is honoured once the silence reaches
		// 1.5 s (docs/protocol.md §6.4), with no other RestartHandshake:
		// a restart under way, then a valid packet cancels it.
		s.mu.Lock()
		s.holdRestart = true
		s.mu.Unlock()
		advance(1450*time.Millisecond - time.Nanosecond)
		if got := s.restartInitials.Load(); got != 0 || restarting(c) {
			t.Fatalf("%d restart Initials before 1.5 s of silence, want 0", got)
		}
		advance(time.Nanosecond) // the client's 50 ms tick, 1.5 s after the last packet
		synctest.Wait()
		if got := s.restartInitials.Load(); got != 1 || !restarting(c) {
			t.Fatalf("%d restart Initials 1.5 s after the server's last packet, want 1 and a restart under way", got)
		}
		advance(10 * time.Millisecond) // a packet sent after the restart began
		s.sendValid()
		advance(50 * time.Millisecond) // the client's next tick acts on it
		if restarting(c) {
			t.Fatal("a valid packet did not cancel the restart")
		}
		advance(1200 * time.Millisecond) // past the Initial resend of a live restart
		if got := s.restartInitials.Load(); got != 1 {
			t.Fatalf("%d restart Initials after the cancel, want 1", got)
		}

		// Silence again, and this time the restart runs to its Ack.
		s.restartAfterSilence(false)
		if c.Restarts() != 1 {
			t.Fatalf("restarts %d, want 1", c.Restarts())
		}
		if c.Err() != nil {
			t.Fatal(c.Err())
		}
	})
}

// TestClientRestartDeniedFailsFast: after a server restart with the same
// SessionID, the new server does not know the connection. It answers the
// RestartResponse with Denied(DeniedUnknownConnection), and the client ends
// the connection at once (no link latency: at the same instant) instead of
// resending for 10 s.
func TestClientRestartDeniedFailsFast(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		s := newScriptServer(t, n)
		c := dialScript(t, n, s)
		underAttack(t, s, c, 5)
		advance(1600 * time.Millisecond)
		start := time.Now()
		s.sendRestart()
		de := ended(t, c, "end of the connection", 5*time.Second)
		if d := time.Since(start); d != 0 {
			t.Fatalf("a denied restart ended the connection %v after the RestartHandshake, want at once", d)
		}
		if de.Reason != ReasonShutdown || !de.Remote {
			t.Fatalf("Err() = %v, want disconnected by the peer (server shutdown)", c.Err())
		}
		if s.restartResponses.Load() != 1 {
			t.Errorf("%d RestartResponses, want 1", s.restartResponses.Load())
		}
	})
}
