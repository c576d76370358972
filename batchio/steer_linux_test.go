package batchio

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// steerHash is the steering program's source hash, in Go: what the kernel
// computes from the network and UDP headers of a datagram from src.
func steerHash(seed uint32, src netip.AddrPort) uint32 {
	mix := func(h, w uint32) uint32 {
		h = (h ^ w) * hashMul
		return h ^ h>>15
	}
	h := seed
	if a := src.Addr().Unmap(); a.Is4() {
		b := a.As4()
		h = mix(h, binary.BigEndian.Uint32(b[:]))
	} else {
		b := a.As16()
		for i := 0; i < 16; i += 4 {
			h = mix(h, binary.BigEndian.Uint32(b[i:]))
		}
	}
	h = mix(h, uint32(src.Port()))
	h ^= h >> 16
	h *= hashFinMul
	return h ^ h>>13
}

// wantSocket is the index of the socket the steering program picks for p
// from src.
func wantSocket(g *Group, src netip.AddrPort, p []byte) int {
	st := g.Config().Steer
	h := steerHash(g.steerSeed, src)
	if len(p) <= st.Bit/8 || p[st.Bit/8]&(1<<(st.Bit%8)) != 0 {
		return int(h % uint32(st.SetSockets))
	}
	if g.Spreading() {
		return int(h % uint32(st.SetSockets+st.ClearSockets))
	}
	return st.SetSockets + int(h%uint32(st.ClearSockets))
}

// bitSet reports whether p counts as bit-set for steering.
func bitSet(p []byte, bit int) bool { return len(p) <= bit/8 || p[bit/8]&(1<<(bit%8)) != 0 }

// received is one datagram as a steered group's loop saw it.
type received struct {
	sock int
	src  netip.AddrPort
	data []byte
}

// record receives on every socket of g until it is closed and passes each
// datagram to got, on the socket's goroutine.
func record(t *testing.T, g *Group, got func(received)) (wait func()) {
	return recvLoops(t, g, func(sock int, m *Message) {
		got(received{sock, m.Addr, append([]byte(nil), m.Buf[:m.N]...)})
	}, false)
}

// steerTraffic sends, from each source, datagrams of every length around
// the steering bit, with the bit set and clear, and checks on arrival that
// each reached exactly the socket the program should pick: the right
// class, and within the class the socket of its source. It returns, per
// socket, how many datagrams arrived.
func steerTraffic(t *testing.T, g *Group, srcs []netip.Addr, portsPerSrc int) []int {
	t.Helper()
	bit := g.Config().Steer.Bit
	var mu sync.Mutex
	counts := make([]int, len(g.Sockets()))
	// Per source and class, the one socket its datagrams may reach.
	seen := map[string]int{}
	var total atomic.Int64
	arrived := make(chan struct{}, 1) // a datagram arrived since the last look
	wait := record(t, g, func(r received) {
		set := bitSet(r.data, bit)
		mu.Lock()
		defer mu.Unlock()
		counts[r.sock]++
		total.Add(1)
		select {
		case arrived <- struct{}{}:
		default:
		}
		class := g.Sockets()[r.sock].Class()
		if want := map[bool]Class{true: ClassBitSet, false: ClassBitClear}[set]; class != want && (set || !g.Spreading()) {
			t.Errorf("%d-byte datagram from %v (bit %d set: %v) reached socket %d of class %v, want %v", len(r.data), r.src, bit, set, r.sock, class, want)
		}
		if want := wantSocket(g, r.src, r.data); r.sock != want {
			t.Errorf("%d-byte datagram from %v reached socket %d, want socket %d", len(r.data), r.src, r.sock, want)
		}
		key := fmt.Sprintf("%v/%v", r.src, set)
		if s, ok := seen[key]; ok && s != r.sock {
			t.Errorf("source %v, bit set %v: datagrams on sockets %d and %d", r.src, set, s, r.sock)
		}
		seen[key] = r.sock
	})
	defer wait()
	defer g.Close()

	dst := g.LocalAddr()
	lengths := []int{0, 1, bit / 8, bit/8 + 1, bit/8 + 2, 48, 1200}
	sent := 0
	for _, src := range srcs {
		var to netip.AddrPort
		switch {
		case src.Is4() && (dst.Addr().Is4() || dst.Addr().IsUnspecified()):
			to = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), dst.Port())
		case src.Is6() && dst.Addr().Is6():
			to = netip.AddrPortFrom(netip.IPv6Loopback(), dst.Port())
		default:
			t.Fatalf("source %v cannot reach %v", src, dst)
		}
		for range portsPerSrc {
			c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)))
			if err != nil {
				t.Fatal(err)
			}
			for k, n := range lengths {
				for _, set := range []bool{true, false} {
					p := make([]byte, n)
					for i := range p {
						p[i] = byte(k*37 + i*11 + n)
					}
					if n > bit/8 {
						if set {
							p[bit/8] |= 1 << (bit % 8)
						} else {
							p[bit/8] &^= 1 << (bit % 8)
						}
					}
					if _, err := c.WriteToUDPAddrPort(p, to); err != nil {
						t.Fatal(err)
					}
					sent++
				}
			}
			c.Close()
		}
	}
	timeout := time.After(5 * time.Second)
