package batchio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var modes = []Mode{ModeNetpoll, ModeBlocking}

// serve runs an echo loop on every socket of g until g is closed. onRecv,
// if not nil, sees each datagram (on the socket's goroutine) before it is
// echoed. The returned wait function blocks until every loop has exited.
func serve(t testing.TB, g *Group, onRecv func(sock int, m *Message)) (wait func()) {
	return recvLoops(t, g, onRecv, true)
}

// recvLoops receives on every socket of g until g is closed, passing each
// datagram to onRecv (if not nil) on the socket's goroutine, and with echo
// sends each batch back.
func recvLoops(t testing.TB, g *Group, onRecv func(sock int, m *Message), echo bool) (wait func()) {
	var wg sync.WaitGroup
	for i, s := range g.Sockets() {
		wg.Go(func() {
			if s.Mode() == ModeBlocking {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			b := g.NewBatch()
			for {
				n, err := s.Recv(b)
				if err != nil {
					if !errors.Is(err, net.ErrClosed) {
						t.Errorf("socket %d: Recv: %v", i, err)
					}
					return
				}
				if onRecv != nil {
					for j := range n {
						onRecv(i, &b.Msgs[j])
					}
				}
				if !echo {
					continue
				}
				if err := s.Send(b, n); err != nil {
					if !errors.Is(err, net.ErrClosed) {
						t.Errorf("socket %d: Send: %v", i, err)
					}
					return
				}
			}
		})
	}
	return wg.Wait
}

// payload fills p with a recognizable pattern for (src, seq).
func payload(p []byte, src, seq int) []byte {
	for i := range p {
		p[i] = byte(src*31 + seq*7 + i)
	}
	if len(p) >= 4 {
		binary.BigEndian.PutUint16(p[0:2], uint16(src))
		binary.BigEndian.PutUint16(p[2:4], uint16(seq))
	}
	return p
}

// TestGroupManySources: 199 sources (127.0.0.2 … 127.0.0.200) send datagrams
// of mixed sizes to a group of 4 sockets; every datagram must arrive exactly
// once across the group, every socket must get traffic, and every echo must
// reach its source intact.
func TestGroupManySources(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			g := listen(t, "127.0.0.1:0", Config{Sockets: 4, Mode: mode})
			type key struct {
				src netip.Addr
				seq int
			}
			var mu sync.Mutex
			seen := make(map[key]int)
			perSocket := make([]int, 4)
			sockOf := make(map[netip.Addr]int)
			wait := serve(t, g, func(sock int, m *Message) {
				if m.N < 4 {
					return
				}
				k := key{m.Addr.Addr(), int(binary.BigEndian.Uint16(m.Buf[2:4]))}
				mu.Lock()
				seen[k]++
				perSocket[sock]++
				if prev, ok := sockOf[k.src]; ok && prev != sock {
					t.Errorf("source %v moved from socket %d to %d", k.src, prev, sock)
				}
				sockOf[k.src] = sock
				mu.Unlock()
			})
			defer wait()
			defer g.Close()

			const sources, perSource = 199, 20
			sem := make(chan struct{}, 16) // bounds datagrams in flight
			var wg sync.WaitGroup
			for src := 2; src < 2+sources; src++ {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					if err := echoClient(g.LocalAddr(), netip.AddrFrom4([4]byte{127, 0, 0, byte(src)}), src, perSource); err != nil {
						t.Errorf("source %d: %v", src, err)
					}
				}()
			}
			wg.Wait()
			g.Close() // so the loops publish their last counters
			wait()
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != sources*perSource {
				t.Errorf("received %d distinct datagrams, want %d", len(seen), sources*perSource)
			}
			for k, n := range seen {
				if n != 1 {
					t.Errorf("%v seq %d received %d times", k.src, k.seq, n)
				}
			}
			for i, n := range perSocket {
				if n == 0 {
					t.Errorf("socket %d received nothing (spread %v)", i, perSocket)
				}
			}
			st := g.Stats()
			t.Logf("spread %v; batch fill %.2f; stats %+v", perSocket, st.RxBatchFill(), st)
			if st.RxPackets != sources*perSource || st.TxPackets != sources*perSource || st.TxErrors != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// echoClient sends n datagrams of mixed sizes (4 … 1472 bytes) from src to
// server and checks that each echo comes back with the same content.
func echoClient(server netip.AddrPort, src netip.Addr, id, n int) error {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)))
	if err != nil {
		return err
	}
	defer c.Close()
	sent := make(map[int][]byte, n)
	for seq := range n {
		size := 4 + (id*131+seq*977)%1469 // 4 … 1472
		p := payload(make([]byte, size), id, seq)
		sent[seq] = p
		if _, err := c.WriteToUDPAddrPort(p, server); err != nil {
			return err
		}
	}
	buf := make([]byte, 2048)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for range n {
		k, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return fmt.Errorf("%d of %d echoes missing: %w", len(sent), n, err)
		}
		if from != server {
			return fmt.Errorf("echo from %v, want %v", from, server)
		}
		seq := int(binary.BigEndian.Uint16(buf[2:4]))
		want, ok := sent[seq]
		if !ok || !bytes.Equal(buf[:k], want) {
			return fmt.Errorf("echo of seq %d wrong or duplicated (%d bytes)", seq, k)
		}
		delete(sent, seq)
	}
	return nil
}

