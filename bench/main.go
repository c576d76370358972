// Command bench is udpgate's end-to-end benchmark harness. In one
// invocation it runs the udpgate server and two baselines over loopback
// under the same load and reports, for the handshake and for established
// Data packets, packets per second and server CPU per packet, with the
// ratios to both baselines:
//
//   - rawecho: a batched raw UDP echo (batchio's recvmmsg/sendmmsg, no
//     protocol work): the floor;
//   - naive: the same handshake and Data echo written plainly (one
//     ReadFromUDP/WriteToUDP per datagram, hmac.New per cookie, one
//     mutex-guarded map).
//
// Each server runs in a child process (this binary, re-executed), so the
// CPU time read from /proc/PID/stat is its own; the load generator
// (internal/traffic/loadgen) runs in this process. Results go to stdout as a
// Markdown table and into -out as bench-results.md, bench-results.json and
// bench-results.svg (a chart).
//
// bench is a module of its own (bench/go.mod), so that the peers it
// measures udpgate against (kcp-go, quic-go) stay out of the library's
// go.mod: run it from this directory (cd bench && go run .), or from the
// repository's root with go -C bench run . (paths such as -out are then
// relative to bench/).
//
// Usage, in bench/:
//
//	go run .                     # quick mode: 1 repetition, 2 s windows, 1k and 10k clients (~35 s)
//	go run . -full               # full mode: 5 repetitions, 4 s windows, every scenario below (~17 min)
//	go run . -full -out results
//	go run . -scenarios data-1k -variants udpgate/b8,udpgate/b32,udpgate/b64,rawecho -reps 3
//	go run . -scenarios storm-1k,storm-10k,storm-100k -variants udpgate,naive -reps 5
//	go run . -scenarios rtt-under-flood -variants udpgate,udpgate/overload,naive -reps 5
//	go run . -scenarios rtt-under-storm -variants udpgate,udpgate/nosteer,naive -reps 5
//	go run . -scenarios sealed-data-1k,sealed-data-100k,data-1k,sealed-storm-10k -variants udpgate,rawecho
//	go run . -scenarios msg-lossy,msg-lossy-20,msg-bulk,msg-cpu-1k -variants udpgate,kcp,rawecho -reps 3
//	go run . -scenarios bn-2,bn-20,bn-100,bn-loss,bn-fair-2,bn-fair-10,bn-vs-quic -variants udpgate,quic,kcp,kcp/cc
//
// Packet-rate scenarios are kind-clients with kind challenge (Initial →
// Challenge), ack (a connected client's valid Response → Ack again) or
// data (Data echoed on an established connection), and low-load (Initial
// → Challenge from 8 clients with one request in flight each, nothing to
// batch; its target is the ratio to the raw echo in the same shape).
// Four more kinds have tables of their own:
//
//   - storm-N: N clients start at once and each runs the whole handshake,
//     promotion included, with the client's 1 s resends: handshakes per
//     second, time until all are in, time to connect p50/p99, resends,
//     denied and failed clients, kernel drops and udpgate's promotion_full
//     drops; compared with the naive server (storm.go).
//   - rtt-under-flood: one player echoing a Data packet every millisecond,
//     idle and then under an open-loop Initial flood from another process
//     (internal/traffic/flood, -flood-sources ports): RTT p50/p99/p99.9 and loss,
//     flood ÷ idle. udpgate runs with cmd/server's defaults here (rtt.go).
//   - rtt-under-storm and rtt-under-storm-N: the same player, idle and then
//     while N clients (100k) log in at once from another process, the
//     window lasting until the last is in: RTT, loss, storm ÷ idle, and the
//     storm's own figures; the servers run with the storm scenarios'
//     settings (rttstorm.go).
//   - conns-N: N connections; the server's live heap per connection after
//     a GC and its GC share of CPU with Data flowing at -conns-rate
//     (mem.go).
//
// Messages (conn's SendMessage, docs/protocol.md §14) are compared with
// kcp-go (variant kcp, github.com/xtaci/kcp-go/v5) in four scenarios with
// a table of their own (messages.go): msg-lossy and msg-lossy-N (4 clients
// echoing 60 messages/s each through an in-process lossy proxy, 5 % or N %
// loss each way, 25 ms delay: round trip p50/p99, delivery, bytes on the
// wire per payload byte), msg-bulk (one 1 MiB reliable message over 1 %
// loss: seconds until the server has it) and msg-cpu-N (N clients sending
// bursts of 4 messages on loopback: server CPU per echoed message, against
// the raw echo's per datagram at the same burst rate); msg-bulk-Nm sends
// N MiB instead.
//
// Bottleneck scenarios (bottleneck.go) put connections through netem's
// bottleneck, a rate and a drop-tail queue each way with 25 ms delay
// after it: one connection carrying a bulk flow of 1 MiB reliable
// messages and a game's small messages (30 reliable and 30 sequenced a
// second, echoed) compared across udpgate, quic-go (variant quic,
// github.com/quic-go/quic-go) and kcp-go in two profiles (kcp, kcp/cc):
// bn-N (N Mbit/s), bn-loss (50 Mbit/s with 5 % random loss each way),
// bn-fair-N (N udpgate connections through one 20 Mbit/s link) and
// bn-vs-quic (a udpgate and a quic-go connection through one 20 Mbit/s
// link). Per run: bulk goodput as a share of the link and the time until
// it first reaches 85 %, the bottleneck's drops each way and its largest
// queue, the small messages' round trip p50/p99 idle and during the bulk
// flow, small messages lost, connections that ended, and for several
// connections each one's share of their goodput.
//
// Sealed mode (docs/protocol.md §11) has two kinds, run by udpgate with a
// private key drawn per run (sealed.go): sealed-data-N is data-N with
// every client proving a connect token and every Data packet sealed both
// ways, against the raw echo of datagrams of the sealed size (the naive
// server has no sealed mode); sealed-storm-N is storm-N with the token's
// proof in every handshake.
//
// Variants are udpgate, rawecho, naive, kcp (kcp/cc: its congestion window
// on) or quic (no settings), with optional settings /bN
// (batch), /sN (sockets), /rSIZE (socket buffers, e.g. r208k, r4m), /pN
// (GOMAXPROCS), /frag, for rawecho /c (the raw echo in C, compiled at bench
// time with the system's C compiler, skipped with a message without one:
// the floor), and for udpgate /overload (overload control on),
// /defaults (cmd/server's default limits and timers) and /nosteer (no
// kernel steering of handshakes and connection packets). A variant runs only
// in the scenarios it applies to: rawecho in the packet-rate ones and
// msg-cpu-N, udpgate/overload in storms and the player's scenarios, kcp in the
// message and bottleneck scenarios, kcp/cc and quic in the bottleneck
// scenarios of one connection. Ratios use the first
// rawecho and naive variants; each run starts a fresh server, so
// repetitions are independent.
//
// Only loopback addresses are used, every phase is bounded in time and
// packets, and every child stops by itself.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	if spec := os.Getenv(roleEnv); spec != "" {
		os.Exit(childMain(spec, os.Stdin, os.Stdout))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// Modes' defaults.
