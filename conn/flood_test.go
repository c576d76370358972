//go:build !race

// The flood tests push a million datagrams through a real server; under the
// race detector that would take many minutes, so scripts/test.sh runs them
// in a separate, uninstrumented pass.

package conn

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/internal/traffic/flood"
	"github.com/udpgate/udpgate/token"
)

// counter is a server application that counts and echoes Data.
type counter struct {
	NopHandler
	mu  sync.Mutex
	got map[*Conn]int
}

func (c *counter) OnPacket(cn *Conn, p []byte) {
	c.mu.Lock()
	c.got[cn]++
	c.mu.Unlock()
	_, _ = cn.Send(p)
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A million hostile datagrams of every kind from 200 sources, while 100
// legitimate clients connect and exchange data: every client gets in and
// none of its Data is dropped by the server, the flood makes no
// connection, no hostile source gets back more bytes than it sent, and the
// server's heap does not grow with the flood. The server runs in a child
// process (this test binary again), so its heap is its own.
func TestFloodWithLegitimateClients(t *testing.T) {
	if testing.Short() {
		t.Skip("a million datagrams: not in -short")
	}
	floodWithClients(t, false)
}

// TestFloodSealedWithPlayers is TestFloodWithLegitimateClients against a
// sealed server (docs/protocol.md §11), with hostile token packets in the
// mix: proofs with expired, foreign, wrong-key, wrong-protocol, bit-flipped,
// truncated and oversized tokens, forged inner seals, and sealed packets
// with random counters, each from a source that completed the handshake
// first. Every player proves its token and echoes its Data; no hostile
// source gets more bytes than it sent, nothing hostile is proven, and the
// heap stays flat.
func TestFloodSealedWithPlayers(t *testing.T) {
	if testing.Short() {
		t.Skip("half a million datagrams: not in -short")
	}
	floodWithClients(t, true)
}

// floodKey and floodProtocol are the sealed flood server's.
var floodKey = [token.KeyBytes]byte{7, 7, 7}

const floodProtocol = 0xf100d

func floodWithClients(t *testing.T, sealed bool) {
	srv := startFloodServer(t, sealed)
	srv.do("reset")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		rep      *flood.Report
		floodErr error
		flooding = make(chan struct{})
	)
	go func() {
		defer close(flooding)
		cfg := flood.Config{
			Server:      srv.addr,
			NumSources:  200,
			Count:       1_000_000,
			MaxDuration: 90 * time.Second,
			Seed:        1,
		}
		if sealed {
			// Every unsealed kind, and as much again of hostile proofs and
			// sealed packets; proofs are 1 KiB, so fewer datagrams.
			cfg.Mix = flood.DefaultMix
			cfg.Mix[flood.KindProof], cfg.Mix[flood.KindSealed] = 6, 2
			cfg.ProtocolID, cfg.PrivateKey = floodProtocol, &floodKey
			cfg.Count = 500_000
		}
		rep, floodErr = flood.Run(ctx, cfg)
	}()
	// The flood is under way once the server's overload level first
	// rises (a connectionless rate of DefaultBurstThreshold or more).
	if srv.do("await-overload") != "ok" {
		t.Fatal("the flood never raised the server's overload level")
	}

	const clients, packets = 100, 20
	var dialMu sync.Mutex
	var dials []time.Duration
	eachClient(t, clients, func(i int) error {
		dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
		defer dcancel()
		echoes := &clientRecorder{ch: make(chan []byte, packets)}
		cfg := Config{Handler: echoes, LocalAddr: fmt.Sprintf("127.0.1.%d:0", 1+i)}
		if sealed {
			tok, err := token.Generate(&floodKey, &token.Params{ProtocolID: floodProtocol, ClientID: uint64(i),
				ServerAddresses: []netip.AddrPort{srv.addr}, Expire: time.Minute, Timeout: 5 * time.Second})
			if err != nil {
				return err
			}
			cfg.Token = tok
		}
		start := time.Now()
		c, err := Dial(dctx, srv.addr.String(), cfg)
		dialMu.Lock()
		dials = append(dials, time.Since(start))
		dialMu.Unlock()
		if err != nil {
			return fmt.Errorf("client %d: %v", i, err)
		}
		defer c.Close()
		pace := time.NewTicker(5 * time.Millisecond) // 200 packets/s
		defer pace.Stop()
		for k := range packets {
			if _, err := c.Send(fmt.Appendf(nil, "client %d packet %d", i, k)); err != nil {
				return err
			}
			<-pace.C
		}
		// The server application counts each Data before it echoes
		// it: wait for the echoes before closing, and for at most 5 s
		// for those the kernel dropped (which the check below allows).
		timeout := time.After(5 * time.Second)
		for range packets {
			select {
			case <-echoes.ch:
			case <-timeout:
				return nil
			}
		}
		return nil
	})
	slices.Sort(dials)
	if len(dials) > 0 {
		t.Logf("players' dials under the flood: p50 %v, p90 %v, max %v", dials[len(dials)/2].Round(time.Millisecond),
			dials[len(dials)*9/10].Round(time.Millisecond), dials[len(dials)-1].Round(time.Millisecond))
	}
	<-flooding
	if floodErr != nil {
		t.Fatalf("flood: %v", floodErr)
	}
	r := srv.report()
	st := &r.Stats
	t.Logf("flood: %d datagrams, %d bytes in %v (%.0f/s); server replied %d datagrams, %d bytes; amplification %.3f",
		rep.Sent.Datagrams, rep.Sent.Bytes, rep.SendTime.Round(time.Millisecond), rep.SendRate(),
		rep.Received.Datagrams, rep.Received.Bytes, rep.Amplification())
	t.Logf("server: overload level changes %d, kernel drops %d, drops %s", st.OverloadChanges, st.Sockets.RxDrops, nonZeroDrops(st))

	if want := uint64(1_000_000); !sealed && rep.Sent.Datagrams < want || sealed && rep.Sent.Datagrams < want/2 {
		t.Fatalf("the flood sent only %d datagrams", rep.Sent.Datagrams)
	}
	if len(rep.Sources) < 200 {
		t.Fatalf("only %d hostile sources", len(rep.Sources))
	}
	for _, src := range rep.Sources {
		if src.Received.Bytes > src.Sent.Bytes {
			t.Errorf("source %v got %d bytes for %d", src.Addr, src.Received.Bytes, src.Sent.Bytes)
		}
	}
	switch {
	case !sealed && st.Accepted != clients:
		t.Fatalf("%d connections accepted, want exactly the %d legitimate ones", st.Accepted, clients)
	case sealed && st.Proofs != clients:
		// The hostile sources complete handshakes (which create
		// nothing), but only the players prove a token.
		t.Fatalf("%d tokens proven, want exactly the %d players'", st.Proofs, clients)
	case sealed:
		// (A proof whose cookie part is no Response's is counted as
		// not_proof, before any token work.)
		for _, d := range []protocol.DropReason{protocol.DropTokenExpired, protocol.DropTokenInvalid,
			protocol.DropTokenProtocol, protocol.DropProofForged, protocol.DropTokenForeignServer, protocol.DropNotProof} {
			if st.Drops[d] == 0 {
				t.Errorf("no %s drop: that hostile proof never reached its check", d.String())
			}
		}
	}
	// The server's own drops never touch a connection's Data: these are the
	// reasons that apply to packets from connected addresses. (Sealed,
	// the players' Data is checked below.)
	fromConnected := []protocol.DropReason{protocol.DropStaleSequence, protocol.DropBadTag,
		protocol.DropClientIDMismatch, protocol.DropPromotionFull}
	if sealed {
		fromConnected = []protocol.DropReason{protocol.DropStaleSequence, protocol.DropPromotionFull}
	}
	for _, d := range fromConnected {
		if st.Drops[d] != 0 {
			t.Errorf("%d drops for %s", st.Drops[d], d.String())
		}
	}
	if want := uint64(clients * packets); r.Data != want {
		if st.Sockets.RxDrops == 0 {
			t.Errorf("the server application got %d of %d Data packets with no kernel drops", r.Data, want)
		} else {
			t.Logf("the kernel dropped %d datagrams in full socket buffers; %d of %d Data arrived", st.Sockets.RxDrops, r.Data, want)
		}
	}
	growth := int64(r.Peak) - int64(r.Base)
	t.Logf("server live heap: %d KiB before, peak %d KiB during the flood (+%d KiB), %d KiB at the end",
		r.Base>>10, r.Peak>>10, growth>>10, r.Now>>10)
	if growth > 4<<20 {
		t.Errorf("the server's heap grew %d KiB during the flood, want < 4096", growth>>10)
	}
}

