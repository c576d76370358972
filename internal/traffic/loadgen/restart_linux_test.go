package loadgen

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seqwin"
	"github.com/udpgate/udpgate/internal/testkit/netem"
	"github.com/udpgate/udpgate/internal/wire"
)

type restartMode int

const (
	// restartComplete: Ack the RestartResponse with the original cookie.
	restartComplete restartMode = iota
	// restartIgnore: never answer it.
	restartIgnore
	// restartDeny: answer Denied(DeniedUnknownConnection), as a server
	// that does not know the connection does.
	restartDeny
	// restartLive: never get that far; with every RestartHandshake send
	// a valid KeepAlive too, as a server that still holds the connection
	// would (the RestartHandshakes are then forgeries to ignore).
	restartLive
	// closeAtAck: send a Disconnect right behind every Ack, as a server
	// shutting down just after promoting the client does.
	closeAtAck
)

// restartServer is a scripted server that speaks just enough of the
// protocol to drive a client through a restart (docs/protocol.md §5–§6): it
// connects every client, and once asked it answers each client's connection
// packets with RestartHandshake until the client restarts. What it does
// with the RestartResponse is its mode.
type restartServer struct {
	t       *testing.T
	pc      *net.UDPConn
	mode    restartMode
	restart atomic.Bool // send RestartHandshakes from now on

	mu      sync.Mutex
	clients map[netip.AddrPort]*restartClient
	// Protocol faults seen in the client's packets.
	faults []string
}

type restartClient struct {
	orig      cookie.Cookie
	clientID  uint8
	seq       seqwin.SeqState // the server's side, for restartLive
	restarted bool
	responses int // RestartResponses seen
}

func listenRestart(t *testing.T, mode restartMode) *restartServer {
	t.Helper()
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &restartServer{t: t, pc: pc, mode: mode, clients: map[netip.AddrPort]*restartClient{}}
	done := make(chan struct{})
	go func() { defer close(done); s.serve() }()
	t.Cleanup(func() { pc.Close(); <-done })
	return s
}

func (s *restartServer) addr() netip.AddrPort { return s.pc.LocalAddr().(*net.UDPAddr).AddrPort() }

func (s *restartServer) fault(f string) {
	s.faults = append(s.faults, f)
}

// cookieFor makes a distinct cookie per address and purpose.
func cookieFor(a netip.AddrPort, which byte) (c cookie.Cookie) {
	b := a.Addr().As4()
	copy(c[:], b[:])
	c[4], c[5], c[6] = byte(a.Port()), byte(a.Port()>>8), which
	return c
}