wait:
	for total.Load() < int64(sent) {
		select {
		case <-arrived:
		case <-timeout:
			break wait
		}
	}
	if got := total.Load(); got != int64(sent) {
		t.Errorf("%d of %d datagrams arrived", got, sent)
	}
	g.Close()
	wait()
	mu.Lock()
	defer mu.Unlock()
	return append([]int(nil), counts...)
}

func v4Sources(n int) []netip.Addr {
	var srcs []netip.Addr
	for i := range n {
		srcs = append(srcs, netip.AddrFrom4([4]byte{127, 0, 1, byte(2 + i)}))
	}
	return srcs
}

// TestSteer: with steering on, every datagram reaches a socket of its
// class (bit set or too short: the first SetSockets sockets; bit clear:
// the rest), always the same socket for one source and class, and exactly
// the socket the program's hash picks (steerHash), which also shows that
// the program sees the payload at offset 0 and that its indices are the
// order of Group.Sockets. Bits are udpgate's HandshakeBit for magic
// headers of 0, 1, 7, 8, 13 and 32 bits, and the byte edges 0, 7 and 8.
// Uneven socket counts catch a swapped class or base.
func TestSteer(t *testing.T) {
	for _, bit := range []int{0 + 5, 1 + 5, 7 + 5, 8 + 5, 13 + 5, 32 + 5, 0, 7, 8} {
		for _, mode := range modes {
			t.Run(fmt.Sprintf("bit%d/%v", bit, mode), func(t *testing.T) {
				g := listen(t, "127.0.0.1:0", Config{Mode: mode, Steer: Steer{Enabled: true, Bit: bit, SetSockets: 2, ClearSockets: 3}})
				if !g.Steered() {
					g.Close()
					t.Fatalf("not steered: %v", g.Warnings())
				}
				if len(g.Sockets()) != 5 || g.Config().Sockets != 5 {
					t.Fatalf("%d sockets, Config.Sockets %d, want 5", len(g.Sockets()), g.Config().Sockets)
				}
				for i, s := range g.Sockets() {
					want := ClassBitClear
					if i < 2 {
						want = ClassBitSet
					}
					if s.Class() != want {
						t.Errorf("socket %d: class %v, want %v", i, s.Class(), want)
					}
				}
				counts := steerTraffic(t, g, v4Sources(20), 3)
				for i, n := range counts {
					if n == 0 {
						t.Errorf("socket %d received nothing: counts %v", i, counts)
					}
				}
			})
		}
	}
}