// TestMixedSizesInOneBatch sends a burst of every size pattern before the
// server reads, so single recvmmsg calls see mixed sizes.
func TestMixedSizesInOneBatch(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			g := listen(t, "127.0.0.1:0", Config{Sockets: 1, Mode: mode})
			c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			sizes := []int{1, 1472, 2, 700, 48, 1471, 3, 1000, 1, 64}
			var want [][]byte
			for i, n := range sizes {
				p := make([]byte, n)
				for j := range p {
					p[j] = byte(i + j)
				}
				want = append(want, p)
				if _, err := c.WriteToUDPAddrPort(p, g.LocalAddr()); err != nil {
					t.Fatal(err)
				}
			}
			s, b := g.Sockets()[0], g.NewBatch()
			got := 0
			for got < len(sizes) {
				n, err := s.Recv(b)
				if err != nil {
					t.Fatal(err)
				}
				for i := range n {
					m := &b.Msgs[i]
					if !bytes.Equal(m.Buf[:m.N], want[got]) || m.Truncated {
						t.Errorf("datagram %d: %d bytes, truncated=%v; want %d bytes", got, m.N, m.Truncated, len(want[got]))
					}
					if len(m.Buf) != DefaultMessageSize || cap(m.Buf) != DefaultMessageSize {
						t.Errorf("Buf len/cap %d/%d, want the full slot", len(m.Buf), cap(m.Buf))
					}
					if m.Addr != netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(c.LocalAddr().(*net.UDPAddr).Port)) {
						t.Errorf("source %v", m.Addr)
					}
					got++
				}
				if err := s.Send(b, n); err != nil {
					t.Fatal(err)
				}
			}
			buf := make([]byte, 2048)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			for i := range sizes {
				k, err := c.Read(buf)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf[:k], want[i]) {
					t.Errorf("echo %d: %d bytes, want %d", i, k, len(want[i]))
				}
			}
		})
	}
}

