package netsim_test

import (
	"encoding/binary"
	"errors"
	"math"
	"net"
	"net/netip"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/batchio"
	"github.com/udpgate/udpgate/netsim"
)

var (
	srvAddr = netip.MustParseAddrPort("10.0.0.1:7777")
	cliAddr = netip.MustParseAddrPort("10.0.0.2:5000")
)

func bind(t *testing.T, nw *netsim.Network, addr netip.AddrPort) *netsim.Endpoint {
	t.Helper()
	ep, err := nw.Bind(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return ep
}

func write(t *testing.T, ep *netsim.Endpoint, p []byte, to netip.AddrPort) {
	t.Helper()
	if err := ep.WriteTo(p, to); err != nil {
		t.Fatal(err)
	}
}

// checkSum checks that every datagram is accounted for once.
func checkSum(t *testing.T, nw *netsim.Network) netsim.Stats {
	t.Helper()
	s := nw.Stats()
	if !s.Balanced() {
		t.Fatalf("counters do not add up: %+v", s)
	}
	return s
}

// within fails unless k of n trials is within 5 standard deviations of p.
func within(t *testing.T, what string, k, n int, p float64) {
	t.Helper()
	mean := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	if math.Abs(float64(k)-mean) > 5*sd {
		t.Fatalf("%s: %d of %d, want %.0f ± %.0f", what, k, n, mean, 5*sd)
	}
}

// A perfect link queues the datagram before WriteTo returns.
func TestPerfectLinkImmediate(t *testing.T) {
	nw := netsim.New()
	srv, cli := bind(t, nw, srvAddr), bind(t, nw, cliAddr)
	write(t, cli, []byte("hello"), srvAddr)
	var buf [16]byte
	n, from, ok := srv.RecvFrom(buf[:])
	if !ok || string(buf[:n]) != "hello" || from != cliAddr {
		t.Fatalf("RecvFrom = %q from %v (%v)", buf[:n], from, ok)
	}
	write(t, cli, []byte("nobody"), netip.MustParseAddrPort("10.9.9.9:1"))
	if s := checkSum(t, nw); s.Sent != 2 || s.Delivered != 1 || s.Undeliverable != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// A datagram over a link of Latency 25ms is read exactly 25ms after it
// was sent, in virtual time; the reverse direction has its own link.
func TestLatencyExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetPath(cliAddr, srvAddr, netsim.Link{Latency: 25 * time.Millisecond})
		nw.SetPath(srvAddr, cliAddr, netsim.Link{Latency: 40 * time.Millisecond})
		srv, cli := bind(t, nw, srvAddr), bind(t, nw, cliAddr)
		start := time.Now()
		write(t, cli, []byte("ping"), srvAddr)
		if srv.Pending() != 0 || nw.Stats().InFlight != 1 {
			t.Fatal("delivered before its latency")
		}
		buf := make([]byte, 64)
		n, from, err := srv.ReadFrom(buf)
		if err != nil || string(buf[:n]) != "ping" || from != cliAddr {
			t.Fatalf("ReadFrom = %q, %v, %v", buf[:n], from, err)
		}
		if d := time.Since(start); d != 25*time.Millisecond {
			t.Fatalf("arrived after %v, want exactly 25ms", d)
		}
		write(t, srv, []byte("pong"), from)
		if _, _, err := cli.ReadFrom(buf); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 65*time.Millisecond {
			t.Fatalf("round trip %v, want exactly 65ms", d)
		}
		if s := checkSum(t, nw); s.Delivered != 2 || s.InFlight != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// Jitter keeps every delay in [Latency, Latency+Jitter] and spreads them.
func TestJitterBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 10 * time.Millisecond, Jitter: 5 * time.Millisecond, Seed: 3})
		srv, cli := bind(t, nw, srvAddr), bind(t, nw, cliAddr)
		seen := map[time.Duration]bool{}
		buf := make([]byte, 8)
		for range 200 {
			start := time.Now()
			write(t, cli, []byte{1}, srvAddr)
			if _, _, err := srv.ReadFrom(buf); err != nil {
				t.Fatal(err)
			}
			d := time.Since(start)
			if d < 10*time.Millisecond || d > 15*time.Millisecond {
				t.Fatalf("delay %v outside [10ms, 15ms]", d)
			}
			seen[d] = true
		}
		if len(seen) < 100 {
			t.Fatalf("only %d distinct delays of 200", len(seen))
		}
	})
}

