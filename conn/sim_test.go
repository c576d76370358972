package conn

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/netsim"
	"github.com/udpgate/udpgate/token"
)

// Servers and clients over a simulated network (Config.Network), in a
// synctest bubble: every goroutine of conn (receive loops, housekeeping,
// promotion workers, the client's reader and timers) runs on the bubble's
// fake clock, so a test observes exact durations without sleeping.

var simServerAddr = netip.MustParseAddrPort("10.0.0.1:7777")

// simEcho echoes Data and records disconnects.
type simEcho struct {
	NopHandler
	gone chan DisconnectReason
}

func (simEcho) OnPacket(c *Conn, p []byte) { _, _ = c.Send(p) }

func (h simEcho) OnDisconnect(_ *Conn, r DisconnectReason, _ bool) {
	if h.gone != nil {
		h.gone <- r
	}
}

// simRecorder passes what a client receives to got.
type simRecorder struct {
	NopHandler
	got chan string
}

func (h simRecorder) OnPacket(_ *Conn, p []byte) { h.got <- string(p) }

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// simListen starts a server on nw at simServerAddr; it is closed when the
// test (the bubble's function) ends.
func simListen(t *testing.T, nw *netsim.Network, cfg Config) *Server {
	t.Helper()
	cfg.Network = nw
	cfg.Logger = quiet()
	if cfg.Sockets == 0 {
		cfg.Sockets = 2
	}
	s, err := Listen(simServerAddr.String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// simSealed listens with cfg, sealed with the test key, on a new simulated
// network whose every path has a one-way latency of oneWay.
func simSealed(t *testing.T, oneWay time.Duration, cfg Config) (*netsim.Network, *Server) {
	t.Helper()
	nw := netsim.New()
	nw.SetLink(netsim.Link{Latency: oneWay})
	cfg.PrivateKey, cfg.ProtocolID = &testKey, testProtocolID
	return nw, simListen(t, nw, cfg)
}

func simDial(t *testing.T, nw *netsim.Network, cfg Config) (*Client, error) {
	t.Helper()
	cfg.Network = nw
	cfg.Logger = quiet()
	cli, err := Dial(context.Background(), simServerAddr.String(), cfg)
	if err == nil {
		t.Cleanup(func() { cli.Close() })
	}
	return cli, err
}

// The handshake, an echo and a timeout take exactly the virtual time the
// links and timers say. With 10 ms each way the connect is two round trips
// (Initial/Challenge, Response/Ack) and an echo one; with the server
// silenced, the client times out exactly Timeout after the last packet it
// heard: its timers tick every min(SweepInterval, 50ms) from Dial, and here
// every arrival falls on a tick.
func TestSimExactTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 10 * time.Millisecond})
		gone := make(chan DisconnectReason, 1)
		srv := simListen(t, nw, Config{Handler: simEcho{gone: gone}, SweepInterval: 10 * time.Millisecond})
		const (
			tick    = 10 * time.Millisecond
			timeout = 2 * time.Second
		)
		got := make(chan string, 1)
		start := time.Now()
		cli, err := simDial(t, nw, Config{Handler: simRecorder{got: got}, SweepInterval: tick,
			KeepAlive: 500 * time.Millisecond, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 40*time.Millisecond {
			t.Fatalf("connected after %v, want exactly 40ms", d)
		}
		if la := cli.LocalAddr(); la != netip.MustParseAddrPort("127.0.0.1:49152") {
			t.Fatalf("client bound %v", la)
		}
		synctest.Wait() // the server's promotion has told the handler
		if srv.Len() != 1 {
			t.Fatalf("server has %d connections", srv.Len())
		}

		sent := time.Now()
		if _, err := cli.Send([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		if p := <-got; p != "hello" {
			t.Fatalf("echo %q", p)
		}
		if d := time.Since(sent); d != 20*time.Millisecond {
			t.Fatalf("echo after %v, want exactly 20ms", d)
		}

		// Silence the server: everything it sends from now on is lost.
		nw.SetPath(simServerAddr, netip.AddrPort{}, netsim.Link{Loss: 1})
		c := cli.Conn()
		<-cli.Done()
		end := time.Now()
		last := time.Unix(0, c.lastRecv.Load())
		var de *DisconnectedError
		if !errors.As(cli.Err(), &de) || de.Reason != ReasonTimedOut || de.Remote {
			t.Fatalf("client ended with %v, want a local timeout", cli.Err())
		}
		// The first tick at or after last+timeout ends it.
		ticks := (last.Sub(start) + timeout + tick - 1) / tick
		if want := start.Add(ticks * tick); !end.Equal(want) {
			t.Fatalf("timed out %v after the last packet, want %v", end.Sub(last), want.Sub(last))
		}
		if d := end.Sub(last); d != timeout {
			t.Fatalf("timed out %v after the last packet, want exactly %v", d, timeout)
		}
		// The client's Disconnects reach the server, 10ms later.
		if r := <-gone; r != ReasonTimedOut {
			t.Fatalf("server saw %v", r)
		}
		if d := time.Since(end); d != 10*time.Millisecond {
			t.Fatalf("server told %v after the client ended", d)
		}
		checkSimStats(t, nw)
	})
}

// simSilenceClient loses every packet cli sends from now on, once srv
// holds its connection, and returns when srv has ended that connection with
// ReasonTimedOut (its Handler reports on gone): the instant of the last
// packet the server received from cli.
func simSilenceClient(t *testing.T, nw *netsim.Network, srv *Server, cli *Client, gone <-chan DisconnectReason) time.Time {
	t.Helper()
	synctest.Wait()
	sc, ok := srv.Conn(cli.LocalAddr())
	if !ok {
		t.Fatal("the server has no connection")
	}
	nw.SetPath(cli.LocalAddr(), netip.AddrPort{}, netsim.Link{Loss: 1})
	if r := <-gone; r != ReasonTimedOut {
		t.Fatalf("server ended the connection with %v", r)
	}
	return time.Unix(0, sc.lastRecv.Load())
}

// The server times a silent client out Timeout after its last packet, late
// by less than one SweepInterval (its timer wheel's slot): exactly Timeout
// here, where every arrival falls on a slot boundary.
func TestSimServerTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			sweep   = 10 * time.Millisecond
			timeout = time.Second
		)
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 10 * time.Millisecond})
		gone := make(chan DisconnectReason, 1)
		srv := simListen(t, nw, Config{Handler: simEcho{gone: gone}, SweepInterval: sweep,
			KeepAlive: 200 * time.Millisecond, Timeout: timeout})
		cli, err := simDial(t, nw, Config{KeepAlive: 200 * time.Millisecond, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		last := simSilenceClient(t, nw, srv, cli, gone)
		if d := time.Since(last); d != timeout {
			t.Fatalf("server timed out %v after the last packet, want exactly %v", d, timeout)
		}
		// Its Disconnects reach the client 10ms later.
		<-cli.Done()
		var de *DisconnectedError
		if !errors.As(cli.Err(), &de) || de.Reason != ReasonTimedOut || !de.Remote {
			t.Fatalf("client ended with %v", cli.Err())
		}
		if d := time.Since(last); d != timeout+10*time.Millisecond {
			t.Fatalf("client told %v after the server's last packet", d)
		}
	})
}

