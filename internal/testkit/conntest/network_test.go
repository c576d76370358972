package conntest

import (
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/batchio"
)

var (
	srvAddr = netip.MustParseAddrPort("10.0.0.1:7777")
	cliAddr = netip.MustParseAddrPort("10.0.0.2:5000")
)

func TestNetworkDelivers(t *testing.T) {
	nw := NewNetwork()
	g := nw.Listen(srvAddr, 1)
	cl := nw.Bind(cliAddr)
	for _, p := range []string{"one", "two", "three"} {
		if err := cl.WriteTo([]byte(p), srvAddr); err != nil {
			t.Fatal(err)
		}
	}
	b := batchio.NewBatch(2, 4)
	ep := g.Endpoints()[0]
	n, err := ep.Recv(b)
	if err != nil || n != 2 {
		t.Fatalf("Recv = %d, %v; want 2 of 3", n, err)
	}
	if got := string(b.Msgs[0].Buf[:b.Msgs[0].N]); got != "one" || b.Msgs[0].Addr != cliAddr {
		t.Fatalf("first datagram %q from %v", got, b.Msgs[0].Addr)
	}
	if n, _ := ep.Recv(b); n != 1 || !b.Msgs[0].Truncated || string(b.Msgs[0].Buf[:b.Msgs[0].N]) != "thre" {
		t.Fatalf("long datagram: n %d, truncated %v", n, b.Msgs[0].Truncated)
	}
	// A reply batch goes back to its addresses.
	b.Msgs[0].N = copy(b.Msgs[0].Buf, "ack")
	b.Msgs[0].Addr = cliAddr
	b.Msgs[1].N = copy(b.Msgs[1].Buf, "lost")
	b.Msgs[1].Addr = netip.MustParseAddrPort("10.9.9.9:1")
	if err := ep.Send(b, 2); err != nil {
		t.Fatal(err)
	}
	var buf [16]byte
	if n, from, ok := cl.RecvFrom(buf[:]); !ok || string(buf[:n]) != "ack" || from != srvAddr {
		t.Fatalf("client got %q from %v (%v)", buf[:n], from, ok)
	}
	if _, _, ok := cl.RecvFrom(buf[:]); ok {
		t.Fatal("a second datagram arrived")
	}
	if nw.Undeliverable() != 1 {
		t.Fatalf("undeliverable %d, want 1", nw.Undeliverable())
	}
	st := g.Stats()
	if st.RxPackets != 3 || st.RxBatches != 2 || st.TxPackets != 2 || st.TxCalls != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// Every datagram of one source reaches the same endpoint of a group, and
// the sources spread over the endpoints.
func TestNetworkGroupSpreads(t *testing.T) {
	nw := NewNetwork()
	g := nw.Listen(srvAddr, 4)
	for i := range 200 {
		from := netip.AddrPortFrom(cliAddr.Addr(), uint16(1000+i))
		nw.Deliver(from, srvAddr, []byte{1})
		nw.Deliver(from, srvAddr, []byte{2})
	}
	b := batchio.NewBatch(1024, 8)
	for i, ep := range g.Endpoints() {
		if ep.Pending() == 0 {
			t.Fatalf("endpoint %d got nothing", i)
		}
		n, _ := ep.Recv(b)
		seen := map[netip.AddrPort]int{}
		for _, m := range b.Msgs[:n] {
			seen[m.Addr]++
		}
		for a, k := range seen {
			if k != 2 {
				t.Fatalf("endpoint %d got %d of %v's 2 datagrams", i, k, a)
			}
		}
	}
}

func TestNetworkLossAndQueue(t *testing.T) {
	nw := NewNetwork()
	nw.QueueLen = 3
	nw.Drop = func(_, _ netip.AddrPort, p []byte) bool { return p[0] == 'x' }
	ep := nw.Listen(srvAddr, 1).Endpoints()[0]
	for _, p := range []string{"a", "x", "b", "c", "d"} {
		nw.Deliver(cliAddr, srvAddr, []byte(p))
	}
	if ep.Pending() != 3 || nw.Dropped() != 1 || ep.Stats().RxDrops != 1 {
		t.Fatalf("pending %d, dropped %d, queue drops %d; want 3, 1, 1", ep.Pending(), nw.Dropped(), ep.Stats().RxDrops)
	}
}

// Close wakes a blocked Recv, and the address is free again. In a synctest
// bubble the Recv is known to be blocked before Close, and one that Close
// did not wake would fail the test as a deadlock.
func TestNetworkCloseWakesRecv(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := NewNetwork()
		g := nw.Listen(srvAddr, 1)
		done := make(chan error)
		go func() {
			_, err := g.Endpoints()[0].Recv(batchio.NewBatch(1, 8))
			done <- err
		}()
		synctest.Wait()
		g.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Recv after Close: %v", err)
		}
		if err := g.Endpoints()[0].WriteTo([]byte{1}, cliAddr); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("WriteTo after Close: %v", err)
		}
		nw.Listen(srvAddr, 1).Close() // no panic: the address was unbound
	})
}

func TestClock(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	c := NewClock(start)
	c.Advance(1500 * time.Millisecond)
	if got := c.Now().Sub(start); got != 1500*time.Millisecond {
		t.Fatalf("advanced %v", got)
	}
}

// Await returns once a Fire follows the change that makes its condition
// true, and gives up after its duration otherwise (here in virtual time).
func TestSignalAwait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s Signal
		var n atomic.Int32
		for i := range 3 {
			time.AfterFunc(time.Duration(i+1)*time.Second, func() { n.Add(1); s.Fire() })
		}
		start := time.Now()
		if !s.Await(time.Minute, func() bool { return n.Load() == 3 }) {
			t.Fatal("Await gave up")
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Fatalf("Await returned after %v, want 3s", d)
		}
		if s.Await(time.Second, func() bool { return n.Load() == 4 }) {
			t.Fatal("Await held a false condition")
		}
		var b SyncBuffer
		time.AfterFunc(time.Second, func() { b.Write([]byte("ready\n")) })
		if !b.Await(time.Minute, func(s string) bool { return s == "ready\n" }) {
			t.Fatal("SyncBuffer.Await gave up")
		}
	})
}
