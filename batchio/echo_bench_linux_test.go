package batchio

// Echo comparison harness: server CPU per echoed packet for batchio's modes
// against a plain ReadFromUDPAddrPort/WriteToUDPAddrPort loop.
//
// Method. Each variant's server runs in a child process (this test binary
// re-executed with BATCHIO_ECHO_CHILD=<variant>), so its CPU time is its
// own: the parent reads the child's /proc/<pid>/task/*/schedstat (on-CPU
// nanoseconds per thread) and /proc/<pid>/stat (utime+stime ticks, which
// also keeps exited threads) at the start and end of the measuring window.
// The load generator runs in this process: S connected sockets bound to
// 127.0.0.2 … 127.0.0.(S+1), one goroutine each, sending sendmmsg batches of
// 32 × 48-byte datagrams with at most W in flight per socket, draining
// echoes with recvmmsg, and writing off the outstanding window after 50 ms
// of silence so it cannot wedge. Server CPU ns/pkt = server CPU in the
// window ÷ echoes received in the window. Variants are interleaved
// round-robin per repetition, so drift hits all alike, and ratios are taken
// within a repetition. The kernel's loopback receive work for the echo is
// charged to the server (it runs inside the server's sendmmsg), as in
// docs/limits.md.
//
// Run (about 45 s with the defaults):
//
//	BATCHIO_ECHO=1 go test -run TestEchoCompare -v -timeout 20m ./batchio/
//
// Knobs: BATCHIO_ECHO_VARIANTS (comma list, default
// "plain,netpoll,blocking"), BATCHIO_ECHO_REPS (3), BATCHIO_ECHO_DUR (3s),
// BATCHIO_ECHO_SOURCES (16), BATCHIO_ECHO_WINDOW (128),
// BATCHIO_ECHO_BATCH (server BatchSize, DefaultBatchSize), BATCHIO_ECHO_QUIET (30s: how
// long to wait for other processes to leave the CPUs idle before each run),
// BATCHIO_ECHO_BASE (the variant ratios are taken against, default plain),
// BATCHIO_ECHO_PREDROP (set: overflow every batchio socket once before the
// run, see overflowSockets).
//
// Variants: plain (one socket, one goroutine, standard library), plain2
// (the same ×2 SO_REUSEPORT), netpoll and blocking (batchio, one loop per
// socket, GOMAXPROCS sockets; blocking loops lock their thread),
// blocking-nolock (loops do not lock their thread). Suffixes: "/bN" sets
// the server's batch size for that variant, e.g. "blocking/b64"; "/frag"
// sets Config.AllowFragmentation. "@binary" runs the variant's server from
// another test binary, such as one built from an older commit
// (go test -c -o /tmp/old.test ./batchio/), so before and after are
// interleaved in one run: "blocking@/tmp/old.test,blocking" with
// BATCHIO_ECHO_BASE=blocking@/tmp/old.test.

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/udpgate/udpgate/internal/testkit/procstat"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestEchoChild is the server side of TestEchoCompare; it does nothing
// unless started by it.
func TestEchoChild(t *testing.T) {
	variant := os.Getenv("BATCHIO_ECHO_CHILD")
	if variant == "" {
		t.Skip("server process of TestEchoCompare")
	}
	port, stats, err := startEchoServer(variant, envInt("BATCHIO_ECHO_BATCH", DefaultBatchSize))
	if err != nil {
		fmt.Printf("ERROR %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("READY %d\n", port)
	// Stop when the parent closes stdin, or after a hard limit.
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
	}
	fmt.Printf("STATS %s\n", stats())
	os.Exit(0)
}

// startEchoServer starts the variant's echo loops on 127.0.0.1 and returns
// the port and a function describing its counters.
func startEchoServer(variant string, batch int) (int, func() string, error) {
	switch variant {
	case "plain", "plain2":
		n := 1
		if variant == "plain2" {
			n = 2
		}
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
		}}
		var pkts atomic.Uint64
		addr := "127.0.0.1:0"
		port := 0
		for range n {
			pc, err := lc.ListenPacket(context.Background(), "udp4", addr)
			if err != nil {
				return 0, nil, err
			}
			c := pc.(*net.UDPConn)
			c.SetReadBuffer(DefaultRecvBuffer)
			c.SetWriteBuffer(DefaultSendBuffer)
			port = c.LocalAddr().(*net.UDPAddr).Port
			addr = c.LocalAddr().String()
			go func() {
				buf := make([]byte, 2048)
				for {
					k, from, err := c.ReadFromUDPAddrPort(buf)
					if err != nil {
						return
					}
					c.WriteToUDPAddrPort(buf[:k], from)
					pkts.Add(1)
				}
			}()
		}
		return port, func() string { return fmt.Sprintf("rx=%d fill=1", pkts.Load()) }, nil
	}
	// Suffixes override the batch size ("/bN") and the don't-fragment
	// default ("/frag"), so they can be interleaved in one run.
	name, opts, _ := strings.Cut(variant, "/")
	cfg := Config{BatchSize: batch}
	for o := range strings.SplitSeq(opts, "/") {
		switch {
		case o == "":
		case o == "frag":
			cfg.AllowFragmentation = true
		case strings.HasPrefix(o, "b"):
			n, err := strconv.Atoi(o[1:])
			if err != nil {
				return 0, nil, fmt.Errorf("variant %q: bad batch size", variant)
			}
			cfg.BatchSize = n
		default:
			return 0, nil, fmt.Errorf("variant %q: unknown suffix %q", variant, o)
		}
	}
	variant = name
	lock := false
	switch variant {
	case "netpoll":
		cfg.Mode = ModeNetpoll
	case "blocking":
		cfg.Mode, lock = ModeBlocking, true
	case "blocking-nolock":
		cfg.Mode = ModeBlocking
	default:
		return 0, nil, fmt.Errorf("unknown variant %q", variant)
	}
	g, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		return 0, nil, err
	}
	if os.Getenv("BATCHIO_ECHO_PREDROP") != "" {
		if err := overflowSockets(g); err != nil {
			return 0, nil, err
		}
	}
	for _, s := range g.Sockets() {
		go func() {
			if lock {
				runtime.LockOSThread()
			}
			b := g.NewBatch()
			for {
				n, err := s.Recv(b)
				if err != nil {
					return
				}
				if s.Send(b, n) != nil {
					return
				}
			}
		}()
	}
	return int(g.LocalAddr().Port()), func() string {
		st := g.Stats()
		return fmt.Sprintf("rx=%d fill=%.1f drops=%d txcalls=%d sockets=%d", st.RxPackets, st.RxBatchFill(), st.RxDrops, st.TxCalls, len(g.Sockets()))
	}, nil
}

