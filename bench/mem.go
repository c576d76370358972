package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/udpgate/udpgate/internal/testkit/procstat"
	"github.com/udpgate/udpgate/internal/traffic/loadgen"
)

// The conns-N scenario: N established connections in the server's child
// process, and what they cost it in memory and in garbage collection. The
// child reads its own runtime/metrics when the harness asks (childMain's
// "MEM" and "GCSTAT" requests), so the figures are the server process's
// alone, whatever server variant it runs.

// forcedGCPeriod: the Go runtime starts a collection at least this often
// (runtime.forcegcperiod), allocation or not.
const forcedGCPeriod = 2 * time.Minute

// maxConns bounds conns-N: the generator holds about 3 KB per connected
// client (sequence state and handshake).
const maxConns = 200_000

// memMetrics are the runtime/metrics a child reports, by the key it uses.
var memMetrics = [...]struct{ key, name string }{
	{"live", "/gc/heap/live:bytes"},
	{"allocs", "/gc/heap/allocs:bytes"},
	{"cycles", "/gc/cycles/total:gc-cycles"},
	{"gc_cpu", "/cpu/classes/gc/total:cpu-seconds"},
	{"mapped", "/memory/classes/total:bytes"},
}

// memLine reads memMetrics as key=value pairs. With collect it first runs
// a full collection, so live is the heap that survives it, and adds what
// that one collection cost: gc_cycle_cpu (the runtime's estimate of the
// CPU seconds of GC work it took) and gc_cycle_wall (seconds runtime.GC
// blocked). The runtime updates its CPU estimates at the end of each
// collection, so gc_cpu counts the collections finished so far.
func memLine(collect bool) string {
	samples := make([]metrics.Sample, len(memMetrics))
	for i, m := range memMetrics {
		samples[i].Name = m.name
	}
	var b strings.Builder
	if collect {
		gcCPU := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
		metrics.Read(gcCPU)
		before := gcCPU[0].Value.Float64()
		t := time.Now()
		runtime.GC()
		wall := time.Since(t)
		metrics.Read(gcCPU)
		fmt.Fprintf(&b, "gc_cycle_cpu=%g gc_cycle_wall=%g ", gcCPU[0].Value.Float64()-before, wall.Seconds())
	}
	metrics.Read(samples)
	for i, s := range samples {
		if i > 0 {
			b.WriteByte(' ')
		}
		switch s.Value.Kind() {
		case metrics.KindUint64:
			fmt.Fprintf(&b, "%s=%d", memMetrics[i].key, s.Value.Uint64())
		case metrics.KindFloat64:
			fmt.Fprintf(&b, "%s=%g", memMetrics[i].key, s.Value.Float64())
		default: // not in this Go release
			fmt.Fprintf(&b, "%s=-1", memMetrics[i].key)
		}
	}
	return b.String()
}

// parseKV reads "key=value key=value" with numeric values; other words
// are skipped.
func parseKV(s string) map[string]float64 {
	m := map[string]float64{}
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		if x, err := strconv.ParseFloat(v, 64); err == nil {
			m[k] = x
		}
	}
	return m
}

// memRecord is a conns-N run.
type memRecord struct {
	Conns int `json:"conns"`
	// Live heap after a full collection: with no connection, right after
	// connecting, and after the Data window; per connection is the last
	// minus the first, ÷ Conns.
	HeapBase      uint64  `json:"heap_base_bytes"`
	HeapConnected uint64  `json:"heap_connected_bytes"`
	HeapAfter     uint64  `json:"heap_after_bytes"`
	HeapPerConn   float64 `json:"heap_per_conn_bytes"`
	// RSS of the server process before connecting and after the window.
	RSSBase    uint64  `json:"rss_base_bytes"`
	RSSAfter   uint64  `json:"rss_after_bytes"`
	RSSPerConn float64 `json:"rss_per_conn_bytes"`
	// One full collection at Conns connections: the runtime's estimate of
	// its CPU, and how long runtime.GC blocked.
	GCCycleCPUms  float64 `json:"gc_cycle_cpu_ms"`
	GCCycleWallms float64 `json:"gc_cycle_wall_ms"`
	// The Data window: replies per second, server CPU, the collections that
	// finished in it and their CPU as a share of the server's CPU, and
	// the heap allocated per reply (what drives collections).
	PPS            float64 `json:"pps"`
	ServerCPUShare float64 `json:"server_util"`
	GCCycles       float64 `json:"gc_cycles"`
	GCShare        float64 `json:"gc_cpu_share"`
	// GCFloor: the share of the server's CPU (at this window's use) that
	// the collection the runtime forces every 2 minutes would take, when
	// nothing else triggers one: GCCycleCPU ÷ (120 s × server util).
	GCFloor       float64 `json:"gc_cpu_floor"`
	AllocPerReply float64 `json:"alloc_bytes_per_reply"`
	Lost          uint64  `json:"lost"`
}