// Loss loses its share, the same datagrams for the same seed.
func TestLossRate(t *testing.T) {
	const n = 10000
	run := func(seed uint64) (lost uint64, got []uint16) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Loss: 0.1, Seed: seed})
		nw.QueueLen = n
		srv, cli := bind(t, nw, srvAddr), bind(t, nw, cliAddr)
		var b [2]byte
		for i := range n {
			binary.BigEndian.PutUint16(b[:], uint16(i))
			write(t, cli, b[:], srvAddr)
		}
		for {
			k, _, ok := srv.RecvFrom(b[:])
			if !ok {
				break
			}
			got = append(got, binary.BigEndian.Uint16(b[:k]))
		}
		s := checkSum(t, nw)
		if s.Delivered != uint64(len(got)) || s.Lost+s.Delivered != n {
			t.Fatalf("stats %+v, %d received", s, len(got))
		}
		srv.Close()
		cli.Close()
		return s.Lost, got
	}
	lost, a := run(42)
	within(t, "lost", int(lost), n, 0.1)
	lost2, b := run(42)
	if lost2 != lost || len(a) != len(b) {
		t.Fatalf("seed 42 lost %d then %d", lost, lost2)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 42 delivered different datagrams at %d", i)
		}
	}
	if lost3, _ := run(43); lost3 == lost {
		t.Logf("seeds 42 and 43 both lost %d (possible, unlikely)", lost)
	}
}

// Duplicate delivers copies, each with its own delay.
func TestDuplicate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 5000
		nw := netsim.New()
		nw.QueueLen = 2 * n
		nw.SetLink(netsim.Link{Duplicate: 0.2, Latency: time.Millisecond, Seed: 7})
		srv, cli := bind(t, nw, srvAddr), bind(t, nw, cliAddr)
		var b [2]byte
		for i := range n {
			binary.BigEndian.PutUint16(b[:], uint16(i))
			write(t, cli, b[:], srvAddr)
		}
		// Every copy is due 1 ms after its send: read until after that.
		copies := map[uint16]int{}
		srv.SetReadDeadline(time.Now().Add(2 * time.Millisecond))
		for {
			k, _, err := srv.ReadFrom(b[:])
			if err != nil {
				break
			}
			copies[binary.BigEndian.Uint16(b[:k])]++
		}
		s := checkSum(t, nw)
		within(t, "duplicated", int(s.Duplicated), n, 0.2)
		twice := 0
		for i := range n {
			switch copies[uint16(i)] {
			case 1:
			case 2:
				twice++
			default:
				t.Fatalf("datagram %d arrived %d times", i, copies[uint16(i)])
			}
		}
		if uint64(twice) != s.Duplicated || s.Delivered != n+s.Duplicated {
			t.Fatalf("%d arrived twice; stats %+v", twice, s)
		}
	})
}

// Reorder holds datagrams back so later ones overtake them; nothing is
// lost, and a datagram not held back keeps its exact latency.
func TestReorder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 2000
		nw := netsim.New()
		nw.SetLink(netsim.Link{Reorder: 0.1, Latency: 10 * time.Millisecond, ReorderDelay: 5 * time.Millisecond, Seed: 9})
		srv, cli := bind(t, nw, srvAddr), bind(t, nw, cliAddr)
		sentAt := make([]time.Time, n)
		done := make(chan struct{})
		go func() {
			defer close(done)
			pace := time.NewTicker(time.Millisecond)
			defer pace.Stop()
			var b [2]byte
			for i := range n {
				sentAt[i] = time.Now()
				binary.BigEndian.PutUint16(b[:], uint16(i))
				write(t, cli, b[:], srvAddr)
				<-pace.C
			}
		}()
		var b [2]byte
		last, inversions, late := -1, 0, 0
		for range n {
			k, _, err := srv.ReadFrom(b[:])
			if err != nil {
				t.Fatal(err)
			}
			i := int(binary.BigEndian.Uint16(b[:k]))
			switch d := time.Since(sentAt[i]); d {
			case 10 * time.Millisecond:
			case 15 * time.Millisecond:
				late++
			default:
				t.Fatalf("datagram %d took %v, want 10ms or 15ms", i, d)
			}
			if i < last {
				inversions++
			}
			last = max(last, i)
		}
		<-done
		s := checkSum(t, nw)
		within(t, "reordered", int(s.Reordered), n, 0.1)
		if uint64(late) != s.Reordered || inversions == 0 || s.Delivered != n {
			t.Fatalf("late %d, inversions %d, stats %+v", late, inversions, s)
		}
	})
}

