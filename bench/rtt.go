package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/procstat"
	"github.com/udpgate/udpgate/internal/traffic/flood"
	"github.com/udpgate/udpgate/internal/traffic/loadgen"
	"github.com/udpgate/udpgate/internal/wire"
)

// The rtt-under-flood scenario: a player on an established connection
// sends one Data packet every millisecond to the server's echo
// application and times each echo, first with nothing else going on, then
// while an attacker floods the server with Initials as fast as one sender
// can from one host (open loop, one address with many source ports,
// sendmmsg batches, replies counted but never waited for). The server runs with the settings a new user gets
// (cmd/server's defaults; /overload adds overload control), because that
// is what a player meets. The flood runs in a process of its own (this
// binary again, floodRole), so the player's thread in the harness keeps
// honest time and the flood's CPU is not the harness's.

const (
	// floodRole is the roleEnv value of the flood's child process, and
	// floodEnv carries its floodSpec as JSON.
	floodRole = "flood"
	floodEnv  = "UDPGATE_BENCH_FLOOD"
	// playerRate: one Data packet per millisecond.
	playerRate = 1000
	// playerLossTimeout: an echo later than this counts as lost (a game
	// has long given up on it).
	playerLossTimeout = time.Second
	// floodBatch: datagrams per sendmmsg, all from one source.
	floodBatch = 64
)

// floodHost is the attacker's address: one host, as in issue 11's attack
// (its ports are the flood's sources), clear of the player's 127.1.0.0/16.
var floodHost = netip.AddrFrom4([4]byte{127, 0, 2, 1})

// floodSpec is what the flood child sends and for how long.
type floodSpec struct {
	Server      netip.AddrPort `json:"server"`
	Sources     int            `json:"sources"`
	Senders     int            `json:"senders"`
	MaxDuration time.Duration  `json:"max_duration"`
}

// floodMain is the flood child: flood spec's server with Initials until
// stdin closes or MaxDuration passes, then report on a STATS line.
func floodMain(stdin io.Reader, stdout io.Writer) int {
	var spec floodSpec
	if err := json.Unmarshal([]byte(os.Getenv(floodEnv)), &spec); err != nil {
		fmt.Fprintf(stdout, "ERROR flood spec: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		io.Copy(io.Discard, stdin)
		cancel()
	}()
	fmt.Fprintln(stdout, "READY 0")
	// One host: one address, a socket (port) per source.
	srcs := make([]netip.Addr, spec.Sources)
	for i := range srcs {
		srcs[i] = floodHost
	}
	rep, err := flood.Run(ctx, flood.Config{
		Server:         spec.Server,
		Sources:        srcs,
		Mix:            flood.Mix{flood.KindInitial: 1},
		Count:          flood.MaxCount,
		MaxDuration:    spec.MaxDuration,
		NetworkVersion: benchNetVersion,
		Batch:          floodBatch,
		Senders:        spec.Senders,
		// A short drain: the replies are the attacker's, nobody waits
		// for them.
		Grace: 50 * time.Millisecond,
	})
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(stdout, "ERROR %v\n", err)
		return 1
	}
	if rep == nil {
		fmt.Fprintln(stdout, "ERROR the flood never started")
		return 1
	}
	fmt.Fprintf(stdout, "STATS sent=%d secs=%g rate=%.0f received=%d challenges=%d\n",
		rep.Sent.Datagrams, rep.SendTime.Seconds(), rep.SendRate(), rep.Received.Datagrams,
		rep.Replies[flood.ReplyType(1)].Datagrams)
	return 0
}

// rttPhase is the player's view of one window.
type rttPhase struct {
	Sent    uint64  `json:"sent"`
	Replies uint64  `json:"replies"`
	Lost    uint64  `json:"lost"`
	Late    uint64  `json:"late"`
	LossPct float64 `json:"loss_pct"`
	P50us   float64 `json:"p50_us"`
	P99us   float64 `json:"p99_us"`
	P999us  float64 `json:"p999_us"`
	MaxUs   float64 `json:"max_us"`
}

// phaseOf sums up a player's Run: latency over the window; packets and
// loss over the whole Run (warm-up, window and the drain that waits for
// the last answers), so that every packet sent is either answered in time,
// or lost (no answer within playerLossTimeout, late ones included).
func phaseOf(r *loadgen.RunResult) rttPhase {
	t := r.Total
	lost := t.Lost + uint64(r.Unanswered)
	p := rttPhase{Sent: t.Sent, Replies: t.Replies, Lost: lost, Late: t.Late,
		P50us: us(r.Latency.P50), P99us: us(r.Latency.P99), P999us: us(r.Latency.P999), MaxUs: us(r.Latency.Max)}
	if t.Sent > 0 {
		p.LossPct = 100 * float64(lost) / float64(t.Sent)
	}
	return p
}