// floodServer is the child process running the server under test.
type floodServer struct {
	t    *testing.T
	addr netip.AddrPort
	in   io.Writer
	out  *bufio.Scanner
	mu   sync.Mutex
}

type floodReport struct {
	Base, Peak, Now uint64 // live heap, bytes
	Data            uint64 // Data packets the application got
	Stats           Stats
}

func startFloodServer(t *testing.T, sealed bool) *floodServer {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFloodServerProcess$")
	cmd.Env = append(os.Environ(), "UDPGATE_FLOOD_CHILD=1")
	if sealed {
		cmd.Env = append(cmd.Env, "UDPGATE_FLOOD_SEALED=1")
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fmt.Fprintln(in, "quit")
		kill := time.AfterFunc(10*time.Second, func() { cmd.Process.Kill() })
		cmd.Wait()
		kill.Stop()
	})
	s := &floodServer{t: t, in: in, out: bufio.NewScanner(out)}
	s.out.Buffer(make([]byte, 1<<20), 1<<20)
	line := s.line("addr ")
	s.addr = netip.MustParseAddrPort(line)
	return s
}

// line reads the child's output up to a line with prefix.
func (s *floodServer) line(prefix string) string {
	for s.out.Scan() {
		if rest, ok := strings.CutPrefix(s.out.Text(), prefix); ok {
			return rest
		}
	}
	s.t.Fatalf("the server process ended without %q: %v", prefix, s.out.Err())
	return ""
}

