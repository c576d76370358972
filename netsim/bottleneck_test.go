package netsim_test

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/netsim"
)

// numbered is a datagram of size bytes that starts with i.
func numbered(i, size int) []byte {
	p := make([]byte, size)
	binary.BigEndian.PutUint16(p, uint16(i))
	return p
}

// arrival is a datagram read: its number, its sender and when it came.
type arrival struct {
	i    int
	from netip.AddrPort
	at   time.Duration
}

// readAll reads n datagrams from ep, each with the time since start.
func readAll(t *testing.T, ep *netsim.Endpoint, n int, start time.Time) []arrival {
	t.Helper()
	var got []arrival
	buf := make([]byte, 2048)
	for range n {
		k, from, err := ep.ReadFrom(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, arrival{int(binary.BigEndian.Uint16(buf[:k])), from, time.Since(start)})
	}
	return got
}

// A bottleneck serialises: ten 1000-byte datagrams sent at once through
// 10,000 bytes per second and a Latency of 25ms arrive 100 ms apart from
// 125ms, exactly, and are in flight until then.
func TestBottleneckSerialises(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		b := netsim.NewBottleneck(10_000, 0)
		nw.SetLink(netsim.Link{Latency: 25 * time.Millisecond, Bottleneck: b})
		srv, cli := bind(t, nw, srvAddr), bind(t, nw, cliAddr)
		start := time.Now()
		for i := range 10 {
			write(t, cli, numbered(i, 1000), srvAddr)
		}
		if s := checkSum(t, nw); s.InFlight != 10 || s.Delivered != 0 {
			t.Fatalf("after the sends: %+v", s)
		}
		if st := b.Stats(); st != (netsim.BottleneckStats{Offered: 10, MaxQueue: 10_000}) {
			t.Fatalf("bottleneck after the sends: %+v", st)
		}
		got := readAll(t, srv, 10, start)
		for k, a := range got {
			if want := time.Duration(100*k+125) * time.Millisecond; a.i != k || a.at != want {
				t.Fatalf("arrival %d is datagram %d at %v, want %d at %v", k, a.i, a.at, k, want)
			}
		}
		if s := checkSum(t, nw); s.InFlight != 0 || s.Delivered != 10 || s.BottleneckDrops != 0 {
			t.Fatalf("at the end: %+v", s)
		}
		if st := b.Stats(); st != (netsim.BottleneckStats{Offered: 10, Forwarded: 10, Bytes: 10_000, MaxQueue: 10_000}) {
			t.Fatalf("bottleneck at the end: %+v", st)
		}
	})
}

// The queue is drop-tail: a burst over it loses exactly the excess, and
// room is made only as datagrams leave, a datagram at a time.
func TestBottleneckDropTail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		b := netsim.NewBottleneck(10_000, 3000)
		nw.SetLink(netsim.Link{Bottleneck: b})
		srv, cli := bind(t, nw, srvAddr), bind(t, nw, cliAddr)
		start := time.Now()
		for i := range 10 {
			write(t, cli, numbered(i, 1000), srvAddr)
		}
		if s := checkSum(t, nw); s.BottleneckDrops != 7 || s.InFlight != 3 {
			t.Fatalf("after the burst: %+v", s)
		}
		if st := b.Stats(); st.Offered != 10 || st.Dropped != 7 || st.MaxQueue != 3000 {
			t.Fatalf("bottleneck after the burst: %+v", st)
		}
		// 50 ms on, the first is half sent: the queue still has no room.
		time.Sleep(50 * time.Millisecond)
		write(t, cli, numbered(10, 1000), srvAddr)
		// At 100 ms it has left: one more fits, and only one.
		time.Sleep(50 * time.Millisecond)
		write(t, cli, numbered(11, 1000), srvAddr)
		write(t, cli, numbered(12, 1000), srvAddr)
		if st := b.Stats(); st != (netsim.BottleneckStats{Offered: 13, Dropped: 9, Forwarded: 1, Bytes: 1000, MaxQueue: 3000}) {
			t.Fatalf("bottleneck at 100ms: %+v", st)
		}
		got := readAll(t, srv, 4, start)
		for k, want := range []arrival{{0, cliAddr, 100 * time.Millisecond}, {1, cliAddr, 200 * time.Millisecond},
			{2, cliAddr, 300 * time.Millisecond}, {11, cliAddr, 400 * time.Millisecond}} {
			if got[k] != want {
				t.Fatalf("arrivals %v, want %v at %d", got, want, k)
			}
		}
		if s := checkSum(t, nw); s.BottleneckDrops != 9 || s.Delivered != 4 || s.InFlight != 0 {
			t.Fatalf("at the end: %+v", s)
		}
	})
}

