package conn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/defaults"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/internal/wire"
)

// recorder is a Handler that records events and echoes Data.
type recorder struct {
	echo bool
	mu   sync.Mutex
	conn []*Conn
	disc map[*Conn]DisconnectReason
	rem  map[*Conn]bool
	pkts [][]byte
	got  chan struct{}
	ev   conntest.Signal
}

func newRecorder(echo bool) *recorder {
	return &recorder{echo: echo, disc: map[*Conn]DisconnectReason{}, rem: map[*Conn]bool{},
		got: make(chan struct{}, 1<<16)}
}

// await waits for cond to hold, checking it after each of the handler's
// events, for at most 10 s (virtual inside a synctest bubble).
func (r *recorder) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !r.ev.Await(10*time.Second, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// gone waits for c's OnDisconnect and returns its reason and remote flag.
func (r *recorder) gone(t *testing.T, c *Conn) (DisconnectReason, bool) {
	t.Helper()
	var (
		reason DisconnectReason
		remote bool
	)
	r.await(t, "a disconnect", func() bool {
		var ok bool
		reason, remote, ok = r.disconnect(c)
		return ok
	})
	return reason, remote
}

func (r *recorder) OnConnect(c *Conn) {
	r.mu.Lock()
	r.conn = append(r.conn, c)
	r.mu.Unlock()
	r.ev.Fire()
}

func (r *recorder) OnPacket(c *Conn, p []byte) {
	r.mu.Lock()
	r.pkts = append(r.pkts, bytes.Clone(p))
	r.mu.Unlock()
	r.ev.Fire()
	if r.echo {
		_, _ = c.Send(p)
	}
	r.got <- struct{}{}
}

func (r *recorder) OnDisconnect(c *Conn, reason DisconnectReason, remote bool) {
	r.mu.Lock()
	r.disc[c] = reason
	r.rem[c] = remote
	r.mu.Unlock()
	r.ev.Fire()
}

func (r *recorder) disconnect(c *Conn) (DisconnectReason, bool, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reason, ok := r.disc[c]
	return reason, r.rem[c], ok
}

// at returns the i-th connection seen, waiting for it to arrive.
func (r *recorder) at(t *testing.T, i int) *Conn {
	t.Helper()
	r.await(t, fmt.Sprintf("connect #%d", i+1), func() bool { return r.connects() > i })
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conn[i]
}

func (r *recorder) connects() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conn)
}

func listen(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Sockets == 0 {
		cfg.Sockets = 2
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = 10 * time.Millisecond
	}
	return conntest.Listen(t, Listen, cfg)
}

func dial(t *testing.T, s *Server, cfg Config) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, s.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// clientRecorder collects a client's Data payloads.
type clientRecorder struct {
	NopHandler
	ch chan []byte
}

func (r *clientRecorder) OnPacket(_ *Conn, p []byte) { r.ch <- bytes.Clone(p) }

// ended waits up to d for client c to end and returns why, failing unless
// it was a DisconnectedError.
func ended(t *testing.T, c *Client, what string, d time.Duration) *DisconnectedError {
	t.Helper()
	within(t, what, d, c.Done())
	var de *DisconnectedError
	if !errors.As(c.Err(), &de) {
		t.Fatalf("%s: ended with %v, want a disconnect", what, c.Err())
	}
	return de
}

func recvOne(t *testing.T, ch chan []byte) []byte {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no packet within 5 s")
		return nil
	}
}

