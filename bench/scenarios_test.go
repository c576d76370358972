package main

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestIssueScenarios runs every storm, player, low-load and memory
// scenario once, small and short, against every server it applies to, and
// checks that each produced its figures and tables; never how fast
// anything was.
func TestIssueScenarios(t *testing.T) {
	rep, stdout, dir := runBench(t, "about 30 s of servers under load", 3*time.Minute, "-scenarios", "storm-1k,low-load,rtt-under-flood,rtt-under-storm-2k,conns-2k",
		"-variants", "udpgate,udpgate/overload,rawecho,naive", "-warmup", "100ms", "-window", "400ms")
	// storm: udpgate, udpgate/overload, naive; low-load: udpgate, rawecho,
	// naive; both rtt: udpgate, udpgate/overload, naive; conns: udpgate,
	// naive.
	if len(rep.Runs) != 14 || len(rep.Storms) != 3 || len(rep.RTTs) != 3 || len(rep.StormRTTs) != 3 || len(rep.Mems) != 2 || len(rep.Cells) != 3 {
		t.Fatalf("%d runs, %d storm, %d rtt, %d rtt-under-storm, %d memory and %d packet cells",
			len(rep.Runs), len(rep.Storms), len(rep.RTTs), len(rep.StormRTTs), len(rep.Mems), len(rep.Cells))
	}
	for _, r := range rep.Runs {
		switch {
		case r.Scenario == "storm-1k":
			if s := r.Storm; s == nil || s.Connected != 1000 || s.PerSecond <= 0 || s.AllInSec <= 0 || s.P50ms <= 0 || s.ServerCPUus <= 0 {
				t.Errorf("%s %s: %+v", r.Scenario, r.Variant, r.Storm)
			} else if (s.PromotionFull >= 0) != strings.HasPrefix(r.Variant, kindUdpgate) {
				t.Errorf("%s %s: promotion_full %d", r.Scenario, r.Variant, s.PromotionFull)
			}
		case r.Scenario == "rtt-under-flood":
			// Both phases and the flood are recorded. Under the flood a
			// server may answer none of the player's packets inside the
			// window (the naive one, on a busy machine): that is a
			// measurement (no flood latency, so no ratio), not a missing
			// figure; a flood latency with no ratio is.
			if x := r.RTT; x == nil || x.Idle.Replies == 0 || x.Idle.P50us <= 0 || x.Flood.Sent == 0 || x.FloodSent == 0 || x.FloodRate <= 0 ||
				(x.Flood.P99us > 0) != (x.P99Ratio > 0) {
				t.Errorf("%s %s: %+v", r.Scenario, r.Variant, r.RTT)
			} else if x.P99Ratio == 0 {
				t.Logf("%s %s: no player answer inside the flood window (%+v)", r.Scenario, r.Variant, x.Flood)
			}
		case r.Scenario == "rtt-under-storm-2k":
			// The storm's window holds the whole storm: every client got
			// in, and the player's packets of that window were counted.
			if x := r.RTT; x == nil || x.Idle.Replies == 0 || x.Flood.Sent == 0 || x.Storm == nil ||
				x.Storm.Connected != 2000 || x.Storm.PerSecond <= 0 || x.Storm.AllInSec <= 0 || x.FloodSent != 0 {
				t.Errorf("%s %s: %+v", r.Scenario, r.Variant, r.RTT)
			}
		case r.Scenario == "conns-2k":
			if m := r.Mem; m == nil || m.Conns != 2000 || m.HeapPerConn <= 0 || m.HeapAfter <= m.HeapBase || m.GCCycleWallms <= 0 || m.PPS <= 0 {
				t.Errorf("%s %s: %+v", r.Scenario, r.Variant, r.Mem)
			}
		default:
			if r.Scenario != "low-load" || r.Replies == 0 || r.CPUNs <= 0 {
				t.Errorf("%s %s: %d replies, %.0f ns", r.Scenario, r.Variant, r.Replies, r.CPUNs)
			}
		}
	}
	names := map[string]bool{}
	for _, tg := range rep.Targets {
		names[tg.Name] = true
	}
	for _, want := range []string{
		"storm-1k (udpgate): handshakes/s ÷ naive",
		"storm-1k (udpgate/overload): promotion_full drops (worst run)",
		"rtt-under-flood (udpgate/overload): player p99 flood ÷ idle",
		"rtt-under-storm-2k (udpgate): player p99 storm ÷ idle",
		"low-load: server CPU per Challenge ÷ raw echo (8 clients × 1 in flight)",
		"conns-2k (udpgate): GC share of server CPU with Data flowing (measured, or the forced-GC floor), %",
	} {
		if !names[want] {
			t.Errorf("target %q missing", want)
		}
	}
	for _, section := range []string{"## Login storms", "## A player under an Initial flood", "## A player beside a login storm", "## Memory and GC per connection", "| low-load | rawecho |"} {
		if !strings.Contains(stdout, section) {
			t.Errorf("report lacks %q", section)
		}
	}
	checkSVG(t, filepath.Join(dir, "bench-results.svg"))
}

