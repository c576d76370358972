package netem

import (
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// echoServer answers every datagram with itself.
func echoServer(t *testing.T) netip.AddrPort {
	t.Helper()
	s, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.SetReadBuffer(roundTripBuffer)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := s.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			s.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	return s.LocalAddr().(*net.UDPAddr).AddrPort()
}

// roundTripBuffer is the receive buffer of every socket in a round trip
// (the proxy's, the echo's, the client's), so that a burst while a reader
// is descheduled on a busy machine is not dropped by the kernel, which no
// fate would count.
const roundTripBuffer = 1 << 20

// roundTrip sends n numbered datagrams through a proxy and returns the
// numbers echoed back, in arrival order. It waits for what the fates say
// will arrive (every datagram to the server decided, every copy echoed and
// decided, every copy to the client read), for at most 20 s, not for a
// quiet spell: on a loaded machine any pause can be long.
func roundTrip(t *testing.T, cfg Config, n int) (got []uint32, fates []Fate) {
	t.Helper()
	return roundTripProxy(t, cfg, n, nil)
}

// roundTripProxy is roundTrip, and sets *proxy, if proxy is not nil, to
// the proxy (closed) for its counters.
func roundTripProxy(t *testing.T, cfg Config, n int, proxy **Proxy) (got []uint32, fates []Fate) {
	t.Helper()
	if cfg.SocketBuffer == 0 {
		cfg.SocketBuffer = roundTripBuffer
	}
	p, err := New(echoServer(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if proxy != nil {
		*proxy = p
	}
	defer p.Close()
	var mu sync.Mutex
	changed := make(chan struct{}, 1)
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	p.Observe(func(f Fate, _ []byte) {
		mu.Lock()
		fates = append(fates, f)
		mu.Unlock()
		signal()
	})
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadBuffer(roundTripBuffer)
	// Read while sending: a small socket buffer would otherwise overflow.
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 64)
		for {
			k, err := c.Read(buf)
			if err != nil {
				return
			}
			mu.Lock()
			got = append(got, binary.LittleEndian.Uint32(buf[:k]))
			mu.Unlock()
			signal()
		}
	}()
	pace := time.NewTicker(100 * time.Microsecond) // 10,000 datagrams/s
	defer pace.Stop()
	for i := range n {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(i))
		c.Write(b[:])
		<-pace.C
	}
	// complete: every datagram has had its fate both ways and every copy
	// the fates sent to the client has arrived.
	complete := func() bool {
		mu.Lock()
		defer mu.Unlock()
		toServer, echoes, toClient, arrive := 0, 0, 0, 0
		for _, f := range fates {
			if f.Dir == ToServer {
				toServer++
				echoes += f.Copies
			} else {
				toClient++
				arrive += f.Copies
			}
		}
		return toServer == n && toClient == echoes && len(got) == arrive
	}
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
wait:
	for !complete() {
		select {
		case <-changed:
		case <-deadline.C:
			t.Errorf("round trip incomplete after 20 s")
			break wait
		}
	}
	p.Close()
	c.Close()
	<-readDone
	mu.Lock()
	defer mu.Unlock()
	return got, fates
}

func TestLossDropsEverything(t *testing.T) {
	got, fates := roundTrip(t, Config{Loss: 1}, 50)
	if len(got) != 0 || len(fates) != 50 {
		t.Fatalf("got %d back, %d fates", len(got), len(fates))
	}
}

func TestDuplicateBothWays(t *testing.T) {
	got, _ := roundTrip(t, Config{Duplicate: 1}, 20)
	if len(got) != 80 { // 2 copies to the server, each echoed twice
		t.Fatalf("got %d back, want 80", len(got))
	}
}

func TestReorderAndCounts(t *testing.T) {
	got, fates := roundTrip(t, Config{Loss: 0.25, Duplicate: 0.1, Reorder: 0.3, Jitter: 2 * time.Millisecond, Seed: 7}, 400)
	// Arrivals equal what the fates say: copies to the server times copies
	// of each echo back.
	want := 0
	for _, f := range fates {
		if f.Dir == ToClient {
			want += f.Copies
		}
	}
	if len(got) != want {
		t.Fatalf("%d arrived, fates say %d", len(got), want)
	}
	inversions := 0
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			inversions++
		}
	}
	if inversions == 0 {
		t.Fatal("no reordering seen")
	}
	lost := 0
	for _, f := range fates {
		if f.Dir == ToServer && f.Copies == 0 {
			lost++
		}
	}
	if lost < 60 || lost > 140 { // 25% of 400, loosely
		t.Fatalf("lost %d of 400 at 25%%", lost)
	}
}

func TestRefusesNonLoopback(t *testing.T) {
	if _, err := New(netip.MustParseAddrPort("192.0.2.1:9"), Config{}); err == nil {
		t.Fatal("accepted a non-loopback server")
	}
}

// A constant delay keeps the order a wire keeps: without Jitter (and
// after a bottleneck's queue) datagrams arrive in the order they were
// sent, as Linux's netem delays them. With a timer per datagram, those
// due together reordered by tens at tens of thousands a second, which a
// receiver's sequence window dropped as stale.
func TestConstantDelayKeepsOrder(t *testing.T) {
	for _, cfg := range []Config{
		{Delay: 2 * time.Millisecond},
		{Delay: 2 * time.Millisecond, Rate: 50e6, QueueBytes: 1 << 20},
	} {
		got, _ := roundTrip(t, cfg, 2000)
		if len(got) != 2000 {
			t.Fatalf("%+v: %d of 2000 echoed", cfg, len(got))
		}
		for i, g := range got {
			if g != uint32(i) {
				t.Fatalf("%+v: datagram %d arrived in place %d", cfg, g, i)
			}
		}
	}
}
