package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"time"

	"github.com/udpgate/udpgate/internal/testkit/procstat"
)

// cell summarises one variant under one scenario over the repetitions.
type cell struct {
	Scenario string `json:"scenario"`
	Variant  string `json:"variant"`
	Runs     int    `json:"runs"`
	// Medians over repetitions, and the range of the CPU figure.
	PPS     float64 `json:"pps"`
	CPUNs   float64 `json:"server_cpu_ns_per_pkt"`
	CPUMin  float64 `json:"server_cpu_ns_min"`
	CPUMax  float64 `json:"server_cpu_ns_max"`
	SchedNs float64 `json:"server_schedstat_ns_per_pkt"`
	Util    float64 `json:"server_util"`
	LoadNs  float64 `json:"loadgen_cpu_ns_per_pkt"`
	Acct    float64 `json:"acct"`
	P50us   float64 `json:"rtt_p50_us"`
	P99us   float64 `json:"rtt_p99_us"`
	Lost    uint64  `json:"lost"` // summed over repetitions
	// Medians of same-repetition ratios: server CPU per packet ÷ the raw
	// echo's, and the naive server's ÷ this one's (= packets per CPU-second
	// ÷ naive's). 0 when the baseline did not run.
	VsEcho  float64 `json:"cpu_vs_rawecho"`
	VsNaive float64 `json:"pkts_per_cpu_s_vs_naive"`
	// VsCEcho is server CPU per packet ÷ the C echo's (rawecho/c), the
	// same way; 0 when it did not run.
	VsCEcho float64 `json:"cpu_vs_cecho,omitempty"`
	// Handshake setup (scenarios with connections), medians.
	ConnectPerSec float64 `json:"connect_per_s,omitempty"`
	ConnectP50us  float64 `json:"connect_p50_us,omitempty"`
	ConnectP99us  float64 `json:"connect_p99_us,omitempty"`
	ConnectSec    float64 `json:"connect_s,omitempty"`
	Flagged       int     `json:"flagged,omitempty"`
}

// target is one of the issue's goals, checked against the medians.
type target struct {
	Name string  `json:"name"`
	Goal string  `json:"goal"`
	Got  float64 `json:"got"`
	Met  bool    `json:"met"`
}

// report is everything one invocation produced.
type report struct {
	When    time.Time   `json:"when"`
	Machine string      `json:"machine"`
	Options *options    `json:"options"`
	Cells   []cell      `json:"cells"`
	Storms  []stormCell `json:"storms,omitempty"`
	RTTs    []rttCell   `json:"rtt_under_flood,omitempty"`
	// StormRTTs: rtt-under-storm's cells.
	StormRTTs []rttCell   `json:"rtt_under_storm,omitempty"`
	Mems      []memCell   `json:"memory,omitempty"`
	Msgs      []msgCell   `json:"messages,omitempty"`
	Bns       []bnCell    `json:"bottleneck,omitempty"`
	Targets   []target    `json:"targets"`
	Runs      []runRecord `json:"runs"`
}

// baseline returns the first variant of kind, the reference for ratios.
func baseline(vs []variant, kind string) string {
	for _, v := range vs {
		if v.Kind == kind {
			return v.Spec
		}
	}
	return ""
}

// cEchoBaseline returns the first C echo variant (rawecho/c), or "".
func cEchoBaseline(vs []variant) string {
	for _, v := range vs {
		if v.C {
			return v.Spec
		}
	}
	return ""
}

