package conn

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"sync"

	"github.com/udpgate/udpgate/internal/defaults"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

// Attacks from outside (issue 12), each against a real server, on the
// simulated network in virtual time: the rules under test are the
// server's, not the kernel's.

// A Response captured on the path and replayed after its connection closed
// must not create a connection again: the server remembers spent cookies
// for longer than a cookie lives.
func TestReplayedResponseAfterClose(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		rec := newRecorder(false)
		s := n.listen(Config{Handler: rec})
		p := n.peer(s, "127.0.0.1:0")
		ch := p.challenge()
		resp := p.response(ch)
		p.send(resp)
		ck := p.expect(protocol.TypeAck).Cookie
		sc := rec.at(t, 0)
		p.send(p.connPacket(ck, 0, protocol.KindDisconnect, []byte{1}))
		rec.gone(t, sc)

		for _, after := range []time.Duration{3 * time.Second, 17 * time.Second} {
			// 3 s, then 20 s after the Challenge.
			p.silentFor("a closed connection", after-200*time.Millisecond)
			before := s.Stats().Drops[protocol.DropReplayedCookie]
			p.send(resp)
			p.silent(fmt.Sprintf("Response replayed %v later", after))
			if s.Stats().Drops[protocol.DropReplayedCookie] != before+1 {
				t.Fatal("replay not counted")
			}
			if s.Len() != 0 || rec.connects() != 1 {
				t.Fatalf("replay made a connection: %d open, %d made", s.Len(), rec.connects())
			}
		}
		// The same client with a fresh handshake gets in.
		p.silentFor("a closed connection", time.Second)
		p.connect()
		rec.at(t, 1)
		if s.Len() != 1 {
			t.Fatalf("%d connections after the reconnect", s.Len())
		}
	})
}

// A restarted client's new connection (another ClientID) must not be
// replaced by a replay of its older Response.
func TestOlderResponseDoesNotReplace(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		rec := newRecorder(false)
		s := n.listen(Config{Handler: rec})
		p := n.peer(s, "127.0.0.1:0")
		old := p.response(p.challenge())
		p.send(old)
		p.expect(protocol.TypeAck)
		p.silentFor("a new connection", 500*time.Millisecond)
		p.clientID = 2 // the client restarts
		p.connect()
		current := rec.at(t, 1)

		p.send(old)
		p.silent("older Response")
		if c, ok := s.Conn(p.addr()); !ok || c != current || current.closed.Load() {
			t.Fatal("a replayed older Response replaced the current connection")
		}
		if s.Stats().Drops[protocol.DropReplayedCookie] == 0 {
			t.Fatal("replay not counted")
		}
	})
}

// One IP, and one /24, hold at most MaxClientsPerIP and
// MaxClientsPerPrefix connections; the rest are told Denied(3).
func TestAddressLimits(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		rec := newRecorder(false)
		s := n.listen(Config{Handler: rec, MaxClientsPerIP: 3, MaxClientsPerPrefix: 5})
		var peers []*rawPeer
		connect := func(ip string) (*rawPeer, protocol.Handshake) {
			p := n.peer(s, ip+":0")
			p.send(p.response(p.challenge()))
			b, ok := p.recv(2 * time.Second)
			if !ok {
				t.Fatalf("%s: no answer", ip)
			}
			var h protocol.Handshake
			if r := wire.DecodeHandshake(p.magic, b, &h); r != protocol.DropNone {
				t.Fatal(r)
			}
			return p, h
		}
		for i := range 3 {
			p, h := connect("127.0.0.1")
			if h.Type != protocol.TypeAck {
				t.Fatalf("client %d: %v, want Ack", i, h.Type)
			}
			peers = append(peers, p)
		}
		if _, h := connect("127.0.0.1"); h.Type != protocol.TypeDenied || h.Reason != protocol.DeniedAddressLimit {
			t.Fatalf("4th from one IP: %v reason %d, want Denied(3)", h.Type, h.Reason)
		}
		for _, ip := range []string{"127.0.0.2", "127.0.0.2"} {
			if _, h := connect(ip); h.Type != protocol.TypeAck {
				t.Fatalf("%s: %v, want Ack", ip, h.Type)
			}
		}
		if _, h := connect("127.0.0.3"); h.Type != protocol.TypeDenied || h.Reason != protocol.DeniedAddressLimit {
			t.Fatalf("6th from one /24: %v, want Denied(3)", h.Type)
		}
		if _, h := connect("127.0.1.1"); h.Type != protocol.TypeAck {
			t.Fatalf("another /24: %v, want Ack", h.Type)
		}
		if got := s.Stats().DeniedAddressLimit; got != 2 {
			t.Fatalf("DeniedAddressLimit %d, want 2", got)
		}
		// A slot freed is a slot to take.
		p := peers[0]
		c, _ := s.Conn(p.addr())
		c.Close()
		rec.gone(t, c)
		if s.Len() != 5 {
			t.Fatalf("%d connections after a close, want 5", s.Len())
		}
		if _, h := connect("127.0.0.1"); h.Type != protocol.TypeAck {
			t.Fatalf("after a close: %v, want Ack", h.Type)
		}
	})
}

