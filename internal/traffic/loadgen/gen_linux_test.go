package loadgen

import (
	"context"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/udpgate/udpgate/batchio"
	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
)

type echoApp = conntest.Echo[*conn.Conn, conn.DisconnectReason]

// watchedEchoApp echoes and fires disconnects at each connection's end.
type watchedEchoApp struct{ echoApp }

// disconnects fires at every OnDisconnect of a watchedEchoApp.
var disconnects conntest.Signal

func (watchedEchoApp) OnDisconnect(*conn.Conn, conn.DisconnectReason, bool) { disconnects.Fire() }

// drained waits, up to 5 s, for s to have no connection left, then closes
// it: Close returns once its receive loops have published the counters of
// their last batch, which the test reads next.
func drained(t *testing.T, s *conn.Server) {
	t.Helper()
	if !disconnects.Await(5*time.Second, func() bool { return s.Len() == 0 }) {
		t.Errorf("%d connections left after the Disconnects", s.Len())
	}
	s.Close()
}

// listenEcho starts an udpgate server with the echo application.
func listenEcho(t *testing.T) *conn.Server {
	t.Helper()
	return conntest.Listen(t, conn.Listen, conn.Config{
		Handler:       watchedEchoApp{},
		ChallengeRate: -1,
		// overload control is off by default
		Sockets: 1,
	})
}

