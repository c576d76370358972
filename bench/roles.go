package main

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/udpgate/udpgate/batchio"
	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
)

// The servers under test run in child processes (this binary, re-executed
// with roleEnv set), so that the CPU time read from /proc is theirs alone.

const (
	// roleEnv names the variant a child serves.
	roleEnv = "UDPGATE_BENCH_ROLE"
	// maxDurEnv bounds a child's life (a Go duration): it exits by itself
	// then, whatever the harness does.
	maxDurEnv = "UDPGATE_BENCH_MAXDUR"
	// profileEnv is "defaults" for a udpgate child that runs with the
	// settings a new user gets (cmd/server's defaults) instead of the
	// benchmark's (see startServer).
	profileEnv = "UDPGATE_BENCH_PROFILE"
	// cpuProfileEnv names a file for the udpgate child's CPU profile:
	// UDPGATE_BENCH_CPUPROFILE=cpu.out go run . -variants udpgate ...
	cpuProfileEnv   = "UDPGATE_BENCH_CPUPROFILE"
	profileDefaults = "defaults"
	// benchNetVersion is the NetworkVersion every server and the load
	// generator use.
	benchNetVersion = 1
)

// Server kinds.
const (
	kindUdpgate = "udpgate"
	kindRawEcho = "rawecho"
	kindNaive   = "naive"
)

// variant is a server under test: a kind and its socket settings, written
// kind[/bN][/sN][/rSIZE][/gN][/pN][/frag][/c][/overload][/defaults][/nosteer], e.g.
// "udpgate", "udpgate/b64/s1", "rawecho/r208k", "naive/g1", "rawecho/frag",
// "udpgate/overload" (b: batch size, s: sockets, r: receive and send buffer
// with k or m, g: the naive server's reader goroutines, p: the child's
// GOMAXPROCS, frag: no don't-fragment bit, overload: udpgate's overload
// control on, as cmd/server -overload; defaults: udpgate with cmd/server's
// default protection and timers instead of the benchmark's, which
// rtt-under-flood always uses; nosteer: udpgate without kernel steering of
// handshake and connection packets, as cmd/server -steer=false; c: the raw
// echo in C, cecho.go). Zero
// settings take the server's defaults. The peers take no settings but
// kcp/cc (kcp-go with its congestion window, kcp.go); quic is quic-go
// (quic.go).
type variant struct {
	Spec       string `json:"spec"`
	Kind       string `json:"kind"`
	Batch      int    `json:"batch,omitempty"`
	Sockets    int    `json:"sockets,omitempty"`
	Buffer     int    `json:"buffer,omitempty"`
	Goroutines int    `json:"goroutines,omitempty"`
	// Procs is the child's GOMAXPROCS (0: the machine's CPUs). Sockets
	// default to GOMAXPROCS, so /pN usually comes with /sN.
	Procs int `json:"procs,omitempty"`
	// Frag clears the don't-fragment bit udpgate and batchio set on IPv4
	// by default (AllowFragmentation), so the kernel picks an IP ID per
	// datagram again: the cost the default saves.
	Frag bool `json:"frag,omitempty"`
	// Overload turns udpgate's overload control on
	// (conn.Config.Overload.Enabled, cmd/server -overload).
	Overload bool `json:"overload,omitempty"`
	// Defaults runs udpgate with the settings cmd/server starts with:
	// the per-source Challenge limit and the default KeepAlive and
	// Timeout.
	Defaults bool `json:"defaults,omitempty"`
	// NoSteer turns off the kernel's steering of handshake and connection
	// packets to separate sockets (conn.Config.NoSteering).
	NoSteer bool `json:"nosteer,omitempty"`
	// C runs the raw echo written in C (cecho.go) instead of batchio's.
	C bool `json:"c,omitempty"`
	// KCPCC runs kcp-go in its normal mode with its congestion window on
	// (kcp/cc, kcpCCProfile) instead of the fast profile.
	KCPCC bool `json:"kcp_cc,omitempty"`
}