func (s *restartServer) serve() {
	buf := make([]byte, 2048)
	out := make([]byte, handshake.MaxReplyLen)
	var in protocol.Handshake
	for {
		n, from, err := s.pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		p := buf[:n]
		pre, r := wire.DecodePrefix(wire.Magic{}, p)
		if r != protocol.DropNone {
			continue
		}
		reply := protocol.Handshake{ClientID: pre.ClientID, MinVersion: 3, CurVersion: 4, RandomLen: 8}
		s.mu.Lock()
		c := s.clients[from]
		if !pre.Handshake {
			// A connection packet: the moment to ask for a restart.
			if c == nil || c.restarted || !s.restart.Load() {
				s.mu.Unlock()
				continue
			}
			if s.mode == restartLive {
				s.sendKeepAlive(c, from)
			}
			reply.Type, reply.Restart = protocol.TypeRestartHandshake, true
		} else {
			if wire.DecodeHandshake(wire.Magic{}, p, &in) != protocol.DropNone {
				s.fault("undecodable handshake packet")
				s.mu.Unlock()
				continue
			}
			reply.SentCount = in.SentCount
			switch in.Type {
			case protocol.TypeInitial:
				which := byte(1)
				if in.Restart {
					if c == nil {
						s.fault("restart Initial from an unknown client")
						s.mu.Unlock()
						continue
					}
					which = 2
				}
				reply.Type, reply.Timestamp, reply.Cookie = protocol.TypeChallenge, 1000, cookieFor(from, which)
			case protocol.TypeResponse:
				if in.Cookie != cookieFor(from, 1) {
					s.fault("Response with a cookie not from our Challenge")
				}
				if c == nil {
					c = &restartClient{orig: in.Cookie, clientID: in.ClientID}
					srv, cli := cookie.Sequences(&c.orig)
					c.seq.Init(srv, cli, 0)
					s.clients[from] = c
				}
				reply.Type, reply.SecretID, reply.Timestamp, reply.Cookie = protocol.TypeAck, 1, -1, c.orig
			case protocol.TypeRestartResponse:
				if c == nil || !in.Restart || in.OrigCookie != c.orig || in.Cookie != cookieFor(from, 2) {
					s.fault("RestartResponse without RestartBit or with the wrong cookies")
					s.mu.Unlock()
					continue
				}
				c.responses++
				switch s.mode {
				case restartComplete:
					c.restarted = true
					reply.Type, reply.SecretID, reply.Timestamp, reply.Cookie = protocol.TypeAck, 1, -1, c.orig
				case restartDeny:
					reply.Type, reply.Cookie, reply.Reason = protocol.TypeDenied, in.Cookie, handshake.DeniedUnknownConnection
				case restartIgnore:
					s.mu.Unlock()
					continue
				default:
					s.fault("a RestartResponse in a mode that should never get one")
					s.mu.Unlock()
					continue
				}
			default:
				s.fault("unexpected " + in.Type.String())
				s.mu.Unlock()
				continue
			}
		}
		s.mu.Unlock()
		k := wire.EncodeHandshake(out, wire.Magic{}, &reply)
		s.pc.WriteToUDPAddrPort(out[:k], from)
		if s.mode == closeAtAck && reply.Type == protocol.TypeAck {
			s.mu.Lock()
			s.sendConn(c, from, protocol.KindDisconnect, []byte{protocol.DisconnectShutdown})
			s.mu.Unlock()
		}
	}
}

// sendKeepAlive sends client c a valid KeepAlive on its connection.
func (s *restartServer) sendKeepAlive(c *restartClient, to netip.AddrPort) {
	s.sendConn(c, to, protocol.KindKeepAlive, nil)
}

// sendConn sends client c a valid connection packet of kind k.
func (s *restartServer) sendConn(c *restartClient, to netip.AddrPort, k protocol.Kind, payload []byte) {
	seq, ack, bits, _, _ := c.seq.Send(0)
	h := protocol.ConnHeader{ClientID: c.clientID, Tag: cookie.SessionTag(&c.orig), Seq: seq, Ack: ack, AckBits: bits, Kind: k}
	out := make([]byte, 64)
	n := wire.EncodeConn(out, wire.Magic{}, &h, payload)
	s.pc.WriteToUDPAddrPort(out[:n], to)
}