// With the defaults, one IP takes defaults.MaxClientsPerIP slots and no more.
func TestSlotsOneIPCanTake(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		// Challenges per IP are limited too (a test of their own): not here.
		s := n.listen(Config{ChallengeRatePerIP: -1, ChallengeRatePerPrefix: -1})
		for range defaults.MaxClientsPerIP + 20 {
			// Every peer keeps its socket, so no two share a port.
			p := n.peer(s, "127.0.0.1:0")
			p.send(p.response(p.challenge()))
			if _, ok := p.recv(2 * time.Second); !ok {
				t.Fatal("no answer")
			}
		}
		taken := s.Len()
		t.Logf("slots one IP can take with the defaults: %d of %d tried", taken, defaults.MaxClientsPerIP+20)
		if taken != defaults.MaxClientsPerIP {
			t.Fatalf("one IP took %d slots, want %d", taken, defaults.MaxClientsPerIP)
		}
	})
}

// A client that proves its address and then says nothing is sent little
// more than it sent: one KeepAlive and one Disconnect after the Ack.
func TestSilentClientCostsLittle(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		s := n.listen(Config{})
		p := n.peer(s, "127.0.0.1:0")
		init := p.handshakePacket(protocol.TypeInitial, nil)
		p.send(init)
		ch := p.expect(protocol.TypeChallenge)
		resp := p.response(ch)
		p.send(resp)
		p.expect(protocol.TypeAck)
		sent := len(init) + len(resp)
		received := 2 * len(resp) // Challenge and Ack are no larger than their requests
		// Everything the server sends until it has been silent for longer
		// than the connection's Timeout.
		for {
			b, ok := p.recv(defaults.Timeout + time.Second)
			if !ok {
				break
			}
			received += len(b)
		}
		if s.Len() != 0 {
			t.Fatal("the silent client did not time out")
		}
		t.Logf("silent client: sent %d bytes, received %d (%.2fx)", sent, received, float64(received)/float64(sent))
		if float64(received) > 1.5*float64(sent) {
			t.Fatalf("a silent client was sent %d bytes for its %d", received, sent)
		}
	})
}

// A storm: every client sends its Initial, then its Response, at once. No
// proven client may be refused for want of a worker, none needs a resend.
func TestStormPromotesEveryone(t *testing.T) {
	onBoth(t, func(t *testing.T, nt *testNet) {
		n := 1000
		if raceBuild {
			n = 300
		}
		s := nt.listen(Config{MaxClientsPerIP: -1, MaxClientsPerPrefix: -1, ChallengeRate: -1,
			PromotionWorkers: 2})
		peers := make([]*rawPeer, n)
		for i := range peers {
			peers[i] = nt.peer(s, fmt.Sprintf("127.0.%d.%d:0", 1+i/200, 1+i%200))
		}
		inits := make([][]byte, n)
		for i, p := range peers {
			inits[i] = p.handshakePacket(protocol.TypeInitial, nil)
		}
		for i, p := range peers {
			p.send(inits[i])
		}
		resps := make([][]byte, n)
		for i, p := range peers {
			resps[i] = p.response(p.expect(protocol.TypeChallenge))
		}
		for i, p := range peers {
			p.send(resps[i])
		}
		for _, p := range peers {
			p.expect(protocol.TypeAck)
		}
		// A connection is in the table before its Ack is sent.
		if s.Len() != n {
			t.Fatalf("%d connections after %d Acks", s.Len(), n)
		}
		if st := s.Stats(); st.PromotionRejected != 0 || st.Drops[protocol.DropPromotionFull] != 0 {
			t.Fatalf("promotion refused %d clients", st.PromotionRejected)
		}
	})
}

