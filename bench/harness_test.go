package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the harness's child servers: the
// harness re-executes os.Executable() with roleEnv set.
func TestMain(m *testing.M) {
	if spec := os.Getenv(roleEnv); spec != "" {
		os.Exit(childMain(spec, os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// runBench runs the harness with args, writing into a new directory, and
// returns its report, what it printed on standard output, and the
// directory. It fails the test if the run fails. Every run starts servers
// under load for seconds: with -short the test skips, saying what it
// would have run (long).
func runBench(t *testing.T, long string, timeout time.Duration, args ...string) (rep report, stdout, dir string) {
	t.Helper()
	if testing.Short() {
		t.Skip(long + "; skipped with -short")
	}
	dir = t.TempDir()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := run(ctx, append(args, "-out", dir), &out, &errb)
	t.Logf("\n%s", errb.String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "bench-results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep, out.String(), dir
}

// TestQuickHarness runs the whole quick mode: every server as a child
// process under every scenario. It checks that everything produced
// packets, CPU figures and the report files, never how fast anything was:
// speed is for the harness's own tables, not for pass/fail.
func TestQuickHarness(t *testing.T) {
	rep, stdout, dir := runBench(t, "the quick harness takes about 35 s (45 s under -race)", 5*time.Minute, "-quick")
	scs := strings.Split(quickScenarios, ",")
	vs := strings.Split(defaultServers, ",")
	if len(rep.Runs) != len(scs)*len(vs) || len(rep.Cells) != len(scs)*len(vs) {
		t.Fatalf("%d runs and %d cells, want %d", len(rep.Runs), len(rep.Cells), len(scs)*len(vs))
	}
	for _, r := range rep.Runs {
		if r.Replies == 0 || r.PPS <= 0 || r.CPUNs <= 0 || r.SchedNs <= 0 {
			t.Errorf("%s %s: %d replies, %.0f pkt/s, %.0f / %.0f CPU ns/pkt", r.Scenario, r.Variant, r.Replies, r.PPS, r.CPUNs, r.SchedNs)
		}
		if (r.Connect != nil) != (r.Variant != kindRawEcho && !strings.HasPrefix(r.Scenario, scChallenge)) {
			t.Errorf("%s %s: connect phase %v", r.Scenario, r.Variant, r.Connect)
		}
	}
	for _, c := range rep.Cells {
		if c.VsEcho <= 0 || c.VsNaive <= 0 {
			t.Errorf("%s %s: ratios %v %v", c.Scenario, c.Variant, c.VsEcho, c.VsNaive)
		}
	}
	if len(rep.Targets) == 0 {
		t.Error("no targets checked")
	}
	md, err := os.ReadFile(filepath.Join(dir, "bench-results.md"))
	if err != nil || !bytes.Contains(md, []byte("| data-10k | udpgate |")) || !bytes.Equal(md, []byte(stdout)) {
		t.Errorf("bench-results.md (%v) is not the table printed:\n%s", err, md)
	}
	checkSVG(t, filepath.Join(dir, "bench-results.svg"))
}

// checkSVG checks that the chart is well-formed XML with an svg root and
// bars.
func checkSVG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	root, rects := "", 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			if se.Name.Local == "rect" {
				rects++
			}
		}
	}
	if root != "svg" || rects < 10 {
		t.Errorf("chart: root %q, %d rects", root, rects)
	}
}

func TestParseVariant(t *testing.T) {
	for in, want := range map[string]variant{
		"udpgate":             {Spec: "udpgate", Kind: kindUdpgate},
		"udpgate/b8/s1/r208k": {Spec: "udpgate/b8/s1/r208k", Kind: kindUdpgate, Batch: 8, Sockets: 1, Buffer: 208 << 10},
		"rawecho/r4m":         {Spec: "rawecho/r4m", Kind: kindRawEcho, Buffer: 4 << 20},
		"naive/r1m":           {Spec: "naive/r1m", Kind: kindNaive, Buffer: 1 << 20},
		"naive/g1":            {Spec: "naive/g1", Kind: kindNaive, Goroutines: 1},
		"rawecho/frag/b8":     {Spec: "rawecho/frag/b8", Kind: kindRawEcho, Frag: true, Batch: 8},
		"udpgate/p3/s2":       {Spec: "udpgate/p3/s2", Kind: kindUdpgate, Procs: 3, Sockets: 2},
		"udpgate/overload":    {Spec: "udpgate/overload", Kind: kindUdpgate, Overload: true},
		"udpgate/defaults/s1": {Spec: "udpgate/defaults/s1", Kind: kindUdpgate, Defaults: true, Sockets: 1},
		"rawecho/c/b32":       {Spec: "rawecho/c/b32", Kind: kindRawEcho, C: true, Batch: 32},
	} {
		got, err := parseVariant(in)
		if err != nil || got != want {
			t.Errorf("parseVariant(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "nginx", "udpgate/", "udpgate/x3", "udpgate/b", "udpgate/b0", "naive/b8", "rawecho/r-1", "udpgate/g2", "naive/frag", "udpgate/p0", "naive/overload", "rawecho/defaults", "udpgate/c", "naive/c"} {
		if _, err := parseVariant(bad); err == nil {
			t.Errorf("parseVariant(%q) accepted", bad)
		}
	}
}

func TestParseScenario(t *testing.T) {
	for in, want := range map[string]scenario{
		"data-100k":          {Name: "data-100k", Kind: scData, Clients: 100000},
		"challenge-1k":       {Name: "challenge-1k", Kind: scChallenge, Clients: 1000},
		"ack-250":            {Name: "ack-250", Kind: scAck, Clients: 250},
		"data-1M":            {Name: "data-1M", Kind: scData, Clients: 1000000},
		"storm-10k":          {Name: "storm-10k", Kind: scStorm, Clients: 10000},
		"conns-100k":         {Name: "conns-100k", Kind: scConns, Clients: 100000},
		"low-load":           {Name: "low-load", Kind: scLowLoad, Clients: lowLoadClients},
		"rtt-under-flood":    {Name: "rtt-under-flood", Kind: scRTTFlood, Clients: 1},
		"rtt-under-storm":    {Name: "rtt-under-storm", Kind: scRTTStorm, Clients: rttStormClients},
		"rtt-under-storm-2k": {Name: "rtt-under-storm-2k", Kind: scRTTStorm, Clients: 2000},
		"sealed-data-1k":     {Name: "sealed-data-1k", Kind: scData, Clients: 1000, Sealed: true},
		"sealed-storm-2":     {Name: "sealed-storm-2", Kind: scStorm, Clients: 2, Sealed: true},
	} {
		got, err := parseScenario(in)
		if err != nil || got != want {
			t.Errorf("parseScenario(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"data", "data-", "data-0", "data-2M", "flood-1k", "data-1x", "conns-1M", "storm-0", "low-load-8", "rtt", "rtt-under-storm-0", "rtt-under-storm-", "rtt-under-storm-2x", "rtt-under-flood-1k",
		"sealed-ack-1k", "sealed-conns-1k", "sealed-low-load", "sealed-data", "sealed-"} {
		if _, err := parseScenario(bad); err == nil {
			t.Errorf("parseScenario(%q) accepted", bad)
		}
	}
}

func TestOptions(t *testing.T) {
	opt, err := parseOptions([]string{"-full", "-reps", "2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if opt.Mode != "full" || opt.Reps != 2 || opt.Window != 4*time.Second || len(opt.Scenarios) != 14 || len(opt.Variants) != 4 {
		t.Errorf("full: %+v", opt)
	}
	// Each variant runs where it applies.
	runs := map[string]int{}
	for _, sc := range opt.Scenarios {
		for _, v := range opt.Variants {
			if sc.runs(v) {
				runs[v.Spec]++
			}
		}
	}
	if want := map[string]int{"udpgate": 14, "udpgate/overload": 5, "rawecho": 8, "naive": 11}; !maps.Equal(runs, want) {
		t.Errorf("runs per variant in -full: %v, want %v", runs, want)
	}
	opt, err = parseOptions(nil, io.Discard)
	if err != nil || opt.Mode != "quick" || opt.Reps != 1 || opt.Quiet != 0 {
		t.Errorf("default: %+v, %v", opt, err)
	}
	for _, bad := range [][]string{{"-quick", "-full"}, {"-window", "2m"}, {"-variants", "udpgate,x"}, {"stray"},
		{"-flood-sources", "0"}, {"-conns-rate", "-1"}, {"-flood-senders", "9"}} {
		if _, err := parseOptions(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestSummarise checks the ratio arithmetic on made-up records.
func TestSummarise(t *testing.T) {
	opt, _ := parseOptions([]string{"-scenarios", "data-1k,data-100k", "-reps", "2"}, io.Discard)
	var recs []runRecord
	for rep := range 2 {
		for _, sc := range []string{"data-1k", "data-100k"} {
			scale := 1.0
			if sc == "data-100k" {
				scale = 1.2
			}
			recs = append(recs,
				runRecord{Rep: rep, Scenario: sc, Variant: "udpgate", CPUNs: 2200 * scale, PPS: 4e5},
				runRecord{Rep: rep, Scenario: sc, Variant: "rawecho", CPUNs: 2000 * scale, PPS: 4e5},
				runRecord{Rep: rep, Scenario: sc, Variant: "naive", CPUNs: 4400 * scale, PPS: 2e5})
		}
	}
	rep := summarise(opt, recs)
	got := map[string]float64{}
	for _, tg := range rep.Targets {
		got[tg.Name] = tg.Got
	}
	want := map[string]float64{
		"data-1k: server CPU per packet ÷ raw echo":      1.1,
		"data-1k: packets per CPU-second ÷ naive":        2,
		"data-100k: server CPU per packet ÷ raw echo":    1.1,
		"data: CPU per packet at data-100k ÷ at data-1k": 1.2,
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g < w-1e-9 || g > w+1e-9 {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, w)
		}
	}
	var md bytes.Buffer
	writeMarkdown(&md, rep)
	if !strings.Contains(md.String(), "| data-100k | naive |") {
		t.Errorf("markdown:\n%s", md.String())
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "c.svg"), []byte(chartSVG(rep)), 0o644); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, filepath.Join(dir, "c.svg"))
}