// runRestart connects clients to s, asks for restarts, runs Data for
// window and returns (and logs) the run's total counters. With until it
// stops as soon as until accepts the counters instead, within restartWait,
// so that a busy machine's pauses do not make the restarts miss a fixed
// window.
func runRestart(t *testing.T, s *restartServer, clients int, window time.Duration, until func(*Counters) bool) Counters {
	t.Helper()
	g := newGen(t, Config{Server: s.addr(), Mode: ModeData, Clients: clients, Sockets: 2,
		LossTimeout: 50 * time.Millisecond, ConnectTimeout: 500 * time.Millisecond, ResendInterval: 200 * time.Millisecond})
	c, err := g.Connect(context.Background())
	if err != nil || c.Connected != clients {
		t.Fatalf("connect: %+v, %v", c, err)
	}
	s.restart.Store(true)
	if until != nil {
		window = restartWait
	}
	r, err := g.Run(context.Background(), RunSpec{Window: window, Until: until})
	if err != nil {
		t.Fatal(err)
	}
	if until != nil && (!r.Stopped || !until(&r.Total)) {
		t.Errorf("not done after %v", restartWait)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.faults {
		t.Error(f)
	}
	t.Logf("%+v", r.Total)
	return r.Total
}

// restartWait bounds a runRestart that waits for the counters.
const restartWait = 20 * time.Second

// The client believes a RestartHandshake only after hearing nothing
// valid from the server for fastpath's RestartSilence (1.5 s by default,
// counted from connecting here), so the windows run past it.

// TestRestart: a connected client told RestartHandshake restarts as
// docs/protocol.md §6 says (restart Initial with RestartBit 1, then a
// RestartResponse whose OrigCookie is its authorised cookie), once, even
// though the server repeats the request for every packet, and goes on
// after the Ack.
func TestRestart(t *testing.T) {
	const clients = 20
	s := listenRestart(t, restartComplete)
	tot := runRestart(t, s, clients, 0, func(c *Counters) bool { return c.Reconnects+c.Ended() >= clients })
	if tot.Restarts != clients || tot.Reconnects != clients || tot.RestartsFailed+tot.RestartsDenied+tot.RestartsCanceled != 0 {
		t.Errorf("restarts %d, reconnects %d, failed %d, denied %d, canceled %d; want %d, %d, 0, 0, 0",
			tot.Restarts, tot.Reconnects, tot.RestartsFailed, tot.RestartsDenied, tot.RestartsCanceled, clients, clients)
	}
	if tot.RestartHandshakes <= clients {
		t.Errorf("%d RestartHandshakes received: the server sent one per Data packet, more than one per client", tot.RestartHandshakes)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for a, c := range s.clients {
		if !c.restarted || c.responses != 1 {
			t.Errorf("%v: restarted %v after %d RestartResponses", a, c.restarted, c.responses)
		}
	}
}

// TestRestartFails: a restart the server never completes times out after
// ConnectTimeout and loses the connection; one it refuses (Denied: it does
// not know the connection) loses it at once. The client then stops.
func TestRestartFails(t *testing.T) {
	const clients = 10
	for _, tc := range []struct {
		name  string
		mode  restartMode
		count func(c *Counters) uint64
		// RestartResponses per client: resent every 200 ms until the
		// 500 ms timeout, or one.
		minResp, maxResp int
	}{
		{"timeout", restartIgnore, func(c *Counters) uint64 { return c.RestartsFailed }, 2, 4},
		{"denied", restartDeny, func(c *Counters) uint64 { return c.RestartsDenied }, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := listenRestart(t, tc.mode)
			tot := runRestart(t, s, clients, 0, func(c *Counters) bool { return c.Ended() >= clients })
			if tot.Restarts != clients || tot.Reconnects != 0 || tc.count(&tot) != clients || tot.Ended() != clients {
				t.Errorf("restarts %d, reconnects %d, lost %d, ended %d; want %d, 0, %d, %d",
					tot.Restarts, tot.Reconnects, tc.count(&tot), tot.Ended(), clients, clients, clients)
			}
			if e := tot.Endings(); len(e) != 1 || e[0].Count != clients {
				t.Errorf("endings %v", e)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			for a, c := range s.clients {
				if c.responses < tc.minResp || c.responses > tc.maxResp {
					t.Errorf("%v: %d RestartResponses, want %d to %d", a, c.responses, tc.minResp, tc.maxResp)
				}
			}
		})
	}
}

// TestRestartIgnoredWhileHeard: RestartHandshakes that arrive while the
// server's own packets keep arriving (forged, as an off-path attacker can,
// issue 12) start no restart.
func TestRestartIgnoredWhileHeard(t *testing.T) {
	const clients = 10
	s := listenRestart(t, restartLive)
	tot := runRestart(t, s, clients, 2200*time.Millisecond, nil)
	if tot.RestartHandshakes == 0 || tot.Restarts != 0 || tot.Ended() != 0 {
		t.Errorf("%d RestartHandshakes made %d restarts and ended %d clients; want some, 0, 0", tot.RestartHandshakes, tot.Restarts, tot.Ended())
	}
	if tot.KeepAlivesIn == 0 || tot.Unexpected != 0 {
		t.Errorf("%d KeepAlives taken, %d unexpected datagrams", tot.KeepAlivesIn, tot.Unexpected)
	}
}

// TestEndReasons: clients denied for a full server, and connections the
// server closes, are counted by reason.
func TestEndReasons(t *testing.T) {
	s, err := conn.Listen("127.0.0.1:0", conn.Config{Handler: echoApp{}, ChallengeRate: -1, Sockets: 1, MaxClients: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := newGen(t, Config{Server: s.Addr(), Mode: ModeData, Clients: 50})
	c, err := g.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c.Connected != 30 || c.Failed != 20 || c.DeniedFull != 20 || c.TimedOut+c.DeniedRefused+c.DeniedOther+c.WrongVersion != 0 {
		t.Fatalf("connect against 30 slots: %+v", c)
	}
	// The server's shutdown tells every connection Disconnect(2).
	s.Close()
	r, err := g.Run(context.Background(), RunSpec{Window: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if tot := g.Counters(); tot.Closed != 30 || tot.ClosedShutdown != 30 || tot.Ended() != 50 {
		t.Errorf("after shutdown: %+v (run %+v)", tot, r.Total)
	}
}

// TestDisconnectBehindAck: a Disconnect that arrives right behind the
// Ack, while the generator is still in its connect phase, ends the client
// (a server shutting down just after promoting it); it is neither lost
// nor left to -duration.
func TestDisconnectBehindAck(t *testing.T) {
	const clients = 16
	s := listenRestart(t, closeAtAck)
	g := newGen(t, Config{Server: s.addr(), Mode: ModeData, Clients: clients, Sockets: 2,
		LossTimeout: 50 * time.Millisecond, ConnectTimeout: 500 * time.Millisecond, ResendInterval: 200 * time.Millisecond})
	c, err := g.Connect(context.Background())
	if err != nil || c.Connected != clients {
		t.Fatalf("connect: %+v, %v", c, err)
	}
	// Disconnects behind the last Acks may arrive after the connect phase
	// ended: a short run takes them. What matters is that none is lost,
	// in whichever phase it arrives.
	if g.Counters().Closed < clients {
		if _, err := g.Run(context.Background(), RunSpec{Window: 100 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	if tot := g.Counters(); tot.Closed != clients || tot.ClosedShutdown != clients || tot.Unexpected != 0 {
		t.Errorf("closed %d (shutdown %d), unexpected %d; want %d, %d, 0",
			tot.Closed, tot.ClosedShutdown, tot.Unexpected, clients, clients)
	}
}

// TestServerSilent: connected clients that hear nothing more from the
// server (gone without a Disconnect, or every Disconnect lost) end after
// the connection timeout (docs/protocol.md §7.5), not before, and not never.
func TestServerSilent(t *testing.T) {
	const clients = 8
	s := listenEcho(t)
	p, err := netem.New(s.Addr(), netem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	g := newGen(t, Config{Server: p.Addr(), Mode: ModeData, Clients: clients, Sockets: 2, Rate: 20, LossTimeout: 50 * time.Millisecond})
	if c, err := g.Connect(context.Background()); err != nil || c.Connected != clients {
		t.Fatalf("connect: %+v, %v", c, err)
	}
	// The path goes dead: nothing reaches the server or comes back.
	p.Close()
	start := time.Now()
	r, err := g.Run(context.Background(), RunSpec{Window: restartWait, Until: func(c *Counters) bool { return c.Ended() >= clients }})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	tot := g.Counters()
	if tot.ServerSilent != clients || tot.Ended() != clients || !r.Stopped || r.Elapsed >= restartWait {
		t.Fatalf("after %v: %d silent, %d ended; want %d, %d, before %v", took, tot.ServerSilent, tot.Ended(), clients, clients, restartWait)
	}
	if took < connTimeout {
		t.Errorf("timed out after %v, before the %v connection timeout", took, connTimeout)
	}
	if e := tot.Endings(); len(e) != 1 || e[0].Count != clients || !strings.Contains(e[0].What, "silent") {
		t.Errorf("endings %v", e)
	}
}