// rttRecord is one rtt-under-flood or rtt-under-storm run.
type rttRecord struct {
	Idle rttPhase `json:"idle"`
	// Flood is the player's second window: under the flood, or in
	// rtt-under-storm during the storm.
	Flood rttPhase `json:"flood"`
	// Flood ÷ idle, this run.
	P50Ratio float64 `json:"p50_ratio"`
	P99Ratio float64 `json:"p99_ratio"`
	// The attack: datagrams per second sent, and datagrams the server
	// answered (Challenges and anything else).
	FloodRate    float64 `json:"flood_rate"`
	FloodSent    uint64  `json:"flood_sent"`
	FloodReplies uint64  `json:"flood_replies"`
	// During the flood window: datagrams the kernel dropped at the
	// server's sockets, and the server's CPU ÷ wall time.
	KernelDrops uint64  `json:"kernel_drops"`
	ServerUtil  float64 `json:"server_util"`
	FloodStats  string  `json:"flood_stats"`
	// Storm is rtt-under-storm's storm, as its clients saw it (the flood's
	// fields above are then zero).
	Storm *stormRecord `json:"storm,omitempty"`
}

// runRTT measures variant v under rtt-under-flood or rtt-under-storm.
func runRTT(ctx context.Context, opt *options, sc scenario, v variant, rep int) (runRecord, error) {
	rec := runRecord{Rep: rep, Scenario: sc.Name, Variant: v.Spec}
	storm := sc.Kind == scRTTStorm
	phase := opt.Warmup + opt.Window + playerLossTimeout
	if storm {
		phase = opt.Warmup + stormTimeout + playerLossTimeout
	}
	// A flood meets the settings a new user gets; a storm the storm
	// scenarios' (no per-source limits).
	ch, err := startChild(v, !storm, 2*phase+connectBudget+30*time.Second)
	if err != nil {
		return rec, err
	}
	defer ch.stop()
	player, err := ch.newGen(loadgen.Config{
		Mode:        loadgen.ModeData,
		Clients:     1,
		Sockets:     1,
		PayloadSize: payloadSize,
		Rate:        playerRate,
		LossTimeout: playerLossTimeout,
	})
	if err != nil {
		return rec, err
	}
	defer player.Close()
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	c, err := player.Connect(cctx)
	cancel()
	if err != nil {
		return rec, fmt.Errorf("player connect: %w", err)
	}
	rec.Connect = connectRec(&c)
	idle, err := player.Run(ctx, loadgen.RunSpec{Warmup: opt.Warmup, Window: opt.Window})
	if err != nil {
		return rec, fmt.Errorf("idle: %w", err)
	}

	var load *child
	if storm {
		load, err = startStorm(opt, ch.addr, sc.Clients, phase+30*time.Second)
	} else {
		spec, _ := json.Marshal(floodSpec{Server: ch.addr, Sources: opt.FloodSources, Senders: opt.FloodSenders, MaxDuration: phase + 5*time.Second})
		load, err = startProcess(phase+30*time.Second, roleEnv+"="+floodRole, floodEnv+"="+string(spec))
		if err != nil {
			err = fmt.Errorf("flood: %w", err)
		}
	}
	if err != nil {
		return rec, err
	}
	defer load.stop()
	var s0, s1 sample
	var f0, f1 procstat.CPU
	var d0, d1 uint64
	var derr error
	spec := loadgen.RunSpec{Warmup: opt.Warmup, Window: opt.Window}
	// The storm runs from the window's start to its last client's Ack,
	// and the window with it.
	type answer struct {
		line string
		err  error
	}
	stormDone := make(chan answer, 1)
	stormAsked := false
	if storm {
		spec.Window = stormTimeout
		spec.Until = func(*loadgen.Counters) bool { return len(stormDone) > 0 }
	}
	spec.Mark = func(end bool) {
		d, e := udpDrops(ch.addr.Port())
		f, _ := procstat.Process(load.pid)
		if e != nil {
			derr = e
		}
		if end {
			s1, f1, d1 = takeSample(ch.pid), f, d
			return
		}
		s0, f0, d0 = takeSample(ch.pid), f, d
		if storm {
			stormAsked = true
			go func() {
				l, err := load.ask(stormRequest, stormTimeout+10*time.Second)
				stormDone <- answer{l, err}
			}()
		}
	}
	under, err := player.Run(ctx, spec)
	var st *stormRecord
	if stormAsked {
		a := <-stormDone
		if a.err == nil {
			st, a.err = stormAnswer(a.line)
		}
		if err == nil && a.err != nil {
			err = fmt.Errorf("storm: %w", a.err)
		}
	}
	loadStats := load.stop()
	rec.RTT = &rttRecord{Storm: st}
	if !storm {
		rec.RTT.FloodStats = loadStats
	}
	rec.ServerStats = ch.stop()
	if err != nil {
		return rec, fmt.Errorf("under load: %w", err)
	}
	if storm && st == nil {
		return rec, errors.New("the player's window ended before the storm began")
	}
	if s0.err != nil || s1.err != nil || derr != nil {
		return rec, fmt.Errorf("reading the server's CPU time or drops: %v %v %v", s0.err, s1.err, derr)
	}
	r := rec.RTT
	r.Idle, r.Flood = phaseOf(&idle), phaseOf(&under)
	if r.Idle.P50us > 0 && r.Idle.P99us > 0 {
		r.P50Ratio, r.P99Ratio = r.Flood.P50us/r.Idle.P50us, r.Flood.P99us/r.Idle.P99us
	}
	if !storm {
		fs := parseKV(r.FloodStats)
		r.FloodRate, r.FloodSent, r.FloodReplies = fs["rate"], uint64(fs["sent"]), uint64(fs["received"])
	}
	r.KernelDrops = d1 - d0
	if st != nil {
		st.KernelDrops = r.KernelDrops
	}
	if wall := s1.at.Sub(s0.at); wall > 0 {
		r.ServerUtil = float64(s1.server.Sched-s0.server.Sched) / float64(wall)
	}
	if busy := s1.busy - s0.busy; busy > 0 {
		rec.Acct = float64(s1.server.Stat-s0.server.Stat+s1.self.Stat-s0.self.Stat+f1.Stat-f0.Stat) / float64(busy)
	}
	return rec, nil
}

