package cclient_test

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// rebinder is a UDP relay whose upstream socket (its address as the server
// sees it) can be replaced, as a NAT does when it rebinds: the server's
// packets to the old address are then lost, and the client's arrive from
// a new one.
type rebinder struct {
	front    *net.UDPConn
	server   *net.UDPAddr
	mu       sync.Mutex
	up       *net.UDPConn
	client   *net.UDPAddr
	fromCli  atomic.Int64
	restarts atomic.Int64 // RestartHandshakes forwarded to the client
	after    int64        // rebind once the client has sent this many
	rebound  atomic.Bool
}

func newRebinder(t *testing.T, server netip.AddrPort, after int64) *rebinder {
	front, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	r := &rebinder{front: front, server: net.UDPAddrFromAddrPort(server), after: after}
	r.rebind(t)
	t.Cleanup(func() {
		front.Close()
		r.mu.Lock()
		r.up.Close()
		r.mu.Unlock()
	})
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := front.ReadFromUDP(buf)
			if err != nil {
				return
			}
			r.mu.Lock()
			r.client = from
			up := r.up
			r.mu.Unlock()
			up.WriteToUDP(buf[:n], r.server)
			if r.fromCli.Add(1) == r.after {
				r.rebind(t)
				r.rebound.Store(true)
			}
		}
	}()
	return r
}

func (r *rebinder) addr() netip.AddrPort { return r.front.LocalAddr().(*net.UDPAddr).AddrPort() }

func (r *rebinder) rebind(t *testing.T) {
	up, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Error(err)
		return
	}
	r.mu.Lock()
	old := r.up
	r.up = up
	r.mu.Unlock()
	if old != nil {
		old.Close()
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, err := up.Read(buf)
			if err != nil {
				return
			}
			// A RestartHandshake: HandshakeBit set, PacketType 4 (bits 23..30).
			if n > 3 && buf[0]&0x20 != 0 && (uint32(buf[2])>>7|uint32(buf[3])<<1)&0xff == 4 {
				r.restarts.Add(1)
			}
			r.mu.Lock()
			c := r.client
			r.mu.Unlock()
			if c != nil {
				r.front.WriteToUDP(buf[:n], c)
			}
		}
	}()
}

// TestMigration: the NAT in front of the C client rebinds in the middle of
// 1,000 reliable messages; the client hears the server's RestartHandshake
// after 1.5 s of silence, restarts (§6.4) and finishes on the same
// connection.
func TestMigration(t *testing.T) {
	eachVariant(t, func(t *testing.T, prog string) {
		s, _, _, h := startServer(t, setup{loss: -1})
		r := newRebinder(t, s.Addr(), 30)
		out := runC(t, prog, "reliable", r.addr().String(), "1000")
		if !strings.Contains(out, "ok reliable 1000") {
			t.Fatalf("C client:\n%s", out)
		}
		if !r.rebound.Load() || r.restarts.Load() == 0 {
			t.Fatalf("rebound %v, %d RestartHandshakes: the test did not move the client", r.rebound.Load(), r.restarts.Load())
		}
		if got := len(h.messages(0)); got != 1000 {
			t.Fatalf("server got %d messages, want 1000 on one connection", got)
		}
		if n := h.connects.Load(); n != 1 {
			t.Fatalf("%d connections, want the one that moved", n)
		}
	})
}