func parseVariant(s string) (variant, error) {
	parts := strings.Split(s, "/")
	v := variant{Spec: s, Kind: parts[0]}
	switch v.Kind {
	case kindUdpgate, kindRawEcho, kindNaive:
	case kindKCP:
		// kcp-go (message and bottleneck scenarios) takes one setting:
		// /cc, its normal mode with the congestion window on.
		if len(parts) == 2 && parts[1] == "cc" {
			v.KCPCC = true
			return v, nil
		}
		if len(parts) > 1 {
			return v, fmt.Errorf("variant %q: kcp takes no settings but /cc", s)
		}
	case kindQUIC:
		// quic-go (bottleneck scenarios only) takes no settings.
		if len(parts) > 1 {
			return v, fmt.Errorf("variant %q: quic takes no settings", s)
		}
	default:
		return v, fmt.Errorf("variant %q: unknown server %q (want udpgate, rawecho, naive, kcp or quic)", s, v.Kind)
	}
	for _, p := range parts[1:] {
		if p == "" {
			return v, fmt.Errorf("variant %q: empty setting", s)
		}
		if p == "frag" {
			if v.Kind == kindNaive {
				return v, fmt.Errorf("variant %q: the naive server keeps the system default (fragmentation allowed) already", s)
			}
			v.Frag = true
			continue
		}
		if p == "c" {
			if v.Kind != kindRawEcho {
				return v, fmt.Errorf("variant %q: /c is a rawecho setting (the raw echo in C)", s)
			}
			v.C = true
			continue
		}
		if p == "overload" || p == "defaults" || p == "nosteer" {
			if v.Kind != kindUdpgate {
				return v, fmt.Errorf("variant %q: /%s is a udpgate setting", s, p)
			}
			v.Overload = v.Overload || p == "overload"
			v.Defaults = v.Defaults || p == "defaults"
			v.NoSteer = v.NoSteer || p == "nosteer"
			continue
		}
		key, val := p[0], p[1:]
		n, err := parseSize(val)
		if err != nil || n <= 0 {
			return v, fmt.Errorf("variant %q: setting %q: want b<batch>, s<sockets>, r<bytes, k or m suffix>, g<goroutines>, p<GOMAXPROCS>, frag, c, overload, defaults or nosteer", s, p)
		}
		switch key {
		case 'b':
			v.Batch = n
		case 's':
			v.Sockets = n
		case 'r':
			v.Buffer = n
		case 'g':
			v.Goroutines = n
		case 'p':
			v.Procs = n
		default:
			return v, fmt.Errorf("variant %q: unknown setting %q (b, s, r, g or p)", s, p)
		}
	}
	if v.Kind == kindNaive && (v.Batch != 0 || v.Sockets != 0) {
		return v, fmt.Errorf("variant %q: the naive server has one socket and no batches", s)
	}
	if v.Kind != kindNaive && v.Goroutines != 0 {
		return v, fmt.Errorf("variant %q: only the naive server takes a goroutine count", s)
	}
	return v, nil
}

// parseSize reads a count with an optional k (×1024) or m (×1024²) suffix.
func parseSize(s string) (int, error) {
	mul := 1
	switch {
	case strings.HasSuffix(s, "k"):
		mul, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "m"):
		mul, s = 1<<20, s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	return n * mul, err
}

// echoApp is the udpgate server's application: every Data payload goes
// back to its sender, as cmd/server's -app echo does.
type echoApp struct{ conn.NopHandler }

func (echoApp) OnPacket(c *conn.Conn, payload []byte) { c.Send(payload) }

// server is a started variant.
type server struct {
	addr  netip.AddrPort
	stats func() string
	close func()
}