// summarise turns run records into cells and checks the targets.
func summarise(opt *options, recs []runRecord) *report {
	rep := &report{When: time.Now().UTC(), Machine: machineLine(), Options: opt, Runs: recs}
	type key struct{ sc, v string }
	byKey := map[key][]runRecord{}
	byRep := map[key]map[int]runRecord{}
	for _, r := range recs {
		k := key{r.Scenario, r.Variant}
		byKey[k] = append(byKey[k], r)
		if byRep[k] == nil {
			byRep[k] = map[int]runRecord{}
		}
		byRep[k][r.Rep] = r
	}
	echo, naive := baseline(opt.Variants, kindRawEcho), baseline(opt.Variants, kindNaive)
	cEcho := cEchoBaseline(opt.Variants)
	for _, sc := range opt.Scenarios {
		for _, v := range opt.Variants {
			rs := byKey[key{sc.Name, v.Spec}]
			if len(rs) == 0 {
				continue
			}
			switch sc.Kind {
			case scStorm:
				rep.Storms = append(rep.Storms, summariseStorm(rs, byRep[key{sc.Name, naive}]))
				continue
			case scRTTFlood:
				rep.RTTs = append(rep.RTTs, summariseRTT(rs))
				continue
			case scRTTStorm:
				rep.StormRTTs = append(rep.StormRTTs, summariseRTT(rs))
				continue
			case scConns:
				rep.Mems = append(rep.Mems, summariseMem(rs))
				continue
			case scMsgLossy, scMsgBulk, scMsgCPU:
				var kcpRuns, rawRuns map[int]runRecord
				if v.Kind != kindKCP {
					kcpRuns = msgRunsByRep(opt, recs, sc.Name, kindKCP)
				}
				if v.Kind != kindRawEcho {
					rawRuns = msgRunsByRep(opt, recs, sc.Name, kindRawEcho)
				}
				rep.Msgs = append(rep.Msgs, summariseMsg(sc, rs, kcpRuns, rawRuns))
				continue
			case scBn:
				rep.Bns = append(rep.Bns, summariseBn(sc, rs))
				continue
			}
			c := cell{Scenario: sc.Name, Variant: v.Spec, Runs: len(rs), CPUMin: math.Inf(1)}
			var pps, cpu, sched, util, load, acct, p50, p99, vsEcho, vsNaive, vsC, cps, cp50, cp99, csec []float64
			for _, r := range rs {
				pps = append(pps, r.PPS)
				cpu = append(cpu, r.CPUNs)
				sched = append(sched, r.SchedNs)
				util = append(util, r.Util)
				load = append(load, r.LoadNs)
				acct = append(acct, r.Acct)
				p50 = append(p50, r.P50us)
				p99 = append(p99, r.P99us)
				c.CPUMin = min(c.CPUMin, r.CPUNs)
				c.CPUMax = max(c.CPUMax, r.CPUNs)
				c.Lost += r.Lost
				if r.Flag != "" {
					c.Flagged++
				}
				if e, ok := byRep[key{sc.Name, echo}][r.Rep]; ok && echo != "" {
					vsEcho = append(vsEcho, r.CPUNs/e.CPUNs)
				}
				if e, ok := byRep[key{sc.Name, cEcho}][r.Rep]; ok && cEcho != "" {
					vsC = append(vsC, r.CPUNs/e.CPUNs)
				}
				if n, ok := byRep[key{sc.Name, naive}][r.Rep]; ok && naive != "" {
					vsNaive = append(vsNaive, n.CPUNs/r.CPUNs)
				}
				if r.Connect != nil {
					cps = append(cps, r.Connect.PerSecond)
					cp50 = append(cp50, r.Connect.P50us)
					cp99 = append(cp99, r.Connect.P99us)
					csec = append(csec, r.Connect.Seconds)
				}
			}
			c.PPS, c.CPUNs, c.SchedNs, c.Util = procstat.Median(pps), procstat.Median(cpu), procstat.Median(sched), procstat.Median(util)
			c.LoadNs, c.Acct, c.P50us, c.P99us = procstat.Median(load), procstat.Median(acct), procstat.Median(p50), procstat.Median(p99)
			c.VsEcho, c.VsNaive, c.VsCEcho = procstat.Median(vsEcho), procstat.Median(vsNaive), procstat.Median(vsC)
			c.ConnectPerSec, c.ConnectP50us, c.ConnectP99us, c.ConnectSec = procstat.Median(cps), procstat.Median(cp50), procstat.Median(cp99), procstat.Median(csec)
			rep.Cells = append(rep.Cells, c)
		}
	}
	rep.Targets = targets(opt, rep.Cells, recs)
	rep.Targets = append(rep.Targets, issueTargets(opt, rep)...)
	return rep
}

