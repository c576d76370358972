package batchio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
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

	"golang.org/x/sys/unix"
)

// TestSteerFlood measures what steering is for: a player echoing one
// datagram per millisecond while an open-loop flood of bit-set datagrams
// (handshake packets) from 64 source ports hits the same group, unsteered
// (Sockets: 2) and steered (2 bit-set + 2 bit-clear sockets), and the
// variants below of the server's scheduling. The server's
// loops drop bit-set datagrams and echo the rest, so the figures isolate
// the kernel queues and the loops' scheduling from udpgate's own work; the
// server in conn is measured by the bench. It loads both CPUs for the
// whole run, so it runs only when asked:
//
//	BATCHIO_STEERFLOOD=1 go test -run TestSteerFlood -v ./batchio/
//
// BATCHIO_STEERFLOOD_VARIANTS (comma-separated names) runs only those,
// BATCHIO_STEERFLOOD_DUR (default 2s) sets each variant's duration,
// BATCHIO_STEERFLOOD_REPS (default 1) the interleaved repetitions, and
// BATCHIO_STEERFLOOD_WORK (default 0) the server's CPU time per flood
// datagram: with enough of it the flood outruns the loops, and unsteered
// the player's datagrams are dropped in the full queues.
func TestSteerFlood(t *testing.T) {
	if os.Getenv("BATCHIO_STEERFLOOD") == "" {
		t.Skip("set BATCHIO_STEERFLOOD=1 to run the flood comparison (loads every CPU)")
	}
	dur := 2 * time.Second
	if d, err := time.ParseDuration(os.Getenv("BATCHIO_STEERFLOOD_DUR")); err == nil {
		dur = d
	}
	reps := envInt("BATCHIO_STEERFLOOD_REPS", 1)
	var work time.Duration
	if d, err := time.ParseDuration(os.Getenv("BATCHIO_STEERFLOOD_WORK")); err == nil {
		work = d
	}
	steer := Config{Sockets: 2, Steer: Steer{Enabled: true, Bit: 5}}
	variants := []struct {
		name  string
		cfg   Config
		opt   floodOpts
		flood bool
	}{
		{"idle", Config{Sockets: 2}, floodOpts{}, false},
		{"unsteered", Config{Sockets: 2}, floodOpts{}, true},
		{"steered 2+2", steer, floodOpts{}, true},
		{"steered 2+2 procs4", steer, floodOpts{procs: 4}, true},
		{"steered 2+2 yield", steer, floodOpts{yield: true}, true},
		{"steered 2+2 procs4 nice10", steer, floodOpts{procs: 4, nice: 10}, true},
		{"unsteered 4 procs4", Config{Sockets: 4}, floodOpts{procs: 4}, true},
		{"steered 1+1", Config{Sockets: 1, Steer: Steer{Enabled: true, Bit: 5}}, floodOpts{}, true},
		{"steered 1+1 spread", Config{Sockets: 1, Steer: Steer{Enabled: true, Bit: 5, Spread: true}}, floodOpts{spread: true}, true},
	}
	only := os.Getenv("BATCHIO_STEERFLOOD_VARIANTS") // comma-separated names; empty: all
	for rep := range reps {
		for _, v := range variants {
			if only != "" && !slices.Contains(strings.Split(only, ","), v.name) {
				continue
			}
			v.opt.work = work
			r, err := runSteerFlood(v.cfg, v.opt, v.flood, dur)
			if err != nil {
				t.Fatalf("%s: %v", v.name, err)
			}
			t.Logf("rep %d %-34s player rtt p50 %8v p99 %8v max %8v lost %5.2f %% (%d/%d)  flood sent %d/s, server saw %d/s, kernel drops %d",
				rep, v.name, r.p50, r.p99, r.max, 100*float64(r.lost)/float64(r.sent), r.lost, r.sent,
				int(float64(r.floodSent)/dur.Seconds()), int(float64(r.floodSeen)/dur.Seconds()), r.drops)
		}
	}
}