// rttCell summarises one variant's rtt-under-flood runs: medians over the
// repetitions (ratios are medians of same-run ratios).
type rttCell struct {
	Scenario    string   `json:"scenario"`
	Variant     string   `json:"variant"`
	Runs        int      `json:"runs"`
	Idle        rttPhase `json:"idle"`
	Flood       rttPhase `json:"flood"`
	P50Ratio    float64  `json:"p50_ratio"`
	P99Ratio    float64  `json:"p99_ratio"`
	FloodRate   float64  `json:"flood_rate"`
	KernelDrops float64  `json:"kernel_drops"`
	ServerUtil  float64  `json:"server_util"`
	// MaxLossPct is the worst run's loss under the flood (or storm).
	MaxLossPct float64 `json:"max_flood_loss_pct"`
	Flagged    int     `json:"flagged,omitempty"`
	// rtt-under-storm: the storm's medians (Resent the worst run's), and
	// the handshake datagrams udpgate's connection loops took over a run
	// (its shared counter; -1 for a server without one).
	Storm  *stormRecord `json:"storm,omitempty"`
	Shared float64      `json:"shared,omitempty"`
}

func medianPhase(ps []rttPhase) rttPhase {
	get := func(f func(*rttPhase) float64) float64 {
		var xs []float64
		for i := range ps {
			xs = append(xs, f(&ps[i]))
		}
		return procstat.Median(xs)
	}
	return rttPhase{
		Sent:    uint64(get(func(p *rttPhase) float64 { return float64(p.Sent) })),
		Replies: uint64(get(func(p *rttPhase) float64 { return float64(p.Replies) })),
		Lost:    uint64(get(func(p *rttPhase) float64 { return float64(p.Lost) })),
		Late:    uint64(get(func(p *rttPhase) float64 { return float64(p.Late) })),
		LossPct: get(func(p *rttPhase) float64 { return p.LossPct }),
		P50us:   get(func(p *rttPhase) float64 { return p.P50us }),
		P99us:   get(func(p *rttPhase) float64 { return p.P99us }),
		P999us:  get(func(p *rttPhase) float64 { return p.P999us }),
		MaxUs:   get(func(p *rttPhase) float64 { return p.MaxUs }),
	}
}