// Path rules: exact, then from-any, then any-to, then the default.
func TestPathPrecedence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		other := netip.MustParseAddrPort("10.0.0.3:5000")
		nw.SetLink(netsim.Link{Latency: 1 * time.Millisecond})
		nw.SetPath(netip.AddrPort{}, srvAddr, netsim.Link{Latency: 2 * time.Millisecond})
		nw.SetPath(cliAddr, netip.AddrPort{}, netsim.Link{Latency: 3 * time.Millisecond})
		nw.SetPath(cliAddr, srvAddr, netsim.Link{Latency: 4 * time.Millisecond})
		srv, cli, oth := bind(t, nw, srvAddr), bind(t, nw, cliAddr), bind(t, nw, other)
		buf := make([]byte, 8)
		for _, c := range []struct {
			from, to *netsim.Endpoint
			want     time.Duration
		}{
			{cli, srv, 4 * time.Millisecond},
			{cli, oth, 3 * time.Millisecond},
			{oth, srv, 2 * time.Millisecond},
			{srv, oth, 1 * time.Millisecond},
		} {
			start := time.Now()
			write(t, c.from, []byte{1}, c.to.LocalAddr())
			if _, _, err := c.to.ReadFrom(buf); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d != c.want {
				t.Fatalf("%v -> %v took %v, want %v", c.from.LocalAddr(), c.to.LocalAddr(), d, c.want)
			}
		}
		nw.ClearPath(cliAddr, srvAddr)
		start := time.Now()
		write(t, cli, []byte{1}, srvAddr)
		srv.ReadFrom(buf)
		if d := time.Since(start); d != 3*time.Millisecond {
			t.Fatalf("after ClearPath: %v, want the from-any rule's 3ms", d)
		}
	})
}

// A read deadline ends a blocked ReadFrom exactly when it passes; Close
// ends it at once.
func TestReadDeadlineAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		ep := bind(t, nw, cliAddr)
		start := time.Now()
		ep.SetReadDeadline(start.Add(30 * time.Millisecond))
		buf := make([]byte, 8)
		if _, _, err := ep.ReadFrom(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("ReadFrom = %v, want deadline exceeded", err)
		}
		if d := time.Since(start); d != 30*time.Millisecond {
			t.Fatalf("deadline hit after %v", d)
		}
		if _, _, err := ep.ReadFrom(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("second ReadFrom = %v", err)
		}
		ep.SetReadDeadline(time.Time{})
		done := make(chan error)
		go func() {
			_, _, err := ep.ReadFrom(buf)
			done <- err
		}()
		synctest.Wait()
		ep.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadFrom after Close = %v", err)
		}
		if time.Since(start) != 30*time.Millisecond {
			t.Fatal("time moved")
		}
		if err := ep.WriteTo([]byte{1}, srvAddr); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("WriteTo after Close = %v", err)
		}
		if _, err := nw.Bind(cliAddr); err != nil {
			t.Fatalf("address not freed: %v", err)
		}
	})
}

// A full queue drops and counts; a datagram to an endpoint closed while it
// was in flight is undeliverable.
func TestQueueDropsAndUnbound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.QueueLen = 3
		srv, cli := bind(t, nw, srvAddr), bind(t, nw, cliAddr)
		for range 5 {
			write(t, cli, []byte{1}, srvAddr)
		}
		if s := checkSum(t, nw); s.QueueDrops != 2 || srv.Stats().RxDrops != 2 || srv.Pending() != 3 {
			t.Fatalf("stats %+v, endpoint %+v", s, srv.Stats())
		}
		nw.SetLink(netsim.Link{Latency: time.Second})
		write(t, srv, []byte{2}, cliAddr)
		cli.Close()
		time.Sleep(time.Second)
		synctest.Wait()
		if s := checkSum(t, nw); s.Undeliverable != 1 || s.InFlight != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}