// Two paths naming one Bottleneck share its rate and its queue: two
// clients' bursts of 10 take the 20 slots of 100 ms in the order they
// were offered, each path then adding its own latency; two paths with a
// bottleneck each of the same rate finish in half the time.
func TestBottleneckShared(t *testing.T) {
	other := netip.MustParseAddrPort("10.0.0.3:5000")
	for _, shared := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			nw := netsim.New()
			b1 := netsim.NewBottleneck(10_000, 0)
			b2 := b1
			if !shared {
				b2 = netsim.NewBottleneck(10_000, 0)
			}
			nw.SetPath(cliAddr, srvAddr, netsim.Link{Latency: 10 * time.Millisecond, Bottleneck: b1})
			nw.SetPath(other, srvAddr, netsim.Link{Latency: 20 * time.Millisecond, Bottleneck: b2})
			srv, a, o := bind(t, nw, srvAddr), bind(t, nw, cliAddr), bind(t, nw, other)
			start := time.Now()
			for i := range 10 {
				write(t, a, numbered(i, 1000), srvAddr)
				write(t, o, numbered(100+i, 1000), srvAddr)
			}
			got := readAll(t, srv, 20, start)
			last := map[netip.AddrPort]time.Duration{}
			for _, g := range got {
				k := g.i % 100 // the datagram's place in its client's burst
				var want time.Duration
				switch {
				case shared && g.from == cliAddr:
					want = time.Duration(200*k+100+10) * time.Millisecond
				case shared:
					want = time.Duration(200*k+200+20) * time.Millisecond
				case g.from == cliAddr:
					want = time.Duration(100*k+100+10) * time.Millisecond
				default:
					want = time.Duration(100*k+100+20) * time.Millisecond
				}
				if g.at != want {
					t.Fatalf("shared %v: datagram %d from %v at %v, want %v", shared, g.i, g.from, g.at, want)
				}
				last[g.from] = g.at
			}
			if st := b1.Stats(); shared && st != (netsim.BottleneckStats{Offered: 20, Forwarded: 20, Bytes: 20_000, MaxQueue: 20_000}) {
				t.Fatalf("shared bottleneck: %+v", st)
			}
			if s := checkSum(t, nw); s.Delivered != 20 {
				t.Fatalf("stats %+v", s)
			}
			t.Logf("shared %v: last arrivals %v", shared, last)
		})
	}
}