func TestIPv6Loopback(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			g := listen(t, "[::1]:0", Config{Sockets: 2, Mode: mode})
			wait := serve(t, g, func(_ int, m *Message) {
				if !m.Addr.Addr().Is6() || m.Addr.Addr() != netip.IPv6Loopback() {
					t.Errorf("source %v, want [::1]", m.Addr)
				}
			})
			defer wait()
			defer g.Close()
			if err := echoClient(g.LocalAddr(), netip.IPv6Loopback(), 1, 10); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDualStack: a group on [::] sees an IPv4 sender as a plain IPv4
// address and answers it, and still serves IPv6.
func TestDualStack(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			g := listen(t, "[::]:0", Config{Sockets: 2, Mode: mode})
			var v4, v6 atomic.Int32
			wait := serve(t, g, func(_ int, m *Message) {
				switch {
				case m.Addr.Addr().Is4():
					v4.Add(1)
				case m.Addr.Addr().Is4In6():
					t.Errorf("source %v is IPv4-mapped, want plain IPv4", m.Addr)
				default:
					v6.Add(1)
				}
			})
			defer wait()
			defer g.Close()
			port := g.LocalAddr().Port()
			if !g.LocalAddr().Addr().Is6() || !g.LocalAddr().Addr().IsUnspecified() {
				t.Errorf("LocalAddr %v", g.LocalAddr())
			}
			if err := echoClient(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), netip.MustParseAddr("127.0.0.7"), 1, 5); err != nil {
				t.Fatal(err)
			}
			if err := echoClient(netip.AddrPortFrom(netip.IPv6Loopback(), port), netip.IPv6Loopback(), 2, 5); err != nil {
				t.Fatal(err)
			}
			if v4.Load() != 5 || v6.Load() != 5 {
				t.Errorf("saw %d IPv4 and %d IPv6 datagrams, want 5 and 5", v4.Load(), v6.Load())
			}
		})
	}
}

func TestTruncated(t *testing.T) {
	g := listen(t, "127.0.0.1:0", Config{Sockets: 1, MessageSize: 100})
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(g.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big := payload(make([]byte, 300), 1, 1)
	c.Write(big)
	c.Write([]byte("small"))
	s, b := g.Sockets()[0], g.NewBatch()
	var msgs []Message
	for len(msgs) < 2 {
		n, err := s.Recv(b)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			m := b.Msgs[i]
			m.Buf = bytes.Clone(m.Buf[:m.N])
			msgs = append(msgs, m)
		}
	}
	if !msgs[0].Truncated || msgs[0].N != 100 || !bytes.Equal(msgs[0].Buf, big[:100]) {
		t.Errorf("oversize datagram: truncated=%v N=%d", msgs[0].Truncated, msgs[0].N)
	}
	if msgs[1].Truncated || string(msgs[1].Buf) != "small" {
		t.Errorf("following datagram: truncated=%v %q", msgs[1].Truncated, msgs[1].Buf)
	}
	if st := g.Stats(); st.RxTruncated != 1 {
		t.Errorf("RxTruncated = %d, want 1", st.RxTruncated)
	}
}

// TestCloseUnblocksRecv: Close wakes a Recv blocked on an idle socket, in
// both modes, well before the SO_RCVTIMEO safety net would.
func TestCloseUnblocksRecv(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			g := listen(t, "127.0.0.1:0", Config{Sockets: 2, Mode: mode})
			errs := make(chan error, 2)
			for _, s := range g.Sockets() {
				go func() {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					_, err := s.Recv(g.NewBatch())
					errs <- err
				}()
			}
			time.Sleep(50 * time.Millisecond)
			start := time.Now()
			if err := g.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			for range 2 {
				select {
				case err := <-errs:
					if !errors.Is(err, net.ErrClosed) {
						t.Errorf("Recv returned %v, want net.ErrClosed", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("Recv still blocked 5 s after Close")
				}
			}
			t.Logf("Recv returned %v after Close", time.Since(start))
			if d := time.Since(start); mode == ModeBlocking && d >= blockingWakeInterval {
				t.Logf("note: woke only by the SO_RCVTIMEO safety net (%v)", d)
			}
			s := g.Sockets()[0]
			if err := s.Send(g.NewBatch(), 0); err != nil {
				t.Errorf("empty Send after Close: %v", err)
			}
			b := g.NewBatch()
			b.Msgs[0].N, b.Msgs[0].Addr = 1, g.LocalAddr()
			if err := s.Send(b, 1); !errors.Is(err, net.ErrClosed) {
				t.Errorf("Send after Close: %v", err)
			}
		})
	}
}