// overflowSockets makes the kernel drop datagrams on every socket of g
// before its loops start, so the measured traffic arrives at sockets that
// have dropped before, like a server's after its first overload: from then
// on SO_RXQ_OVFL, where enabled, attaches a control message to every
// datagram. The junk is echoed during the warm-up.
func overflowSockets(g *Group) error {
	drops := func(s *Socket) uint32 {
		// Straight from the kernel: the version under test may count
		// drops only as datagrams arrive.
		var mem [unix.SK_MEMINFO_VARS]uint32
		n := uint32(len(mem) * 4)
		s.sys.rc.Control(func(fd uintptr) {
			unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
				uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&n)), 0)
		})
		return mem[unix.SK_MEMINFO_DROPS]
	}
	var clients []*net.UDPConn
	for range 32 { // sources on many ports reach every socket of the group
		c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(g.LocalAddr()))
		if err != nil {
			return err
		}
		clients = append(clients, c)
	}
	// The echoes of the junk land in these sockets' buffers; keep them
	// open until the process exits so no ICMP goes back.
	overflowClients = clients
	p := make([]byte, 48)
	for range 100 {
		done := true
		for _, s := range g.Sockets() {
			done = done && drops(s) > 0
		}
		if done {
			return nil
		}
		for _, c := range clients {
			for range 1000 {
				c.Write(p)
			}
		}
	}
	return errors.New("could not overflow every socket")
}

// overflowClients keeps overflowSockets' sources open.
var overflowClients []*net.UDPConn

// procCPU returns pid's schedstat and stat CPU times (0 when unreadable).
func procCPU(pid int) (sched, stat time.Duration) {
	c, _ := procstat.Process(pid)
	return c.Sched, c.Stat
}

