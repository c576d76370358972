package batchio

import (
	"net/netip"
	"sync"
	"testing"
)

// pair is a server group and a client group on loopback, with the client's
// batch addressed to the server.
type pair struct {
	srv, cli *Group
	cb       *Batch // client's outgoing batch, addressed to srv
	sb, rb   *Batch // server's and client's receive batches
}

func newPair(tb testing.TB, mode Mode, batch, size int) *pair {
	tb.Helper()
	srv, err := Listen("127.0.0.1:0", Config{Sockets: 1, Mode: mode, BatchSize: batch})
	if err != nil {
		tb.Fatal(err)
	}
	cli, err := Listen("127.0.0.2:0", Config{Sockets: 1, Mode: ModeNetpoll, BatchSize: batch})
	if err != nil {
		srv.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { srv.Close(); cli.Close() })
	p := &pair{srv: srv, cli: cli, cb: NewBatch(batch, size), sb: srv.NewBatch(), rb: cli.NewBatch()}
	for i := range p.cb.Msgs {
		p.cb.Msgs[i].N = size
		p.cb.Msgs[i].Addr = srv.LocalAddr()
	}
	return p
}

// round sends one client batch, echoes it on the server with Recv+Send and
// drains the echoes on the client.
func (p *pair) round(tb testing.TB) {
	n := len(p.cb.Msgs)
	if err := p.cli.Sockets()[0].Send(p.cb, n); err != nil {
		tb.Fatal(err)
	}
	s := p.srv.Sockets()[0]
	for got := 0; got < n; {
		k, err := s.Recv(p.sb)
		if err != nil {
			tb.Fatal(err)
		}
		if err := s.Send(p.sb, k); err != nil {
			tb.Fatal(err)
		}
		got += k
	}
	c := p.cli.Sockets()[0]
	for got := 0; got < n; {
		k, err := c.Recv(p.rb)
		if err != nil {
			tb.Fatal(err)
		}
		got += k
	}
}

func TestZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			p := newPair(t, mode, 32, 48)
			p.round(t)
			if a := testing.AllocsPerRun(200, func() { p.round(t) }); a != 0 {
				t.Errorf("Recv+Send round: %v allocs, want 0", a)
			}
			s := p.srv.Sockets()[0]
			dst := p.cli.LocalAddr()
			msg := make([]byte, 48)
			if a := testing.AllocsPerRun(1000, func() {
				if err := s.WriteTo(msg, dst); err != nil {
					t.Fatal(err)
				}
			}); a != 0 {
				t.Errorf("WriteTo: %v allocs, want 0", a)
			}
			// Stats asks the kernel for the drop count; a metrics
			// scrape should not allocate for it.
			if a := testing.AllocsPerRun(100, func() { _ = s.Stats() }); a != 0 {
				t.Errorf("Stats: %v allocs, want 0", a)
			}
		})
	}
}

func TestSockaddrRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		ap     string
		family int
		want   string // "" = not encodable
	}{
		{"1.2.3.4:5", 2, "1.2.3.4:5"},
		{"[::ffff:1.2.3.4]:5", 2, "1.2.3.4:5"},
		{"1.2.3.4:5", 10, "1.2.3.4:5"}, // sent IPv4-mapped, decoded plain
		{"[2001:db8::1]:65535", 10, "[2001:db8::1]:65535"},
		{"[fe80::1%7]:9", 10, "[fe80::1%7]:9"},
		{"[2001:db8::1]:5", 2, ""},
	} {
		var sa rawSockaddr
		ap := netip.MustParseAddrPort(tc.ap)
		n := encodeSockaddr(&sa, ap, tc.family)
		if tc.want == "" {
			if n != 0 {
				t.Errorf("%s family %d: encoded, want refusal", tc.ap, tc.family)
			}
			continue
		}
		if got := decodeSockaddr(&sa); got.String() != tc.want {
			t.Errorf("%s family %d: round trip %v, want %s", tc.ap, tc.family, got, tc.want)
		}
	}
	var sa rawSockaddr
	encodeSockaddr(&sa, netip.MustParseAddrPort("10.0.0.1:80"), 2)
	if a := testing.AllocsPerRun(100, func() { _ = decodeSockaddr(&sa) }); a != 0 {
		t.Errorf("decodeSockaddr: %v allocs", a)
	}
}

// BenchmarkRecvSendRound: a client batch of 32 × 48 bytes echoed by the
// server socket (Recv+Send) and drained. ns/pkt covers the client's
// sendmmsg (including loopback delivery), the server's recvmmsg+sendmmsg
// and the client's recvmmsg.
func BenchmarkRecvSendRound(b *testing.B) {
	for _, mode := range modes {
		for _, batch := range []int{8, 32, 64} {
			b.Run(mode.String()+"/batch="+itoa(batch), func(b *testing.B) {
				p := newPair(b, mode, batch, 48)
				b.ReportAllocs()
				for b.Loop() {
					p.round(b)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/pkt")
			})
		}
	}
}

// BenchmarkWriteTo: lone and concurrent senders through the WriteTo queue,
// to a receiver that drains in the background.
func BenchmarkWriteTo(b *testing.B) {
	for _, par := range []bool{false, true} {
		name := "serial"
		if par {
			name = "parallel"
		}
		b.Run(name, func(b *testing.B) {
			p := newPair(b, ModeNetpoll, 32, 48)
			var wg sync.WaitGroup
			wg.Go(func() {
				rb := p.cli.NewBatch()
				for {
					if _, err := p.cli.Sockets()[0].Recv(rb); err != nil {
						return
					}
				}
			})
			s, dst := p.srv.Sockets()[0], p.cli.LocalAddr()
			msg := make([]byte, 48)
			b.ReportAllocs()
			if par {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						s.WriteTo(msg, dst)
					}
				})
			} else {
				for b.Loop() {
					s.WriteTo(msg, dst)
				}
			}
			st := s.Stats()
			b.ReportMetric(float64(st.TxPackets)/float64(max(st.TxCalls, 1)), "pkts/call")
			p.cli.Close()
			wg.Wait()
		})
	}
}

func BenchmarkSockaddr(b *testing.B) {
	var sa rawSockaddr
	ap := netip.MustParseAddrPort("10.1.2.3:7777")
	b.ReportAllocs()
	for b.Loop() {
		encodeSockaddr(&sa, ap, 10)
		ap = decodeSockaddr(&sa)
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var d []byte
	for ; n > 0; n /= 10 {
		d = append([]byte{byte('0' + n%10)}, d...)
	}
	return string(d)
}