// eachClient runs client(i) for each i below n, on a goroutine of its own,
// and reports the errors they return.
func eachClient(t *testing.T, n int, client func(i int) error) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = client(i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestEcho200Clients(t *testing.T) {
	onBoth(t, func(t *testing.T, n *testNet) {
		srv := newRecorder(true)
		s := n.listen(Config{Handler: srv})
		const clients = 200
		eachClient(t, clients, func(i int) error {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			rec := &clientRecorder{ch: make(chan []byte, 16)}
			c, err := Dial(ctx, s.Addr().String(), n.config(Config{Handler: rec, LocalAddr: fmt.Sprintf("127.0.%d.%d:0", 1+i/250, 1+i%250)}))
			if err != nil {
				return err
			}
			defer c.Close()
			for j := range 5 {
				msg := fmt.Sprintf("client %d message %d", i, j)
				// Unreliable transport: resend until the echo comes back.
				for try := 0; ; try++ {
					if _, err := c.Send([]byte(msg)); err != nil {
						return err
					}
					select {
					case p := <-rec.ch:
						if string(p) != msg {
							return fmt.Errorf("client %d: echo %q, want %q", i, p, msg)
						}
					case <-time.After(time.Second):
						if try < 3 {
							continue
						}
						return fmt.Errorf("client %d: no echo for %q", i, msg)
					}
					break
				}
			}
			return nil
		})
		if got := srv.connects(); got != clients {
			t.Errorf("server saw %d connects, want %d", got, clients)
		}
		st := s.Stats()
		if st.Accepted != clients {
			t.Errorf("accepted %d", st.Accepted)
		}
	})
}

// rawPeer speaks the protocol by hand, to send what a well-behaved client
// never would.
type rawPeer struct {
	t        testing.TB
	pc       net.PacketConn
	server   netip.AddrPort
	magic    wire.Magic
	clientID uint8
	netV     uint32
	rnd      wire.Rand
}

func newRawPeer(t testing.TB, s *Server, local string) *rawPeer {
	t.Helper()
	la, _ := net.ResolveUDPAddr("udp", local)
	udp, err := net.ListenUDP("udp", la)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	return &rawPeer{t: t, pc: udp, server: s.Addr(), clientID: 1, netV: s.st.NetworkVersion, rnd: wire.NewRand(9)}
}

func (p *rawPeer) addr() netip.AddrPort { return p.pc.LocalAddr().(*net.UDPAddr).AddrPort() }

func (p *rawPeer) send(b []byte) {
	if _, err := p.pc.WriteTo(b, net.UDPAddrFromAddrPort(p.server)); err != nil {
		p.t.Fatal(err)
	}
}

func (p *rawPeer) recv(timeout time.Duration) ([]byte, bool) {
	buf := make([]byte, 2048)
	p.pc.SetReadDeadline(time.Now().Add(timeout))
	n, _, err := p.pc.ReadFrom(buf)
	if err != nil {
		return nil, false
	}
	return buf[:n], true
}

func (p *rawPeer) handshakePacket(typ protocol.PacketType, mut func(*protocol.Handshake)) []byte {
	h := protocol.Handshake{ClientID: p.clientID, MinVersion: 3, CurVersion: 4, Type: typ,
		NetworkVersion: p.netV, RandomLen: 16}
	p.rnd.Fill(h.Random[:])
	if mut != nil {
		mut(&h)
	}
	b := make([]byte, 128)
	return b[:wire.EncodeHandshake(b, p.magic, &h)]
}

// expect reads until a handshake packet of type typ arrives.
func (p *rawPeer) expect(typ protocol.PacketType) protocol.Handshake {
	p.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		b, ok := p.recv(time.Until(deadline))
		if !ok {
			break
		}
		var h protocol.Handshake
		if wire.DecodeHandshake(p.magic, b, &h) == protocol.DropNone && h.Type == typ {
			return h
		}
	}
	p.t.Fatalf("no %v from the server", typ)
	return protocol.Handshake{}
}

// challenge sends an Initial and returns the Challenge.
func (p *rawPeer) challenge() protocol.Handshake {
	p.send(p.handshakePacket(protocol.TypeInitial, nil))
	return p.expect(protocol.TypeChallenge)
}

func (p *rawPeer) response(ch protocol.Handshake) []byte {
	return p.handshakePacket(protocol.TypeResponse, func(h *protocol.Handshake) {
		h.SessionID, h.SecretID, h.Timestamp, h.Cookie = ch.SessionID, ch.SecretID, ch.Timestamp, ch.Cookie
	})
}

// recorded listens with a recorder (no echo) as the Handler and makes a
// raw peer at 127.0.0.2.
func (n *testNet) recorded() (*recorder, *Server, *rawPeer) {
	rec := newRecorder(false)
	s := n.listen(Config{Handler: rec})
	return rec, s, n.peer(s, "127.0.0.2:0")
}

// connect completes a handshake and returns the authorised cookie.
func (p *rawPeer) connect() cookie.Cookie { return p.handshake().Cookie }

// handshake completes a handshake and returns the Response's SecretId,
// Timestamp and Cookie (the Ack's): what a sealed client's proofs carry.
func (p *rawPeer) handshake() wire.ProofCookie {
	ch := p.challenge()
	p.send(p.response(ch))
	ack := p.expect(protocol.TypeAck)
	if ack.Cookie != ch.Cookie {
		p.t.Fatalf("ack cookie %x, want %x", ack.Cookie, ch.Cookie)
	}
	return wire.ProofCookie{SecretID: ch.SecretID, Timestamp: ch.Timestamp, Cookie: ch.Cookie}
}