// softirqThreads returns the CPU time of the ksoftirqd threads, which take
// over softirq work (here: loopback delivery) that the senders' own
// syscalls defer when it runs too long. Such work is charged to neither
// process, so a run where it is large understates everyone's cost.
func softirqThreads() time.Duration {
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	var sum time.Duration
	for _, f := range comms {
		b, err := os.ReadFile(f)
		if err != nil || !strings.HasPrefix(string(b), "ksoftirqd/") {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		sched, _ := procCPU(pid)
		sum += sched
	}
	return sum
}

type echoResult struct {
	variant      string
	pps          float64 // echoes per second in the window
	schedNs      float64 // server CPU ns/pkt from schedstat
	statNs       float64 // server CPU ns/pkt from /proc/pid/stat
	util         float64 // server CPU / wall time
	acct         float64 // (server + load generator CPU) / machine busy CPU
	ksoftirqd    float64 // ksoftirqd CPU / wall time
	lost         int64
	serverReport string
}

func TestEchoCompare(t *testing.T) {
	if os.Getenv("BATCHIO_ECHO") == "" {
		t.Skip("set BATCHIO_ECHO=1 to run the echo comparison (about 45 s)")
	}
	if raceEnabled {
		t.Skip("measure without -race")
	}
	variants := strings.Split(cmp.Or(os.Getenv("BATCHIO_ECHO_VARIANTS"), "plain,netpoll,blocking"), ",")
	reps := envInt("BATCHIO_ECHO_REPS", 3)
	dur := 3 * time.Second
	if d, err := time.ParseDuration(os.Getenv("BATCHIO_ECHO_DUR")); err == nil && d > 0 && d <= 10*time.Second {
		dur = d
	}
	quietWait := 30 * time.Second
	if d, err := time.ParseDuration(os.Getenv("BATCHIO_ECHO_QUIET")); err == nil && d >= 0 && d <= 10*time.Minute {
		quietWait = d
	}
	base := cmp.Or(os.Getenv("BATCHIO_ECHO_BASE"), "plain")
	results := map[string][]echoResult{}
	for rep := range reps {
		for _, v := range variants {
			// Other processes on the machine steal CPU from the server
			// and the load generator and distort the figures; retry a
			// run whose two processes account for too little of the
			// machine's busy time.
			var r echoResult
			for try := 0; try < 3; try++ {
				if !procstat.WaitQuiet(context.Background(), quietWait) {
					t.Logf("machine still busy with other work after %v; measuring anyway", quietWait)
				}
				var err error
				if r, err = runEcho(v, dur); err != nil {
					t.Fatalf("%s: %v", v, err)
				}
				t.Logf("rep %d %-16s %8.0f echoes/s  server %5.0f ns/pkt (stat %5.0f)  util %.2f  acct %.2f  ksoftirqd %.2f  lost %d  [%s]",
					rep, v, r.pps, r.schedNs, r.statNs, r.util, r.acct, r.ksoftirqd, r.lost, r.serverReport)
				if r.acct >= minAcct {
					break
				}
			}
			results[v] = append(results[v], r)
		}
	}
	t.Logf("medians over runs with acct ≥ %.2f; ratios to %s within a repetition (range)", minAcct, base)
	t.Logf("%-16s %9s %22s %18s %18s %6s %5s", "variant", "echoes/s", "server ns/pkt (range)", "ns/pkt ÷ base", "echoes/s ÷ base", "util", "runs")
	for _, v := range variants {
		var pps, ns, ratio, ppsRatio, util []float64
		for i, r := range results[v] {
			if r.acct < minAcct {
				continue
			}
			pps = append(pps, r.pps)
			ns = append(ns, r.schedNs)
			util = append(util, r.util)
			if b, ok := results[base]; ok && b[i].acct >= minAcct {
				ratio = append(ratio, r.schedNs/b[i].schedNs)
				ppsRatio = append(ppsRatio, r.pps/b[i].pps)
			}
		}
		if len(ns) == 0 {
			t.Logf("%-16s no clean run", v)
			continue
		}
		ratioString := func(xs []float64) string {
			if len(xs) == 0 {
				return "-"
			}
			return fmt.Sprintf("%.3f (%.2f–%.2f)", procstat.Median(xs), slices.Min(xs), slices.Max(xs))
		}
		t.Logf("%-16s %9.0f %6.0f (%5.0f–%5.0f) %18s %18s %6.2f %5d", v, procstat.Median(pps), procstat.Median(ns), slices.Min(ns), slices.Max(ns),
			ratioString(ratio), ratioString(ppsRatio), procstat.Median(util), len(ns))
	}
}

// minAcct is the share of the machine's busy CPU time that the server and
// the load generator must account for in a clean run.
const minAcct = 0.9

// runEcho starts a server child for variant, loads it for 0.5 s of warm-up
// and dur of measurement, and stops it.
func runEcho(variant string, dur time.Duration) (echoResult, error) {
	res := echoResult{variant: variant}
	bin := os.Args[0]
	if v, b, ok := strings.Cut(variant, "@"); ok {
		variant, bin = v, b
	}
	cmd := exec.Command(bin, "-test.run=^TestEchoChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "BATCHIO_ECHO_CHILD="+variant)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return res, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return res, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return res, err
	}
	defer func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	lines := bufio.NewScanner(stdout)
	port := 0
	for lines.Scan() {
		if p, ok := strings.CutPrefix(lines.Text(), "READY "); ok {
			port, _ = strconv.Atoi(p)
			break
		}
		if strings.HasPrefix(lines.Text(), "ERROR") {
			return res, errors.New(lines.Text())
		}
	}
	if port == 0 {
		return res, errors.New("server did not start")
	}
	server := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))
	sources := envInt("BATCHIO_ECHO_SOURCES", 16)
	window := envInt("BATCHIO_ECHO_WINDOW", 128)
	pid := cmd.Process.Pid

	start := time.Now()
	winStart, winEnd := start.Add(500*time.Millisecond), start.Add(500*time.Millisecond+dur)
	var counted, lost atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, sources)
	for i := range sources {
		wg.Go(func() {
			src := netip.AddrFrom4([4]byte{127, 0, byte((2 + i) >> 8), byte(2 + i)})
			if err := loadSource(src, server, window, winStart, winEnd, &counted, &lost); err != nil {
				errs <- err
			}
		})
	}
	// Sample the server's CPU at the window's edges.
	time.Sleep(time.Until(winStart))
	e0 := sampleEdge(pid)
	time.Sleep(time.Until(winEnd))
	e1 := sampleEdge(pid)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return res, err
	}
	stdin.Close()
	for lines.Scan() {
		if r, ok := strings.CutPrefix(lines.Text(), "STATS "); ok {
			res.serverReport = r
		}
	}
	n := float64(counted.Load())
	if n == 0 {
		return res, errors.New("no echoes in the window")
	}
	res.pps = n / dur.Seconds()
	sched, wall := float64(e1.sched-e0.sched), float64(e1.at.Sub(e0.at))
	res.schedNs = sched / n
	res.statNs = float64(e1.stat-e0.stat) / n
	res.util = sched / wall
	res.acct = (sched + float64(e1.self-e0.self)) / float64(e1.busy-e0.busy)
	res.ksoftirqd = float64(e1.softirq-e0.softirq) / wall
	res.lost = lost.Load()
	return res, nil
}