// A sealed server and a token-proving client over a lossy link: the proof
// and the sealed echo get through in virtual time.
func TestSimSealed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 15 * time.Millisecond, Jitter: 10 * time.Millisecond, Loss: 0.2, Seed: 6})
		srv := simListen(t, nw, Config{Handler: simEcho{}, PrivateKey: &testKey, ProtocolID: testProtocolID})
		tok := makeToken(t, nil, token.Params{ServerAddresses: []netip.AddrPort{simServerAddr}})
		got := make(chan string, 16)
		cli, err := simDial(t, nw, Config{Handler: simRecorder{got: got}, Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		for echoed := false; !echoed; {
			if _, err := cli.Send([]byte("sealed")); err != nil {
				t.Fatal(err, cli.Err())
			}
			select {
			case p := <-got:
				if p != "sealed" {
					t.Fatalf("echo %q", p)
				}
				echoed = true
			case <-time.After(500 * time.Millisecond):
			}
		}
		sc, ok := srv.Conn(cli.LocalAddr())
		if !ok {
			t.Fatal("the server has no connection")
		}
		if _, ok := sc.Identity(); !ok {
			t.Fatal("no identity on the sealed server connection")
		}
	})
}

// When the server's first sealed packet (the KeepAlive that tells the
// client its proof was accepted) is lost, the connection still comes up:
// the server answers the client's next proof with another KeepAlive, and
// the proven connection's timers run from its proof, not its proof
// deadline. (Found with TestSimSealed on a lossy link: the server used to
// drop later proofs unanswered and leave the connection in its timer slot
// until ProofTimeout, then time it out.)
func TestSimSealedFirstKeepAliveLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		var fromServer atomic.Int32
		nw.Drop = func(from, _ netip.AddrPort, _ []byte) bool {
			// The server sends Challenge, Ack, then the sealed KeepAlive.
			return from == simServerAddr && fromServer.Add(1) == 3
		}
		nw.SetLink(netsim.Link{Latency: 15 * time.Millisecond})
		simListen(t, nw, Config{Handler: simEcho{}, PrivateKey: &testKey, ProtocolID: testProtocolID})
		tok := makeToken(t, nil, token.Params{ServerAddresses: []netip.AddrPort{simServerAddr}})
		cli, err := simDial(t, nw, Config{Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		if err := cli.Err(); err != nil {
			t.Fatalf("Dial returned a connection that has ended: %v", err)
		}
	})
}