// targets checks the issue's goals for the first udpgate variant.
func targets(opt *options, cells []cell, recs []runRecord) []target {
	srv := baseline(opt.Variants, kindUdpgate)
	if srv == "" {
		return nil
	}
	find := func(sc string) *cell {
		for i := range cells {
			if cells[i].Scenario == sc && cells[i].Variant == srv {
				return &cells[i]
			}
		}
		return nil
	}
	var ts []target
	for _, sc := range opt.Scenarios {
		c := find(sc.Name)
		if c == nil {
			continue
		}
		if c.VsEcho > 0 && sc.Sealed {
			ts = append(ts, target{Name: sc.Name + ": server CPU per sealed Data echo ÷ raw echo", Goal: "≤ 1.20", Got: c.VsEcho, Met: c.VsEcho <= 1.20})
		} else if c.VsEcho > 0 && (sc.Kind == scChallenge || sc.Kind == scData) {
			ts = append(ts, target{Name: sc.Name + ": server CPU per packet ÷ raw echo", Goal: "≤ 1.10", Got: c.VsEcho, Met: c.VsEcho <= 1.10})
		}
		if c.VsEcho > 0 && sc.Kind == scLowLoad {
			ts = append(ts, target{Name: sc.Name + ": server CPU per Challenge ÷ raw echo (8 clients × 1 in flight)", Goal: "≤ 1.15", Got: c.VsEcho, Met: c.VsEcho <= 1.15})
		}
		if c.VsNaive > 0 && sc.Kind != scLowLoad {
			ts = append(ts, target{Name: sc.Name + ": packets per CPU-second ÷ naive", Goal: "≥ 2", Got: c.VsNaive, Met: c.VsNaive >= 2})
		}
	}
	// Data cost from the fewest to the most connections, same repetition.
	var lo, hi *scenario
	for i := range opt.Scenarios {
		sc := &opt.Scenarios[i]
		if sc.Kind != scData || sc.Sealed {
			continue
		}
		if lo == nil || sc.Clients < lo.Clients {
			lo = sc
		}
		if hi == nil || sc.Clients > hi.Clients {
			hi = sc
		}
	}
	if lo != nil && hi != nil && lo != hi {
		if r := scaleRatio(recs, lo.Name, hi.Name, srv); r > 0 {
			ts = append(ts, target{Name: fmt.Sprintf("data: CPU per packet at %s ÷ at %s", hi.Name, lo.Name), Goal: "≤ 1.30", Got: r, Met: r <= 1.30})
		}
	}
	return ts
}

// scaleRatio is the median over repetitions of CPU per packet at scenario
// hi ÷ at scenario lo for variant v.
func scaleRatio(recs []runRecord, lo, hi, v string) float64 {
	at := map[int]float64{}
	for _, r := range recs {
		if r.Scenario == lo && r.Variant == v {
			at[r.Rep] = r.CPUNs
		}
	}
	var xs []float64
	for _, r := range recs {
		if r.Scenario == hi && r.Variant == v && at[r.Rep] > 0 {
			xs = append(xs, r.CPUNs/at[r.Rep])
		}
	}
	return procstat.Median(xs)
}

// machineLine describes the machine: CPU count and model, kernel, Go.
func machineLine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = "Linux " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%d CPUs (%s), %s, %s", runtime.NumCPU(), model, kernel, runtime.Version())
}