// edge is what the comparison samples at each edge of its window: the
// server's CPU time (scheduler and /proc/PID/stat), this process's, the
// ksoftirqd threads', the machine's busy time, and when.
type edge struct {
	sched, stat, self, softirq, busy time.Duration
	at                               time.Time
}

func sampleEdge(pid int) edge {
	var e edge
	e.sched, e.stat = procCPU(pid)
	e.self, _ = procCPU(os.Getpid())
	e.softirq = softirqThreads()
	e.busy = procstat.MachineBusy()
	e.at = time.Now()
	return e
}

// loadSource is one load-generator socket: it keeps up to window datagrams
// in flight and counts the echoes that arrive inside [winStart, winEnd).
// It stops by itself at winEnd.
func loadSource(src netip.Addr, server netip.AddrPort, window int, winStart, winEnd time.Time, counted, lost *atomic.Int64) error {
	const burst, size = 32, 48
	c, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), net.UDPAddrFromAddrPort(server))
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetReadBuffer(DefaultRecvBuffer)
	c.SetWriteBuffer(DefaultSendBuffer)
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	// Connected socket: no addresses in the headers.
	payload := make([]byte, size)
	shdrs := make([]unix.Mmsghdr, burst)
	siovs := make([]unix.Iovec, burst)
	for i := range shdrs {
		siovs[i].Base = &payload[0]
		siovs[i].SetLen(size)
		shdrs[i].Hdr.Iov = &siovs[i]
		shdrs[i].Hdr.SetIovlen(1)
	}
	const rn = 64
	rbuf := make([]byte, rn*2048)
	rhdrs := make([]unix.Mmsghdr, rn)
	riovs := make([]unix.Iovec, rn)
	for i := range rhdrs {
		riovs[i].Base = &rbuf[i*2048]
		riovs[i].SetLen(2048)
		rhdrs[i].Hdr.Iov = &riovs[i]
		rhdrs[i].Hdr.SetIovlen(1)
	}
	var sent, got int
	var serr, rerr syscall.Errno
	sendFn := func(fd uintptr) bool {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&shdrs[0])), burst, 0, 0, 0)
		if e == unix.EAGAIN {
			return false
		}
		sent, serr = int(r), e
		return true
	}
	recvFn := func(fd uintptr) bool {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&rhdrs[0])), rn, unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN {
			return false
		}
		got, rerr = int(r), e
		return true
	}
	outstanding := 0
	for {
		now := time.Now()
		if !now.Before(winEnd) {
			return nil
		}
		for outstanding+burst <= window {
			if err := rc.Write(sendFn); err != nil {
				return err
			}
			if serr != 0 {
				return serr
			}
			outstanding += sent
		}
		c.SetReadDeadline(now.Add(50 * time.Millisecond))
		err := rc.Read(recvFn)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			lost.Add(int64(outstanding))
			outstanding = 0
			continue
		}
		if err != nil {
			return err
		}
		if rerr != 0 {
			continue // e.g. ECONNREFUSED while the server starts
		}
		outstanding = max(outstanding-got, 0)
		if t := time.Now(); !t.Before(winStart) && t.Before(winEnd) {
			counted.Add(int64(got))
		}
	}
}