// floodOpts are the server-side variations of TestSteerFlood: procs, if
// not 0, is the server's GOMAXPROCS; yield makes the bit-set sockets'
// loops call runtime.Gosched after each batch; nice, if not 0, runs those
// loops on locked threads of that nice value; work is the CPU time the
// server spends on each bit-set datagram, standing for a handshake's cost,
// so that a flood can outrun the loops and fill their queues; spread, with
// Steer.Spread, stops the spreading as conn does (conn/spread.go): when a
// bit-set socket's loop receives a batch at least half full, less than
// half of it bit-clear.
type floodOpts struct {
	procs  int
	yield  bool
	work   time.Duration
	nice   int
	spread bool
}

type floodResult struct {
	p50, p99, max        time.Duration
	sent, lost           int
	floodSent, floodSeen int64
	drops                uint64
}

// runSteerFlood runs the server group in this process and the load (the
// flood and the player) in a child process, so the server's loops compete
// with the load for the CPUs, as on one machine, but not for this
// runtime's Ps, as they would not against a real attacker.
func runSteerFlood(cfg Config, opt floodOpts, flood bool, dur time.Duration) (floodResult, error) {
	var res floodResult
	if opt.procs > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(opt.procs))
	}
	g, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		return res, err
	}
	defer g.Close()
	if cfg.Steer.Enabled && !g.Steered() {
		return res, fmt.Errorf("not steered: %v", g.Warnings())
	}
	var seen atomic.Int64
	var wg sync.WaitGroup
	for _, s := range g.Sockets() {
		wg.Go(func() {
			if opt.nice != 0 && s.Class() == ClassBitSet {
				// The thread ends with the goroutine, nice value and all.
				runtime.LockOSThread()
				if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), opt.nice); err != nil {
					panic(err)
				}
			}
			b := g.NewBatch()
			for {
				n, err := s.Recv(b)
				if err != nil {
					return
				}
				k := 0
				for i := range n {
					m := &b.Msgs[i]
					if m.N > 0 && m.Buf[0]&(1<<5) != 0 {
						seen.Add(1)
						for t0 := time.Now(); time.Since(t0) < opt.work; {
						}
						continue
					}
					b.Msgs[k], b.Msgs[i] = b.Msgs[i], b.Msgs[k]
					k++
				}
				if opt.spread && s.Class() == ClassBitSet && 2*n >= len(b.Msgs) && 2*k < n && g.Spreading() {
					if err := g.SetSpread(false); err != nil {
						panic(err)
					}
				}
				if k > 0 && s.Send(b, k) != nil {
					return
				}
				if opt.yield && s.Class() == ClassBitSet {
					runtime.Gosched()
				}
			}
		})
	}
	defer wg.Wait()
	defer g.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^TestSteerFloodChild$", "-test.v")
	cmd.Env = append(os.Environ(),
		"BATCHIO_STEERFLOOD_CHILD="+g.LocalAddr().String(),
		fmt.Sprintf("BATCHIO_STEERFLOOD_FLOOD=%v", flood),
		"BATCHIO_STEERFLOOD_DUR="+dur.String())
	out, err := cmd.Output()
	if err != nil {
		return res, fmt.Errorf("load process: %v\n%s", err, out)
	}
	var p50, p99, max int64
	found := false
	for line := range strings.Lines(string(out)) {
		if _, err := fmt.Sscanf(line, "RESULT %d %d %d %d %d %d", &p50, &p99, &max, &res.sent, &res.lost, &res.floodSent); err == nil {
			found = true
		}
	}
	if !found {
		return res, fmt.Errorf("load process printed no result:\n%s", out)
	}
	res.p50, res.p99, res.max = time.Duration(p50), time.Duration(p99), time.Duration(max)
	res.floodSeen = seen.Load()
	res.drops = g.Stats().RxDrops
	return res, nil
}