// A Dial nobody answers fails with ErrTimedOut ConnectTimeout after it
// started (the handshake's deadline, checked at the client's ticks).
func TestSimDialTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		start := time.Now()
		_, err := simDial(t, nw, Config{ConnectTimeout: 3 * time.Second, SweepInterval: 10 * time.Millisecond})
		if !errors.Is(err, ErrTimedOut) {
			t.Fatalf("Dial = %v, want ErrTimedOut", err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Fatalf("Dial failed after %v, want exactly 3s", d)
		}
		// Initials at the resend interval, none delivered.
		if s := nw.Stats(); s.Sent < 2 || s.Undeliverable != s.Sent {
			t.Fatalf("stats %+v", s)
		}
	})
}

// Connecting and echoing over a lossy, jittery link, in either direction:
// the handshake's resends get through, and the run is the same every time
// for the same seeds.
func TestSimLossyConnect(t *testing.T) {
	run := func(t *testing.T) (connect time.Duration, st netsim.Stats) {
		synctest.Test(t, func(t *testing.T) {
			nw := netsim.New()
			nw.SetPath(netip.AddrPort{}, simServerAddr, netsim.Link{Loss: 0.4, Latency: 30 * time.Millisecond, Jitter: 20 * time.Millisecond, Seed: 1})
			nw.SetPath(simServerAddr, netip.AddrPort{}, netsim.Link{Loss: 0.4, Latency: 30 * time.Millisecond, Jitter: 20 * time.Millisecond, Duplicate: 0.1, Seed: 2})
			simListen(t, nw, Config{Handler: simEcho{}, Sockets: 1})
			got := make(chan string, 16)
			start := time.Now()
			cli, err := simDial(t, nw, Config{Handler: simRecorder{got: got}})
			if err != nil {
				t.Fatal(err)
			}
			connect = time.Since(start)
			for echoed := false; !echoed; {
				if _, err := cli.Send([]byte("hello")); err != nil {
					t.Fatal(err)
				}
				select {
				case <-got:
					echoed = true
				case <-time.After(time.Second):
				}
			}
			cli.Close()
			synctest.Wait()
			st = checkSimStats(t, nw)
		})
		return connect, st
	}
	d1, s1 := run(t)
	if s1.Lost == 0 {
		t.Fatalf("nothing lost: %+v", s1)
	}
	t.Logf("connected in %v; %+v", d1, s1)
	d2, _ := run(t)
	if d1 != d2 {
		t.Logf("connect took %v then %v: goroutine scheduling changed the order of the draws", d1, d2)
	}
}

