package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/procstat"
	"github.com/udpgate/udpgate/internal/wire"

	"github.com/udpgate/udpgate/internal/traffic/loadgen"
)

// Scenario kinds: what the clients send and what the server answers.
const (
	scChallenge = "challenge" // Initial → Challenge
	scAck       = "ack"       // valid Response from a connected client → Ack
	scData      = "data"      // Data on an established connection → echoed Data
	// scLowLoad: Initial → Challenge from 8 clients with one request in
	// flight each (nothing to batch), written "low-load".
	scLowLoad = "low-load"
	// scStorm: every client handshakes at once (storm.go).
	scStorm = "storm"
	// scRTTFlood: one player's Data RTT, idle and under an Initial flood
	// (rtt.go), written "rtt-under-flood".
	scRTTFlood = "rtt-under-flood"
	// scRTTStorm: the same player, idle and beside a login storm
	// (rttstorm.go), written "rtt-under-storm" or "rtt-under-storm-N".
	scRTTStorm = "rtt-under-storm"
	// scConns: live heap and GC cost of established connections (mem.go).
	scConns = "conns"
	// sealedPrefix marks a sealed-mode scenario (docs/protocol.md §11):
	// sealed-data-N and sealed-storm-N are data-N and storm-N with a server
	// holding a private key and clients that prove connect tokens and seal
	// every connection packet.
	sealedPrefix = "sealed-"
)

// lowLoadClients is the low-load scenario's client count.
const lowLoadClients = 8

// scenario is a kind of traffic at a number of simulated clients, written
// kind-clients, e.g. "data-100k", or one of the fixed names "low-load",
// "rtt-under-flood" and "rtt-under-storm" (its Clients are the storm's;
// "rtt-under-storm-N" sets them).
type scenario struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Clients int    `json:"clients"`
	Sealed  bool   `json:"sealed,omitempty"`
}

func parseScenario(s string) (scenario, error) {
	switch s {
	case scLowLoad:
		return scenario{Name: s, Kind: scLowLoad, Clients: lowLoadClients}, nil
	case scRTTFlood:
		return scenario{Name: s, Kind: scRTTFlood, Clients: 1}, nil
	case scRTTStorm:
		return scenario{Name: s, Kind: scRTTStorm, Clients: rttStormClients}, nil
	}
	if n, ok := strings.CutPrefix(s, scRTTStorm+"-"); ok {
		c, err := parseCount(n)
		if err != nil || c < 1 || c > loadgen.MaxClients {
			return scenario{}, fmt.Errorf("scenario %q: storm client count %q: want 1 to %d, k or M suffix allowed", s, n, loadgen.MaxClients)
		}
		return scenario{Name: s, Kind: scRTTStorm, Clients: c}, nil
	}
	if sc, ok, err := parseMsgScenario(s); ok {
		return sc, err
	}
	if sc, ok, err := parseBnScenario(s); ok {
		return sc, err
	}
	rest, sealed := strings.CutPrefix(s, sealedPrefix)
	kind, n, ok := strings.Cut(rest, "-")
	if !ok {
		return scenario{}, fmt.Errorf("scenario %q: want kind-clients, e.g. data-100k, or low-load, rtt-under-flood or rtt-under-storm", s)
	}
	switch kind {
	case scChallenge, scAck, scData, scStorm, scConns:
	default:
		return scenario{}, fmt.Errorf("scenario %q: unknown kind %q (challenge, ack, data, storm or conns, and sealed-data or sealed-storm; or low-load, rtt-under-flood, rtt-under-storm)", s, kind)
	}
	if sealed && kind != scData && kind != scStorm {
		return scenario{}, fmt.Errorf("scenario %q: sealed mode has data and storm scenarios (sealed-data-N, sealed-storm-N)", s)
	}
	c, err := parseCount(n)
	if err != nil || c < 1 || c > loadgen.MaxClients {
		return scenario{}, fmt.Errorf("scenario %q: client count %q: want 1 to %d, k or M suffix allowed", s, n, loadgen.MaxClients)
	}
	if kind == scConns && c > maxConns {
		return scenario{}, fmt.Errorf("scenario %q: at most %d connections (each costs the generator about 3 KB)", s, maxConns)
	}
	return scenario{Name: s, Kind: kind, Clients: c, Sealed: sealed}, nil
}