// listenRawEcho starts a batchio echo: every datagram straight back.
func listenRawEcho(t *testing.T) netip.AddrPort {
	t.Helper()
	g, err := batchio.Listen("127.0.0.1:0", batchio.Config{Sockets: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	s := g.Sockets()[0]
	go func() {
		b := g.NewBatch()
		for {
			n, err := s.Recv(b)
			if err != nil {
				return
			}
			s.Send(b, n)
		}
	}()
	return g.LocalAddr()
}

// newGen makes a generator with a test-sized window and a patient loss
// timeout: under the race detector the in-process server answers in tens of
// milliseconds.
func newGen(t *testing.T, cfg Config) *Generator {
	t.Helper()
	if cfg.Window == 0 {
		cfg.Window = 64
	}
	if cfg.LossTimeout == 0 {
		cfg.LossTimeout = time.Second
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// runAttempts bounds runUntil.
const runAttempts = 5

// runUntil runs g until ok accepts a run, at most runAttempts times, and
// returns the last run. A window is one sample of a busy machine: the
// server's or the generator's thread can be descheduled for all of a
// 200 ms window, so a test asks for enough samples instead of a longer
// window; a generator that never measures right fails every run.
func runUntil(t *testing.T, g *Generator, spec RunSpec, ok func(RunResult) bool) RunResult {
	t.Helper()
	var r RunResult
	for i := range runAttempts {
		var err error
		if r, err = g.Run(context.Background(), spec); err != nil {
			t.Fatal(err)
		}
		if ok(r) {
			break
		}
		t.Logf("run %d of %d: %.0f answers/s, %d answers in the window; running again", i+1, runAttempts, r.PerSecond(), r.Window.Replies)
	}
	return r
}

// answered: the run measured answers in its window.
func answered(r RunResult) bool { return r.Window.Replies > 0 && r.Latency.N > 0 }

func checkRun(t *testing.T, r RunResult, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	w := r.Window
	t.Logf("%.0f answers/s, sent %d, answers %d, lost %d, late %d, unexpected %d, unanswered %d, latency p50 %v p99 %v",
		r.PerSecond(), w.Sent, w.Replies, w.Lost, w.Late, w.Unexpected, r.Unanswered, r.Latency.P50, r.Latency.P99)
	if w.Replies == 0 || r.Latency.N == 0 || r.Latency.P50 <= 0 {
		t.Fatalf("no answers measured: %+v", r)
	}
	// Loopback under a light test load loses nothing and answers only
	// what was asked.
	if r.Total.Lost > r.Total.Sent/100 || w.Unexpected != 0 {
		t.Errorf("lost %d of %d, unexpected %d", r.Total.Lost, r.Total.Sent, w.Unexpected)
	}
}

func TestEchoMode(t *testing.T) {
	addr := listenRawEcho(t)
	g := newGen(t, Config{Server: addr, Mode: ModeEcho, Clients: 300, Sockets: 2, PacketSize: 56})
	r := runUntil(t, g, RunSpec{Warmup: 50 * time.Millisecond, Window: 200 * time.Millisecond}, answered)
	checkRun(t, r, nil)
}

func TestInitialMode(t *testing.T) {
	s := listenEcho(t)
	g := newGen(t, Config{Server: s.Addr(), Mode: ModeInitial, Clients: 300})
	r := runUntil(t, g, RunSpec{Window: 200 * time.Millisecond}, answered)
	checkRun(t, r, nil)
	if st := s.Stats(); st.Connections != 0 || st.HandshakeOut[1] == 0 {
		t.Errorf("server: %d connections, %d Challenges", st.Connections, st.HandshakeOut[1])
	}
}

func TestResponseMode(t *testing.T) {
	s := listenEcho(t)
	g := newGen(t, Config{Server: s.Addr(), Mode: ModeResponse, Clients: 300, Sockets: 3})
	c, err := g.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c.Connected != 300 || c.Failed != 0 || s.Len() != 300 {
		t.Fatalf("connected %d, failed %d, server has %d", c.Connected, c.Failed, s.Len())
	}
	r := runUntil(t, g, RunSpec{Window: 200 * time.Millisecond}, answered)
	checkRun(t, r, nil)
	if s.Len() != 300 {
		t.Errorf("repeated Responses changed the connections: %d", s.Len())
	}
}

func TestDataMode(t *testing.T) {
	s := listenEcho(t)
	g := newGen(t, Config{Server: s.Addr(), Mode: ModeData, Clients: 500, Sources: 100, PayloadSize: 40})
	if g.Config().Sockets != 5 {
		t.Fatalf("%d sockets, want 5", g.Config().Sockets)
	}
	c, err := g.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("connect: %d in %v (%.0f/s), p50 %v p99 %v, %d packets", c.Connected, c.Elapsed, c.PerSecond(), c.Latency.P50, c.Latency.P99, c.Packets)
	if c.Connected != 500 || c.Latency.N != 500 || s.Len() != 500 {
		t.Fatalf("connected %d (latencies %d), server has %d", c.Connected, c.Latency.N, s.Len())
	}
	// Every client has its own address and port on the server.
	seen := map[netip.AddrPort]bool{}
	s.Range(func(c *conn.Conn) bool { seen[c.RemoteAddr()] = true; return true })
	if len(seen) != 500 {
		t.Fatalf("%d distinct client addresses", len(seen))
	}
	r, err := g.Run(context.Background(), RunSpec{Warmup: 50 * time.Millisecond, Window: 300 * time.Millisecond})
	checkRun(t, r, err)
	checkCountedAndDisconnect(t, g, s, r, 1000)
}

// checkCountedAndDisconnect checks that the server counted at least as
// many connection packets as r's echoes, then that g's Disconnect (two
// packets per client, want in all) empties the server.
func checkCountedAndDisconnect(t *testing.T, g *Generator, s *conn.Server, r RunResult, want int) {
	t.Helper()
	n, err := g.Disconnect(context.Background(), 2, 0)
	if err != nil || n != want {
		t.Fatalf("disconnect: %d packets, %v; want %d", n, err, want)
	}
	drained(t, s)
	if st := s.Stats(); st.ConnPacketsIn < r.Total.Replies {
		t.Errorf("server accepted %d connection packets, generator got %d echoes", st.ConnPacketsIn, r.Total.Replies)
	}
}

func TestRateMode(t *testing.T) {
	s := listenEcho(t)
	g := newGen(t, Config{Server: s.Addr(), Mode: ModeData, Clients: 100, Rate: 200})
	if _, err := g.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	// 100 clients × 200/s = 20 000/s; pacing is good to a few percent.
	// A run never goes faster; one may go slower when the machine is busy
	// (and under the race detector the in-process server cannot keep up),
	// so one of the runs must reach the pace.
	over := 0.0
	r := runUntil(t, g, RunSpec{Warmup: 100 * time.Millisecond, Window: 500 * time.Millisecond}, func(r RunResult) bool {
		got := r.PerSecond()
		over = max(over, got)
		return got > 24000 || answered(r) && (got >= 16000 || raceEnabled)
	})
	checkRun(t, r, nil)
	if got := r.PerSecond(); over > 24000 || got < 16000 && !raceEnabled {
		t.Errorf("%.0f answers/s at 100 clients × 200/s (fastest run %.0f/s)", got, over)
	}
}

func TestBounds(t *testing.T) {
	addr := listenRawEcho(t)
	g := newGen(t, Config{Server: addr, Mode: ModeEcho, Clients: 10, MaxPackets: 1000})
	r, err := g.Run(context.Background(), RunSpec{Window: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Total.Sent > 1000 {
		t.Errorf("sent %d, MaxPackets 1000", r.Total.Sent)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	g2 := newGen(t, Config{Server: addr, Mode: ModeEcho, Clients: 10})
	if _, err := g2.Run(ctx, RunSpec{Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("cancelled run took %v", el)
	}
	if _, err := g2.Run(context.Background(), RunSpec{Window: MaxPhase + time.Second}); err == nil {
		t.Error("a run longer than MaxPhase was accepted")
	}
	if _, err := g2.Connect(context.Background()); err == nil {
		t.Error("Connect in echo mode was accepted")
	}
}

func TestRefusesNonLoopback(t *testing.T) {
	for _, a := range []string{"10.1.2.3:7777", "192.168.0.1:7777", "[::1]:7777"} {
		if _, err := New(Config{Server: netip.MustParseAddrPort(a), Clients: 1}); err == nil {
			t.Errorf("%s accepted", a)
		}
	}
}

func TestConnectNoServer(t *testing.T) {
	// A port nobody listens on: every handshake times out.
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	pc.Close()
	g := newGen(t, Config{Server: addr, Mode: ModeData, Clients: 20, ConnectTimeout: 200 * time.Millisecond, ResendInterval: 50 * time.Millisecond})
	c, err := g.Connect(context.Background())
	if err == nil || c.Failed != 20 {
		t.Fatalf("connect to nobody: %+v, %v", c, err)
	}
}

func TestNoAllocsPerPacket(t *testing.T) {
	if raceEnabled {
		t.Skip("the race runtime allocates")
	}
	s := listenEcho(t)
	checkAllocsPerAnswer(t, newGen(t, Config{Server: s.Addr(), Mode: ModeData, Clients: 200}))
}

// checkAllocsPerAnswer connects g's clients and checks that a Run costs
// next to no allocation per answer. The server runs in this process too
// and allocates nothing per packet either; a Run allocates a fixed few
// objects (goroutines, timers).
func checkAllocsPerAnswer(t *testing.T, g *Generator) {
	t.Helper()
	if _, err := g.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	r, mallocs := runMallocs(t, g)
	if per := float64(mallocs) / float64(r.Total.Replies); per > 0.01 || r.Total.Replies < 1000 {
		t.Errorf("%d allocations for %d answers (%.3f per answer)", mallocs, r.Total.Replies, per)
	}
}

// runMallocs runs g for a 300 ms window and counts the heap allocations
// the process made meanwhile.
func runMallocs(t *testing.T, g *Generator) (RunResult, uint64) {
	t.Helper()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	r, err := g.Run(context.Background(), RunSpec{Window: 300 * time.Millisecond})
	runtime.ReadMemStats(&m1)
	if err != nil {
		t.Fatal(err)
	}
	return r, m1.Mallocs - m0.Mallocs
}

// TestStorm: every client starts at once and all connect; the result
// times each from the storm's start and counts resends.
func TestStorm(t *testing.T) {
	s := listenEcho(t)
	const clients = 2000
	g := newGen(t, Config{Server: s.Addr(), Mode: ModeData, Clients: clients, Sockets: 2})
	c, err := g.Storm(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("storm: %d in %v (%.0f/s), since start p50 %v p99 %v, %d resent, %d packets",
		c.Connected, c.AllIn, c.PerSecond(), c.SinceStart.P50, c.SinceStart.P99, c.Resent, c.Packets)
	if c.Connected != clients || c.Failed != 0 || s.Len() != clients || c.SinceStart.N != clients {
		t.Fatalf("storm: %+v, server has %d", c, s.Len())
	}
	if c.AllIn <= 0 || c.AllIn > c.Elapsed || c.SinceStart.Max > c.AllIn || c.PerSecond() <= 0 {
		t.Errorf("storm timing: all in %v, elapsed %v, slowest %v", c.AllIn, c.Elapsed, c.SinceStart.Max)
	}
	// Each client sent an Initial and a Response; one that resent, a few
	// more: with the resend backoff a slow client's Initials at 0, 0.1, 0.3
	// and 0.7 s may each draw a Challenge, each answered with a Response.
	if c.Packets < 2*clients || c.Packets > uint64(2*clients+8*c.Resent) {
		t.Errorf("%d handshake packets for %d clients, %d resent", c.Packets, clients, c.Resent)
	}
	// A second storm finds everyone connected and starts nobody.
	c2, err := g.Storm(context.Background())
	if c2.Clients != 0 || c2.Connected != 0 {
		t.Errorf("second storm: %+v, %v", c2, err)
	}
}

// listenSealed starts an udpgate server in sealed mode with the echo
// application; cfg adds settings.
func listenSealed(t *testing.T, cfg conn.Config) *conn.Server {
	t.Helper()
	cfg.Handler = watchedEchoApp{}
	cfg.ChallengeRate = -1
	cfg.Sockets = 1
	if cfg.PrivateKey == nil {
		cfg.PrivateKey, cfg.ProtocolID = &testPrivateKey, testProtocolID
	}
	s, err := conn.Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func sealedGen(t *testing.T, s *conn.Server, cfg Config) *Generator {
	t.Helper()
	cfg.Server, cfg.Mode = s.Addr(), ModeData
	if cfg.PrivateKey == nil {
		cfg.PrivateKey, cfg.ProtocolID = &testPrivateKey, testProtocolID
	}
	return newGen(t, cfg)
}

// TestSealedDataMode: against a sealed server every client proves its
// token right after its Challenge (an Initial and a proof each: no
// Response), Data is echoed sealed both ways, and the sealed Disconnect ends
// every connection.
func TestSealedDataMode(t *testing.T) {
	s := listenSealed(t, conn.Config{})
	g := sealedGen(t, s, Config{Clients: 300, Sockets: 3})
	c, err := g.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("connect: %d in %v (%.0f/s), p50 %v p99 %v, %d packets, %d proofs", c.Connected, c.Elapsed, c.PerSecond(),
		c.Latency.P50, c.Latency.P99, c.Packets, c.Proofs)
	st := s.Stats()
	if c.Connected != 300 || c.Failed != 0 || c.Proofs < 300 || c.Packets < 600 || s.Len() != 300 || st.Proofs != 300 || st.Accepted != 300 {
		t.Fatalf("connect: %+v; server has %d, %d proofs, %d accepted", c, s.Len(), st.Proofs, st.Accepted)
	}
	r, err := g.Run(context.Background(), RunSpec{Warmup: 50 * time.Millisecond, Window: 300 * time.Millisecond})
	checkRun(t, r, err)
	if w := r.Total; w.SealedForged != 0 || w.SealedReplay != 0 {
		t.Errorf("%d forged and %d replayed answers from the server", w.SealedForged, w.SealedReplay)
	}
	checkCountedAndDisconnect(t, g, s, r, 600)
	if f := s.Stats().Drops[protocol.DropSealedForged]; f != 0 {
		t.Errorf("server dropped %d connection packets as forged", f)
	}
}

// TestSealedStorm: every client starts at once and each is in only when
// its proof is answered.
func TestSealedStorm(t *testing.T) {
	s := listenSealed(t, conn.Config{})
	const clients = 1000
	g := sealedGen(t, s, Config{Clients: clients, Sockets: 2})
	c, err := g.Storm(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sealed storm: %d in %v (%.0f/s), since start p50 %v p99 %v, %d resent, %d packets",
		c.Connected, c.AllIn, c.PerSecond(), c.SinceStart.P50, c.SinceStart.P99, c.Resent, c.Packets)
	if c.Connected != clients || c.Failed != 0 || s.Len() != clients || s.Stats().Proofs != clients || c.SinceStart.N != clients {
		t.Fatalf("storm: %+v, server has %d", c, s.Len())
	}
}

// TestSealedRefusals: tokens the server must refuse end each client with
// the server's reason: expired, invalid (another key or protocol id), not
// listing this server, and nothing reaches the server's connections.
func TestSealedRefusals(t *testing.T) {
	other := [32]byte{9, 9, 9}
	s := listenSealed(t, conn.Config{})
	cases := []struct {
		name string
		cfg  Config
		old  bool // tokens made two hours ago
		want func(c ConnectResult) int
	}{
		{"expired", Config{}, true, func(c ConnectResult) int { return c.RefusedExpired }},
		{"wrong key", Config{PrivateKey: &other, ProtocolID: testProtocolID}, false, func(c ConnectResult) int { return c.RefusedInvalid }},
		{"wrong protocol", Config{PrivateKey: &testPrivateKey, ProtocolID: testProtocolID + 1}, false, func(c ConnectResult) int { return c.RefusedInvalid }},
		{"foreign server", Config{TokenAddresses: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.2:9")}}, false,
			func(c ConnectResult) int { return c.RefusedForeign }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Clients = 20
			tc.cfg.ResendInterval = 200 * time.Millisecond
			g := sealedGen(t, s, tc.cfg)
			if tc.old {
				made := time.Now().Add(-2 * time.Hour)
				g.tokens.params.Now = func() time.Time { return made }
			}
			c, err := g.Connect(context.Background())
			if err == nil || c.Connected != 0 || c.Failed != 20 || tc.want(c) != 20 {
				t.Errorf("connect: %+v, %v", c, err)
			}
			if e := g.Counters().Endings(); len(e) != 1 || e[0].Count != 20 {
				t.Errorf("endings: %v", e)
			}
		})
	}
	if s.Len() != 0 || s.Stats().Proofs != 0 {
		t.Errorf("server has %d connections, %d proofs", s.Len(), s.Stats().Proofs)
	}
}

// TestSealedNoAllocsPerPacket: sealed Data round trips cost the generator
// (and the server, in this process) no allocation.
func TestSealedNoAllocsPerPacket(t *testing.T) {
	if raceEnabled {
		t.Skip("the race runtime allocates")
	}
	s := listenSealed(t, conn.Config{})
	checkAllocsPerAnswer(t, sealedGen(t, s, Config{Clients: 200}))
}
