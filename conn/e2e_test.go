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
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/internal/wire"
)

// clock is an injectable clock: real time plus an offset tests advance, so
// timeouts are reached without sleeping through them.
type clock struct{ off atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// recorder is a Handler that records events and echoes Data.
type recorder struct {
	echo bool
	mu   sync.Mutex
	conn []*Conn
	disc map[*Conn]DisconnectReason
	rem  map[*Conn]bool
	pkts [][]byte
	got  chan struct{}
}

func newRecorder(echo bool) *recorder {
	return &recorder{echo: echo, disc: map[*Conn]DisconnectReason{}, rem: map[*Conn]bool{}, got: make(chan struct{}, 1<<16)}
}

func (r *recorder) OnConnect(c *Conn) {
	r.mu.Lock()
	r.conn = append(r.conn, c)
	r.mu.Unlock()
}

func (r *recorder) OnPacket(c *Conn, p []byte) {
	r.mu.Lock()
	r.pkts = append(r.pkts, bytes.Clone(p))
	r.mu.Unlock()
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
	conntest.Eventually(t, fmt.Sprintf("connect #%d", i+1), func() bool { return r.connects() > i })
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conn[i]
}

func (r *recorder) connects() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conn)
}

func listen(t *testing.T, cfg Config) *Server {
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

func TestEcho200Clients(t *testing.T) {
	srv := newRecorder(true)
	s := listen(t, Config{Handler: srv})
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			rec := &clientRecorder{ch: make(chan []byte, 16)}
			c, err := Dial(ctx, s.Addr().String(), Config{Handler: rec, LocalAddr: fmt.Sprintf("127.0.%d.%d:0", 1+i/250, 1+i%250)})
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			for j := range 5 {
				msg := fmt.Sprintf("client %d message %d", i, j)
				// Unreliable transport: resend until the echo comes back.
				for try := 0; ; try++ {
					if _, err := c.Send([]byte(msg)); err != nil {
						errs <- err
						return
					}
					select {
					case p := <-rec.ch:
						if string(p) != msg {
							errs <- fmt.Errorf("client %d: echo %q, want %q", i, p, msg)
							return
						}
					case <-time.After(time.Second):
						if try < 3 {
							continue
						}
						errs <- fmt.Errorf("client %d: no echo for %q", i, msg)
						return
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := srv.connects(); got != n {
		t.Errorf("server saw %d connects, want %d", got, n)
	}
	st := s.Stats()
	if st.Accepted != n {
		t.Errorf("accepted %d", st.Accepted)
	}
}

// rawPeer speaks the protocol by hand, to send what a well-behaved client
// never would.
type rawPeer struct {
	t        *testing.T
	udp      *net.UDPConn
	server   netip.AddrPort
	magic    wire.Magic
	clientID uint8
	netV     uint32
	rnd      wire.Rand
}

func newRawPeer(t *testing.T, s *Server, local string) *rawPeer {
	t.Helper()
	la, _ := net.ResolveUDPAddr("udp", local)
	udp, err := net.ListenUDP("udp", la)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	return &rawPeer{t: t, udp: udp, server: s.Addr(), clientID: 1, netV: s.st.NetworkVersion, rnd: wire.NewRand(9)}
}

func (p *rawPeer) addr() netip.AddrPort { return p.udp.LocalAddr().(*net.UDPAddr).AddrPort() }

func (p *rawPeer) send(b []byte) {
	if _, err := p.udp.WriteToUDPAddrPort(b, p.server); err != nil {
		p.t.Fatal(err)
	}
}

func (p *rawPeer) recv(timeout time.Duration) ([]byte, bool) {
	buf := make([]byte, 2048)
	p.udp.SetReadDeadline(time.Now().Add(timeout))
	n, _, err := p.udp.ReadFromUDPAddrPort(buf)
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

func TestMigration(t *testing.T) {
	rec := newRecorder(true)
	s := listen(t, Config{Handler: rec})
	cr := &clientRecorder{ch: make(chan []byte, 64)}
	c := dial(t, s, Config{Handler: cr})
	if _, err := c.Send([]byte("before")); err != nil {
		t.Fatal(err)
	}
	if p := recvOne(t, cr.ch); string(p) != "before" {
		t.Fatalf("echo %q", p)
	}
	conntest.Eventually(t, "server connection", func() bool { return rec.connects() == 1 })
	serverConn := rec.at(t, 0)
	before := serverConn.Stats()
	oldAddr := c.LocalAddr()
	if err := c.Rebind(); err != nil {
		t.Fatal(err)
	}
	if c.LocalAddr() == oldAddr {
		t.Fatal("rebind kept the port")
	}
	// Keep sending until the migration completes and echoes come back.
	deadline := time.Now().Add(10 * time.Second)
	for c.Restarts() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no migration")
		}
		c.Send([]byte("during"))
		time.Sleep(50 * time.Millisecond)
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
}

func TestDeniedFull(t *testing.T) {
	s := listen(t, Config{MaxClients: 2})
	dial(t, s, Config{})
	dial(t, s, Config{})
	_, err := Dial(context.Background(), s.Addr().String(), Config{})
	var de *DeniedError
	if !errors.As(err, &de) || de.Reason != 1 {
		t.Fatalf("third client: %v, want denied (server full)", err)
	}
	if s.Stats().DeniedFull != 1 {
		t.Fatalf("denied full %d", s.Stats().DeniedFull)
	}
}

func TestDeniedRefused(t *testing.T) {
	s := listen(t, Config{Accept: func(netip.AddrPort) error { return errors.New("banned") }})
	_, err := Dial(context.Background(), s.Addr().String(), Config{})
	var de *DeniedError
	if !errors.As(err, &de) || de.Reason != 2 {
		t.Fatalf("%v, want denied (refused)", err)
	}
	if s.Len() != 0 {
		t.Fatal("refused client got a connection")
	}
}

func TestWrongVersion(t *testing.T) {
	s := listen(t, Config{NetworkVersion: 7})
	_, err := Dial(context.Background(), s.Addr().String(), Config{NetworkVersion: 1})
	var ve *VersionError
	if !errors.As(err, &ve) || ve.ServerNetworkVersion != 7 {
		t.Fatalf("%v, want version error", err)
	}
}

func TestDialTimeout(t *testing.T) {
	// A socket that never answers.
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	clk := &clock{}
	done := make(chan error, 1)
	go func() {
		_, err := Dial(context.Background(), udp.LocalAddr().String(), Config{Now: clk.Now})
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	clk.Advance(11 * time.Second)
	select {
	case err := <-done:
		if !errors.Is(err, ErrTimedOut) {
			t.Fatalf("%v, want ErrTimedOut", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("dial did not time out")
	}
}

func TestSilentClientTimesOut(t *testing.T) {
	clk := &clock{}
	rec := newRecorder(false)
	s := listen(t, Config{Handler: rec, Now: clk.Now})
	p := newRawPeer(t, s, "127.0.0.1:0")
	p.connect()
	conntest.Eventually(t, "connection", func() bool { return s.Len() == 1 })
	clk.Advance(6 * time.Second)
	conntest.Eventually(t, "timeout", func() bool { return s.Len() == 0 })
	r, remote, ok := rec.disconnect(rec.at(t, 0))
	if !ok || r != ReasonTimedOut || remote {
		t.Fatalf("disconnect %v remote %v", r, remote)
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
	if got != TimeoutDisconnectPackets {
		t.Fatalf("got %d Disconnect(3) packets, want %d", got, TimeoutDisconnectPackets)
	}
	if s.Stats().Disconnects[ReasonTimedOut] != 1 {
		t.Fatal("timeout not counted")
	}
}

func TestKeepAliveKeepsConnection(t *testing.T) {
	clk := &clock{}
	s := listen(t, Config{Now: clk.Now})
	c := dial(t, s, Config{Now: clk.Now, SweepInterval: 10 * time.Millisecond})
	for range 20 {
		clk.Advance(500 * time.Millisecond)
		time.Sleep(30 * time.Millisecond)
	}
	// 10 s of clock passed with no Data: keepalives held both ends.
	if s.Len() != 1 || c.Err() != nil {
		t.Fatalf("connections %d, client err %v", s.Len(), c.Err())
	}
}

func TestCleanDisconnect(t *testing.T) {
	t.Run("client closes", func(t *testing.T) {
		rec := newRecorder(false)
		s := listen(t, Config{Handler: rec})
		c := dial(t, s, Config{})
		conntest.Eventually(t, "connect", func() bool { return rec.connects() == 1 })
		c.Close()
		// The count drops before OnDisconnect runs: wait for the latter.
		sc := rec.at(t, 0)
		conntest.Eventually(t, "server sees disconnect", func() bool { _, _, ok := rec.disconnect(sc); return ok })
		if s.Len() != 0 {
			t.Fatalf("%d connections after the disconnect", s.Len())
		}
		r, remote, _ := rec.disconnect(sc)
		if r != ReasonClosed || !remote {
			t.Fatalf("reason %v remote %v", r, remote)
		}
	})
	t.Run("server closes", func(t *testing.T) {
		rec := newRecorder(false)
		s := listen(t, Config{Handler: rec})
		c := dial(t, s, Config{})
		conntest.Eventually(t, "connect", func() bool { return rec.connects() == 1 })
		rec.at(t, 0).Close()
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("client not told")
		}
		var de *DisconnectedError
		if !errors.As(c.Err(), &de) || de.Reason != ReasonClosed || !de.Remote {
			t.Fatalf("client err %v", c.Err())
		}
	})
}

func TestShutdownNotifiesClients(t *testing.T) {
	s := listen(t, Config{})
	var clients []*Client
	for range 5 {
		clients = append(clients, dial(t, s, Config{}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for i, c := range clients {
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("client %d not told of shutdown", i)
		}
		var de *DisconnectedError
		if !errors.As(c.Err(), &de) || de.Reason != ReasonShutdown {
			t.Fatalf("client %d: %v", i, c.Err())
		}
	}
}

func TestRecentlyDisconnectedGetsNoRestart(t *testing.T) {
	s := listen(t, Config{})
	p := newRawPeer(t, s, "127.0.0.1:0")
	ck := p.connect()
	conntest.Eventually(t, "connection", func() bool { return s.Len() == 1 })
	// The client closes; its late packets must not provoke a restart.
	var reason [1]byte
	reason[0] = 1
	p.send(p.connPacket(ck, 0, protocol.KindDisconnect, reason[:]))
	conntest.Eventually(t, "close", func() bool { return s.Len() == 0 })
	p.send(p.connPacket(ck, 1, protocol.KindData, []byte("late")))
	if b, ok := p.recv(300 * time.Millisecond); ok {
		t.Fatalf("got %x after disconnect, want silence", b)
	}
	if s.Stats().Drops[protocol.DropRecentlyDisconnected] == 0 {
		t.Fatal("drop not counted")
	}
	// A stranger at another address does get a RestartHandshake.
	q := newRawPeer(t, s, "127.0.0.1:0")
	q.send(q.connPacket(ck, 2, protocol.KindData, []byte("x")))
	q.expect(protocol.TypeRestartHandshake)
}

func TestRestartedClientReplacesStale(t *testing.T) {
	rec := newRecorder(false)
	s := listen(t, Config{Handler: rec})
	p := newRawPeer(t, s, "127.0.0.1:0")
	p.connect()
	conntest.Eventually(t, "first", func() bool { return rec.connects() == 1 })
	// The same address, a new ClientID: a restarted client.
	p.clientID = 5
	p.connect()
	conntest.Eventually(t, "second", func() bool { return rec.connects() == 2 })
	conntest.Eventually(t, "replaced", func() bool {
		r, _, ok := rec.disconnect(rec.at(t, 0))
		return ok && r == ReasonReplaced
	})
	if s.Len() != 1 {
		t.Fatalf("%d connections, want 1", s.Len())
	}
	if c, ok := s.Conn(p.addr()); !ok || c.ClientID() != 5 {
		t.Fatalf("connection at the address: %v %v", c, ok)
	}
}

func TestMagicAndVersionServer(t *testing.T) {
	s := listen(t, Config{Magic: "1011", NetworkVersion: 7})
	c := dial(t, s, Config{Magic: "1011", NetworkVersion: 7})
	if c.Conn() == nil {
		t.Fatal("no connection")
	}
	_, err := Dial(context.Background(), s.Addr().String(), Config{Magic: "1011", NetworkVersion: 1})
	var ve *VersionError
	if !errors.As(err, &ve) {
		t.Fatalf("%v", err)
	}
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
	s := listen(t, Config{Handler: greeter{}})
	for i := range 20 {
		rec := &clientRecorder{ch: make(chan []byte, 4)}
		c := dial(t, s, Config{Handler: rec, LocalAddr: fmt.Sprintf("127.0.5.%d:0", 1+i)})
		if p := recvOne(t, rec.ch); string(p) != "welcome" {
			t.Fatalf("client %d: first packet %q, want the greeting", i, p)
		}
		c.Close()
	}
}