func TestBindAddresses(t *testing.T) {
	nw := netsim.New()
	a, err := nw.Bind(netip.MustParseAddrPort("0.0.0.0:0"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := nw.Bind(netip.AddrPort{})
	c, _ := nw.Bind(netip.MustParseAddrPort("[::]:0"))
	if a.LocalAddr() != netip.MustParseAddrPort("127.0.0.1:49152") ||
		b.LocalAddr() != netip.MustParseAddrPort("127.0.0.1:49153") ||
		c.LocalAddr() != netip.MustParseAddrPort("[::1]:49154") {
		t.Fatalf("bound %v %v %v", a.LocalAddr(), b.LocalAddr(), c.LocalAddr())
	}
	if _, err := nw.Listen(a.LocalAddr(), 2); !errors.Is(err, netsim.ErrAddrInUse) {
		t.Fatalf("second bind: %v", err)
	}
	if _, err := nw.Bind(netip.MustParseAddrPort("0.0.0.0:7")); err != nil {
		t.Fatal(err)
	}
	if _, err := nw.Bind(netip.MustParseAddrPort("127.0.0.1:7")); !errors.Is(err, netsim.ErrAddrInUse) {
		t.Fatalf("0.0.0.0:7 did not bind 127.0.0.1:7: %v", err)
	}
}

// Drop sees every datagram first.
func TestDropHook(t *testing.T) {
	nw := netsim.New()
	nw.Drop = func(_, _ netip.AddrPort, p []byte) bool { return p[0] == 'x' }
	nw.SetLink(netsim.Link{Loss: 1})
	srv := bind(t, nw, srvAddr)
	for _, p := range []string{"a", "x", "b"} {
		nw.Deliver(cliAddr, srvAddr, []byte(p))
	}
	if s := checkSum(t, nw); s.Dropped != 1 || s.Lost != 2 || srv.Pending() != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// The batch methods a server's loop uses.
func TestBatch(t *testing.T) {
	nw := netsim.New()
	g, err := nw.Listen(srvAddr, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	cli := bind(t, nw, cliAddr)
	for _, p := range []string{"one", "two", "three"} {
		write(t, cli, []byte(p), srvAddr)
	}
	b := batchio.NewBatch(4, 4)
	ep := g.Endpoints()[0]
	if n, err := ep.Recv(b); n != 3 || err != nil || !b.Msgs[2].Truncated {
		t.Fatalf("Recv = %d, %v", n, err)
	}
	b.Msgs[0].Addr, b.Msgs[1].Addr = cliAddr, cliAddr
	if err := ep.Send(b, 2); err != nil {
		t.Fatal(err)
	}
	if cli.Pending() != 2 {
		t.Fatalf("client has %d datagrams", cli.Pending())
	}
	if st := g.Stats(); st.RxPackets != 3 || st.RxTruncated != 1 || st.TxPackets != 2 || st.TxCalls != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestPacketConn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 5 * time.Millisecond})
		srv := bind(t, nw, srvAddr)
		pc := bind(t, nw, cliAddr).PacketConn()
		if _, err := pc.WriteTo([]byte("hi"), &net.UDPAddr{IP: net.ParseIP("10.0.0.1"), Port: 7777}); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 8)
		n, from, err := srv.ReadFrom(buf)
		if err != nil || string(buf[:n]) != "hi" || from != cliAddr {
			t.Fatalf("ReadFrom = %q, %v, %v", buf[:n], from, err)
		}
		srv.WriteTo([]byte("yo"), from)
		pc.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, _, err := pc.ReadFrom(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("ReadFrom = %v, want deadline exceeded", err)
		}
		pc.SetReadDeadline(time.Time{})
		n, addr, err := pc.ReadFrom(buf)
		if err != nil || string(buf[:n]) != "yo" || addr.String() != srvAddr.String() {
			t.Fatalf("ReadFrom = %q, %v, %v", buf[:n], addr, err)
		}
	})
}

// A datagram costs no allocation once the network is warm, delayed or
// not, through a bottleneck or not (whose queue takes the first of each
// round's two datagrams and drops the second).
func TestZeroAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	for _, l := range []netsim.Link{{}, {Latency: time.Millisecond, Jitter: time.Millisecond, Loss: 0.01},
		{Latency: time.Millisecond, Bottleneck: netsim.NewBottleneck(1_000_000, 2000)}} {
		synctest.Test(t, func(t *testing.T) {
			nw := netsim.New()
			nw.SetLink(l)
			srv, cli := bind(t, nw, srvAddr), bind(t, nw, cliAddr)
			p := make([]byte, 1200)
			buf := make([]byte, 1500)
			round := func() {
				cli.WriteTo(p, srvAddr)
				cli.WriteTo(p, srvAddr)
				srv.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
				for {
					if _, _, err := srv.ReadFrom(buf); err != nil {
						break
					}
				}
			}
			for range 100 {
				round()
			}
			if a := testing.AllocsPerRun(100, round); a > 0 {
				t.Errorf("link %+v: %v allocations per round", l, a)
			}
		})
	}
}

func BenchmarkWriteRead(b *testing.B) {
	for _, bc := range []struct {
		name string
		link netsim.Link
	}{{"perfect", netsim.Link{}}, {"lossy", netsim.Link{Loss: 0.01, Duplicate: 0.01, Seed: 1}}} {
		b.Run(bc.name, func(b *testing.B) {
			nw := netsim.New()
			nw.SetLink(bc.link)
			srv, _ := nw.Bind(srvAddr)
			cli, _ := nw.Bind(cliAddr)
			p := make([]byte, 1200)
			buf := make([]byte, 1500)
			b.ReportAllocs()
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				cli.WriteTo(p, srvAddr)
				for {
					if _, _, ok := srv.RecvFrom(buf); !ok {
						break
					}
				}
			}
		})
	}
}

// The package example in a synctest bubble, where the network's delays are
// virtual: the round trip takes exactly 50 ms of the bubble's clock and no
// real time.
func TestVirtualRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 25 * time.Millisecond})
		srv, cli := bind(t, nw, srvAddr), bind(t, nw, netip.AddrPort{})
		go echo(srv)
		start := time.Now()
		write(t, cli, []byte("ping"), srvAddr)
		buf := make([]byte, 1500)
		if _, _, err := cli.ReadFrom(buf); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 50*time.Millisecond {
			t.Fatalf("round trip %v, want exactly 50ms", d)
		}
	})
}