// TestSteerSpread: a group that spreads (Steer.Spread, Group.SetSpread)
// sends bit-clear datagrams to every socket, each source to the socket its
// hash picks among all, and bit-set ones still to the bit-set sockets only;
// SetSpread switches both ways while the group runs, and refuses a group
// that is not steered.
func TestSteerSpread(t *testing.T) {
	for _, tc := range []struct {
		name           string
		start, switch_ bool
	}{
		{"started", true, true},
		{"switched-on", false, true},
		{"switched-off", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := listen(t, "127.0.0.1:0", Config{Steer: Steer{Enabled: true, Bit: 13, SetSockets: 2, ClearSockets: 3, Spread: tc.start}})
			if !g.Steered() {
				g.Close()
				t.Fatalf("not steered: %v", g.Warnings())
			}
			if g.Spreading() != tc.start {
				t.Errorf("Spreading %v after Listen, want %v", g.Spreading(), tc.start)
			}
			for range 2 { // the second call finds it done
				if err := g.SetSpread(tc.switch_); err != nil {
					t.Fatal(err)
				}
			}
			if g.Spreading() != tc.switch_ {
				t.Fatalf("Spreading %v after SetSpread(%v)", g.Spreading(), tc.switch_)
			}
			counts := steerTraffic(t, g, v4Sources(20), 3)
			for i, n := range counts {
				if n == 0 {
					t.Errorf("socket %d received nothing: counts %v", i, counts)
				}
			}
		})
	}
	g := listen(t, "127.0.0.1:0", Config{Sockets: 2})
	if err := g.SetSpread(true); err == nil || g.Spreading() {
		t.Errorf("SetSpread on an unsteered group: err %v, Spreading %v; want an error and false", err, g.Spreading())
	}
}

// TestSteerIPv6: the IPv6 path of the program (the source address in four
// words, the UDP header found through the payload length), on an IPv6
// group and on a dual-stack group whose IPv4 peers arrive with IPv4
// headers.
func TestSteerIPv6(t *testing.T) {
	srcs := []netip.Addr{netip.IPv6Loopback()}
	for _, tc := range []struct {
		addr string
		srcs []netip.Addr
	}{
		{"[::1]:0", srcs},
		{"[::]:0", append(v4Sources(10), srcs...)},
	} {
		for _, bit := range []int{5, 13, 37} {
			t.Run(fmt.Sprintf("%s/bit%d", tc.addr, bit), func(t *testing.T) {
				g, err := Listen(tc.addr, Config{Steer: Steer{Enabled: true, Bit: bit, SetSockets: 2, ClearSockets: 2}})
				if err != nil {
					t.Skipf("no IPv6: %v", err)
				}
				if !g.Steered() {
					g.Close()
					t.Fatalf("not steered: %v", g.Warnings())
				}
				// ::1 is one address: 24 ports spread it.
				steerTraffic(t, g, tc.srcs, 24)
			})
		}
	}
}

// TestSteerDefaults: steering is off unless asked for; when asked, each
// class has Config.Sockets sockets, within MaxSockets in all.
func TestSteerDefaults(t *testing.T) {
	g := listen(t, "127.0.0.1:0", Config{Sockets: 2})
	if g.Steered() || len(g.Sockets()) != 2 {
		t.Errorf("zero Steer: steered %v with %d sockets, want unsteered with 2", g.Steered(), len(g.Sockets()))
	}
	for i, s := range g.Sockets() {
		if s.Class() != ClassAll {
			t.Errorf("socket %d: class %v, want all", i, s.Class())
		}
	}
	g.Close()
	for _, tc := range []struct{ sockets, set, clear, wantSet, wantClear int }{
		{3, 0, 0, 3, 3},
		{2, 1, 0, 1, 2},
		{MaxSockets, 0, 0, MaxSockets / 2, MaxSockets / 2},
	} {
		g := listen(t, "127.0.0.1:0", Config{Sockets: tc.sockets, Mode: ModeNetpoll, Steer: Steer{Enabled: true, Bit: 5, SetSockets: tc.set, ClearSockets: tc.clear}})
		st := g.Config().Steer
		if !g.Steered() || st.SetSockets != tc.wantSet || st.ClearSockets != tc.wantClear || len(g.Sockets()) != tc.wantSet+tc.wantClear {
			t.Errorf("%+v: steered %v, %d+%d sockets (%d in all), want %d+%d", tc, g.Steered(), st.SetSockets, st.ClearSockets, len(g.Sockets()), tc.wantSet, tc.wantClear)
		}
		g.Close()
	}
}

