package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/udpgate/udpgate/internal/traffic/loadgen"
)

// The rtt-under-storm scenario: rtt-under-flood's player, first idle, then
// beside a login storm instead of a flood: N clients (100k unless the name
// says, rtt-under-storm-N) start their handshakes at once, as storm-N's do,
// from a process of their own. The player's second window opens as the
// storm starts and closes when its last client is in, so every echo in it
// was timed during the storm. It measures what a player sees while the
// server takes a storm (docs/decisions.md, "Connection loops share a login
// storm"), where rtt-under-flood measures an attack that proves no one.
// The server runs with the storm scenarios' settings (no per-source or
// per-prefix limits: the storm's clients share a few loopback /16s).

const (
	// stormRole is the roleEnv value of the storm's child process, and
	// stormEnv carries its stormSpec as JSON.
	stormRole = "storm"
	stormEnv  = "UDPGATE_BENCH_STORM"
	// rttStormClients: the storm's clients when the scenario's name gives
	// no count. 100k take 1–3 s here, a window of thousands of the
	// player's echoes; 10k are over in a tenth of a second.
	rttStormClients = 100_000
	// stormRequest is the line that starts the child's storm; its answer
	// is a line that starts with it too.
	stormRequest = "STORM"
)

// stormFirstSource is the storm's first client address, clear of the
// player's 127.1.0.0/16 (loadgen's default) and the flood's 127.0.2.1.
var stormFirstSource = netip.AddrFrom4([4]byte{127, 2, 0, 1})

// stormSpec is the storm a storm child runs.
type stormSpec struct {
	Server  netip.AddrPort `json:"server"`
	Clients int            `json:"clients"`
	Sockets int            `json:"sockets"`
	Batch   int            `json:"batch"`
}

// stormMain is the storm child: set up spec's clients, say READY, and run
// the storm when the harness asks (a "STORM" line), answering with its
// figures; exit when stdin closes.
func stormMain(stdin io.Reader, stdout io.Writer) int {
	var spec stormSpec
	if err := json.Unmarshal([]byte(os.Getenv(stormEnv)), &spec); err != nil {
		fmt.Fprintf(stdout, "ERROR storm spec: %v\n", err)
		return 2
	}
	gen, err := loadgen.New(loadgen.Config{
		Server:         spec.Server,
		NetworkVersion: benchNetVersion,
		Mode:           loadgen.ModeResponse,
		Clients:        spec.Clients,
		Sockets:        spec.Sockets,
		Batch:          spec.Batch,
		RecvBuffer:     stormBuffer,
		FirstSource:    stormFirstSource,
	})
	if err != nil {
		fmt.Fprintf(stdout, "ERROR storm clients: %v\n", err)
		return 1
	}
	defer gen.Close()
	fmt.Fprintln(stdout, "READY 0")
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		if sc.Text() != stormRequest {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), stormTimeout)
		c, err := gen.Storm(ctx)
		cancel()
		if err != nil {
			fmt.Fprintf(stdout, "ERROR storm: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s clients=%d connected=%d per_s=%.0f all_in_s=%g p50_ms=%g p99_ms=%g resent=%d\n",
			stormRequest, c.Clients, c.Connected, c.PerSecond(), c.AllIn.Seconds(),
			ms(c.SinceStart.P50), ms(c.SinceStart.P99), c.Resent)
	}
	return 0
}

// stormAnswer is a storm child's answer, read into the storm's record.
func stormAnswer(line string) (*stormRecord, error) {
	kv := parseKV(line)
	st := &stormRecord{
		Clients: int(kv["clients"]), Connected: int(kv["connected"]), PerSecond: kv["per_s"],
		AllInSec: kv["all_in_s"], P50ms: kv["p50_ms"], P99ms: kv["p99_ms"], Resent: int(kv["resent"]),
		PromotionFull: -1,
	}
	if st.Clients == 0 || st.Connected == 0 {
		return nil, fmt.Errorf("storm answered %q", line)
	}
	return st, nil
}

// startStorm starts the storm child for the server at server and waits
// until its clients are set up.
func startStorm(opt *options, server netip.AddrPort, clients int, life time.Duration) (*child, error) {
	spec, _ := json.Marshal(stormSpec{Server: server, Clients: clients, Sockets: opt.LoadSockets, Batch: opt.LoadBatch})
	st, err := startProcess(life, roleEnv+"="+stormRole, stormEnv+"="+string(spec))
	if err != nil {
		return nil, fmt.Errorf("storm: %w", err)
	}
	return st, nil
}

// writeRTTStorms writes rtt-under-storm's table.
func writeRTTStorms(w io.Writer, cells []rttCell) {
	fmt.Fprintf(w, "\n## A player beside a login storm (rtt-under-storm)\n\n"+
		"rtt-under-flood's player (one established client, a %d-byte Data packet every millisecond, lost: no echo within %v), "+
		"first idle, then during a login storm: every storm client starts its handshake at once from another process, as in storm-N. "+
		"The player's storm window opens as the storm starts and closes when its last client is in. "+
		"The server runs with the storm scenarios' settings. *Shared*: handshake datagrams the connection loops took during the run "+
		"(udpgate's `shared` counter). Medians over repetitions; ratios are medians of same-run storm ÷ idle.\n\n",
		fastpathDataLen(), playerLossTimeout)
	fmt.Fprintln(w, "| scenario | server | idle p50 / p99 / p99.9 µs | storm p50 / p99 / p99.9 / max µs | storm loss (worst) | p50 × | p99 × | storm handshakes/s | all in, s | resent | server kernel drops | shared |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, c := range cells {
		s := c.Storm
		if s == nil {
			s = &stormRecord{}
		}
		shared := "–"
		if c.Shared >= 0 {
			shared = thousands(c.Shared)
		}
		fmt.Fprintf(w, "| %s | %s%s | %.0f / %.0f / %.0f | %.0f / %.0f / %.0f / %.0f | %.2f %% (%.2f %%) | %.2f | %.2f | %s | %.2f | %d | %.0f | %s |\n",
			c.Scenario, c.Variant, flagMark(c.Flagged), c.Idle.P50us, c.Idle.P99us, c.Idle.P999us,
			c.Flood.P50us, c.Flood.P99us, c.Flood.P999us, c.Flood.MaxUs, c.Flood.LossPct, c.MaxLossPct,
			c.P50Ratio, c.P99Ratio, thousands(s.PerSecond), s.AllInSec, s.Resent, c.KernelDrops, shared)
	}
}

// rttStormTargets: a login storm may cost a player no more than a flood
// does (rttTargets' goals).
func rttStormTargets(c rttCell) []target {
	ts := rttTargets(c)
	for i := range ts {
		ts[i].Name = strings.ReplaceAll(ts[i].Name, "flood", "storm")
	}
	return ts
}