// runConns connects sc.Clients clients to variant v, measures the heap,
// lets Data flow at opt.ConnsRate per client through a warm-up and a
// window, and measures again.
func runConns(ctx context.Context, opt *options, sc scenario, v variant, rep int) (runRecord, error) {
	rec := runRecord{Rep: rep, Scenario: sc.Name, Variant: v.Spec}
	ch, err := startChild(v, false, opt.Warmup+opt.Window+connectBudget+time.Minute)
	if err != nil {
		return rec, err
	}
	defer ch.stop()
	mem := func() (map[string]float64, error) {
		l, err := ch.ask("MEM", 30*time.Second)
		return parseKV(l), err
	}
	base, err := mem()
	if err != nil {
		return rec, err
	}
	rss0, _ := rssBytes(ch.pid)
	gen, err := ch.newGen(loadgen.Config{
		Mode:        loadgen.ModeData,
		Clients:     sc.Clients,
		Sockets:     opt.LoadSockets,
		Window:      opt.LoadWindow,
		Batch:       opt.LoadBatch,
		PayloadSize: payloadSize,
		Rate:        opt.ConnsRate,
		// Data keeps the connections alive (the benchmark server never
		// times them out): no KeepAlives, which at 1 s per client would
		// outnumber the Data and cost the generator more than the
		// server.
		KeepAlive: time.Hour,
	})
	if err != nil {
		return rec, err
	}
	defer gen.Close()
	c, err := connectGen(ctx, gen, &rec)
	if err != nil {
		return rec, err
	}
	connected, err := mem()
	if err != nil {
		return rec, err
	}
	var s0, s1 sample
	var g0, g1 map[string]float64
	var askErr error
	r, err := gen.Run(ctx, loadgen.RunSpec{
		Warmup: opt.Warmup,
		Window: opt.Window,
		Mark: func(end bool) {
			l, err := ch.ask("GCSTAT", 10*time.Second)
			if err != nil {
				askErr = err
			}
			if end {
				s1, g1 = takeSample(ch.pid), parseKV(l)
			} else {
				s0, g0 = takeSample(ch.pid), parseKV(l)
			}
		},
	})
	if err == nil {
		err = askErr
	}
	if err != nil {
		return rec, err
	}
	after, err := mem()
	if err != nil {
		return rec, err
	}
	rss1, _ := rssBytes(ch.pid)
	rec.ServerStats = ch.stop()
	if s0.err != nil || s1.err != nil {
		return rec, fmt.Errorf("reading the server's CPU time: %v %v", s0.err, s1.err)
	}
	n := float64(c.Connected)
	m := &memRecord{
		Conns:         c.Connected,
		HeapBase:      uint64(base["live"]),
		HeapConnected: uint64(connected["live"]),
		HeapAfter:     uint64(after["live"]),
		RSSBase:       rss0,
		RSSAfter:      rss1,
		GCCycleCPUms:  1e3 * after["gc_cycle_cpu"],
		GCCycleWallms: 1e3 * after["gc_cycle_wall"],
		PPS:           r.PerSecond(),
		GCCycles:      g1["cycles"] - g0["cycles"],
		Lost:          r.Window.Lost,
	}
	m.HeapPerConn = (after["live"] - base["live"]) / n
	m.RSSPerConn = (float64(rss1) - float64(rss0)) / n
	server := (s1.server.Stat - s0.server.Stat).Seconds()
	if wall := s1.at.Sub(s0.at).Seconds(); wall > 0 {
		m.ServerCPUShare = server / wall
	}
	if server > 0 {
		m.GCShare = (g1["gc_cpu"] - g0["gc_cpu"]) / server
	}
	if m.ServerCPUShare > 0 {
		m.GCFloor = after["gc_cycle_cpu"] / (forcedGCPeriod.Seconds() * m.ServerCPUShare)
	}
	if r.Window.Replies > 0 {
		m.AllocPerReply = (g1["allocs"] - g0["allocs"]) / float64(r.Window.Replies)
	}
	rec.Mem = m
	rec.Acct = acct(s0, s1)
	return rec, nil
}