// Drain: connected clients stay served, new ones are told the server is
// full.
func TestDrain(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		s := n.listen(Config{Handler: newRecorder(true)})
		cr := &clientRecorder{ch: make(chan []byte, 8)}
		c := n.dial(s, Config{Handler: cr})
		s.Drain()
		if !s.Draining() {
			t.Fatal("not draining")
		}
		_, err := n.tryDial(s, Config{})
		var de *DeniedError
		if !errors.As(err, &de) || de.Reason != protocol.DeniedServerFull {
			t.Fatalf("new client while draining: %v, want Denied(server full)", err)
		}
		if _, err := c.Send([]byte("still here")); err != nil {
			t.Fatal(err)
		}
		if p := recvOne(t, cr.ch); string(p) != "still here" {
			t.Fatalf("echo %q", p)
		}
	})
}

func TestSetMaxClientsLive(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		s := n.listen(Config{MaxClients: 1})
		n.dial(s, Config{})
		if _, err := n.tryDial(s, Config{}); err == nil {
			t.Fatal("second client admitted at MaxClients 1")
		}
		if err := s.SetMaxClients(0); err == nil {
			t.Fatal("MaxClients 0 accepted")
		}
		if err := s.SetMaxClients(2); err != nil {
			t.Fatal(err)
		}
		n.dial(s, Config{})
		if s.Len() != 2 || s.MaxClients() != 2 {
			t.Fatalf("%d connections, max %d", s.Len(), s.MaxClients())
		}
	})
}

// SetChallengeRate reaches every loop before its next batch.
func TestSetChallengeRateLive(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		s := n.listen(Config{ChallengeRate: 1, ChallengeBurst: 1})
		p := n.peer(s, "127.0.0.1:0")
		count := func() int {
			for range 5 {
				p.send(p.handshakePacket(protocol.TypeInitial, nil))
			}
			got := 0
			for {
				if _, ok := p.recv(150 * time.Millisecond); !ok {
					return got
				}
				got++
			}
		}
		if got := count(); got != 1 {
			t.Fatalf("%d Challenges at burst 1", got)
		}
		if err := s.SetChallengeRate(-1, 0); err != nil {
			t.Fatal(err)
		}
		if got := count(); got != 5 {
			t.Fatalf("%d Challenges with no limit, want 5", got)
		}
		if err := s.SetChallengeRate(10, -1); err == nil {
			t.Fatal("negative burst accepted")
		}
	})
}

func TestHealthy(t *testing.T) {
	s := listen(t, Config{})
	if err := s.Healthy(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s.Healthy() == nil {
		t.Fatal("healthy after Close")
	}
}

// collect counts the handshake replies of type typ that reached peers on
// the simulated network: a read times out only once the server, like every
// goroutine of the bubble, has nothing left to do.
func collect(peers []*rawPeer, typ protocol.PacketType) int {
	got := 0
	for _, p := range peers {
		for {
			b, ok := p.recv(time.Millisecond)
			if !ok {
				break
			}
			var h protocol.Handshake
			if wire.DecodeHandshake(p.magic, b, &h) == protocol.DropNone && h.Type == typ {
				got++
			}
		}
	}
	return got
}

// A spoofer aiming 1,000 ports of one host at the server draws at most the
// host's Challenge budget toward it, not 1,000 ports' worth.
func TestChallengesTowardOneHost(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		s := n.listen(Config{})
		peers := make([]*rawPeer, 1000)
		for i := range peers {
			peers[i] = n.peer(s, "127.0.0.9:0")
		}
		start := time.Now()
		for range 5 {
			for _, p := range peers {
				p.send(p.handshakePacket(protocol.TypeInitial, nil))
			}
		}
		synctest.Wait() // the server has answered every Initial
		elapsed := time.Since(start).Seconds()
		got := collect(peers, protocol.TypeChallenge)
		// Burst 128, then 64/s, whichever loops the ports land on.
		limit := 2*handshake.DefaultChallengeIPRate + handshake.DefaultChallengeIPRate*elapsed
		t.Logf("Challenges toward one host from 1,000 ports: %d for %d Initials in %.2f s (budget %d/s, burst %d)",
			got, 5*len(peers), elapsed, handshake.DefaultChallengeIPRate, 2*handshake.DefaultChallengeIPRate)
		if float64(got) > limit+1 {
			t.Fatalf("%d Challenges toward one host, want at most %.0f", got, limit)
		}
		if got == 0 {
			t.Fatal("no Challenge at all")
		}
	})
}