func summariseRTT(rs []runRecord) rttCell {
	c := rttCell{Scenario: rs[0].Scenario, Variant: rs[0].Variant, Runs: len(rs)}
	var idle, fl []rttPhase
	var r50, r99, rate, drops, util, hs, allIn, shared []float64
	for _, r := range rs {
		t := r.RTT
		if t == nil {
			continue
		}
		if s := t.Storm; s != nil {
			if c.Storm == nil {
				c.Storm = &stormRecord{Clients: s.Clients, PromotionFull: -1}
			}
			hs, allIn = append(hs, s.PerSecond), append(allIn, s.AllInSec)
			c.Storm.Resent = max(c.Storm.Resent, s.Resent)
			n, ok := parseKV(r.ServerStats)["shared"]
			if !ok {
				n = -1
			}
			shared = append(shared, n)
		}
		idle, fl = append(idle, t.Idle), append(fl, t.Flood)
		r50, r99 = append(r50, t.P50Ratio), append(r99, t.P99Ratio)
		rate, drops, util = append(rate, t.FloodRate), append(drops, float64(t.KernelDrops)), append(util, t.ServerUtil)
		c.MaxLossPct = max(c.MaxLossPct, t.Flood.LossPct)
		if r.Flag != "" {
			c.Flagged++
		}
	}
	c.Idle, c.Flood = medianPhase(idle), medianPhase(fl)
	c.P50Ratio, c.P99Ratio = procstat.Median(r50), procstat.Median(r99)
	c.FloodRate, c.KernelDrops, c.ServerUtil = procstat.Median(rate), procstat.Median(drops), procstat.Median(util)
	if c.Storm != nil {
		c.Storm.PerSecond, c.Storm.AllInSec, c.Shared = procstat.Median(hs), procstat.Median(allIn), procstat.Median(shared)
	}
	return c
}

func writeRTTs(w io.Writer, cells []rttCell, opt *options) {
	fmt.Fprintf(w, "\n## A player under an Initial flood (rtt-under-flood)\n\n"+
		"One established client sends a %d-byte Data packet every millisecond to the echo application and times each echo "+
		"(lost: no echo within %v, counted over warm-up and window). First idle, then while another process floods the server with valid Initials as fast as %d "+
		"sender thread(s) can from one host (one address, open loop, sendmmsg batches of %d, each batch from one of its %d source ports, replies never awaited). "+
		"udpgate runs with cmd/server's defaults (32 Challenges/s per source, 1 s KeepAlive, 5 s Timeout); /overload adds "+
		"overload control. Medians over repetitions; ratios are medians of same-run flood ÷ idle.\n\n",
		fastpathDataLen(), playerLossTimeout, max(opt.FloodSenders, 1), floodBatch, opt.FloodSources)
	fmt.Fprintln(w, "| server | idle p50 / p99 / p99.9 µs | idle loss | flood p50 / p99 / p99.9 µs | flood loss (worst) | p50 × | p99 × | flood datagrams/s | server kernel drops | server util |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, c := range cells {
		fmt.Fprintf(w, "| %s%s | %.0f / %.0f / %.0f | %.2f %% | %.0f / %.0f / %.0f | %.2f %% (%.2f %%) | %.2f | %.2f | %s | %.0f | %.2f |\n",
			c.Variant, flagMark(c.Flagged), c.Idle.P50us, c.Idle.P99us, c.Idle.P999us, c.Idle.LossPct,
			c.Flood.P50us, c.Flood.P99us, c.Flood.P999us, c.Flood.LossPct, c.MaxLossPct,
			c.P50Ratio, c.P99Ratio, thousands(c.FloodRate), c.KernelDrops, c.ServerUtil)
	}
}

// rttTargets are issue 11's goals for one udpgate variant's player.
func rttTargets(c rttCell) []target {
	name := c.Scenario + " (" + c.Variant + "): "
	return []target{
		{Name: name + "player p50 flood ÷ idle", Goal: "≤ 1.5", Got: c.P50Ratio, Met: c.P50Ratio <= 1.5},
		{Name: name + "player p99 flood ÷ idle", Goal: "≤ 2", Got: c.P99Ratio, Met: c.P99Ratio <= 2},
		{Name: name + "player loss under flood, % (worst run)", Goal: "≤ 1", Got: c.MaxLossPct, Met: c.MaxLossPct <= 1},
	}
}

// fastpathDataLen is the player's datagram size.
func fastpathDataLen() int {
	return wire.ConnLen(wire.Magic{}, protocol.KindData, payloadSize)
}
