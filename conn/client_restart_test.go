package conn

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seqwin"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/internal/wire"
)

// Issue 12 item 1 through a real client socket. The attacker knows only the
// client's and the server's addresses and spoofs RestartHandshakes from the
// server's address. Here the "server" is a scripted one on a loopback socket
// (fastpath's decisions, driven by hand), which sends both the valid
// connection packets and the spoofed RestartHandshakes: from the client's
// side that is exactly a server plus an attacker spoofing its address.

// scriptServer answers the handshake like a server, and on command sends
// valid connection packets or RestartHandshakes to the one client it saw.
type scriptServer struct {
	t   *testing.T
	pc  *net.UDPConn
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

func newScriptServer(t *testing.T) *scriptServer {
	t.Helper()
	pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
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
		n, from, err := s.pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
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
			_, _ = s.pc.WriteToUDPAddrPort(out[:reply], from)
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
	_, _ = s.pc.WriteToUDPAddrPort(b[:n], to)
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
	_, _ = s.pc.WriteToUDPAddrPort(b[:n], to)
}

// dialScript connects a client to s on an injected clock and returns both.
func dialScript(t *testing.T, s *scriptServer) (*Client, *clock) {
	t.Helper()
	clk := &clock{}
	// A long Timeout, so that nothing but the restart rules can end the
	// connection within the test.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, s.addr(), Config{Now: clk.Now, Timeout: time.Hour, KeepAlive: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	<-s.connected
	return c, clk
}

// underAttack sends n rounds of a valid packet followed by a spoofed
// RestartHandshake, the client's clock moving 50 ms per round (so the
// rounds span n/20 s of the client's time), each step waiting until the
// client has dealt with the packet.
func underAttack(t *testing.T, s *scriptServer, c *Client, clk *clock, n int) {
	t.Helper()
	for range n {
		in := c.Conn().Stats().PacketsIn
		s.sendValid()
		conntest.Eventually(t, "valid packet accepted", func() bool { return c.Conn().Stats().PacketsIn > in })
		clk.Advance(50 * time.Millisecond)
		refused := c.Drops()[protocol.DropRestartUnneeded]
		s.sendRestart()
		conntest.Eventually(t, "RestartHandshake refused", func() bool { return c.Drops()[protocol.DropRestartUnneeded] > refused })
	}
}

// TestClientIgnoresSpoofedRestart: a client whose server still reaches it
// refuses every RestartHandshake and keeps its connection.
func TestClientIgnoresSpoofedRestart(t *testing.T) {
	s := newScriptServer(t)
	c, clk := dialScript(t, s)
	underAttack(t, s, c, clk, 100)
	time.Sleep(100 * time.Millisecond) // a few of the client's timer ticks
	if s.restartInitials.Load() != 0 || c.Restarts() != 0 || c.Err() != nil || c.hs.Restarting() {
		t.Fatalf("client restarted under spoofed RestartHandshakes: %d restart Initials, %d restarts, err %v",
			s.restartInitials.Load(), c.Restarts(), c.Err())
	}
}

// TestClientRestartsAfterSilence: when the server falls silent, the
// RestartHandshake is honoured and the connection moves (a client whose
// address changed); the restart is given up at once if the server turns
// out to reach the client after all.
func TestClientRestartsAfterSilence(t *testing.T) {
	s := newScriptServer(t)
	s.migrate = true
	c, clk := dialScript(t, s)
	underAttack(t, s, c, clk, 10)

	// Silence: a restart under way, then a valid packet cancels it.
	s.mu.Lock()
	s.holdRestart = true
	s.mu.Unlock()
	clk.Advance(1600 * time.Millisecond)
	s.sendRestart()
	conntest.Eventually(t, "restart Initial", func() bool { return s.restartInitials.Load() == 1 })
	s.sendValid()
	conntest.Eventually(t, "restart canceled", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.hs.Restarting()
	})
	clk.Advance(1200 * time.Millisecond) // past the Initial resend of a live restart
	time.Sleep(150 * time.Millisecond)
	if got := s.restartInitials.Load(); got != 1 {
		t.Fatalf("%d restart Initials after the cancel, want 1", got)
	}

	// Silence again, and this time the restart runs to its Ack.
	s.mu.Lock()
	s.holdRestart = false
	s.mu.Unlock()
	clk.Advance(1600 * time.Millisecond)
	s.sendRestart()
	conntest.Eventually(t, "restart completed", func() bool { return c.Restarts() == 1 })
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
}

// TestClientRestartDeniedFailsFast: after a server restart with the same
// SessionID, the new server does not know the connection. It answers the
// RestartResponse with Denied(DeniedUnknownConnection), and the client ends
// the connection at once instead of resending for 10 s.
func TestClientRestartDeniedFailsFast(t *testing.T) {
	s := newScriptServer(t)
	c, clk := dialScript(t, s)
	underAttack(t, s, c, clk, 5)
	clk.Advance(1600 * time.Millisecond)
	start := time.Now()
	s.sendRestart()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("connection still open %v after a denied restart (%d RestartResponses)", time.Since(start), s.restartResponses.Load())
	}
	var de *DisconnectedError
	if err := c.Err(); !errors.As(err, &de) || de.Reason != ReasonShutdown || !de.Remote {
		t.Fatalf("Err() = %v, want disconnected by the peer (server shutdown)", err)
	}
	t.Logf("denied restart ended the connection %v after the RestartHandshake", time.Since(start))
	if s.restartResponses.Load() != 1 {
		t.Errorf("%d RestartResponses, want 1", s.restartResponses.Load())
	}
}