// TestSteerFloodChild is the load process of TestSteerFlood: the flood, if
// asked, and the player, for the given duration.
func TestSteerFloodChild(t *testing.T) {
	addr := os.Getenv("BATCHIO_STEERFLOOD_CHILD")
	if addr == "" {
		t.Skip("load process of TestSteerFlood")
	}
	server := netip.MustParseAddrPort(addr)
	dur, err := time.ParseDuration(os.Getenv("BATCHIO_STEERFLOOD_DUR"))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var floodSent atomic.Int64
	var fwg sync.WaitGroup
	if os.Getenv("BATCHIO_STEERFLOOD_FLOOD") == "true" {
		// Two generators of 32 source ports each, sendmmsg batches of 64
		// bit-set datagrams, as fast as they go.
		for gen := range 2 {
			var socks []*Socket
			for range 32 {
				c := listen(t, fmt.Sprintf("127.0.1.%d:0", 2+gen), Config{Sockets: 1, Mode: ModeNetpoll, RecvBuffer: -1})
				socks = append(socks, c.Sockets()[0])
			}
			fwg.Go(func() {
				b := NewBatch(64, 64)
				for i := range b.Msgs {
					b.Msgs[i].N = 48
					b.Msgs[i].Buf[0] = 1 << 5
					b.Msgs[i].Addr = server
				}
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if socks[i%len(socks)].Send(b, len(b.Msgs)) != nil {
						return
					}
					floodSent.Add(int64(len(b.Msgs)))
				}
			})
		}
	}

	// The player: one datagram per millisecond, bit 5 clear, each
	// carrying its sequence number; echoes are matched to send times.
	p, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.2.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	n := int(dur / time.Millisecond)
	sentAt := make([]time.Time, n)
	rtts := make([]time.Duration, 0, n)
	var rmu sync.Mutex
	echoed := make(chan struct{}, 1) // an echo arrived since the last look
	var rwg sync.WaitGroup
	rwg.Go(func() {
		buf := make([]byte, 64)
		for {
			k, _, err := p.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			now := time.Now()
			if k < 8 {
				continue
			}
			seq := int(binary.LittleEndian.Uint32(buf[4:8]))
			rmu.Lock()
			if seq < n && !sentAt[seq].IsZero() {
				rtts = append(rtts, now.Sub(sentAt[seq]))
			}
			rmu.Unlock()
			select {
			case echoed <- struct{}{}:
			default:
			}
		}
	})
	msg := make([]byte, 48)
	pace := time.NewTicker(time.Millisecond)
	defer pace.Stop()
	for seq := range n {
		if seq > 0 {
			<-pace.C
		}
		binary.LittleEndian.PutUint32(msg[4:8], uint32(seq))
		rmu.Lock()
		sentAt[seq] = time.Now()
		rmu.Unlock()
		if _, err := p.WriteToUDPAddrPort(msg, server); err != nil && !errors.Is(err, net.ErrClosed) {
			t.Fatal(err)
		}
	}
	close(stop)
	fwg.Wait()
	// The last echoes: until every one is in, or none came for 200 ms.
	quiet := time.NewTimer(200 * time.Millisecond)
	for done := false; !done; {
		rmu.Lock()
		all := len(rtts) == n
		rmu.Unlock()
		if all {
			break
		}
		select {
		case <-echoed:
			quiet.Reset(200 * time.Millisecond)
		case <-quiet.C:
			done = true
		}
	}
	p.Close()
	rwg.Wait()
	var p50, p99, max time.Duration
	if len(rtts) > 0 {
		slices.Sort(rtts)
		p50, p99, max = rtts[len(rtts)/2], rtts[len(rtts)*99/100], rtts[len(rtts)-1]
	}
	fmt.Printf("RESULT %d %d %d %d %d %d\n", p50, p99, max, n, n-len(rtts), floodSent.Load())
}
