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

// roundTrip sends n numbered datagrams through a proxy and returns the
// numbers echoed back, in arrival order.
func roundTrip(t *testing.T, cfg Config, n int) (got []uint32, fates []Fate) {
	t.Helper()
	p, err := New(echoServer(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var mu sync.Mutex
	p.Observe(func(f Fate, _ []byte) {
		mu.Lock()
		fates = append(fates, f)
		mu.Unlock()
	})
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Read while sending: a small socket buffer would otherwise overflow.
	done := make(chan []uint32)
	go func() {
		var got []uint32
		buf := make([]byte, 64)
		for {
			c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			k, err := c.Read(buf)
			if err != nil {
				done <- got
				return
			}
			got = append(got, binary.LittleEndian.Uint32(buf[:k]))
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
	got = <-done
	p.Close()
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
