package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/udpgate/udpgate/internal/testkit/procstat"
	"github.com/udpgate/udpgate/internal/traffic/loadgen"
)

// The storm-N scenario: N clients start at once (a match begins, a server
// comes back) and each runs the whole handshake, Initial → Challenge →
// Response → Ack, promotion included, as docs/protocol.md §6's client does it
// (resending its Initial or Response after 1 s). The generator sends every
// Initial as fast as it can (loadgen's Storm), from N distinct addresses.
// Each run has a fresh server, so repetitions are independent.

// stormRecord is one storm.
type stormRecord struct {
	Clients   int `json:"clients"`
	Connected int `json:"connected"`
	// PerSecond: full handshakes per second, Connected ÷ AllIn (from the
	// first Initial to the last Ack).
	PerSecond float64 `json:"handshakes_per_s"`
	AllInSec  float64 `json:"all_in_s"`
	// Time to connect per client, from the storm's start (every client
	// starts then) to its Ack.
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
	// Resent: clients that connected only after a resend (a packet was
	// lost, or the answer took more than 1 s). Denied and TimedOut: clients
	// that never got in.
	Resent   int `json:"resent"`
	Denied   int `json:"denied"`
	TimedOut int `json:"timed_out"`
	// Packets: handshake datagrams the clients sent, resends included.
	Packets uint64 `json:"packets"`
	// ServerCPUus: the server's CPU per connected client, µs.
	ServerCPUus float64 `json:"server_cpu_us_per_handshake"`
	// KernelDrops: datagrams the kernel dropped at the server's sockets
	// (/proc/net/udp) during the storm. PromotionFull: proven clients
	// udpgate turned away for want of a promotion worker (-1: the server
	// does not count them).
	KernelDrops   uint64 `json:"kernel_drops"`
	PromotionFull int64  `json:"promotion_full"`
	// LoadDrops: replies the kernel dropped at the generator's own
	// sockets. Non-zero means some resends are the generator's doing, not
	// the server's; the storm is then flagged.
	LoadDrops uint64 `json:"load_drops"`
}

// stormBuffer is the generator's receive buffer per socket in a storm: a
// small reply takes about 1 KiB of buffer in the kernel.
const stormBuffer = 64 << 20

// stormTimeout bounds a storm: the client's own 10 s connect timeout ends
// every handshake well before it.
const stormTimeout = time.Minute