func (p *rawPeer) connPacket(ck cookie.Cookie, seq uint16, kind protocol.Kind, payload []byte) []byte {
	_, cs := cookie.Sequences(&ck)
	h := protocol.ConnHeader{ClientID: p.clientID, Tag: cookie.SessionTag(&ck), Seq: (cs + seq) % protocol.SeqModulus,
		Ack: 0, Kind: kind}
	sseq, _ := cookie.Sequences(&ck)
	h.Ack = (sseq + protocol.SeqModulus - 1) % protocol.SeqModulus
	b := make([]byte, 1500)
	return b[:wire.EncodeConn(b, p.magic, &h, payload)]
}

// Rebind moves the client to a new port; the server migrates the same
// connection there, its sequence state continuing. Real sockets too: the
// new port is the kernel's.
func TestMigration(t *testing.T) {
	onBoth(t, func(t *testing.T, n *testNet) {
		rec := newRecorder(true)
		s := n.listen(Config{Handler: rec})
		cr := &clientRecorder{ch: make(chan []byte, 64)}
		c := n.dial(s, Config{Handler: cr})
		if _, err := c.Send([]byte("before")); err != nil {
			t.Fatal(err)
		}
		if p := recvOne(t, cr.ch); string(p) != "before" {
			t.Fatalf("echo %q", p)
		}
		serverConn := rec.at(t, 0)
		before := serverConn.Stats()
		oldAddr := c.LocalAddr()
		if err := c.Rebind(); err != nil {
			t.Fatal(err)
		}
		if c.LocalAddr() == oldAddr {
			t.Fatal("rebind kept the port")
		}
		// Send until an echo comes back to the new port: the first packets
		// from it restart the handshake, which the migration completes.
		for try := 0; ; try++ {
			if try == 100 {
				t.Fatal("no migration")
			}
			c.Send([]byte("during"))
			select {
			case <-cr.ch:
			case <-time.After(50 * time.Millisecond):
				continue
			}
			break
		}
		if c.Restarts() != 1 {
			t.Fatalf("restarts %d, want 1", c.Restarts())
		}
		for len(cr.ch) > 0 {
			<-cr.ch
		}
		if _, err := c.Send([]byte("after")); err != nil {
			t.Fatal(err)
		}
		for p := recvOne(t, cr.ch); string(p) != "after"; p = recvOne(t, cr.ch) {
		}
		if rec.connects() != 1 {
			t.Fatalf("%d connections created, want the same one", rec.connects())
		}
		if got := serverConn.RemoteAddr(); got.Port() != c.LocalAddr().Port() {
			t.Fatalf("server conn at %v, client at %v", got, c.LocalAddr())
		}
		after := serverConn.Stats()
		if after.PacketsIn <= before.PacketsIn || after.PacketsOut <= before.PacketsOut {
			t.Fatalf("sequence state did not continue: %+v then %+v", before, after)
		}
		if s.Stats().Migrations != 1 {
			t.Fatalf("migrations %d", s.Stats().Migrations)
		}
	})
}

func TestDeniedFull(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		s := n.listen(Config{MaxClients: 2})
		n.dial(s, Config{})
		n.dial(s, Config{})
		_, err := n.tryDial(s, Config{})
		var de *DeniedError
		if !errors.As(err, &de) || de.Reason != 1 {
			t.Fatalf("third client: %v, want denied (server full)", err)
		}
		if s.Stats().DeniedFull != 1 {
			t.Fatalf("denied full %d", s.Stats().DeniedFull)
		}
	})
}

func TestDeniedRefused(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		s := n.listen(Config{Accept: func(netip.AddrPort) error { return errors.New("banned") }})
		_, err := n.tryDial(s, Config{})
		var de *DeniedError
		if !errors.As(err, &de) || de.Reason != 2 {
			t.Fatalf("%v, want denied (refused)", err)
		}
		if s.Len() != 0 {
			t.Fatal("refused client got a connection")
		}
	})
}

func TestWrongVersion(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		s := n.listen(Config{NetworkVersion: 7})
		_, err := n.tryDial(s, Config{NetworkVersion: 1})
		var ve *VersionError
		if !errors.As(err, &ve) || ve.ServerNetworkVersion != 7 {
			t.Fatalf("%v, want version error", err)
		}
	})
}