// TestSummariseIssue checks the storm, player and memory arithmetic on
// made-up records.
func TestSummariseIssue(t *testing.T) {
	opt, err := parseOptions([]string{"-scenarios", "storm-10k,rtt-under-flood,conns-100k", "-variants", "udpgate,naive", "-reps", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var recs []runRecord
	for rep := range 3 {
		k := float64(rep + 1)
		recs = append(recs,
			runRecord{Rep: rep, Scenario: "storm-10k", Variant: "udpgate", Storm: &stormRecord{Clients: 10000, Connected: 10000,
				PerSecond: 30000 * k, AllInSec: 0.3 + 0.1*k, Resent: rep, PromotionFull: int64(rep)}},
			runRecord{Rep: rep, Scenario: "storm-10k", Variant: "naive", Storm: &stormRecord{Clients: 10000, Connected: 9990,
				PerSecond: 10000 * k, AllInSec: 1, PromotionFull: -1}},
			runRecord{Rep: rep, Scenario: "rtt-under-flood", Variant: "udpgate", RTT: &rttRecord{
				Idle: rttPhase{P50us: 100, P99us: 200}, Flood: rttPhase{P50us: 100 * k, P99us: 300, LossPct: k / 2},
				P50Ratio: k, P99Ratio: 1.5}},
			runRecord{Rep: rep, Scenario: "conns-100k", Variant: "udpgate", Mem: &memRecord{Conns: 100000,
				HeapPerConn: 900 + 100*k, GCShare: 0.001, GCFloor: 0.004 * k}},
		)
	}
	rep := summarise(opt, recs)
	got := map[string]float64{}
	met := map[string]bool{}
	for _, tg := range rep.Targets {
		got[tg.Name], met[tg.Name] = tg.Got, tg.Met
	}
	for name, want := range map[string]struct {
		v   float64
		met bool
	}{
		"storm-10k (udpgate): handshakes/s ÷ naive":                                                            {3, true},
		"storm-10k (udpgate): promotion_full drops (worst run)":                                                {2, false},
		"storm-10k (udpgate): all in, s (worst run)":                                                           {0.6, false},
		"storm-10k (udpgate): clients that needed a resend (worst run)":                                        {2, false},
		"storm-10k (udpgate): clients denied or failed (worst run)":                                            {0, true},
		"rtt-under-flood (udpgate): player p50 flood ÷ idle":                                                   {2, false},
		"rtt-under-flood (udpgate): player p99 flood ÷ idle":                                                   {1.5, true},
		"rtt-under-flood (udpgate): player loss under flood, % (worst run)":                                    {1.5, false},
		"conns-100k (udpgate): live heap per connection, bytes":                                                {1100, false},
		"conns-100k (udpgate): GC share of server CPU with Data flowing (measured, or the forced-GC floor), %": {0.8, true},
	} {
		if g, ok := got[name]; !ok || g < want.v-1e-9 || g > want.v+1e-9 || met[name] != want.met {
			t.Errorf("%s = %v met %v (present %v), want %v met %v", name, g, met[name], ok, want.v, want.met)
		}
	}
	if n := len(rep.Storms); n != 2 || rep.Storms[1].MaxNotIn != 10 {
		t.Errorf("storm cells: %+v", rep.Storms)
	}
	var md bytes.Buffer
	writeMarkdown(&md, rep)
	if !strings.Contains(md.String(), "| storm-10k | naive | 20 000 |") {
		t.Errorf("markdown:\n%s", md.String())
	}
}

// TestSealedScenarios runs sealed-data and sealed-storm once, small and
// short: udpgate in sealed mode and the raw echo take part (the naive
// server has no sealed mode), the raw echo's datagrams have the sealed
// packet's size, and the sealed target is checked; never how fast.
func TestSealedScenarios(t *testing.T) {
	rep, _, _ := runBench(t, "servers under load", 2*time.Minute, "-scenarios", "sealed-data-1k,sealed-storm-1k", "-variants", "udpgate,rawecho,naive",
		"-warmup", "100ms", "-window", "300ms")
	// sealed-data: udpgate, rawecho; sealed-storm: udpgate.
	if len(rep.Runs) != 3 || len(rep.Cells) != 2 || len(rep.Storms) != 1 {
		t.Fatalf("%d runs, %d packet cells, %d storms", len(rep.Runs), len(rep.Cells), len(rep.Storms))
	}
	for _, r := range rep.Runs {
		switch {
		case r.Variant == kindNaive:
			t.Errorf("the naive server ran %s", r.Scenario)
		case r.Scenario == "sealed-storm-1k":
			if s := r.Storm; s == nil || s.Connected != 1000 || s.PerSecond <= 0 || !strings.Contains(r.ServerStats, "proofs=1000 ") {
				t.Errorf("sealed storm: %+v, server %s", r.Storm, r.ServerStats)
			}
		case r.Variant == kindUdpgate:
			if r.Replies == 0 || r.CPUNs <= 0 || r.Connect == nil || r.Connect.Connected != 1000 ||
				!strings.Contains(r.ServerStats, "proofs=1000 ") || !strings.Contains(r.ServerStats, "sealed_forged=0") {
				t.Errorf("sealed data: %d replies, %+v, server %s", r.Replies, r.Connect, r.ServerStats)
			}
		default:
			if r.Replies == 0 || r.CPUNs <= 0 {
				t.Errorf("%s %s: %d replies", r.Scenario, r.Variant, r.Replies)
			}
		}
	}
	found := false
	for _, tg := range rep.Targets {
		found = found || tg.Name == "sealed-data-1k: server CPU per sealed Data echo ÷ raw echo"
	}
	if !found {
		t.Errorf("no sealed target in %+v", rep.Targets)
	}
}

func TestSealedKeysRoundTrip(t *testing.T) {
	sc, _ := parseScenario("sealed-data-1k")
	k, env, err := sc.keys(variant{Kind: kindUdpgate})
	if err != nil || k == nil || len(env) != 1 {
		t.Fatalf("keys: %v %v %v", k, env, err)
	}
	_, val, _ := strings.Cut(env[0], "=")
	got, err := parseSealedKeys(val)
	if err != nil || *got != *k {
		t.Errorf("parseSealedKeys(%q) = %+v, %v; want %+v", val, got, err, k)
	}
	if k2, _, _ := sc.keys(variant{Kind: kindRawEcho}); k2 != nil {
		t.Error("keys for the raw echo")
	}
	if k3, _, _ := (scenario{Kind: scData}).keys(variant{Kind: kindUdpgate}); k3 != nil {
		t.Error("keys for an unsealed scenario")
	}
	for _, bad := range []string{"x", "00:1", strings.Repeat("0", 64) + ":zz", strings.Repeat("0", 64)} {
		if _, err := parseSealedKeys(bad); err == nil {
			t.Errorf("parseSealedKeys(%q) accepted", bad)
		}
	}
}