var (
	quickScenarios = "challenge-1k,ack-1k,data-1k,data-10k"
	fullScenarios  = "challenge-1k,ack-1k,ack-100k,data-1k,data-100k,low-load,storm-1k,storm-10k,storm-100k,rtt-under-flood,conns-100k,sealed-data-1k,sealed-data-100k,sealed-storm-10k"
	defaultServers = "udpgate,rawecho,naive"
	fullServers    = "udpgate,udpgate/overload,rawecho,naive"
)

// parseOptions reads the command line.
func parseOptions(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "quick mode (the default): 1 repetition, 0.5 s warm-up, 2 s windows, scenarios "+quickScenarios)
	full := fs.Bool("full", false, "full mode: 5 repetitions, 1 s warm-up, 4 s windows, scenarios "+fullScenarios)
	reps := fs.Int("reps", 0, "repetitions (0: the mode's)")
	warmup := fs.Duration("warmup", 0, "warm-up before each window (0: the mode's)")
	window := fs.Duration("window", 0, "measuring window (0: the mode's)")
	scenarios := fs.String("scenarios", "", "comma-separated list: kind-clients with kind challenge, ack, data, storm, conns, sealed-data or sealed-storm (e.g. data-100k, storm-10k, conns-100k, sealed-data-1k), low-load, rtt-under-flood, msg-lossy, msg-lossy-N (N % loss), msg-bulk, msg-bulk-Nm (N MiB), msg-cpu-N, bn-N (N Mbit/s bottleneck), bn-loss, bn-fair-N, bn-vs-quic (default: the mode's)")
	variants := fs.String("variants", "", "comma-separated servers: udpgate, rawecho, naive, kcp (kcp-go, message and bottleneck scenarios), kcp/cc (kcp-go with its congestion window, bottleneck scenarios), quic (quic-go, bottleneck scenarios), each but kcp and quic with optional /bN /sN /rSIZE /pN (GOMAXPROCS) /frag, rawecho also /c (the raw echo in C, built with the system's C compiler), udpgate also /overload /defaults /nosteer (default: "+defaultServers+"; -full: "+fullServers+")")
	connsRate := fs.Float64("conns-rate", 1, "conns-N: Data packets per second per client while GC is measured (0: closed loop)")
	floodSources := fs.Int("flood-sources", 64, "rtt-under-flood: the attacker's source ports (one address), 1 to 4096")
	floodSenders := fs.Int("flood-senders", 1, "rtt-under-flood: the attacker's sending threads, 1 to 8 (each takes a core if it can)")
	msgDuration := fs.Duration("msg-duration", 20*time.Second, "msg-lossy: how long each client sends (60 messages/s; drained for up to 10 s more)")
	msgRate := fs.Float64("msg-rate", 30000, "msg-cpu-N: messages per second, all clients together (bursts of 4)")
	msgBulk := fs.Int("msg-bulk", 3, "msg-bulk: transfers per run")
	bnDuration := fs.Duration("bn-duration", 0, "bottleneck scenarios: the bulk phase (0: the scenario's, 12-16 s; the idle phase before it is a quarter of it, 0.5 to 3 s)")
	bnSendRate := fs.Int("bn-send-rate", 0, "bottleneck scenarios: udpgate's Config.Messages.SendRate, bytes per second (0: the library's default)")
	out := fs.String("out", "", "directory for bench-results.{md,json,svg} (default: a new temporary directory)")
	loadSockets := fs.Int("load-sockets", 0, "load generator sockets (0: 2)")
	loadWindow := fs.Int("load-window", 0, "outstanding requests per load socket (0: 256)")
	loadBatch := fs.Int("load-batch", 0, "load generator sendmmsg/recvmmsg batch (0: 32)")
	quiet := fs.Duration("quiet", -1, "wait up to this long before each run for the machine to be idle (-1: the mode's; 0: don't)")
	from := fs.String("from", "", "measure nothing: rewrite the reports of an earlier bench-results.json (into -out)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *quick && *full {
		return nil, fmt.Errorf("-quick and -full exclude each other")
	}
	if *from != "" {
		return &options{From: *from, Out: *out}, nil
	}
	opt := &options{
		Mode: "quick", Reps: 1, Warmup: 500 * time.Millisecond, Window: 2 * time.Second,
		LoadSockets: *loadSockets, LoadWindow: *loadWindow, LoadBatch: *loadBatch,
		ConnsRate: *connsRate, FloodSources: *floodSources, FloodSenders: *floodSenders,
		MsgDuration: *msgDuration, MsgRate: *msgRate, MsgBulk: *msgBulk,
		BnDuration: *bnDuration, BnSendRate: *bnSendRate,
		MinAcct: 0.85, Retries: 0, Out: *out,
		Command: "go run . " + strings.Join(args, " "), // in bench/
	}
	scs, vars := quickScenarios, defaultServers
	if *full {
		vars = fullServers
		opt.Mode, opt.Reps, opt.Warmup, opt.Window = "full", 5, time.Second, 4*time.Second
		opt.Quiet, opt.Retries = 10*time.Second, 1
		scs = fullScenarios
	}
	if *reps > 0 {
		opt.Reps = *reps
	}
	if *warmup > 0 {
		opt.Warmup = *warmup
	}
	if *window > 0 {
		opt.Window = *window
	}
	if *quiet >= 0 {
		opt.Quiet = *quiet
	}
	if *scenarios != "" {
		scs = *scenarios
	}
	if *variants != "" {
		vars = *variants
	}
	if *connsRate < 0 || *floodSources < 1 || *floodSources > 4096 || *floodSenders < 1 || *floodSenders > 8 {
		return nil, fmt.Errorf("-conns-rate must not be negative, -flood-sources must be 1 to 4096 and -flood-senders 1 to 8")
	}
	if *msgDuration <= 0 || *msgDuration > 2*time.Minute || *msgRate <= 0 || *msgRate > 1e6 || *msgBulk < 1 || *msgBulk > 20 {
		return nil, fmt.Errorf("-msg-duration must be in (0, 2m], -msg-rate in (0, 1e6] and -msg-bulk 1 to 20")
	}
	if *bnDuration < 0 || *bnDuration > 2*time.Minute || *bnSendRate < 0 {
		return nil, fmt.Errorf("-bn-duration must be in [0, 2m] and -bn-send-rate not negative")
	}
	if opt.Warmup+opt.Window > time.Minute || opt.Reps > 50 {
		return nil, fmt.Errorf("a run of %v + %v × %d repetitions is more than this harness allows (1 min per run, 50 repetitions)", opt.Warmup, opt.Window, opt.Reps)
	}
	for _, s := range strings.Split(scs, ",") {
		sc, err := parseScenario(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		opt.Scenarios = append(opt.Scenarios, sc)
	}
	for _, s := range strings.Split(vars, ",") {
		v, err := parseVariant(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		opt.Variants = append(opt.Variants, v)
	}
	return opt, nil
}

// run is the whole harness: parse, measure, report.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	opt, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	if opt.From != "" {
		return replot(opt.From, opt.Out, stdout)
	}
	opt.Log = stderr
	if opt.Out == "" {
		if opt.Out, err = os.MkdirTemp("", "udpgate-bench-"); err != nil {
			return err
		}
	}
	defer buildCEcho(opt, stderr)()
	start := time.Now()
	fmt.Fprintf(stderr, "bench: %s mode, %d repetition(s) of %d scenario(s) × %d server(s); results in %s\n",
		opt.Mode, opt.Reps, len(opt.Scenarios), len(opt.Variants), opt.Out)
	recs, err := harness(ctx, opt)
	if err != nil {
		return err
	}
	paths, err := writeReports(opt.Out, summarise(opt, recs), stdout)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "bench: done in %v; wrote %s\n", time.Since(start).Round(time.Second), strings.Join(paths, ", "))
	return nil
}

// replot rewrites the reports of an earlier run from its JSON, with the
// present table and chart code, into dir (default: beside the JSON).
func replot(path, dir string, stdout io.Writer) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if rep.Options == nil || len(rep.Runs) == 0 {
		return fmt.Errorf("%s: not a bench-results.json", path)
	}
	if dir == "" {
		dir = filepath.Dir(path)
	}
	// Recompute the summary, so improvements to it apply to old runs.
	opt := rep.Options
	fresh := summarise(opt, rep.Runs)
	fresh.When, fresh.Machine = rep.When, rep.Machine
	_, err = writeReports(dir, fresh, stdout)
	return err
}