func (s *floodServer) do(cmd string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintln(s.in, cmd)
	return s.line(cmd + " ")
}

func (s *floodServer) report() floodReport {
	var r floodReport
	if err := json.Unmarshal([]byte(s.do("report")), &r); err != nil {
		s.t.Fatal(err)
	}
	return r
}

// TestFloodServerProcess is the child side of TestFloodWithLegitimateClients:
// a server with an echo application, answering "reset", "report",
// "await-overload" (once the overload level is above normal, which the
// server logs) and "quit" on stdin.
func TestFloodServerProcess(t *testing.T) {
	if os.Getenv("UDPGATE_FLOOD_CHILD") == "" {
		t.Skip("runs as TestFloodWithLegitimateClients's server process")
	}
	app := &counter{got: map[*Conn]int{}}
	// Overload control on, as an internet-facing server should run.
	var logged conntest.Signal
	cfg := Config{Handler: app, Overload: OverloadConfig{Enabled: true}, Logger: slog.New(logSignal{&logged})}
	if os.Getenv("UDPGATE_FLOOD_SEALED") != "" {
		cfg.PrivateKey, cfg.ProtocolID = &floodKey, floodProtocol
	}
	s, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fmt.Printf("addr %s\n", s.Addr())
	var base, peak atomic.Uint64
	go func() { // peak live heap, sampled
		for range time.Tick(100 * time.Millisecond) {
			if h := heapAlloc(); h > peak.Load() {
				peak.Store(h)
			}
		}
	}()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "reset":
			h := heapAlloc()
			base.Store(h)
			peak.Store(h)
			fmt.Println("reset ok")
		case "report":
			app.mu.Lock()
			var data uint64
			for _, n := range app.got {
				data += uint64(n)
			}
			app.mu.Unlock()
			b, _ := json.Marshal(floodReport{Base: base.Load(), Peak: peak.Load(), Now: heapAlloc(), Data: data, Stats: s.Stats()})
			fmt.Printf("report %s\n", b)
		case "await-overload":
			up := func() bool { return s.Stats().OverloadLevel > LevelNormal }
			if logged.Await(time.Minute, up) {
				fmt.Println("await-overload ok")
			} else {
				fmt.Println("await-overload timeout")
			}
		case "quit":
			return
		}
	}
}

func nonZeroDrops(st *Stats) string {
	out := ""
	for r, n := range st.Drops {
		if n > 0 {
			out += fmt.Sprintf("%s=%d ", protocol.DropReason(r).String(), n)
		}
	}
	return out
}

// BenchmarkRTTUnderHandshakeFlood measures established connections' round
// trips (one client, ping-pong through the echo application) with no other
// traffic, during an Initial flood of 100k/s (twice the LevelFlood
// threshold, ten times a loop's Challenge cap) and during one as fast as
// the generator goes, which on a 2-core machine also takes a core from the
// server.
// One op is one round trip; p50 and p99 are reported in microseconds.
//
//	go test -run '^$' -bench RTTUnderHandshakeFlood -benchtime 20000x -count 5 ./conn/
func BenchmarkRTTUnderHandshakeFlood(b *testing.B) {
	for _, tc := range []struct {
		name string
		rate float64 // Initials per second; 0: none; -1: as fast as possible
	}{{"idle", 0}, {"flood-100k", 100_000}, {"flood-max", -1}} {
		flooded := tc.rate != 0
		b.Run(tc.name, func(b *testing.B) {
			t := &testing.T{}
			srv := startFloodServer(t, false)
			defer srv.do("reset") // keeps the child alive until here
			rec := &clientRecorder{ch: make(chan []byte, 16)}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			c, err := Dial(ctx, srv.addr.String(), Config{Handler: rec})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			var done chan struct{}
			if flooded {
				done = make(chan struct{})
				mix, _ := flood.ParseMix("initial=1")
				go func() {
					defer close(done)
					flood.Run(ctx, flood.Config{Server: srv.addr, NumSources: 200, Mix: mix,
						Rate: max(tc.rate, 0), Count: flood.MaxCount, MaxDuration: 2 * time.Minute, Seed: 2})
				}()
				for srv.report().Stats.OverloadLevel < LevelFlood {
					time.Sleep(10 * time.Millisecond)
				}
			}
			rtts := make([]time.Duration, 0, b.N)
			msg := []byte("ping")
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				c.Send(msg)
				select {
				case <-rec.ch:
					rtts = append(rtts, time.Since(start))
				case <-time.After(time.Second):
					// lost: counted by its absence
				}
			}
			b.StopTimer()
			if flooded {
				level := srv.report().Stats.OverloadLevel
				cancel()
				<-done
				b.ReportMetric(float64(level), "overload-level")
			}
			slices.Sort(rtts)
			if len(rtts) > 0 {
				b.ReportMetric(float64(rtts[len(rtts)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(rtts[len(rtts)*99/100].Microseconds()), "p99-µs")
			}
			b.ReportMetric(float64(b.N-len(rtts)), "lost")
		})
	}
}