// TestTinySendBufferNoLoss: a socket with the smallest send buffer sends a
// large burst with Send while several goroutines use WriteTo; a receiver
// with a big buffer must count every datagram.
func TestTinySendBufferNoLoss(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			rx := listen(t, "127.0.0.1:0", Config{Sockets: 1, Mode: ModeNetpoll, RecvBuffer: 64 << 20})
			if len(rx.Warnings()) > 0 {
				t.Skipf("receiver cannot get a big buffer: %v", rx.Warnings())
			}
			tx := listen(t, "127.0.0.1:0", Config{Sockets: 1, Mode: mode, SendBuffer: 1})
			ts := tx.Sockets()[0]
			var sndbuf int
			ts.sys.rc.Control(func(fd uintptr) { sndbuf, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF) })
			t.Logf("sender SO_SNDBUF %d", sndbuf)

			const (
				batches   = 200
				batchSize = 64
				writers   = 4
				perWriter = 3000
				size      = 200
				total     = batches*batchSize + writers*perWriter
			)
			var got atomic.Int64
			recvDone := make(chan struct{})
			go func() {
				defer close(recvDone)
				b := rx.NewBatch()
				for got.Load() < total {
					n, err := rx.Sockets()[0].Recv(b)
					if err != nil {
						return
					}
					got.Add(int64(n))
				}
			}()
			var wg sync.WaitGroup
			wg.Add(1 + writers)
			go func() {
				defer wg.Done()
				b := NewBatch(batchSize, size)
				for i := range batchSize {
					b.Msgs[i].N, b.Msgs[i].Addr = size, rx.LocalAddr()
				}
				for range batches {
					if err := ts.Send(b, batchSize); err != nil {
						t.Errorf("Send: %v", err)
						return
					}
				}
			}()
			for range writers {
				go func() {
					defer wg.Done()
					p := make([]byte, size)
					for range perWriter {
						if err := ts.WriteTo(p, rx.LocalAddr()); err != nil {
							t.Errorf("WriteTo: %v", err)
							return
						}
					}
				}()
			}
			wg.Wait()
			select {
			case <-recvDone:
			case <-time.After(10 * time.Second):
			}
			rst, tst := rx.Stats(), tx.Stats()
			t.Logf("sender %+v", tst)
			t.Logf("receiver got %d of %d, kernel drops %d", got.Load(), total, rst.RxDrops)
			if got.Load() != total {
				t.Errorf("received %d of %d datagrams", got.Load(), total)
			}
			if tst.TxPackets != total || tst.TxErrors != 0 {
				t.Errorf("sender stats %+v", tst)
			}
		})
	}
}