// A Dial to a socket that never answers fails with ErrTimedOut exactly
// defaults.ConnectTimeout after it started.
func TestDialTimeout(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		pc := n.socket()
		start := time.Now()
		_, err := Dial(context.Background(), pc.LocalAddr().String(), n.config(Config{}))
		if !errors.Is(err, ErrTimedOut) {
			t.Fatalf("%v, want ErrTimedOut", err)
		}
		if d := time.Since(start); d != defaults.ConnectTimeout {
			t.Fatalf("Dial failed after %v, want exactly %v", d, defaults.ConnectTimeout)
		}
	})
}

// A client that goes silent after its handshake is timed out exactly
// defaults.Timeout after its last packet (which falls on a sweep slot
// boundary), and told so with timeoutDisconnectPackets Disconnects.
func TestSilentClientTimesOut(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		rec, s, p := n.recorded()
		p.connect()
		last := time.Now() // the Response: the link has no latency
		r, remote := rec.gone(t, rec.at(t, 0))
		if r != ReasonTimedOut || remote {
			t.Fatalf("disconnect %v remote %v", r, remote)
		}
		if d := time.Since(last); d != defaults.Timeout {
			t.Fatalf("timed out %v after the last packet, want exactly %v", d, defaults.Timeout)
		}
		if s.Len() != 0 {
			t.Fatalf("%d connections after the timeout", s.Len())
		}
		// The client is told: Disconnect packets with reason 3.
		got := 0
		for {
			b, ok := p.recv(300 * time.Millisecond)
			if !ok {
				break
			}
			var h protocol.ConnHeader
			if pl, r := wire.DecodeConn(wire.Magic{}, b, &h); r == protocol.DropNone && h.Kind == protocol.KindDisconnect && pl[0] == 3 {
				got++
			}
		}
		if got != timeoutDisconnectPackets {
			t.Fatalf("got %d Disconnect(3) packets, want %d", got, timeoutDisconnectPackets)
		}
		if s.Stats().Disconnects[ReasonTimedOut] != 1 {
			t.Fatal("timeout not counted")
		}
	})
}

// Keepalives hold an idle connection at both ends: 10 s (twice the
// timeout) without Data end nothing.
func TestKeepAliveKeepsConnection(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		rec := newRecorder(false)
		s := n.listen(Config{Handler: rec})
		c := n.dial(s, Config{SweepInterval: 10 * time.Millisecond})
		sc := rec.at(t, 0)
		select {
		case <-c.Done():
			t.Fatalf("the client ended: %v", c.Err())
		case <-time.After(2 * defaults.Timeout):
		}
		if _, _, ok := rec.disconnect(sc); ok || s.Len() != 1 || c.Err() != nil {
			t.Fatalf("connections %d, client err %v", s.Len(), c.Err())
		}
		if st := sc.Stats(); st.PacketsIn < uint64(2*defaults.Timeout/defaults.KeepAlive)-1 {
			t.Fatalf("the server heard %d packets in %v, want keepalives", st.PacketsIn, 2*defaults.Timeout)
		}
	})
}

func TestCleanDisconnect(t *testing.T) {
	t.Run("client closes", func(t *testing.T) {
		onSim(t, func(t *testing.T, n *testNet) {
			rec := newRecorder(false)
			s := n.listen(Config{Handler: rec})
			c := n.dial(s, Config{})
			sc := rec.at(t, 0)
			c.Close()
			r, remote := rec.gone(t, sc)
			if r != ReasonClosed || !remote {
				t.Fatalf("reason %v remote %v", r, remote)
			}
			// The count drops before OnDisconnect runs.
			if s.Len() != 0 {
				t.Fatalf("%d connections after the disconnect", s.Len())
			}
		})
	})
	t.Run("server closes", func(t *testing.T) {
		onSim(t, func(t *testing.T, n *testNet) {
			rec := newRecorder(false)
			c := n.dial(n.listen(Config{Handler: rec}), Config{})
			rec.at(t, 0).Close()
			if de := ended(t, c, "client told", 5*time.Second); de.Reason != ReasonClosed || !de.Remote {
				t.Fatalf("client err %v", c.Err())
			}
		})
	})
}

func TestShutdownNotifiesClients(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		s := n.listen(Config{})
		var clients []*Client
		for i := range 5 {
			clients = append(clients, n.dial(s, Config{LocalAddr: fmt.Sprintf("127.0.0.%d:0", 10+i)}))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		for i, c := range clients {
			if de := ended(t, c, fmt.Sprintf("shutdown notice to client %d", i), 5*time.Second); de.Reason != ReasonShutdown {
				t.Fatalf("client %d: %v", i, c.Err())
			}
		}
	})
}