// TestSteerFallback: when the kernel refuses the program, the group runs
// unsteered, warns with the cause and the fix, and still works. Refused at
// the probe, it has Config.Sockets sockets, as without steering; refused
// only on the bound group, it keeps the sockets it bound.
func TestSteerFallback(t *testing.T) {
	defer func() { attachSteerHook = nil }()
	for _, tc := range []struct {
		name      string
		failAfter int // attach calls that succeed before the refusal
		sockets   int
	}{
		{"probe", 0, 2},
		{"group", 2, 4}, // after the probes of both programs
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			attachSteerHook = func(fd int, prog *unix.SockFprog) error {
				calls++
				if calls > tc.failAfter {
					return fmt.Errorf("setsockopt SO_ATTACH_REUSEPORT_CBPF: %w", unix.EPERM)
				}
				return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, prog)
			}
			g, err := Listen("127.0.0.1:0", Config{Sockets: 2, Steer: Steer{Enabled: true, Bit: 5}})
			attachSteerHook = nil
			if err != nil {
				t.Fatal(err)
			}
			if g.Steered() || g.Config().Steer.Enabled {
				t.Error("steered after the kernel refused the program")
			}
			if len(g.Sockets()) != tc.sockets || g.Config().Sockets != tc.sockets {
				t.Errorf("%d sockets (Config.Sockets %d), want %d", len(g.Sockets()), g.Config().Sockets, tc.sockets)
			}
			for i, s := range g.Sockets() {
				if s.Class() != ClassAll {
					t.Errorf("socket %d: class %v, want all", i, s.Class())
				}
			}
			w := strings.Join(g.Warnings(), "\n")
			for _, part := range []string{"cannot steer", "operation not permitted", "Linux 4.5", "SO_ATTACH_REUSEPORT_CBPF", "turn steering off"} {
				if !strings.Contains(w, part) {
					t.Errorf("warnings %q lack %q", w, part)
				}
			}
			wait := serve(t, g, nil)
			defer wait()
			defer g.Close()
			if err := echoClient(g.LocalAddr(), netip.MustParseAddr("127.0.0.1"), 1, 10); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSteerKernel pins the kernel behaviour the program relies on, with
// bare programs on a batchio group: the index is the order of
// Group.Sockets, offset 0 is the first payload byte, a load beyond the
// datagram sends it to socket 0 (a bit-set socket in a steered group), and
// an index past the last socket falls back to the kernel's hash over all
// sockets.
func TestSteerKernel(t *testing.T) {
	g := listen(t, "127.0.0.1:0", Config{Sockets: 4, Mode: ModeNetpoll})
	attach := func(prog []bpf.Instruction) {
		t.Helper()
		raw, err := bpf.Assemble(prog)
		if err != nil {
			t.Fatal(err)
		}
		var f []unix.SockFilter
		for _, r := range raw {
			f = append(f, unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K})
		}
		var aerr error
		g.Sockets()[2].sys.rc.Control(func(fd uintptr) { aerr = attachSteer(int(fd), f) })
		if aerr != nil {
			t.Fatal(aerr)
		}
	}
	newSender := func() *net.UDPConn {
		t.Helper()
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := newSender()
	defer c.Close()
	b := g.NewBatch()
	// arrival sends p from c and returns the index of the socket it
	// reached.
	arrival := func(c *net.UDPConn, p []byte) int {
		t.Helper()
		if _, err := c.WriteToUDPAddrPort(p, g.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		i := readable(g.Sockets(), 2*time.Second)
		if i < 0 {
			t.Fatal("datagram not received")
		}
		if _, err := g.Sockets()[i].Recv(b); err != nil {
			t.Fatal(err)
		}
		return i
	}
	attach([]bpf.Instruction{bpf.LoadAbsolute{Off: 0, Size: 1}, bpf.RetA{}})
	for i := range 4 {
		if got := arrival(c, []byte{byte(i), 0xff}); got != i {
			t.Errorf("program returned %d (payload byte 0): socket %d received it", i, got)
		}
	}
	attach([]bpf.Instruction{bpf.LoadAbsolute{Off: 10, Size: 1}, bpf.RetConstant{Val: 3}})
	for _, n := range []int{0, 1, 10} {
		if got := arrival(c, make([]byte, n)); got != 0 {
			t.Errorf("%d-byte datagram, load at 10: socket %d received it, want 0", n, got)
		}
	}
	if got := arrival(c, make([]byte, 11)); got != 3 {
		t.Errorf("11-byte datagram, load at 10: socket %d received it, want 3", got)
	}
	attach([]bpf.Instruction{bpf.RetConstant{Val: 4}})
	hit := map[int]bool{}
	for range 64 {
		d := newSender()
		hit[arrival(d, []byte{1})] = true
		d.Close()
	}
	if len(hit) < 2 {
		t.Errorf("index past the last socket: 64 sources all reached socket(s) %v, want the kernel's hash to spread them", hit)
	}
}

// queued reports whether s has a datagram waiting, empty ones included.
func queued(s *Socket) bool { return readable([]*Socket{s}, 0) == 0 }

// readable waits up to timeout for a datagram on one of socks (poll(2) on
// their descriptors) and returns the first such socket's index, or -1.
func readable(socks []*Socket, timeout time.Duration) int {
	pfd := make([]unix.PollFd, len(socks))
	for i, s := range socks {
		s.sys.rc.Control(func(fd uintptr) { pfd[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN} })
	}
	for {
		n, err := unix.Poll(pfd, int(timeout.Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		if n <= 0 {
			return -1
		}
		for i := range pfd {
			if pfd[i].Revents&unix.POLLIN != 0 {
				return i
			}
		}
		return -1
	}
}

// TestSteerZeroAllocs: steering happens in the kernel; a steered socket's
// Recv and Send still allocate nothing.
func TestSteerZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	srv := listen(t, "127.0.0.1:0", Config{Steer: Steer{Enabled: true, Bit: 5, SetSockets: 1, ClearSockets: 1}})
	if !srv.Steered() {
		t.Fatalf("not steered: %v", srv.Warnings())
	}
	cli := listen(t, "127.0.0.2:0", Config{Sockets: 1, Mode: ModeNetpoll})
	const n = 32
	cb := NewBatch(n, 48)
	for i := range cb.Msgs {
		cb.Msgs[i].N = 48
		cb.Msgs[i].Buf[0] = 0 // bit 5 clear: the bit-clear socket, index 1
		cb.Msgs[i].Addr = srv.LocalAddr()
	}
	s, c := srv.Sockets()[1], cli.Sockets()[0]
	sb, rb := srv.NewBatch(), cli.NewBatch()
	round := func() {
		if err := c.Send(cb, n); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < n; {
			k, err := s.Recv(sb)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Send(sb, k); err != nil {
				t.Fatal(err)
			}
			got += k
		}
		for got := 0; got < n; {
			k, err := c.Recv(rb)
			if err != nil {
				t.Fatal(err)
			}
			got += k
		}
	}
	round()
	if a := testing.AllocsPerRun(200, round); a != 0 {
		t.Errorf("steered Recv+Send round: %v allocs, want 0", a)
	}
}

// TestSteerProgramSize: the program stays far below the kernel's limit
// (BPF_MAXINSNS, 4096) and its conditional jumps within reach for every
// bit.
func TestSteerProgramSize(t *testing.T) {
	for _, bit := range []int{0, 37, maxSteerBit} {
		raw, err := steerProgram(bit, MaxSockets/2, MaxSockets/2, 1)
		if err != nil {
			t.Fatalf("bit %d: %v", bit, err)
		}
		if len(raw) > 128 {
			t.Errorf("bit %d: %d instructions", bit, len(raw))
		}
	}
}

// TestSteerSetRecvBuffer: the sockets for set bits get their own receive
// buffer, the others keep Config.RecvBuffer.
func TestSteerSetRecvBuffer(t *testing.T) {
	const base, deep = 1 << 20, 8 << 20
	g, err := Listen("127.0.0.1:0", Config{Sockets: 2, RecvBuffer: base,
		Steer: Steer{Enabled: true, Bit: 5, SetSockets: 1, ClearSockets: 1, SetRecvBuffer: deep}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if !g.Steered() {
		t.Skip("the kernel refused steering:", g.Warnings())
	}
	for i, s := range g.Sockets() {
		var got int
		var gerr error
		if err := s.sys.rc.Control(func(fd uintptr) {
			got, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		}); err != nil || gerr != nil {
			t.Fatal(err, gerr)
		}
		want := base
		if s.Class() == ClassBitSet {
			want = deep
		}
		// The kernel reports twice what was set; an unprivileged run may
		// be capped by net.core.rmem_max, which Warnings would say.
		if got/2 != want && len(g.Warnings()) == 0 {
			t.Errorf("socket %d (%v): SO_RCVBUF %d, want %d", i, s.Class(), got/2, want)
		}
	}
}

// TestSteerMatch: with Steer.Match, a datagram of exactly Match.Len bytes
// whose word at Match.Off is Match.Word reaches a bit-set socket although
// its bit is clear; one byte longer or shorter, or another word, goes by
// its bit (udpgate: sealed-mode proofs are steered with the handshakes).
func TestSteerMatch(t *testing.T) {
	const bit, n, off, word = 5, 40, 5, 0x4e455443 // "NETC"
	g, err := Listen("127.0.0.1:0", Config{Steer: Steer{Enabled: true, Bit: bit, SetSockets: 2, ClearSockets: 2,
		Match: SteerMatch{Len: n, Off: off, Word: word}}})
	if err != nil {
		t.Fatal(err)
	}
	if !g.Steered() {
		g.Close()
		t.Fatalf("not steered: %v", g.Warnings())
	}
	type arrival struct {
		class Class
		tag   byte
	}
	got := make(chan arrival, 64)
	wait := record(t, g, func(r received) { got <- arrival{g.Sockets()[r.sock].Class(), r.data[len(r.data)-1]} })
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mk := func(size int, w uint32, tag byte) []byte {
		p := make([]byte, size)
		p[bit/8] &^= 1 << (bit % 8)
		binary.BigEndian.PutUint32(p[off:], w)
		p[size-1] = tag
		return p
	}
	cases := []struct {
		p    []byte
		want Class
	}{
		{mk(n, word, 1), ClassBitSet},
		{mk(n, word+1, 2), ClassBitClear},
		{mk(n+1, word, 3), ClassBitClear},
		{mk(n-1, word, 4), ClassBitClear},
	}
	for _, tc := range cases {
		if _, err := c.WriteToUDPAddrPort(tc.p, g.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	for range cases {
		select {
		case a := <-got:
			if want := cases[a.tag-1].want; a.class != want {
				t.Errorf("datagram %d reached a %v socket, want %v", a.tag, a.class, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a datagram did not arrive")
		}
	}
	g.Close()
	wait()
}
