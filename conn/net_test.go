package conn

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/netsim"
)

// testNet is where one end-to-end test body runs, as wireguard-go's
// genTestPair(tb, realSocket): on a simulated network inside a synctest
// bubble (nw set; every wait is in virtual time, so timeouts are exact and
// nothing sleeps), or on real loopback sockets (nw nil) where the kernel
// matters: recvmmsg batches, per-source steering, SO_REUSEPORT, Rebind.
type testNet struct {
	t  *testing.T
	nw *netsim.Network
}

// onSim runs body on a simulated network in a synctest bubble.
func onSim(t *testing.T, body func(t *testing.T, n *testNet)) {
	synctest.Test(t, func(t *testing.T) { body(t, &testNet{t: t, nw: netsim.New()}) })
}

// onBoth runs body on the simulated network (subtest "sim") and on real
// loopback sockets (subtest "udp").
func onBoth(t *testing.T, body func(t *testing.T, n *testNet)) {
	t.Run("sim", func(t *testing.T) { onSim(t, body) })
	t.Run("udp", func(t *testing.T) { body(t, &testNet{t: t}) })
}

func (n *testNet) sim() bool { return n.nw != nil }

// config puts cfg on the test's network.
func (n *testNet) config(cfg Config) Config {
	if n.nw != nil {
		cfg.Network = n.nw
		cfg.Logger = quiet()
	}
	return cfg
}

// listen starts a server at 127.0.0.1 on a free port, with listen's
// defaults (2 sockets, a 10 ms sweep), closed when the test ends.
func (n *testNet) listen(cfg Config) *Server {
	n.t.Helper()
	if n.nw == nil {
		return listen(n.t, cfg)
	}
	if cfg.Sockets == 0 {
		cfg.Sockets = 2
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = 10 * time.Millisecond
	}
	s, err := Listen("127.0.0.1:0", n.config(cfg))
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { s.Close() })
	return s
}

// tryDial dials s; a client that connects is closed when the test ends.
func (n *testNet) tryDial(s *Server, cfg Config) (*Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, s.Addr().String(), n.config(cfg))
	if err == nil {
		n.t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func (n *testNet) dial(s *Server, cfg Config) *Client {
	n.t.Helper()
	c, err := n.tryDial(s, cfg)
	if err != nil {
		n.t.Fatal(err)
	}
	return c
}

// peer binds a rawPeer at local ("127.0.0.2:0") that talks to s.
func (n *testNet) peer(s *Server, local string) *rawPeer {
	n.t.Helper()
	if n.nw == nil {
		return newRawPeer(n.t, s, local)
	}
	ap, err := n.nw.Resolve(local)
	if err != nil {
		n.t.Fatal(err)
	}
	ep, err := n.nw.Bind(ap)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { ep.Close() })
	return &rawPeer{t: n.t, pc: ep.PacketConn(), server: s.Addr(), clientID: 1, netV: s.st.NetworkVersion, rnd: wire.NewRand(9)}
}

// socket binds a bare socket at 127.0.0.1 that never answers.
func (n *testNet) socket() net.PacketConn {
	n.t.Helper()
	var pc net.PacketConn
	if n.nw == nil {
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			n.t.Fatal(err)
		}
		pc = udp
	} else {
		ep, err := n.nw.Bind(netip.MustParseAddrPort("127.0.0.1:0"))
		if err != nil {
			n.t.Fatal(err)
		}
		pc = ep.PacketConn()
	}
	n.t.Cleanup(func() { pc.Close() })
	return pc
}

// within fails the test if ch yields nothing in d: 10 s on real sockets, the
// exact virtual d on the simulated network.
func within[T any](t *testing.T, what string, d time.Duration, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("no %s within %v", what, d)
		var zero T
		return zero
	}
}

// advance lets d pass on a synctest bubble's clock, running every timer due
// in it, then waits until every goroutine of the bubble is blocked again.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// logSignal is a slog.Handler that fires its Signal at each record: the
// server logs what a test may wait for (a spreader switch, an overload
// level change), so the test waits for it on the log.
type logSignal struct{ sig *conntest.Signal }

func (logSignal) Enabled(context.Context, slog.Level) bool    { return true }
func (l logSignal) Handle(context.Context, slog.Record) error { l.sig.Fire(); return nil }
func (l logSignal) WithAttrs([]slog.Attr) slog.Handler        { return l }
func (l logSignal) WithGroup(string) slog.Handler             { return l }