// Loss and duplication apply on top of a bottleneck, before its queue:
// the datagrams lost never reach it, both copies of a duplicate do, and
// the random outcomes are those of the same link without a bottleneck.
func TestBottleneckLossOnTop(t *testing.T) {
	const n = 2000
	run := func(bottleneck bool) (lost map[int]bool, s netsim.Stats, st netsim.BottleneckStats) {
		synctest.Test(t, func(t *testing.T) {
			var b *netsim.Bottleneck
			if bottleneck {
				b = netsim.NewBottleneck(1_000_000, 0)
			}
			nw := netsim.New()
			nw.QueueLen = 2 * n
			nw.SetLink(netsim.Link{Loss: 0.2, Duplicate: 0.05, Latency: 5 * time.Millisecond, Seed: 4, Bottleneck: b})
			srv, cli := bind(t, nw, srvAddr), bind(t, nw, cliAddr)
			// 100 bytes every millisecond: a tenth of the rate below.
			for i := range n {
				write(t, cli, numbered(i, 100), srvAddr)
				time.Sleep(time.Millisecond)
			}
			time.Sleep(time.Second)
			lost = map[int]bool{}
			for i := range n {
				lost[i] = true
			}
			buf := make([]byte, 128)
			for {
				k, _, ok := srv.RecvFrom(buf)
				if !ok {
					break
				}
				delete(lost, int(binary.BigEndian.Uint16(buf[:k])))
			}
			s = checkSum(t, nw)
			if b != nil {
				st = b.Stats()
			}
		})
		return lost, s, st
	}
	lost, s, st := run(true)
	within(t, "lost", int(s.Lost), n, 0.2)
	if len(lost) != int(s.Lost) || st.Offered != n-s.Lost+s.Duplicated || st.Dropped != 0 ||
		st.Forwarded != st.Offered || s.Delivered != st.Forwarded || s.BottleneckDrops != 0 {
		t.Fatalf("%d lost; network %+v; bottleneck %+v", len(lost), s, st)
	}
	plain, ps, _ := run(false)
	if ps.Lost != s.Lost || ps.Duplicated != s.Duplicated || len(plain) != len(lost) {
		t.Fatalf("without the bottleneck: %+v, with: %+v", ps, s)
	}
	for i := range lost {
		if !plain[i] {
			t.Fatalf("datagram %d lost with the bottleneck, not without", i)
		}
	}
}

// A burst through a lossy link: the queue keeps its size's worth of what
// the loss left, and drops the rest.
func TestBottleneckBurstWithLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		b := netsim.NewBottleneck(10_000, 5000)
		nw.SetLink(netsim.Link{Loss: 0.5, Seed: 2, Bottleneck: b})
		srv, cli := bind(t, nw, srvAddr), bind(t, nw, cliAddr)
		for i := range 40 {
			write(t, cli, numbered(i, 1000), srvAddr)
		}
		s, st := checkSum(t, nw), b.Stats()
		if s.Lost < 8 || s.Lost > 32 || st.Offered != 40-s.Lost || st.Dropped != st.Offered-5 || s.BottleneckDrops != st.Dropped {
			t.Fatalf("network %+v; bottleneck %+v", s, st)
		}
		start := time.Now()
		got := readAll(t, srv, 5, start)
		if got[4].at != 500*time.Millisecond {
			t.Fatalf("arrivals %v", got)
		}
		if s := checkSum(t, nw); s.InFlight != 0 || s.Delivered != 5 {
			t.Fatalf("at the end: %+v", s)
		}
	})
}

// Jitter counts from the departure: datagrams leave 100 ms apart and each
// arrives within [Latency, Latency+Jitter] after leaving.
func TestBottleneckThenJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 10 * time.Millisecond, Jitter: 20 * time.Millisecond, Seed: 8,
			Bottleneck: netsim.NewBottleneck(10_000, 0)})
		srv, cli := bind(t, nw, srvAddr), bind(t, nw, cliAddr)
		start := time.Now()
		for i := range 20 {
			write(t, cli, numbered(i, 1000), srvAddr)
		}
		for _, g := range readAll(t, srv, 20, start) {
			left := time.Duration(100*(g.i+1)) * time.Millisecond
			if d := g.at - left; d < 10*time.Millisecond || d > 30*time.Millisecond {
				t.Fatalf("datagram %d arrived %v after leaving at %v", g.i, d, left)
			}
		}
	})
}

func TestNewBottleneckRate(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NewBottleneck(0, 0) did not panic")
		}
	}()
	netsim.NewBottleneck(0, 0)
}