// runStorm measures variant v under storm scenario sc.
func runStorm(ctx context.Context, opt *options, sc scenario, v variant, rep int) (runRecord, error) {
	rec := runRecord{Rep: rep, Scenario: sc.Name, Variant: v.Spec}
	keys, env, err := sc.keys(v)
	if err != nil {
		return rec, err
	}
	ch, err := startChild(v, false, stormTimeout+30*time.Second, env...)
	if err != nil {
		return rec, err
	}
	defer ch.stop()
	// ModeResponse: the lightest mode with connections (no sequence state
	// per client); the storm itself is all this run measures. A sealed
	// storm needs ModeData: the proof carries sequence numbers, and a
	// client is in when the server's first sealed packet opens.
	lcfg := loadgen.Config{
		Mode:    loadgen.ModeResponse,
		Clients: sc.Clients,
		Sockets: opt.LoadSockets,
		Batch:   opt.LoadBatch,
		// Room for every client's Challenge and Ack at once, so that the
		// generator, sharing the CPUs with the server, does not drop
		// replies itself when it falls behind for a moment (LoadDrops
		// checks it).
		RecvBuffer: stormBuffer,
	}
	if keys != nil {
		lcfg.Mode = loadgen.ModeData
		// Only the handshakes: no KeepAlive within the storm's bound.
		lcfg.KeepAlive = stormTimeout
		keys.apply(&lcfg)
	}
	gen, err := ch.newGen(lcfg)
	if err != nil {
		return rec, err
	}
	defer gen.Close()
	d0, derr := udpDrops(ch.addr.Port())
	l0, lerr := udpDrops(gen.Ports()...)
	s0 := takeSample(ch.pid)
	sctx, cancel := context.WithTimeout(ctx, stormTimeout)
	c, err := gen.Storm(sctx)
	cancel()
	s1 := takeSample(ch.pid)
	d1, derr1 := udpDrops(ch.addr.Port())
	l1, lerr1 := udpDrops(gen.Ports()...)
	if err != nil {
		return rec, fmt.Errorf("storm: %w", err)
	}
	if s0.err != nil || s1.err != nil {
		return rec, fmt.Errorf("reading the server's CPU time: %v %v", s0.err, s1.err)
	}
	if err := errors.Join(derr, derr1, lerr, lerr1); err != nil {
		return rec, fmt.Errorf("reading kernel drops: %w", err)
	}
	rec.ServerStats = ch.stop()
	rec.Connect = connectRec(&c)
	st := &stormRecord{
		Clients: c.Clients, Connected: c.Connected,
		PerSecond: c.PerSecond(), AllInSec: c.AllIn.Seconds(),
		P50ms: ms(c.SinceStart.P50), P99ms: ms(c.SinceStart.P99), MaxMs: ms(c.SinceStart.Max),
		Resent: c.Resent, Denied: c.DeniedFull + c.DeniedRefused + c.DeniedOther +
			c.RefusedExpired + c.RefusedInvalid + c.RefusedForeign + c.RefusedInUse + c.RefusedFull,
		TimedOut: c.TimedOut + c.WrongVersion + c.WrongLayout, Packets: c.Packets,
		KernelDrops: d1 - d0, LoadDrops: l1 - l0, PromotionFull: -1,
	}
	if c.Connected > 0 {
		st.ServerCPUus = us(s1.server.Sched-s0.server.Sched) / float64(c.Connected)
	}
	if n, ok := parseKV(rec.ServerStats)["promotion_full"]; ok {
		st.PromotionFull = int64(n)
	}
	rec.Storm = st
	rec.Acct = acct(s0, s1)
	if st.LoadDrops > 0 {
		rec.Flag = fmt.Sprintf("the generator's own sockets dropped %d replies", st.LoadDrops)
	}
	return rec, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// stormCell summarises one variant's storms over the repetitions: medians,
// and the worst run for the counts that should be zero.
type stormCell struct {
	Scenario    string  `json:"scenario"`
	Variant     string  `json:"variant"`
	Runs        int     `json:"runs"`
	Clients     int     `json:"clients"`
	PerSecond   float64 `json:"handshakes_per_s"`
	AllInSec    float64 `json:"all_in_s"`
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	ServerCPUus float64 `json:"server_cpu_us_per_handshake"`
	KernelDrops float64 `json:"kernel_drops"`
	// Worst run.
	MaxAllInSec      float64 `json:"max_all_in_s"`
	MaxResent        int     `json:"max_resent"`
	MaxNotIn         int     `json:"max_denied_or_failed"`
	MaxPromotionFull int64   `json:"max_promotion_full"`
	// VsNaive: median of same-repetition handshakes/s ÷ the naive
	// server's (0 without it).
	VsNaive float64 `json:"handshakes_vs_naive"`
	Flagged int     `json:"flagged,omitempty"`
}

func summariseStorm(rs []runRecord, naive map[int]runRecord) stormCell {
	c := stormCell{Scenario: rs[0].Scenario, Variant: rs[0].Variant, Runs: len(rs), MaxPromotionFull: -1}
	var pps, allIn, p50, p99, cpu, drops, vs []float64
	for _, r := range rs {
		st := r.Storm
		if st == nil {
			continue
		}
		c.Clients = st.Clients
		pps = append(pps, st.PerSecond)
		allIn = append(allIn, st.AllInSec)
		p50 = append(p50, st.P50ms)
		p99 = append(p99, st.P99ms)
		cpu = append(cpu, st.ServerCPUus)
		drops = append(drops, float64(st.KernelDrops))
		c.MaxAllInSec = max(c.MaxAllInSec, st.AllInSec)
		c.MaxResent = max(c.MaxResent, st.Resent)
		c.MaxNotIn = max(c.MaxNotIn, st.Clients-st.Connected)
		c.MaxPromotionFull = max(c.MaxPromotionFull, st.PromotionFull)
		if n, ok := naive[r.Rep]; ok && n.Storm != nil && n.Storm.PerSecond > 0 {
			vs = append(vs, st.PerSecond/n.Storm.PerSecond)
		}
		if r.Flag != "" {
			c.Flagged++
		}
	}
	c.PerSecond, c.AllInSec, c.P50ms, c.P99ms = procstat.Median(pps), procstat.Median(allIn), procstat.Median(p50), procstat.Median(p99)
	c.ServerCPUus, c.KernelDrops, c.VsNaive = procstat.Median(cpu), procstat.Median(drops), procstat.Median(vs)
	return c
}

func writeStorms(w io.Writer, cells []stormCell) {
	fmt.Fprintln(w, "\n## Login storms (every client starts at once: Initial → Challenge → Response → Ack, 1 s resends)")
	fmt.Fprintln(w, "\nHandshakes/s is connected clients ÷ the time from the first Initial to the last Ack; time to connect is from the storm's start. "+
		"Medians over repetitions; *worst* columns are the worst repetition. Kernel drops are the server sockets' (/proc/net/udp); "+
		"promotion_full counts proven clients udpgate turned away for want of a promotion worker. "+
		"In sealed-storm rows a handshake also proves the client's connect token: it ends at the server's first sealed packet.")
	fmt.Fprintln(w, "\n| scenario | server | handshakes/s | ÷ naive | all in (worst) | connect p50 / p99 ms | server µs/handshake | resent (worst) | denied or failed (worst) | kernel drops | promotion_full (worst) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, c := range cells {
		pf := "–"
		if c.MaxPromotionFull >= 0 {
			pf = fmt.Sprint(c.MaxPromotionFull)
		}
		fmt.Fprintf(w, "| %s | %s%s | %s | %s | %.3f s (%.3f) | %.0f / %.0f | %.1f | %d | %d | %.0f | %s |\n",
			c.Scenario, c.Variant, flagMark(c.Flagged), thousands(c.PerSecond), ratio(c.VsNaive), c.AllInSec, c.MaxAllInSec,
			c.P50ms, c.P99ms, c.ServerCPUus, c.MaxResent, c.MaxNotIn, c.KernelDrops, pf)
	}
}

// stormTargets are issue 11's storm goals for one udpgate variant's cell.
// A sealed storm (issue 13) has no goal but that every client gets in: its
// rate is reported, not judged.
func stormTargets(c stormCell) []target {
	var ts []target
	name := c.Scenario + " (" + c.Variant + "): "
	if strings.HasPrefix(c.Scenario, sealedPrefix) {
		return []target{{Name: name + "clients denied or failed (worst run)", Goal: "0", Got: float64(c.MaxNotIn), Met: c.MaxNotIn == 0}}
	}
	if c.VsNaive > 0 {
		ts = append(ts, target{Name: name + "handshakes/s ÷ naive", Goal: "≥ 2", Got: c.VsNaive, Met: c.VsNaive >= 2})
	}
	if c.MaxPromotionFull >= 0 {
		ts = append(ts, target{Name: name + "promotion_full drops (worst run)", Goal: "0", Got: float64(c.MaxPromotionFull), Met: c.MaxPromotionFull == 0})
	}
	if c.Clients <= 10_000 {
		ts = append(ts,
			target{Name: name + "all in, s (worst run)", Goal: "≤ 0.5", Got: c.MaxAllInSec, Met: c.MaxAllInSec <= 0.5},
			target{Name: name + "clients that needed a resend (worst run)", Goal: "0", Got: float64(c.MaxResent), Met: c.MaxResent == 0})
	} else {
		ts = append(ts, target{Name: name + "all in, s (worst run)", Goal: "≤ 3", Got: c.MaxAllInSec, Met: c.MaxAllInSec <= 3})
	}
	ts = append(ts, target{Name: name + "clients denied or failed (worst run)", Goal: "0", Got: float64(c.MaxNotIn), Met: c.MaxNotIn == 0})
	return ts
}