// startServer starts variant v on 127.0.0.1 with a kernel-chosen port;
// defaults asks for cmd/server's default settings (see below), and keys, if
// not nil, for udpgate in sealed mode.
func startServer(v variant, defaults bool, keys *sealedKeys) (*server, error) {
	if keys != nil && v.Kind != kindUdpgate {
		return nil, fmt.Errorf("variant %s has no sealed mode", v.Spec)
	}
	switch v.Kind {
	case kindUdpgate:
		// Benchmark settings: no per-source Challenge limit and no
		// overload control (the load comes from few ports at a rate
		// that would trip both), and connection timers far beyond a
		// run, so that no KeepAlive or timeout adds packets that are not
		// answers: in the ack scenario the clients send no connection
		// packets at all, and with the default 5 s timeout their
		// connections would close mid-window. Housekeeping still sweeps
		// every connection every 100 ms, and that cost is measured.
		cfg := conn.Config{
			Handler:        echoApp{},
			NetworkVersion: benchNetVersion,
			ChallengeRate:  -1,
			KeepAlive:      time.Hour,
			Timeout:        2 * time.Hour,
			// Room for the largest storm and conns scenarios (the default
			// is 100k, and a slot of the last storm may not be free yet).
			MaxClients: 1 << 20,
			// The generator's clients share a few hundred loopback
			// addresses per /24: they are not one network.
			MaxClientsPerIP:     -1,
			MaxClientsPerPrefix: -1,
			// Nor an inbound budget per connection (a scenario's load
			// from few connections may exceed it).
			InboundPacketRate: -1,
			InboundByteRate:   -1,
			Sockets:           v.Sockets,
			BatchSize:         v.Batch,
			RecvBuffer:        v.Buffer,
			SendBuffer:        v.Buffer,

			AllowFragmentation: v.Frag,
			NoSteering:         v.NoSteer,
			// Off unless asked for (its default): the raw handshake rate.
			Overload: conn.OverloadConfig{Enabled: v.Overload},
		}
		if defaults {
			// What a new user gets from cmd/server: 32 Challenges/s per
			// source, 1 s KeepAlive, 5 s Timeout, connections per address
			// and per /24 bounded, the inbound budget per connection. (MaxClients stays: cmd/server takes
			// -max-clients.)
			cfg.ChallengeRate, cfg.KeepAlive, cfg.Timeout = 0, 0, 0
			cfg.MaxClientsPerIP, cfg.MaxClientsPerPrefix = 0, 0
			cfg.InboundPacketRate, cfg.InboundByteRate = 0, 0
		}
		if keys != nil {
			cfg.PrivateKey, cfg.ProtocolID = &keys.key, keys.protocolID
		}
		s, err := conn.Listen("127.0.0.1:0", cfg)
		if err != nil {
			return nil, err
		}
		return udpgateServer(s), nil
	case kindRawEcho:
		cfg := batchio.Config{Sockets: v.Sockets, BatchSize: v.Batch, RecvBuffer: v.Buffer, SendBuffer: v.Buffer,
			AllowFragmentation: v.Frag}
		g, err := batchio.Listen("127.0.0.1:0", cfg)
		if err != nil {
			return nil, err
		}
		for _, s := range g.Sockets() {
			go func() {
				// A blocking receiver per socket, as udpgate's loops
				// are; the thread lock itself measured no difference
				// (batchio/params.go).
				runtime.LockOSThread()
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
		return &server{addr: g.LocalAddr(), close: func() { g.Close() }, stats: func() string {
			st := g.Stats()
			return fmt.Sprintf("rx=%d fill=%.1f rx_drops=%d tx=%d tx_calls=%d sockets=%d",
				st.RxPackets, st.RxBatchFill(), st.RxDrops, st.TxPackets, st.TxCalls, len(g.Sockets()))
		}}, nil
	case kindNaive:
		s := newNaive(wire.Magic{}, benchNetVersion)
		buf := v.Buffer
		if buf == 0 {
			buf = batchio.DefaultRecvBuffer
		}
		addr, err := s.listen(buf, v.Goroutines)
		if err != nil {
			return nil, err
		}
		return &server{addr: addr, close: s.close, stats: func() string {
			s.mu.Lock()
			n := len(s.conns)
			s.mu.Unlock()
			return fmt.Sprintf("conns=%d rx=%d replies=%d", n, s.packets.Load(), s.replies.Load())
		}}, nil
	}
	return nil, fmt.Errorf("unknown server kind %q", v.Kind)
}

// childMain is a child's whole life: start the variant, say READY with the
// port, serve until the harness closes stdin (or the maximum duration
// passes), print STATS and exit. It returns the exit code. Meanwhile it
// answers the harness's requests, one a line on stdin: "MEM" (collect
// garbage, then report the heap, mem.go) and "GCSTAT" (the runtime's GC
// counters, without collecting).
func childMain(spec string, stdin io.Reader, stdout io.Writer) int {
	switch spec {
	case floodRole:
		return floodMain(stdin, stdout)
	case stormRole:
		return stormMain(stdin, stdout)
	}
	maxDur := 10 * time.Minute
	if d, err := time.ParseDuration(os.Getenv(maxDurEnv)); err == nil && d > 0 && d < maxDur {
		maxDur = d
	}
	v, err := parseVariant(spec)
	if err != nil {
		fmt.Fprintf(stdout, "ERROR %v\n", err)
		return 2
	}
	keys, err := parseSealedKeys(os.Getenv(sealedEnv))
	if err != nil {
		fmt.Fprintf(stdout, "ERROR %v\n", err)
		return 2
	}
	if v.C {
		err := execCEcho(v) // returns only on failure
		fmt.Fprintf(stdout, "ERROR %v\n", err)
		return 1
	}
	var srv *server
	if spec := os.Getenv(msgEnv); spec != "" {
		srv, err = startMsgServer(v, spec)
	} else {
		srv, err = startServer(v, v.Defaults || os.Getenv(profileEnv) == profileDefaults, keys)
	}
	if err != nil {
		fmt.Fprintf(stdout, "ERROR %v\n", err)
		return 1
	}
	if path := os.Getenv(cpuProfileEnv); path != "" && v.Kind == kindUdpgate {
		// The last udpgate child of the run leaves its profile at path.
		if f, err := os.Create(path); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				defer pprof.StopCPUProfile()
			}
		}
	}
	fmt.Fprintf(stdout, "READY %d\n", srv.addr.Port())
	var mu sync.Mutex // one writer of stdout at a time
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			var line string
			switch sc.Text() {
			case "MEM":
				line = "MEM " + memLine(true)
			case "GCSTAT":
				line = "GCSTAT " + memLine(false)
			default:
				line = "ERROR unknown request " + strconv.Quote(sc.Text())
			}
			mu.Lock()
			fmt.Fprintln(stdout, line)
			mu.Unlock()
		}
	}()
	select {
	case <-done:
	case <-time.After(maxDur):
	}
	mu.Lock()
	fmt.Fprintf(stdout, "STATS %s\n", srv.stats())
	mu.Unlock()
	// No graceful shutdown: it would only send Disconnects nobody reads.
	return 0
}