// writeMarkdown writes the report's tables.
func writeMarkdown(w io.Writer, rep *report) {
	opt := rep.Options
	fmt.Fprintf(w, "# udpgate end-to-end benchmark (%s mode)\n\n", opt.Mode)
	fmt.Fprintf(w, "Command: `%s`  \n", opt.Command)
	fmt.Fprintf(w, "Machine: %s  \n", rep.Machine)
	fmt.Fprintf(w, "Date: %s\n\n", rep.When.Format(time.RFC3339))
	fmt.Fprintf(w, "Each server runs in its own child process on 127.0.0.1; the load generator (internal/traffic/loadgen, %s) runs in the harness. "+
		"Per run: connect the clients if needed, %v warm-up, %v measuring window; %d repetition(s), variants interleaved. "+
		"Server CPU per packet is the child's utime+stime (/proc/PID/stat) over the window ÷ replies received in the window "+
		"(one request in, one reply out). Figures are medians over repetitions (CPU range in brackets); ratios are medians of "+
		"same-repetition ratios. *÷ raw echo*: server CPU per packet over the batched raw echo's (the floor: same recvmmsg/sendmmsg work, no protocol; *÷ C echo*, when it ran, over the same echo written in C). "+
		"*÷ naive (pkts/CPU-s)*: packets per CPU-second over the naive server's (per-packet syscalls, hmac.New per cookie, one mutex map).\n\n",
		loadShape(opt), opt.Warmup, opt.Window, opt.Reps)
	if opt.Mode == "quick" && scenarioList(opt.Scenarios) == quickScenarios {
		fmt.Fprintf(w, "Quick mode stays short (for CI): one repetition, and 10k connections where the full mode (`go run . -full` in bench/) uses 100k.\n\n")
	}
	// The C echo's column only when it ran.
	withC := cEchoBaseline(opt.Variants) != ""
	if len(rep.Cells) > 0 {
		cHead, cRule := "", ""
		if withC {
			cHead, cRule = " ÷ C echo |", "---:|"
		}
		fmt.Fprintln(w, "| scenario | server | replies/s | server CPU ns/pkt | ÷ raw echo |"+cHead+" ÷ naive (pkts/CPU-s) | server util | loadgen ns/pkt | RTT p50 / p99 µs | lost |")
		fmt.Fprintln(w, "|---|---|---:|---:|---:|"+cRule+"---:|---:|---:|---:|---:|")
	}
	for _, c := range rep.Cells {
		flag := ""
		if c.Flagged > 0 {
			flag = fmt.Sprintf(" ⚠%d", c.Flagged)
		}
		cCol := ""
		if withC {
			cCol = " " + ratio(c.VsCEcho) + " |"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.0f (%.0f–%.0f)%s | %s |%s %s | %.2f | %.0f | %.0f / %.0f | %d |\n",
			c.Scenario, c.Variant, thousands(c.PPS), c.CPUNs, c.CPUMin, c.CPUMax, flag,
			ratio(c.VsEcho), cCol, ratio(c.VsNaive), c.Util, c.LoadNs, c.P50us, c.P99us, c.Lost)
	}
	if len(rep.Targets) > 0 {
		fmt.Fprintf(w, "\n## Targets (%s, unless another variant is named)\n\n", baseline(opt.Variants, kindUdpgate))
		fmt.Fprintln(w, "| target | goal | measured | met |")
		fmt.Fprintln(w, "|---|---|---:|---|")
		for _, t := range rep.Targets {
			met := "yes"
			if !t.Met {
				met = "**no**"
			}
			fmt.Fprintf(w, "| %s | %s | %.2f | %s |\n", t.Name, t.Goal, t.Got, met)
		}
	}
	var conn []cell
	for _, c := range rep.Cells {
		if c.ConnectPerSec > 0 {
			conn = append(conn, c)
		}
	}
	if len(conn) > 0 {
		fmt.Fprintln(w, "\n## Handshake setup (every client: Initial → Challenge → Response → Ack, before the run)")
		fmt.Fprintln(w, "\n| scenario | server | handshakes/s | time | latency p50 / p99 µs |")
		fmt.Fprintln(w, "|---|---|---:|---:|---:|")
		for _, c := range conn {
			fmt.Fprintf(w, "| %s | %s | %s | %.2f s | %.0f / %.0f |\n", c.Scenario, c.Variant, thousands(c.ConnectPerSec), c.ConnectSec, c.ConnectP50us, c.ConnectP99us)
		}
	}
	writeIssueTables(w, rep)
	var flagged []string
	for _, r := range rep.Runs {
		if r.Flag != "" {
			flagged = append(flagged, fmt.Sprintf("rep %d %s %s: %s", r.Rep, r.Scenario, r.Variant, r.Flag))
		}
	}
	if len(flagged) > 0 {
		fmt.Fprintln(w, "\n⚠ Runs measured while other work shared the machine (kept, but read them with care):")
		for _, f := range flagged {
			fmt.Fprintf(w, "- %s\n", f)
		}
	}
}