// TestSendFaultInjection drives Send's loop through partial sends, EAGAIN
// and per-datagram errors with a fake sendmmsg, and checks that exactly the
// refused datagrams are missing.
func TestSendFaultInjection(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			rx := listen(t, "127.0.0.1:0", Config{Sockets: 1, Mode: ModeNetpoll})
			tx := listen(t, "127.0.0.1:0", Config{Sockets: 1, Mode: mode})

			const refusedLen = 13
			var calls int
			sendmmsgHook = func(fd uintptr, hdrs []unix.Mmsghdr) (int, syscall.Errno) {
				calls++
				// EAGAIN can only be injected for a blocking socket: the
				// netpoller would wait for an edge that never comes.
				if mode == ModeBlocking && calls%3 == 0 {
					return 0, unix.EAGAIN
				}
				if hdrs[0].Hdr.Iov.Len == refusedLen {
					return 0, unix.EPERM
				}
				k := min(len(hdrs), 3)
				for i := 1; i < k; i++ {
					if hdrs[i].Hdr.Iov.Len == refusedLen {
						k = i
					}
				}
				r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafePointer(&hdrs[0])), uintptr(k), 0, 0, 0)
				return int(r), e
			}
			defer func() { sendmmsgHook = nil }()

			b := NewBatch(32, 64)
			want := map[int]bool{}
			refused := 0
			for i := range 32 {
				m := &b.Msgs[i]
				m.N = 20 + i%5
				if i%7 == 3 {
					m.N = refusedLen
					refused++
				} else {
					want[i] = true
				}
				m.Buf[0] = byte(i)
				m.Addr = rx.LocalAddr()
			}
			// One destination of the wrong family is skipped as well.
			b.Msgs[30].Addr = netip.MustParseAddrPort("[::1]:9")
			delete(want, 30)
			if err := tx.Sockets()[0].Send(b, 32); err != nil {
				t.Fatal(err)
			}
			sendmmsgHook = nil
			rb := rx.NewBatch()
			for len(want) > 0 {
				n, err := rx.Sockets()[0].Recv(rb)
				if err != nil {
					t.Fatal(err)
				}
				for i := range n {
					id := int(rb.Msgs[i].Buf[0])
					if !want[id] {
						t.Fatalf("unexpected datagram %d", id)
					}
					delete(want, id)
				}
			}
			st := tx.Stats()
			t.Logf("stats %+v", st)
			if st.TxErrors != uint64(refused+1) || st.TxPackets != uint64(32-refused-1) || st.TxPartial == 0 {
				t.Errorf("stats %+v; want %d errors, %d packets, partial sends", st, refused+1, 32-refused-1)
			}
			if mode == ModeBlocking && st.TxWaits == 0 {
				t.Errorf("no EAGAIN waits counted")
			}
		})
	}
}

// TestKernelDrops overflows a tiny receive buffer and checks that Stats
// reports the drops before anything has been received (the count is read
// from the socket, not carried on later datagrams), that received plus
// dropped accounts for exactly the datagrams sent, and that the count
// survives Close.
func TestKernelDrops(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			g := listen(t, "127.0.0.1:0", Config{Sockets: 1, Mode: mode, RecvBuffer: 1})
			for _, w := range g.Warnings() {
				if strings.Contains(w, "SO_MEMINFO") {
					t.Fatalf("warning: %s", w)
				}
			}
			c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(g.LocalAddr()))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			const burst = 500
			p := make([]byte, 100)
			for range burst {
				if _, err := c.Write(p); err != nil {
					t.Fatal(err)
				}
			}
			s := g.Sockets()[0]
			// Loopback normally delivers inside the sender's write; allow
			// for delivery deferred to ksoftirqd.
			deadline := time.Now().Add(10 * time.Second)
			for s.Stats().RxDrops == 0 {
				if time.Now().After(deadline) {
					t.Fatal("no kernel drops reported before receiving")
				}
				time.Sleep(time.Millisecond)
			}
			var received atomic.Int64
			recvd := make(chan struct{}, 1) // a receive since the last look
			recvDone := make(chan struct{})
			go func() {
				defer close(recvDone)
				b := g.NewBatch()
				for {
					n, err := s.Recv(b)
					if err != nil {
						return
					}
					received.Add(int64(n))
					select {
					case recvd <- struct{}{}:
					default:
					}
				}
			}()
			// account waits until received + dropped is sent. A drop
			// happens only while the buffer is full, so a receive always
			// follows it: checking at each receive misses nothing.
			account := func(sent int) {
				t.Helper()
				timeout := time.After(time.Until(deadline))
				for {
					drops := s.Stats().RxDrops
					got := received.Load()
					if got+int64(drops) > int64(sent) {
						t.Fatalf("received %d + drops %d > %d sent", got, drops, sent)
					}
					if got+int64(drops) == int64(sent) {
						return
					}
					select {
					case <-recvd:
					case <-timeout:
						t.Fatalf("received %d + drops %d do not account for %d sent", got, drops, sent)
					}
				}
			}
			account(burst)
			// One more datagram behind the burst, into the now empty
			// buffer: once it is received, the kernel and Recv are done
			// with every datagram before it, so a miscount would show.
			drops := s.Stats().RxDrops
			if _, err := c.Write(p); err != nil {
				t.Fatal(err)
			}
			account(burst + 1)
			g.Close()
			<-recvDone
			st, gst := s.Stats(), g.Stats()
			t.Logf("sent %d, received %d, kernel drops %d", burst+1, received.Load(), st.RxDrops)
			if received.Load() < 2 || st.RxDrops != drops || received.Load()+int64(st.RxDrops) != burst+1 || gst.RxDrops != st.RxDrops {
				t.Errorf("after Close: received %d, socket drops %d (%d before the last datagram), group drops %d; want received + drops = %d",
					received.Load(), st.RxDrops, drops, gst.RxDrops, burst+1)
			}
		})
	}
}