// udpgateServer is a running udpgate server as the harness drives it, its
// stats line the counters a run's log shows.
func udpgateServer(s *conn.Server) *server {
	return &server{addr: s.Addr(), close: func() { s.Close() }, stats: func() string {
		st := s.Stats()
		so := st.Sockets
		var drops uint64
		for _, d := range st.Drops {
			drops += d
		}
		return fmt.Sprintf("conns=%d accepted=%d conn_in=%d drops=%d promotion_full=%d denied_full=%d overload_changes=%d rx=%d fill=%.1f rx_drops=%d tx=%d tx_calls=%d sockets=%d proofs=%d sealed_forged=%d shared=%d",
			st.Connections, st.Accepted, st.ConnPacketsIn, drops, st.Drops[protocol.DropPromotionFull],
			st.DeniedFull, st.OverloadChanges, so.RxPackets, float64(so.RxPackets)/float64(max(so.RxBatches, 1)),
			so.RxDrops, so.TxPackets, so.TxCalls, len(s.SocketStats()),
			st.Proofs, st.Drops[protocol.DropSealedForged], st.Shared) + dropReasons(st)
	}}
}

// dropReasons names the server's nonzero drop counters, packet and
// message ones (" drops_by=reason:n,..."), so that a run's log says why.
func dropReasons(st conn.Stats) string {
	var b strings.Builder
	for i, n := range st.Drops {
		if n != 0 {
			fmt.Fprintf(&b, ",%s:%d", protocol.DropReason(i), n)
		}
	}
	for i, n := range st.MessageDrops {
		if n != 0 {
			fmt.Fprintf(&b, ",message_%s:%d", message.DropReason(i), n)
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return " drops_by=" + b.String()[1:]
}
