package netem

import (
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// sink records the datagrams it receives, numbered by their first 4
// bytes, with the time each arrived.
type sink struct {
	addr    netip.AddrPort
	mu      sync.Mutex
	seq     []uint32
	at      []time.Time
	bytes   int
	changed chan struct{}
}

func newSink(t *testing.T) *sink {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadBuffer(4 << 20)
	s := &sink{addr: c.LocalAddr().(*net.UDPAddr).AddrPort(), changed: make(chan struct{}, 1)}
	done := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			now := time.Now()
			s.mu.Lock()
			s.seq = append(s.seq, binary.LittleEndian.Uint32(buf[:4]))
			s.at = append(s.at, now)
			s.bytes += n
			s.mu.Unlock()
			signal(s.changed)
		}
	}()
	return s
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (s *sink) received() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seq)
}

// waitFor waits until cond holds, re-checking whenever one of the
// channels signals, for at most 20 s (a bound for a loaded machine, not a
// timing the test depends on).
func waitFor(t *testing.T, what string, cond func() bool, changed ...chan struct{}) {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	merged := make(chan struct{}, 1)
	stop := make(chan struct{})
	defer close(stop)
	for _, c := range changed {
		go func() {
			for {
				select {
				case <-c:
					signal(merged)
				case <-stop:
					return
				}
			}
		}()
	}
	for !cond() {
		select {
		case <-merged:
		case <-deadline.C:
			t.Fatalf("%s: not after 20 s", what)
		}
	}
}

// fates counts a proxy's fates toward the server.
type fates struct {
	mu                  sync.Mutex
	n, copies, overflow int
	lost                int
	changed             chan struct{}
}

func observeFates(p *Proxy) *fates {
	f := &fates{changed: make(chan struct{}, 1)}
	p.Observe(func(fa Fate, _ []byte) {
		if fa.Dir != ToServer {
			return
		}
		f.mu.Lock()
		f.n++
		f.copies += fa.Copies
		f.overflow += fa.Overflow
		if fa.Copies+fa.Overflow == 0 {
			f.lost++
		}
		f.mu.Unlock()
		signal(f.changed)
	})
	return f
}

func (f *fates) get() (n, copies, overflow, lost int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n, f.copies, f.overflow, f.lost
}

func dialProxy(t *testing.T, p *Proxy) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetWriteBuffer(4 << 20)
	return c
}

func sendNumbered(c *net.UDPConn, i, size int) {
	b := make([]byte, size)
	binary.LittleEndian.PutUint32(b, uint32(i))
	c.Write(b)
}