// packets reports whether the scenario is a packet-rate measurement (a
// table row with CPU per packet and the ratios), as opposed to the storm,
// RTT and memory scenarios, which have tables of their own.
func (sc scenario) packets() bool {
	switch sc.Kind {
	case scChallenge, scAck, scData, scLowLoad:
		return true
	}
	return false
}

// runs reports whether variant v takes part in scenario sc. The raw echo
// speaks no protocol, so it has no handshake storm, no player and no
// connections; overload control only matters where connectionless traffic
// floods in (storms and floods), and elsewhere measuring it again would
// only repeat udpgate.
func (sc scenario) runs(v variant) bool {
	switch {
	case sc.messages():
		return sc.msgRuns(v)
	case sc.Kind == scBn:
		return sc.bnRuns(v)
	case v.Kind == kindKCP || v.Kind == kindQUIC:
		// kcp-go only has message and bottleneck scenarios, quic-go
		// bottleneck scenarios.
		return false
	case sc.Sealed && v.Kind == kindNaive:
		// The naive server has no sealed mode.
		return false
	case v.Kind == kindRawEcho:
		return sc.packets()
	case v.Overload:
		return sc.Kind == scStorm || sc.Kind == scRTTFlood || sc.Kind == scRTTStorm
	}
	return true
}