// A server's Close tells the client, which ends with ReasonShutdown from
// the peer one link latency later.
func TestSimServerClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 5 * time.Millisecond})
		srv := simListen(t, nw, Config{})
		cli, err := simDial(t, nw, Config{})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		start := time.Now()
		srv.Close()
		<-cli.Done()
		var de *DisconnectedError
		if !errors.As(cli.Err(), &de) || de.Reason != ReasonShutdown || !de.Remote {
			t.Fatalf("client ended with %v", cli.Err())
		}
		if d := time.Since(start); d != 5*time.Millisecond {
			t.Fatalf("client told after %v, want exactly 5ms", d)
		}
	})
}

// Rebind moves a simulated client to a new endpoint; the connection
// migrates.
func TestSimRebind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: time.Millisecond})
		srv := simListen(t, nw, Config{Handler: simEcho{}})
		got := make(chan string, 4)
		cli, err := simDial(t, nw, Config{Handler: simRecorder{got: got}, LocalAddr: "10.0.0.2:0"})
		if err != nil {
			t.Fatal(err)
		}
		if err := cli.Rebind(); err != nil {
			t.Fatal(err)
		}
		if cli.LocalAddr().Addr() != netip.MustParseAddr("10.0.0.2") || cli.LocalAddr().Port() == 49152 {
			t.Fatalf("rebound to %v", cli.LocalAddr())
		}
		for echoed := false; !echoed; {
			cli.Send([]byte("again"))
			select {
			case <-got:
				echoed = true
			case <-time.After(100 * time.Millisecond):
			}
		}
		if cli.Restarts() != 1 {
			t.Fatalf("restarts %d", cli.Restarts())
		}
		synctest.Wait()
		if _, ok := srv.Conn(cli.LocalAddr()); !ok {
			t.Fatal("the server does not know the new address")
		}
	})
}

func TestSimListenErrors(t *testing.T) {
	nw := netsim.New()
	s, err := Listen(":7777", Config{Network: nw, Logger: quiet(), Sockets: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Addr() != netip.MustParseAddrPort("127.0.0.1:7777") {
		t.Fatalf("listening on %v", s.Addr())
	}
	if _, err := Listen("127.0.0.1:7777", Config{Network: nw, Logger: quiet()}); !errors.Is(err, netsim.ErrAddrInUse) {
		t.Fatalf("second Listen: %v", err)
	}
	if _, err := Listen("example.com:7777", Config{Network: nw, Logger: quiet()}); err == nil {
		t.Fatal("a host name was accepted")
	}
}

func checkSimStats(t *testing.T, nw *netsim.Network) netsim.Stats {
	t.Helper()
	s := nw.Stats()
	if !s.Balanced() {
		t.Fatalf("counters do not add up: %+v", s)
	}
	return s
}

// simRTTAtConnect reports each server connection's RTT at OnConnect.
type simRTTAtConnect struct {
	NopHandler
	rtt chan time.Duration
}

func (h simRTTAtConnect) OnConnect(c *Conn) { h.rtt <- c.RTT() }

// A server connection starts with its handshake's round trip (the
// Challenge to the Response) as its first RTT sample, before any ack,
// unless that is over 100 ms (what is assumed before a sample): a client
// cannot lengthen its own timeouts by answering late.
func TestSimHandshakeRTT(t *testing.T) {
	for _, tc := range []struct {
		oneWay, want time.Duration
	}{{15 * time.Millisecond, 30 * time.Millisecond}, {40 * time.Millisecond, 80 * time.Millisecond}, {60 * time.Millisecond, 0}} {
		t.Run(tc.oneWay.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nw := netsim.New()
				nw.SetLink(netsim.Link{Latency: tc.oneWay})
				h := simRTTAtConnect{rtt: make(chan time.Duration, 1)}
				simListen(t, nw, Config{Handler: h})
				cli, err := simDial(t, nw, Config{})
				if err != nil {
					t.Fatal(err)
				}
				got := <-h.rtt
				if d := got - tc.want; d < -time.Microsecond || d > time.Microsecond {
					t.Errorf("the server's connection began with an RTT of %v, want %v", got, tc.want)
				}
				if r := cli.Conn().RTT(); r != 0 {
					t.Errorf("the client's began with %v, want 0 (no sample)", r)
				}
			})
		})
	}
}