// TestSocketOptions: IPv4 traffic gets the don't-fragment setting by
// default (IP_PMTUDISC_PROBE on IPv4 and dual-stack sockets) and keeps the
// system default with AllowFragmentation; IPv6 always keeps the system
// default; and no socket asks for per-datagram SO_RXQ_OVFL control
// messages.
func TestSocketOptions(t *testing.T) {
	type opt struct {
		name        string
		level, opt  int
		probe       int
		plainFamily int  // family of a plain socket that shows the system default
		never       bool // never set: the system default either way
	}
	ip4 := opt{"IP_MTU_DISCOVER", unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE, unix.AF_INET, false}
	ip6 := opt{"IPV6_MTU_DISCOVER", unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_PROBE, unix.AF_INET6, true}
	systemDefault := func(o opt) int {
		fd, err := unix.Socket(o.plainFamily, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		v, err := unix.GetsockoptInt(fd, o.level, o.opt)
		if err != nil {
			t.Fatal(err)
		}
		if v == o.probe {
			t.Fatalf("%s system default is already PROBE: the test cannot tell", o.name)
		}
		return v
	}
	for _, tc := range []struct {
		addr string
		opts []opt
	}{
		{"127.0.0.1:0", []opt{ip4}},
		{"[::1]:0", []opt{ip6}},
		{"[::]:0", []opt{ip4, ip6}},
	} {
		for _, allow := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/AllowFragmentation=%v", tc.addr, allow), func(t *testing.T) {
				g := listen(t, tc.addr, Config{Sockets: 2, AllowFragmentation: allow})
				if w := g.Warnings(); len(w) > 0 {
					t.Logf("warnings: %v", w)
				}
				for i, s := range g.Sockets() {
					for _, o := range tc.opts {
						want := o.probe
						if allow || o.never {
							want = systemDefault(o)
						}
						var got, ovfl int
						var gerr, oerr error
						s.sys.rc.Control(func(fd uintptr) {
							got, gerr = unix.GetsockoptInt(int(fd), o.level, o.opt)
							ovfl, oerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RXQ_OVFL)
						})
						if gerr != nil || oerr != nil {
							t.Fatalf("socket %d: getsockopt: %v, %v", i, gerr, oerr)
						}
						if got != want {
							t.Errorf("socket %d: %s = %d, want %d", i, o.name, got, want)
						}
						if ovfl != 0 {
							t.Errorf("socket %d: SO_RXQ_OVFL enabled", i)
						}
					}
				}
				// The sockets still echo, DF or not.
				wait := serve(t, g, nil)
				defer wait()
				defer g.Close()
				dst := g.LocalAddr()
				src := netip.MustParseAddr("127.0.0.1")
				if dst.Addr().Is6() {
					src = netip.IPv6Loopback()
				}
				dst = netip.AddrPortFrom(src, dst.Port())
				if err := echoClient(dst, src, 1, 10); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestControlMessagesIgnored: control messages a Config.Control hook
// enables have no buffer to go to; datagrams must still arrive whole and
// be echoed, and drops still be counted.
func TestControlMessagesIgnored(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			g, err := Listen("127.0.0.1:0", Config{Sockets: 1, Mode: mode, Control: func(_, _ string, c syscall.RawConn) error {
				var serr error
				err := c.Control(func(fd uintptr) {
					for _, o := range [][2]int{
						{unix.IPPROTO_IP, unix.IP_PKTINFO},
						{unix.SOL_SOCKET, unix.SO_TIMESTAMPNS},
						{unix.SOL_SOCKET, unix.SO_RXQ_OVFL},
					} {
						if serr == nil {
							serr = unix.SetsockoptInt(int(fd), o[0], o[1], 1)
						}
					}
				})
				return errors.Join(err, serr)
			}})
			if err != nil {
				t.Fatal(err)
			}
			wait := serve(t, g, func(_ int, m *Message) {
				if m.Truncated {
					t.Errorf("datagram of %d bytes flagged truncated", m.N)
				}
			})
			defer wait()
			defer g.Close()
			if err := echoClient(g.LocalAddr(), netip.MustParseAddr("127.0.0.3"), 1, 50); err != nil {
				t.Fatal(err)
			}
			g.Close()
			wait()
			if st := g.Stats(); st.RxPackets != 50 || st.TxPackets != 50 || st.RxErrors != 0 || st.RxTruncated != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestConcurrentUse exercises every path at once for the race detector:
// loops echoing, WriteTo from several goroutines, Stats readers, Close.
func TestConcurrentUse(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			g := listen(t, "127.0.0.1:0", Config{Sockets: 2, Mode: mode})
			wait := serve(t, g, nil)
			c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			dst := c.LocalAddr().(*net.UDPAddr).AddrPort()
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for i := range 4 {
				wg.Go(func() {
					s := g.Sockets()[i%2]
					p := []byte("concurrent")
					for j := 0; j < 2000; j++ {
						if err := s.WriteTo(p, dst); err != nil {
							if !errors.Is(err, net.ErrClosed) {
								t.Errorf("WriteTo: %v", err)
							}
							return
						}
						// Echo traffic through the loops as well.
						if j%10 == 0 {
							c.WriteToUDPAddrPort(p, g.LocalAddr())
						}
					}
				})
			}
			// A Stats reader, which also tells when the traffic is well
			// under way: Close comes in the middle of it.
			busy := make(chan struct{})
			wg.Go(func() {
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				told := false
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						if st := g.Stats(); st.TxPackets >= 1000 && !told {
							close(busy)
							told = true
						}
					}
				}
			})
			select {
			case <-busy:
			case <-time.After(10 * time.Second):
				t.Error("fewer than 1000 datagrams sent in 10 s")
			}
			g.Close()
			close(stop)
			wg.Wait()
			wait()
		})
	}
}

// TestSendersOverlap: two goroutines sending on one blocking socket are in
// sendmmsg at the same time. Send does not hold the descriptor's write lock
// through the call, so a receive loop's replies do not wait behind a
// promotion worker's batch of Acks on the same socket.
func TestSendersOverlap(t *testing.T) {
	rx := listen(t, "127.0.0.1:0", Config{Sockets: 1})
	tx := listen(t, "127.0.0.1:0", Config{Sockets: 1, Mode: ModeBlocking})
	entered, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	sendmmsgHook = func(fd uintptr, hdrs []unix.Mmsghdr) (int, syscall.Errno) {
		if first.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
		return len(hdrs), 0
	}
	defer func() { sendmmsgHook = nil }()
	s := tx.Sockets()[0]
	send := func(res chan<- error) {
		b := NewBatch(1, 8)
		b.Msgs[0].N, b.Msgs[0].Addr = 1, rx.LocalAddr()
		res <- s.Send(b, 1)
	}
	firstDone, secondDone := make(chan error, 1), make(chan error, 1)
	go send(firstDone)
	<-entered
	go send(secondDone)
	select {
	case err := <-secondDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("a second Send waited for the first one's sendmmsg to end")
	}
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
}