// memCell summarises one variant's conns-N runs: medians.
type memCell struct {
	Scenario      string  `json:"scenario"`
	Variant       string  `json:"variant"`
	Runs          int     `json:"runs"`
	Conns         int     `json:"conns"`
	HeapPerConn   float64 `json:"heap_per_conn_bytes"`
	RSSPerConn    float64 `json:"rss_per_conn_bytes"`
	HeapAfter     float64 `json:"heap_after_bytes"`
	GCCycleCPUms  float64 `json:"gc_cycle_cpu_ms"`
	GCCycleWallms float64 `json:"gc_cycle_wall_ms"`
	PPS           float64 `json:"pps"`
	ServerUtil    float64 `json:"server_util"`
	GCCycles      float64 `json:"gc_cycles"`
	GCShare       float64 `json:"gc_cpu_share"`
	GCFloor       float64 `json:"gc_cpu_floor"`
	AllocPerReply float64 `json:"alloc_bytes_per_reply"`
	Flagged       int     `json:"flagged,omitempty"`
}

func summariseMem(rs []runRecord) memCell {
	c := memCell{Scenario: rs[0].Scenario, Variant: rs[0].Variant, Runs: len(rs)}
	var heap, rss, after, cyc, wall, pps, util, cycles, share, floor, alloc []float64
	for _, r := range rs {
		m := r.Mem
		if m == nil {
			continue
		}
		c.Conns = m.Conns
		heap, rss, after = append(heap, m.HeapPerConn), append(rss, m.RSSPerConn), append(after, float64(m.HeapAfter))
		cyc, wall = append(cyc, m.GCCycleCPUms), append(wall, m.GCCycleWallms)
		pps, util, cycles = append(pps, m.PPS), append(util, m.ServerCPUShare), append(cycles, m.GCCycles)
		share, floor, alloc = append(share, m.GCShare), append(floor, m.GCFloor), append(alloc, m.AllocPerReply)
		if r.Flag != "" {
			c.Flagged++
		}
	}
	c.HeapPerConn, c.RSSPerConn, c.HeapAfter = procstat.Median(heap), procstat.Median(rss), procstat.Median(after)
	c.GCCycleCPUms, c.GCCycleWallms = procstat.Median(cyc), procstat.Median(wall)
	c.PPS, c.ServerUtil, c.GCCycles = procstat.Median(pps), procstat.Median(util), procstat.Median(cycles)
	c.GCShare, c.GCFloor, c.AllocPerReply = procstat.Median(share), procstat.Median(floor), procstat.Median(alloc)
	return c
}

func writeMems(w io.Writer, cells []memCell, rate float64) {
	load := "closed loop"
	if rate > 0 {
		load = fmt.Sprintf("%g Data/s per client", rate)
	}
	fmt.Fprintf(w, "\n## Memory and GC per connection (conns-N)\n\n"+
		"The server's own runtime/metrics, read in its process: live heap after a full collection (runtime.GC), before "+
		"connecting and after the Data window, ÷ connections; RSS likewise. *GC cycle*: the runtime's CPU estimate for one full "+
		"collection at N connections. Then Data flows (%s): GC share is the CPU of the collections that finished in the window "+
		"÷ the server's CPU (/proc), with the cycles counted and the bytes allocated per reply that drive them. With nothing allocated "+
		"no collection runs in a window; *forced GC* is then the floor: one cycle's CPU every 2 minutes (the runtime forces one that often) "+
		"÷ the server's CPU at the window's load. Medians.\n\n", load)
	fmt.Fprintln(w, "| scenario | server | heap B/conn | RSS B/conn | live heap | GC cycle CPU / wall ms | replies/s | server util | GC cycles | GC share | forced GC | alloc B/reply |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, c := range cells {
		fmt.Fprintf(w, "| %s | %s%s | %.0f | %.0f | %s | %.1f / %.1f | %s | %.2f | %g | %.2f %% | %.2f %% | %.2f |\n",
			c.Scenario, c.Variant, flagMark(c.Flagged), c.HeapPerConn, c.RSSPerConn, mib(uint64(c.HeapAfter)),
			c.GCCycleCPUms, c.GCCycleWallms, thousands(c.PPS), c.ServerUtil, c.GCCycles, 100*c.GCShare, 100*c.GCFloor, c.AllocPerReply)
	}
}

// memTargets are issue 11's memory goals for one udpgate variant.
func memTargets(c memCell) []target {
	name := c.Scenario + " (" + c.Variant + "): "
	// The larger of the measured share and the forced-GC floor: a window
	// without a collection proves nothing by itself.
	share := max(c.GCShare, c.GCFloor)
	ts := []target{{Name: name + "GC share of server CPU with Data flowing (measured, or the forced-GC floor), %", Goal: "≤ 2", Got: 100 * share, Met: share <= 0.02}}
	if c.Conns >= 100_000 {
		ts = append([]target{{Name: name + "live heap per connection, bytes", Goal: "≤ 1024", Got: c.HeapPerConn, Met: c.HeapPerConn <= 1024}}, ts...)
	}
	return ts
}