func TestRecentlyDisconnectedGetsNoRestart(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		rec, s, p := n.recorded()
		ck := p.connect()
		sc := rec.at(t, 0)
		// The client closes; its late packets must not provoke a restart.
		var reason [1]byte
		reason[0] = 1
		p.send(p.connPacket(ck, 0, protocol.KindDisconnect, reason[:]))
		rec.gone(t, sc)
		p.send(p.connPacket(ck, 1, protocol.KindData, []byte("late")))
		if b, ok := p.recv(300 * time.Millisecond); ok {
			t.Fatalf("got %x after disconnect, want silence", b)
		}
		if s.Stats().Drops[protocol.DropRecentlyDisconnected] == 0 {
			t.Fatal("drop not counted")
		}
		// A stranger at another address does get a RestartHandshake.
		q := n.peer(s, "127.0.0.3:0")
		q.send(q.connPacket(ck, 2, protocol.KindData, []byte("x")))
		q.expect(protocol.TypeRestartHandshake)
	})
}

func TestRestartedClientReplacesStale(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		rec, s, p := n.recorded()
		p.connect()
		first := rec.at(t, 0)
		// The same address, a new ClientID: a restarted client, some time
		// later (a handshake at the same instant would get the same cookie).
		p.silent("before the restart")
		p.clientID = 5
		p.connect()
		rec.at(t, 1)
		if r, _ := rec.gone(t, first); r != ReasonReplaced {
			t.Fatalf("the first connection ended with %v, want replaced", r)
		}
		if s.Len() != 1 {
			t.Fatalf("%d connections, want 1", s.Len())
		}
		if c, ok := s.Conn(p.addr()); !ok || c.ClientID() != 5 {
			t.Fatalf("connection at the address: %v %v", c, ok)
		}
	})
}

func TestMagicAndVersionServer(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		s := n.listen(Config{Magic: "1011", NetworkVersion: 7})
		c := n.dial(s, Config{Magic: "1011", NetworkVersion: 7})
		if c.Conn() == nil {
			t.Fatal("no connection")
		}
		_, err := n.tryDial(s, Config{Magic: "1011", NetworkVersion: 1})
		var ve *VersionError
		if !errors.As(err, &ve) {
			t.Fatalf("%v", err)
		}
	})
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Magic: "10x"}, "Magic"},
		{Config{SessionID: 4}, "SessionID"},
		{Config{MaxDatagram: 5000}, "MaxDatagram"},
		{Config{KeepAlive: 10 * time.Second}, "KeepAlive"},
		{Config{Timeout: -1}, "Timeout"},
		{Config{EgressRate: -1}, "EgressRate"},
		{Config{ReceiveQueue: -1, Messages: testChannels}, "ReceiveQueue"},
		{Config{ReceiveQueue: 1 << 10}, "Config.Messages"},
	} {
		_, err := Listen("127.0.0.1:0", tc.cfg)
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	// The port in use names the fix.
	s := listen(t, Config{})
	_, err := Listen(s.Addr().String(), Config{})
	if err == nil {
		t.Fatal("second listen on the same port succeeded")
	}
}

// greeter sends a greeting from OnConnect.
type greeter struct{ NopHandler }

func (greeter) OnConnect(c *Conn) { _, _ = c.Send([]byte("welcome")) }

// A Send from OnConnect reaches the client: promotion answers Ack before it
// tells the Handler, so the greeting never arrives ahead of the Ack (a
// client still handshaking drops connection packets).
func TestGreetingFromOnConnect(t *testing.T) {
	onBoth(t, func(t *testing.T, n *testNet) {
		s := n.listen(Config{Handler: greeter{}})
		for i := range 20 {
			rec := &clientRecorder{ch: make(chan []byte, 4)}
			c := n.dial(s, Config{Handler: rec, LocalAddr: fmt.Sprintf("127.0.5.%d:0", 1+i)})
			if p := recvOne(t, rec.ch); string(p) != "welcome" {
				t.Fatalf("client %d: first packet %q, want the greeting", i, p)
			}
			c.Close()
		}
	})
}

// clock is an injectable clock: real time plus an offset tests advance, for
// the tests on real sockets that need time to jump (the netsim tests use
// synctest's virtual time instead).
type clock struct{ off atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) Advance(d time.Duration) { c.off.Add(int64(d)) }
