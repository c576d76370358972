package main

import (
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

// TestBottleneckScenarios runs one-connection, fairness and beside-quic-go
// bottleneck scenarios once, with a tiny bulk phase, for every peer they
// apply to, and checks that each run filled its figures and the report its
// tables and targets; never how fast anything was.
func TestBottleneckScenarios(t *testing.T) {
	rep, stdout, _ := runBench(t, "about 30 s of connections through a bottleneck", 3*time.Minute,
		"-scenarios", "bn-20,bn-fair-2,bn-vs-quic", "-variants", "udpgate,quic,kcp,kcp/cc", "-bn-duration", "1s")
	// bn-20: all four; bn-fair-2 and bn-vs-quic: udpgate.
	if len(rep.Runs) != 6 || len(rep.Bns) != 6 {
		t.Fatalf("%d runs, %d bottleneck cells", len(rep.Runs), len(rep.Bns))
	}
	for _, r := range rep.Runs {
		m := r.Bn
		if m == nil {
			t.Errorf("%s %s: no bottleneck record", r.Scenario, r.Variant)
			continue
		}
		want := map[string][]string{"bn-20": {r.Variant}, "bn-fair-2": {"udpgate", "udpgate"}, "bn-vs-quic": {"udpgate", "quic"}}[r.Scenario]
		var peers []string
		for _, c := range m.Conns {
			peers = append(peers, c.Peer)
			// The idle phase's echoes are there; everything else need
			// only be a number.
			if c.RelSent == 0 || c.SeqSent == 0 || c.IdleP50 <= 0 || c.IdleP99 < c.IdleP50 || c.RelLost > c.RelSent ||
				math.IsNaN(c.GoodputPct) || c.GoodputPct < 0 || c.ReachS < -1 {
				t.Errorf("%s %s: %+v", r.Scenario, r.Variant, c)
			}
		}
		if strings.Join(peers, ",") != strings.Join(want, ",") {
			t.Errorf("%s %s: connections %v, want %v", r.Scenario, r.Variant, peers, want)
		}
		if m.RateMbit != 20 || m.QueueKiB != 256 || m.DelayMs != 25 || m.BulkSec != 1 || m.Offered[0] == 0 || m.Offered[1] == 0 ||
			m.DropPct[0] < 0 || m.DropPct[0] > 100 || m.MaxQueueMs[0] <= 0 || m.LinkUsePct <= 0 {
			t.Errorf("%s %s: %+v", r.Scenario, r.Variant, m)
		}
		if r.Scenario == "bn-fair-2" && m.TotalPct > 0 && (m.MinShare > m.MaxShare || m.Jain <= 0 || m.Jain > 1+1e-9) {
			t.Errorf("%s: shares %v–%v, Jain %v", r.Scenario, m.MinShare, m.MaxShare, m.Jain)
		}
		for _, c := range m.Conns {
			if c.LinkPct <= 0 {
				t.Errorf("%s %s: no bytes of %s counted into the link: %+v", r.Scenario, r.Variant, c.Peer, c)
			}
		}
	}
	names := map[string]bool{}
	for _, tg := range rep.Targets {
		names[tg.Name] = true
	}
	for _, want := range []string{
		"bn-20 (udpgate): bulk goodput, % of link",
		"bn-20 (udpgate): bottleneck drops, % of datagrams offered (worse direction)",
		"bn-20 (udpgate): small messages' p99 during bulk − idle p99, ms",
		"bn-20 (udpgate): reliable small messages lost (worst run)",
		"bn-fair-2 (udpgate): lowest link share ÷ equal share",
		"bn-fair-2 (udpgate): highest link share ÷ equal share",
		"bn-vs-quic (udpgate): goodput beside quic-go, % of link",
	} {
		if !names[want] {
			t.Errorf("target %q missing", want)
		}
	}
	for name := range names {
		if strings.Contains(name, "(quic)") || strings.Contains(name, "(kcp") {
			t.Errorf("a peer has a target: %s", name)
		}
	}
	for _, section := range []string{"## Through a bottleneck: udpgate vs quic-go v0.65.0 vs kcp-go", "### One connection (bn-N, bn-loss)",
		"| bn-20 | 20 Mbit/s, 256 KiB | kcp/cc |", "### Several udpgate connections through one bottleneck", "### udpgate beside quic-go through one bottleneck"} {
		if !strings.Contains(stdout, section) {
			t.Errorf("report lacks %q", section)
		}
	}
}

// TestBnScenarioNames checks the bottleneck scenarios' paths and who runs
// them.
func TestBnScenarioNames(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spec  bnSpec
		conns int
	}{
		{"bn-2", bnSpec{RateBits: 2e6, Queue: 64 << 10, Conns: 1, Bulk: 16 * time.Second}, 1},
		{"bn-20", bnSpec{RateBits: 20e6, Queue: 256 << 10, Conns: 1, Bulk: 12 * time.Second}, 1},
		{"bn-100", bnSpec{RateBits: 100e6, Queue: 1 << 20, Conns: 1, Bulk: 12 * time.Second}, 1},
		{"bn-loss", bnSpec{RateBits: 50e6, Queue: 1 << 20, Loss: 0.05, Conns: 1, Bulk: 12 * time.Second}, 1},
		{"bn-fair-10", bnSpec{RateBits: 20e6, Queue: 256 << 10, Conns: 10, Bulk: 15 * time.Second}, 10},
		{"bn-vs-quic", bnSpec{RateBits: 20e6, Queue: 256 << 10, Conns: 1, WithQUIC: true, Bulk: 15 * time.Second}, 2},
	} {
		sc, err := parseScenario(tc.name)
		if err != nil || sc.Kind != scBn || sc.Clients != tc.conns || sc.bn() != tc.spec {
			t.Errorf("%s: %+v %+v, %v", tc.name, sc, sc.bn(), err)
		}
	}
	for _, bad := range []string{"bn-0", "bn-x", "bn-1000", "bn-fair-1", "bn-fair-99", "bn-other"} {
		if _, err := parseScenario(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	opt, err := parseOptions([]string{"-scenarios", "bn-2,bn-fair-2,bn-vs-quic,msg-lossy,data-1k", "-variants", "udpgate,quic,kcp,kcp/cc,rawecho,udpgate/overload"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"bn-2": "udpgate,quic,kcp,kcp/cc", "bn-fair-2": "udpgate", "bn-vs-quic": "udpgate",
		"msg-lossy": "udpgate,kcp", "data-1k": "udpgate,rawecho"}
	for _, sc := range opt.Scenarios {
		var got []string
		for _, v := range opt.Variants {
			if sc.runs(v) {
				got = append(got, v.Spec)
			}
		}
		if strings.Join(got, ",") != want[sc.Name] {
			t.Errorf("%s runs %v, want %s", sc.Name, got, want[sc.Name])
		}
	}
	for _, bad := range []string{"quic/b8", "kcp/x", "kcp/cc/cc"} {
		if _, err := parseVariant(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// TestCurveRate checks goodput from completion times.
func TestCurveRate(t *testing.T) {
	const s = int64(time.Second)
	// 1 MiB a second from t0 = 0.
	done := []int64{1 * s, 2 * s, 3 * s, 4 * s}
	if g, ok := curveRate(0, done, 1<<20, 2*s, 10*s); !ok || g != 1<<20 {
		t.Errorf("steady: %v %v", g, ok)
	}
	// From the middle of an interval: linear inside it.
	if g, ok := curveRate(0, []int64{1 * s, 3 * s}, 1<<20, s/2, 3*s); !ok || math.Abs(g-0.6*(1<<20)) > 1 {
		t.Errorf("linear: %v %v", g, ok)
	}
	if _, ok := curveRate(0, done, 1<<20, 5*s, 10*s); ok {
		t.Error("a window after the last completion has a rate")
	}
	if _, ok := curveRate(0, nil, 1<<20, 0, 10*s); ok {
		t.Error("no completion has a rate")
	}
}

// TestSummariseBn checks the cell's medians and worst cases and the
// targets on made-up records.
func TestSummariseBn(t *testing.T) {
	sc, _ := parseScenario("bn-20")
	var rs []runRecord
	for rep := range 3 {
		k := float64(rep)
		rs = append(rs, runRecord{Rep: rep, Scenario: "bn-20", Variant: "udpgate", Bn: &bnRecord{
			DropPct: [2]float64{k, 0}, LinkUsePct: 90, LinkReachS: []float64{1, -1, 2}[rep],
			Conns: []bnConnRecord{{Peer: "udpgate", GoodputPct: 80 + 5*k, ReachS: 1 + k, IdleP99: 52, BulkP99: 60 + 10*k,
				RelLost: uint64(rep), Ended: []string{"", "", "stalled"}[rep]}}}})
	}
	c := summariseBn(sc, rs)
	p := c.peer("udpgate")
	if p == nil || p.GoodputPct != 85 || p.ReachS != 2 || p.BulkP99 != 80 || p.P99Rise != 18 || p.RelLost != 2 ||
		c.DropPct[0] != 1 || c.LinkReachS != 2 || c.Ended != 1 {
		t.Fatalf("%+v %+v", c, p)
	}
	met := map[string]bool{}
	for _, tg := range bnTargets(c) {
		met[tg.Name] = tg.Met
	}
	for name, want := range map[string]bool{
		"bn-20 (udpgate): bulk goodput, % of link":                                    true,
		"bn-20 (udpgate): bottleneck drops, % of datagrams offered (worse direction)": true,
		"bn-20 (udpgate): small messages' p99 during bulk − idle p99, ms":             true,
		"bn-20 (udpgate): reliable small messages lost (worst run)":                   false,
		"bn-20 (udpgate): runs in which a connection ended":                           false,
	} {
		if got, ok := met[name]; !ok || got != want {
			t.Errorf("%s: met %v (present %v), want %v", name, got, ok, want)
		}
	}
}

func TestIsQUICInitial(t *testing.T) {
	b := make([]byte, 1200)
	b[0], b[4] = 0xc3, 1
	if !isQUICInitial(b) || isQUICInitial(b[:100]) {
		t.Error("a QUIC Initial not told")
	}
	b[4] = 2
	if isQUICInitial(b) {
		t.Error("another version taken for QUIC v1")
	}
}