// The VersionUpgrade total (512 per 300 s) is one budget for the server,
// whatever the number of receive loops.
func TestVersionUpgradeTotalAcrossLoops(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		s := n.listen(Config{Sockets: 4, NetworkVersion: 2})
		peers := make([]*rawPeer, 300)
		for i := range peers {
			peers[i] = n.peer(s, fmt.Sprintf("127.0.%d.%d:0", 20+i/200, 1+i%200))
			peers[i].netV = 1
		}
		round := func() int {
			for range 8 { // the per-source burst
				for _, p := range peers {
					p.send(p.handshakePacket(protocol.TypeInitial, nil))
				}
			}
			return collect(peers, protocol.TypeVersionUpgrade)
		}
		first := round()
		peers[0].silentFor("a refused client", 300*time.Second)
		second := round()
		t.Logf("VersionUpgrades over 300 s across %d loops: %d, then %d after 300 s (%d requests each time)",
			len(s.loops), first, second, 8*len(peers))
		total := handshake.DefaultVersionUpgradeTotal
		if first > total+2 || first+second > 2*total+4 {
			t.Fatalf("VersionUpgrades %d and %d: more than one budget of %d per 300 s", first, second, total)
		}
		if first < total/2 {
			t.Fatalf("only %d VersionUpgrades for %d requests", first, 8*len(peers))
		}
	})
}

// blockingConnect is a Handler whose first OnConnect blocks until release
// is closed; entered is closed once it has begun.
type blockingConnect struct {
	NopHandler
	once             sync.Once
	entered, release chan struct{}
}

func (h *blockingConnect) OnConnect(*Conn) {
	first := false
	h.once.Do(func() { first = true })
	if first {
		close(h.entered)
		<-h.release
	}
}

// A drain task blocked in OnConnect must not hold up the clients queued
// behind it: with more than a batch waiting the queue gets another task, and
// every later client is Acked while the first OnConnect still blocks. (Any
// change to when drain tasks start, issue 21, must keep this.)
func TestDrainBlockedOnConnectGetsAnotherTask(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		h := &blockingConnect{entered: make(chan struct{}), release: make(chan struct{})}
		s := n.listen(Config{Sockets: 1, PromotionWorkers: 4, Handler: h,
			MaxClientsPerIP: -1, MaxClientsPerPrefix: -1, ChallengeRate: -1})
		defer close(h.release)
		first := n.peer(s, "127.0.0.1:0")
		first.connect()
		<-h.entered

		const m = promotionBatch + 44
		peers := make([]*rawPeer, m)
		resps := make([][]byte, m)
		for i := range peers {
			peers[i] = n.peer(s, fmt.Sprintf("127.0.%d.%d:0", 1+i/200, 2+i%200))
			resps[i] = peers[i].response(peers[i].challenge())
		}
		for i, p := range peers {
			p.send(resps[i])
		}
		for _, p := range peers {
			p.expect(protocol.TypeAck)
		}
		if got := s.Len(); got != m+1 {
			t.Fatalf("%d connections, want %d", got, m+1)
		}
		if st := s.Stats(); st.PromotionRejected != 0 {
			t.Fatalf("promotion refused %d clients", st.PromotionRejected)
		}
	})
}