// parseCount reads a decimal count with an optional k (×1000) or M
// (×1000000) suffix.
func parseCount(s string) (int, error) {
	mul := 1
	switch {
	case strings.HasSuffix(s, "k"):
		mul, s = 1000, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mul, s = 1_000_000, s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	return n * mul, err
}

// payloadSize is the Data payload of the data scenarios: a small game
// update (8 bytes of it carry the send time).
const payloadSize = loadgen.DefaultPayloadSize

// mode is the load generator's mode for this scenario against kind: the
// raw echo speaks no protocol, so it gets raw datagrams of the same size.
func (sc scenario) mode(kind string) loadgen.Mode {
	switch {
	case kind == kindRawEcho:
		return loadgen.ModeEcho
	case sc.Kind == scChallenge || sc.Kind == scLowLoad:
		return loadgen.ModeInitial
	case sc.Kind == scAck:
		return loadgen.ModeResponse
	}
	return loadgen.ModeData
}

// requestSize is the size of the scenario's requests, which the raw echo
// baseline's datagrams copy: an Initial or Response with the client's
// largest RandomData (16 bytes), or a Data packet.
func (sc scenario) requestSize() int {
	switch sc.Kind {
	case scChallenge, scLowLoad:
		return wire.HandshakeLen(wire.Magic{}, protocol.TypeInitial, protocol.MaxRandomBytes)
	case scAck:
		return wire.HandshakeLen(wire.Magic{}, protocol.TypeResponse, protocol.MaxRandomBytes)
	}
	if sc.Sealed {
		return wire.SealedConnLen(wire.Magic{}, payloadSize)
	}
	return wire.ConnLen(wire.Magic{}, protocol.KindData, payloadSize)
}

// options is one harness invocation.
type options struct {
	Mode      string        `json:"mode"`
	Command   string        `json:"command"`
	Reps      int           `json:"reps"`
	Warmup    time.Duration `json:"warmup"`
	Window    time.Duration `json:"window"`
	Scenarios []scenario    `json:"scenarios"`
	Variants  []variant     `json:"variants"`
	// Load generator shape (0: loadgen defaults).
	LoadSockets int `json:"load_sockets"`
	LoadWindow  int `json:"load_window"`
	LoadBatch   int `json:"load_batch"`
	// ConnsRate: Data packets per second per client in conns-N (0: closed
	// loop). FloodSources and FloodSenders: the attacker's source ports
	// and sending threads in rtt-under-flood.
	ConnsRate    float64 `json:"conns_rate,omitempty"`
	FloodSources int     `json:"flood_sources,omitempty"`
	FloodSenders int     `json:"flood_senders,omitempty"`
	// Message scenarios: msg-lossy's sending phase, msg-cpu's messages
	// per second (all clients), msg-bulk's transfers per run.
	MsgDuration time.Duration `json:"msg_duration,omitempty"`
	MsgRate     float64       `json:"msg_rate,omitempty"`
	MsgBulk     int           `json:"msg_bulk,omitempty"`
	// Bottleneck scenarios: the bulk phase (0: the scenario's) and
	// udpgate's Config.Messages.SendRate (0: the library's default).
	BnDuration time.Duration `json:"bn_duration,omitempty"`
	BnSendRate int           `json:"bn_send_rate,omitempty"`
	// Quiet: the longest wait, before each run, for the machine to be
	// idle (other processes distort CPU figures); 0 skips the wait.
	Quiet time.Duration `json:"quiet"`
	// MinAcct: a run whose server and generator account for less of the
	// machine's busy CPU time than this shared it with something else; it
	// is retried up to Retries times and flagged if it stays so.
	MinAcct float64   `json:"min_acct"`
	Retries int       `json:"retries"`
	Out     string    `json:"-"`
	From    string    `json:"-"`
	Log     io.Writer `json:"-"`
}

// connectRecord is a run's handshake phase.
type connectRecord struct {
	Clients   int     `json:"clients"`
	Connected int     `json:"connected"`
	Failed    int     `json:"failed"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	Resent    int     `json:"resent,omitempty"`
}

func connectRec(c *loadgen.ConnectResult) *connectRecord {
	return &connectRecord{
		Clients: c.Clients, Connected: c.Connected, Failed: c.Failed,
		Seconds: c.Elapsed.Seconds(), PerSecond: c.PerSecond(),
		P50us: us(c.Latency.P50), P99us: us(c.Latency.P99), Resent: c.Resent,
	}
}

// runRecord is one measured run: one variant under one scenario in one
// repetition.
type runRecord struct {
	Rep      int    `json:"rep"`
	Scenario string `json:"scenario"`
	Variant  string `json:"variant"`
	// Window figures.
	Seconds    float64 `json:"seconds"`
	Replies    uint64  `json:"replies"`
	PPS        float64 `json:"pps"`
	CPUNs      float64 `json:"server_cpu_ns_per_pkt"`       // /proc/PID/stat
	SchedNs    float64 `json:"server_schedstat_ns_per_pkt"` // cross-check
	Util       float64 `json:"server_util"`                 // server CPU ÷ wall time
	LoadNs     float64 `json:"loadgen_cpu_ns_per_pkt"`
	Acct       float64 `json:"acct"` // (server + generator CPU) ÷ machine busy
	Lost       uint64  `json:"lost"`
	Late       uint64  `json:"late"`
	Unexpected uint64  `json:"unexpected"`
	P50us      float64 `json:"rtt_p50_us"`
	P99us      float64 `json:"rtt_p99_us"`

	Connect *connectRecord `json:"connect,omitempty"`
	// The storm, rtt-under-flood/-storm and conns scenarios' own figures.
	Storm       *stormRecord `json:"storm,omitempty"`
	RTT         *rttRecord   `json:"rtt,omitempty"`
	Mem         *memRecord   `json:"mem,omitempty"`
	Msg         *msgRecord   `json:"msg,omitempty"`
	Bn          *bnRecord    `json:"bottleneck,omitempty"`
	ServerStats string       `json:"server_stats"`
	Flag        string       `json:"flag,omitempty"`
}

// harness runs every repetition, scenario and variant and returns the
// records. Within a repetition each scenario runs every variant back to
// back, in an order that rotates with the repetition, so slow drift of the
// machine hits all variants alike and same-repetition ratios cancel it.
func harness(ctx context.Context, opt *options) ([]runRecord, error) {
	var recs []runRecord
	for rep := range opt.Reps {
		for _, sc := range opt.Scenarios {
			var vs []variant
			for _, v := range opt.Variants {
				if sc.runs(v) {
					vs = append(vs, v)
				}
			}
			n := len(vs)
			for k := range n {
				v := vs[(k+rep)%n]
				var rec runRecord
				var err error
				for try := 0; ; try++ {
					if opt.Quiet > 0 && !procstat.WaitQuiet(ctx, opt.Quiet) {
						fmt.Fprintf(opt.Log, "machine still busy after %v; measuring anyway\n", opt.Quiet)
					}
					rec, err = runOne(ctx, opt, sc, v, rep)
					if err != nil {
						return recs, fmt.Errorf("rep %d, %s, %s: %w", rep, sc.Name, v.Spec, err)
					}
					logRun(opt.Log, &rec)
					if rec.Acct >= opt.MinAcct || try >= opt.Retries || sc.lightCPU() {
						break
					}
					fmt.Fprintf(opt.Log, "  (server and generator had only %.0f%% of the busy CPU time: retrying)\n", 100*rec.Acct)
				}
				if rec.Acct < opt.MinAcct && !sc.lightCPU() {
					rec.Flag = strings.TrimPrefix(rec.Flag+"; "+fmt.Sprintf("acct %.2f < %.2f: the machine was shared", rec.Acct, opt.MinAcct), "; ")
				}
				recs = append(recs, rec)
				if ctx.Err() != nil {
					return recs, ctx.Err()
				}
			}
		}
	}
	return recs, nil
}

func logRun(w io.Writer, r *runRecord) {
	switch {
	case r.Msg != nil:
		logMsg(w, r)
		return
	case r.Bn != nil:
		logBn(w, r)
		return
	case r.Storm != nil:
		st := r.Storm
		fmt.Fprintf(w, "rep %d %-11s %-16s %d/%d in %.3fs: %8.0f handshakes/s  p50 %.0fms p99 %.0fms  resent %d denied %d timed out %d  server %.1f µs/handshake  kernel drops %d promotion_full %d  generator drops %d  acct %.2f\n",
			r.Rep, r.Scenario, r.Variant, st.Connected, st.Clients, st.AllInSec, st.PerSecond, st.P50ms, st.P99ms,
			st.Resent, st.Denied, st.TimedOut, st.ServerCPUus, st.KernelDrops, st.PromotionFull, st.LoadDrops, r.Acct)
		return
	case r.RTT != nil && r.RTT.Storm != nil:
		t, st := r.RTT, r.RTT.Storm
		fmt.Fprintf(w, "rep %d %-11s %-16s idle p50 %.0fµs p99 %.0fµs p999 %.0fµs loss %.2f%% | storm %d/%d in %.3fs, %.0f handshakes/s, resent %d: p50 %.0fµs p99 %.0fµs p999 %.0fµs loss %.2f%% (×%.1f p50, ×%.1f p99)  kernel drops %d  acct %.2f\n",
			r.Rep, r.Scenario, r.Variant, t.Idle.P50us, t.Idle.P99us, t.Idle.P999us, t.Idle.LossPct,
			st.Connected, st.Clients, st.AllInSec, st.PerSecond, st.Resent,
			t.Flood.P50us, t.Flood.P99us, t.Flood.P999us, t.Flood.LossPct, t.P50Ratio, t.P99Ratio, t.KernelDrops, r.Acct)
		return
	case r.RTT != nil:
		t := r.RTT
		fmt.Fprintf(w, "rep %d %-11s %-16s idle p50 %.0fµs p99 %.0fµs p999 %.0fµs loss %.2f%% | flood %.0f/s: p50 %.0fµs p99 %.0fµs p999 %.0fµs loss %.2f%% (×%.1f p50, ×%.1f p99)  kernel drops %d  acct %.2f\n",
			r.Rep, r.Scenario, r.Variant, t.Idle.P50us, t.Idle.P99us, t.Idle.P999us, t.Idle.LossPct,
			t.FloodRate, t.Flood.P50us, t.Flood.P99us, t.Flood.P999us, t.Flood.LossPct, t.P50Ratio, t.P99Ratio, t.KernelDrops, r.Acct)
		return
	case r.Mem != nil:
		m := r.Mem
		fmt.Fprintf(w, "rep %d %-11s %-16s %d conns: heap %.0f B/conn (live %s → %s), RSS %.0f B/conn, GC cycle %.1f ms CPU; window %.0f pkt/s, %g GC cycles, GC %.2f%% of server CPU, %.2f B alloc/reply\n",
			r.Rep, r.Scenario, r.Variant, m.Conns, m.HeapPerConn, mib(m.HeapBase), mib(m.HeapAfter), m.RSSPerConn,
			m.GCCycleCPUms, m.PPS, m.GCCycles, 100*m.GCShare, m.AllocPerReply)
		return
	}
	c := ""
	if r.Connect != nil {
		c = fmt.Sprintf("  [connect %d/%d in %.2fs, %.0f/s]", r.Connect.Connected, r.Connect.Clients, r.Connect.Seconds, r.Connect.PerSecond)
	}
	fmt.Fprintf(w, "rep %d %-11s %-16s %8.0f pkt/s  server %5.0f ns/pkt (sched %5.0f)  util %.2f  loadgen %5.0f ns/pkt  acct %.2f  lost %d  unexpected %d  rtt p50 %.0fµs p99 %.0fµs%s\n",
		r.Rep, r.Scenario, r.Variant, r.PPS, r.CPUNs, r.SchedNs, r.Util, r.LoadNs, r.Acct, r.Lost, r.Unexpected, r.P50us, r.P99us, c)
}

// connectGen runs gen's connect phase within connectBudget and records it
// in rec.
func connectGen(ctx context.Context, gen *loadgen.Generator, rec *runRecord) (loadgen.ConnectResult, error) {
	cctx, cancel := context.WithTimeout(ctx, connectBudget)
	defer cancel()
	c, err := gen.Connect(cctx)
	if err != nil {
		return c, fmt.Errorf("connect: %w", err)
	}
	rec.Connect = connectRec(&c)
	return c, nil
}

// runSampled runs gen's warm-up and window, sampling process pid's CPU time
// (and the machine's) at the window's start and end.
func runSampled(ctx context.Context, gen *loadgen.Generator, opt *options, pid int) (loadgen.RunResult, sample, sample, error) {
	var s0, s1 sample
	r, err := gen.Run(ctx, loadgen.RunSpec{
		Warmup: opt.Warmup,
		Window: opt.Window,
		Mark: func(end bool) {
			if end {
				s1 = takeSample(pid)
			} else {
				s0 = takeSample(pid)
			}
		},
	})
	if err == nil && (s0.err != nil || s1.err != nil) {
		err = fmt.Errorf("reading the server's CPU time: %w", errors.Join(s0.err, s1.err))
	}
	return r, s0, s1, err
}

// sample is everything read at one edge of the measuring window.
type sample struct {
	server, self procstat.CPU
	busy         time.Duration
	at           time.Time
	err          error
}

func takeSample(pid int) sample {
	var s sample
	s.server, s.err = procstat.Process(pid)
	s.self, _ = procstat.Process(os.Getpid())
	s.busy = procstat.MachineBusy()
	s.at = time.Now()
	return s
}

// acct is the share of the machine's busy CPU time between two samples
// that the server and the harness account for.
func acct(s0, s1 sample) float64 {
	busy := s1.busy - s0.busy
	if busy <= 0 {
		return 0
	}
	return float64(s1.server.Stat-s0.server.Stat+s1.self.Stat-s0.self.Stat) / float64(busy)
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// connectBudget bounds a run's handshake phase: 100k handshakes take a few
// seconds here.
const connectBudget = 2 * time.Minute

// runOne measures variant v under scenario sc: start the server, connect
// the clients if the scenario needs them, warm up, measure, stop.
func runOne(ctx context.Context, opt *options, sc scenario, v variant, rep int) (runRecord, error) {
	switch sc.Kind {
	case scStorm:
		return runStorm(ctx, opt, sc, v, rep)
	case scRTTFlood, scRTTStorm:
		return runRTT(ctx, opt, sc, v, rep)
	case scConns:
		return runConns(ctx, opt, sc, v, rep)
	case scMsgLossy, scMsgBulk, scMsgCPU:
		return runMsg(ctx, opt, sc, v, rep)
	case scBn:
		return runBn(ctx, opt, sc, v, rep)
	}
	rec := runRecord{Rep: rep, Scenario: sc.Name, Variant: v.Spec}
	life := opt.Warmup + opt.Window + connectBudget + 30*time.Second
	keys, env, err := sc.keys(v)
	if err != nil {
		return rec, err
	}
	ch, err := startChild(v, false, life, env...)
	if err != nil {
		return rec, err
	}
	defer ch.stop()
	lcfg := loadgen.Config{
		Mode:        sc.mode(v.Kind),
		Clients:     sc.Clients,
		Sockets:     opt.LoadSockets,
		Window:      opt.LoadWindow,
		Batch:       opt.LoadBatch,
		PacketSize:  sc.requestSize(),
		PayloadSize: payloadSize,
		// As the server's (roles.go): no KeepAlive adds packets that are
		// not answers. With the 1 s default, each of 100k clients idle
		// between its Data sent one a second (two per Data at data-100k),
		// all at once after a long Connect.
		KeepAlive: time.Hour,
	}
	keys.apply(&lcfg)
	gen, err := ch.newGen(lcfg)
	if err != nil {
		return rec, err
	}
	defer gen.Close()
	if gen.Config().Mode.NeedsConnect() {
		if _, err := connectGen(ctx, gen, &rec); err != nil {
			return rec, err
		}
	}
	r, s0, s1, err := runSampled(ctx, gen, opt, ch.pid)
	if err != nil {
		return rec, err
	}
	rec.ServerStats = ch.stop()
	w := r.Window
	if w.Replies == 0 {
		return rec, fmt.Errorf("no replies in the window (sent %d, lost %d, unexpected %d; server: %s)", w.Sent, w.Lost, w.Unexpected, rec.ServerStats)
	}
	n := float64(w.Replies)
	wall := s1.at.Sub(s0.at)
	server := s1.server.Stat - s0.server.Stat
	rec.Seconds = r.Elapsed.Seconds()
	rec.Replies = w.Replies
	rec.PPS = r.PerSecond()
	rec.CPUNs = float64(server) / n
	rec.SchedNs = float64(s1.server.Sched-s0.server.Sched) / n
	rec.Util = float64(s1.server.Sched-s0.server.Sched) / float64(wall)
	rec.LoadNs = float64(s1.self.Stat-s0.self.Stat) / n
	if busy := s1.busy - s0.busy; busy > 0 {
		rec.Acct = float64(server+s1.self.Stat-s0.self.Stat) / float64(busy)
	}
	rec.Lost, rec.Late, rec.Unexpected = w.Lost, w.Late, w.Unexpected
	rec.P50us, rec.P99us = us(r.Latency.P50), us(r.Latency.P99)
	return rec, nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// child is a server variant running in a child process.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	addr  netip.AddrPort
	pid   int
	stats string
	done  bool
}

// startChild re-executes this binary as variant v's server (with
// cmd/server's default settings if defaults, and extra in its environment),
// to live at most life, and waits for it to report its port.
func startChild(v variant, defaults bool, life time.Duration, extra ...string) (*child, error) {
	env := append([]string{roleEnv + "=" + v.Spec}, extra...)
	if v.Procs > 0 {
		env = append(env, fmt.Sprintf("GOMAXPROCS=%d", v.Procs))
	}
	if defaults {
		env = append(env, profileEnv+"="+profileDefaults)
	}
	c, err := startProcess(life, env...)
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", v.Spec, err)
	}
	return c, nil
}

// newGen makes a load generator aimed at the child's server, speaking the
// network version of the benchmark's servers.
func (c *child) newGen(cfg loadgen.Config) (*loadgen.Generator, error) {
	cfg.Server, cfg.NetworkVersion = c.addr, benchNetVersion
	return loadgen.New(cfg)
}

// startProcess re-executes this binary with env added, to live at most
// life, and waits for its READY line.
func startProcess(life time.Duration, env ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), maxDurEnv+"="+life.String()), env...)
	cmd.Stderr = os.Stderr
	childAttr(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 16), pid: cmd.Process.Pid}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				c.stop()
				return nil, errors.New("the child exited before it was ready")
			}
			if p, ok := strings.CutPrefix(l, "READY "); ok {
				port, err := strconv.Atoi(p)
				if err != nil || port < 0 || port > 65535 {
					c.stop()
					return nil, fmt.Errorf("bad READY line %q", l)
				}
				c.addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port))
				return c, nil
			}
			if strings.HasPrefix(l, "ERROR") {
				c.stop()
				return nil, errors.New(l)
			}
		case <-timeout:
			c.stop()
			return nil, errors.New("the child did not start within 20 s")
		}
	}
}

// ask sends the child a request line and returns the rest of its answer,
// the line that starts with the request's name.
func (c *child) ask(req string, timeout time.Duration) (string, error) {
	if _, err := io.WriteString(c.stdin, req+"\n"); err != nil {
		return "", fmt.Errorf("asking the child for %s: %w", req, err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				return "", fmt.Errorf("the child exited before answering %s", req)
			}
			if rest, ok := strings.CutPrefix(l, req+" "); ok {
				return rest, nil
			}
			if strings.HasPrefix(l, "ERROR") {
				return "", fmt.Errorf("the child, asked for %s: %s", req, l)
			}
		case <-t.C:
			return "", fmt.Errorf("the child did not answer %s within %v", req, timeout)
		}
	}
}

// stop ends the child (closing its stdin asks it to report and exit; after
// 5 s it is killed) and returns its STATS line. It may be called again.
func (c *child) stop() string {
	if c.done {
		return c.stats
	}
	c.done = true
	c.stdin.Close()
	kill := time.AfterFunc(5*time.Second, func() { c.cmd.Process.Kill() })
	// Read to the end of its output (it closes when the process ends, so
	// Wait below never races the reader).
	for l := range c.lines {
		if s, ok := strings.CutPrefix(l, "STATS "); ok {
			c.stats = s
		}
	}
	kill.Stop()
	c.cmd.Wait()
	return c.stats
}
