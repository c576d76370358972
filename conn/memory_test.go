package conn

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

// liveHeap is the heap the last GC found live, after a fresh GC.
func liveHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// promoteN makes n connections through the promotion path's own admit
// (map inserts, address limits, counts) and timers, without the Ack's
// system call, from n distinct addresses.
func promoteN(tb testing.TB, s *Server, n int) {
	tb.Helper()
	sock := s.socks[0]
	now := s.st.Now()
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range n {
		var p promotion
		p.addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), uint16(1024+i%60000))
		for j := range p.cookie {
			p.cookie[j] = byte(rng.Uint32())
		}
		p.to.ClientID = 1
		p.ts = seconds(now)
		v := s.tab.admit(&p, func() *Conn { return s.newConn(&p, sock, now) })
		if v.made == nil {
			tb.Fatalf("promotion %d refused: %+v", i, v)
		}
		s.timers.add(v.made)
		if s.sealed != nil {
			proveForTest(v.made, p.addr, rng)
		}
	}
}

// proveForTest gives sealed connection c what a proof gives it (both
// directions' keys, the token's identity, the used-token and index
// entries), without the packets.
func proveForTest(c *Conn, addr netip.AddrPort, rng *rand.Rand) {
	var k [32]byte
	for i := range k {
		k[i] = byte(rng.Uint32())
	}
	sec := c.sec
	sec.rx.Init(&k, c.salt())
	sec.tx.Init(&k, c.salt())
	sec.id.ClientID = rng.Uint64()
	for i := range sec.mac {
		sec.mac[i] = byte(rng.Uint32())
	}
	sec.expire = ^uint64(0)
	c.srv.sealed.proved(c, addr)
}

// heapPerConn is the live heap that n connections add to a listening
// server, per connection, and the time each promotion took.
func heapPerConn(tb testing.TB, n int, sealed bool) (bytes float64, promotion time.Duration) {
	// The default address limits stay on: every client has its own IP,
	// 256 to a /24, so their counts cost what they would in the field.
	cfg := Config{Sockets: 1, MaxClients: n, KeepAlive: time.Hour, Timeout: 2 * time.Hour}
	if sealed {
		cfg.PrivateKey, cfg.ProtocolID = &testKey, testProtocolID
	}
	s, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	before := liveHeap()
	start := time.Now()
	promoteN(tb, s, n)
	took := time.Since(start)
	after := liveHeap()
	runtime.KeepAlive(s)
	return float64(after-before) / float64(n), took / time.Duration(n)
}

// TestHeapPerConnection holds the memory target: an established connection
// costs at most 1 KiB of live heap, maps and timers included.
func TestHeapPerConnection(t *testing.T) {
	if raceBuild {
		t.Skip("the race detector's shadow memory is not the server's")
	}
	const n = 50_000
	per, _ := heapPerConn(t, n, false)
	t.Logf("live heap per connection at %d connections: %.0f bytes", n, per)
	if per > 1024 {
		t.Fatalf("%.0f bytes of live heap per connection, want at most 1024", per)
	}
}

// BenchmarkHeapPerConn reports the live heap per connection at 100k and 1M
// connections (bytes/conn) and the cost of one promotion without its
// system call (ns/promotion); ns/op includes the listen and the shutdown.
func BenchmarkHeapPerConn(b *testing.B) {
	for _, tc := range []struct {
		n      int
		sealed bool
	}{{100_000, false}, {1_000_000, false}, {100_000, true}} {
		name := fmt.Sprintf("conns=%d", tc.n)
		if tc.sealed {
			// A proven sealed connection: its keys, identity and the
			// sealed mode's tables besides.
			name = "sealed/" + name
		}
		b.Run(name, func(b *testing.B) {
			var per float64
			var took time.Duration
			for range b.N {
				per, took = heapPerConn(b, tc.n, tc.sealed)
			}
			b.ReportMetric(per, "bytes/conn")
			b.ReportMetric(float64(took.Nanoseconds()), "ns/promotion")
		})
	}
}