// A burst larger than the queue is cut to the queue: at 2000 B/s the
// first of 500-byte datagrams leaves 250 ms after it came, long after the
// burst has reached the proxy, so a queue of 2000 bytes keeps exactly 4.
// With Loss, the datagrams lost never reach the queue, which keeps 4 of
// the rest.
func TestBottleneckBurstCutToQueue(t *testing.T) {
	for _, c := range []struct {
		name string
		loss float64
	}{{"lossless", 0}, {"loss", 0.5}} {
		t.Run(c.name, func(t *testing.T) {
			const burst, size, queue = 40, 500, 2000
			s := newSink(t)
			p, err := New(s.addr, Config{Rate: 2000, QueueBytes: queue, Loss: c.loss, Seed: 5, SocketBuffer: 4 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			f := observeFates(p)
			cl := dialProxy(t, p)
			for i := range burst {
				sendNumbered(cl, i, size)
			}
			waitFor(t, "fates", func() bool { n, _, _, _ := f.get(); return n == burst }, f.changed)
			_, copies, overflow, lost := f.get()
			st := p.Bottleneck(ToServer)
			t.Logf("lost %d, %+v", lost, st)
			if c.loss > 0 && (lost < 8 || lost > 32) {
				t.Fatalf("lost %d of %d at %.0f%%", lost, burst, 100*c.loss)
			}
			offered := burst - lost
			if copies != queue/size || overflow != offered-queue/size ||
				st.Offered != uint64(offered) || st.Dropped != uint64(overflow) || st.MaxQueue != queue {
				t.Fatalf("fates: %d forwarded, %d overflowed, %d lost; bottleneck %+v", copies, overflow, lost, st)
			}
			waitFor(t, "arrivals", func() bool { return s.received() == copies }, s.changed)
			s.mu.Lock()
			defer s.mu.Unlock()
			for i := 1; i < len(s.seq); i++ {
				if s.seq[i] <= s.seq[i-1] {
					t.Fatalf("arrivals out of order: %v", s.seq)
				}
			}
			if c.loss == 0 && s.seq[0] != 0 {
				t.Fatalf("arrived %v, want the burst's first", s.seq)
			}
			if st := p.Bottleneck(ToServer); st.Forwarded != uint64(copies) || st.Bytes != uint64(copies*size) {
				t.Fatalf("after the queue drained: %+v", st)
			}
			if st := p.Bottleneck(ToClient); st != (BottleneckStats{}) {
				t.Fatalf("the other direction counted %+v", st)
			}
		})
	}
}

// Offered twice its rate for 0.6 s, a bottleneck of 1 MB/s delivers at 1
// MB/s, in order, and drops the rest at its queue.
func TestBottleneckRate(t *testing.T) {
	const (
		rate  = 1_000_000
		size  = 1000
		total = 1200 // at 2000 datagrams/s, twice the rate
		queue = 256 << 10
	)
	s := newSink(t)
	p, err := New(s.addr, Config{Rate: rate, QueueBytes: queue, SocketBuffer: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	f := observeFates(p)
	cl := dialProxy(t, p)
	// Send in top-ups: however late a tick, the sends catch up with twice
	// the rate, so the queue stays full and the link busy.
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	sent := 0
	for sent < total {
		due := min(total, int(time.Since(start).Seconds()*2*rate/size)+1)
		for ; sent < due; sent++ {
			sendNumbered(cl, sent, size)
		}
		<-tick.C
	}
	tick.Stop()
	waitFor(t, "fates", func() bool { n, _, _, _ := f.get(); return n == total }, f.changed)
	_, copies, overflow, _ := f.get()
	waitFor(t, "arrivals", func() bool { return s.received() == copies }, s.changed)

	st := p.Bottleneck(ToServer)
	if st.Offered != total || st.Forwarded != uint64(copies) || st.Dropped != uint64(overflow) ||
		st.Bytes != uint64(copies*size) || st.MaxQueue > queue || st.Dropped == 0 {
		t.Fatalf("fates: %d forwarded, %d overflowed; bottleneck %+v", copies, overflow, st)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 1; i < len(s.seq); i++ {
		if s.seq[i] <= s.seq[i-1] {
			t.Fatalf("arrival %d is %d after %d", i, s.seq[i], s.seq[i-1])
		}
	}
	// The rate between the first arrival and the last: every datagram
	// but the first left the link in that span.
	span := s.at[len(s.at)-1].Sub(s.at[0])
	got := float64((len(s.seq)-1)*size) / span.Seconds()
	t.Logf("%d of %d datagrams through in %v: %.0f B/s (%.1f%% of the rate), queue at most %d", len(s.seq), total, span, got, 100*got/rate, st.MaxQueue)
	if got < 0.80*rate || got > 1.05*rate {
		t.Fatalf("throughput %.0f B/s, want 80-105%% of %d", got, rate)
	}
}

// Random loss applies on top of a bottleneck, both ways: what is lost
// never reaches the queue, and what reaches a queue with room goes
// through.
func TestBottleneckWithLoss(t *testing.T) {
	const n = 400
	var p *Proxy
	got, fates := roundTripProxy(t, Config{Loss: 0.25, Rate: 200_000, Seed: 11}, n, &p)
	lost := [2]int{}
	for _, f := range fates {
		if f.Copies == 0 {
			lost[f.Dir]++
		}
		if f.Overflow != 0 {
			t.Fatalf("overflow at a queue with room: %+v", f)
		}
	}
	up, down := p.Bottleneck(ToServer), p.Bottleneck(ToClient)
	t.Logf("lost %v; to server %+v; to client %+v", lost, up, down)
	if lost[ToServer] < 60 || lost[ToServer] > 140 {
		t.Fatalf("lost %d of %d at 25%%", lost[ToServer], n)
	}
	echoed := n - lost[ToServer]
	if up.Offered != uint64(echoed) || up.Forwarded != up.Offered || up.Dropped != 0 ||
		down.Offered != uint64(echoed-lost[ToClient]) || down.Forwarded != down.Offered ||
		len(got) != int(down.Forwarded) || down.Bytes != 4*down.Forwarded {
		t.Fatalf("%d arrived back", len(got))
	}
}