func scenarioList(scs []scenario) string {
	var names []string
	for _, sc := range scs {
		names = append(names, sc.Name)
	}
	return strings.Join(names, ",")
}

func loadShape(opt *options) string {
	s := func(v, def int) int {
		if v == 0 {
			return def
		}
		return v
	}
	return fmt.Sprintf("%d sockets, window %d per socket, batch %d", s(opt.LoadSockets, 2), s(opt.LoadWindow, 256), s(opt.LoadBatch, 32))
}

func ratio(x float64) string {
	if x == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", x)
}

// thousands formats x rounded, with thin spaces between thousands.
func thousands(x float64) string {
	s := fmt.Sprintf("%.0f", x)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString(" ")
		}
		b.WriteRune(c)
	}
	return b.String()
}

// finite sets every infinite or NaN float in v to 0, which JSON cannot
// carry: a ratio whose denominator measured 0 (a variant that got no CPU
// time in its window on a starved machine). The Markdown, written first,
// still shows it as it was.
func finite(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			finite(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				finite(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			finite(v.Index(i))
		}
	case reflect.Float64, reflect.Float32:
		if f := v.Float(); (math.IsInf(f, 0) || math.IsNaN(f)) && v.CanSet() {
			v.SetFloat(0)
		}
	}
}

// writeReports writes bench-results.md, .json and .svg into dir and the
// Markdown to stdout.
func writeReports(dir string, rep *report, stdout io.Writer) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var md strings.Builder
	writeMarkdown(&md, rep)
	fmt.Fprintf(&md, "\n![server CPU per packet and replies per second](bench-results.svg)\n")
	io.WriteString(stdout, md.String())
	finite(reflect.ValueOf(rep))
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		"bench-results.md":   []byte(md.String()),
		"bench-results.json": append(js, '\n'),
		"bench-results.svg":  []byte(chartSVG(rep)),
	}
	var paths []string
	for _, name := range []string{"bench-results.md", "bench-results.json", "bench-results.svg"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// writeIssueTables writes the tables of the storm, rtt-under-flood,
// rtt-under-storm, conns and message scenarios, those that ran.
func writeIssueTables(w io.Writer, rep *report) {
	if len(rep.Storms) > 0 {
		writeStorms(w, rep.Storms)
	}
	if len(rep.RTTs) > 0 {
		writeRTTs(w, rep.RTTs, rep.Options)
	}
	if len(rep.StormRTTs) > 0 {
		writeRTTStorms(w, rep.StormRTTs)
	}
	if len(rep.Mems) > 0 {
		writeMems(w, rep.Mems, rep.Options.ConnsRate)
	}
	if len(rep.Msgs) > 0 {
		writeMsgs(w, rep.Msgs, rep.Options)
	}
	if len(rep.Bns) > 0 {
		writeBns(w, rep.Bns, rep.Options)
	}
}

// issueTargets checks issue 11's storm, player and memory goals for every
// udpgate variant (the player's goals hold for the default settings and
// for -overload alike).
func issueTargets(opt *options, rep *report) []target {
	ts := udpgateTargets(nil, rep.Storms, func(c stormCell) string { return c.Variant }, stormTargets)
	ts = udpgateTargets(ts, rep.RTTs, func(c rttCell) string { return c.Variant }, rttTargets)
	ts = udpgateTargets(ts, rep.StormRTTs, func(c rttCell) string { return c.Variant }, rttStormTargets)
	ts = udpgateTargets(ts, rep.Mems, func(c memCell) string { return c.Variant }, memTargets)
	ts = udpgateTargets(ts, rep.Msgs, func(c msgCell) string { return c.Variant }, msgTargets)
	return udpgateTargets(ts, rep.Bns, func(c bnCell) string { return c.Variant }, bnTargets)
}

// udpgateTargets appends to ts the goals of each cell whose variant (as
// variant reads it) is a udpgate server.
func udpgateTargets[C any](ts []target, cells []C, variant func(C) string, goals func(C) []target) []target {
	for _, c := range cells {
		if v, err := parseVariant(variant(c)); err == nil && v.Kind == kindUdpgate {
			ts = append(ts, goals(c)...)
		}
	}
	return ts
}

func flagMark(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" ⚠%d", n)
}
