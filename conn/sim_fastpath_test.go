package conn

import (
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/message"
	"github.com/udpgate/udpgate/netsim"
)

// simBulkTransfers runs bench's msg-bulk in virtual time (25 ms each way,
// plus up to jitter, 1 % loss each way with seeds seed and seed+1, the
// default send ceiling), on a path without a bottleneck (rate 0) or
// through one of rate bytes a second with a queue larger than any flight:
// n 1 MiB messages one after another on one connection, each answered by
// the server once it holds all of it. It returns each transfer's time,
// from the send until the answer, and whether the connection was still in
// slow start after the first; heldAt, when not nil, gets each transfer's
// time from the send until the server held the message (without the
// answer's way back, which a loss of its own may lengthen).
func simBulkTransfers(t *testing.T, seed uint64, n int, rate int64, jitter time.Duration, heldAt ...*[]time.Duration) (d []time.Duration, ss bool) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		up := netsim.Link{Latency: 25 * time.Millisecond, Jitter: jitter, Loss: 0.01, Seed: seed}
		down := netsim.Link{Latency: 25 * time.Millisecond, Jitter: jitter, Loss: 0.01, Seed: seed + 1}
		if rate > 0 {
			up.Bottleneck, down.Bottleneck = netsim.NewBottleneck(rate, 4<<20), netsim.NewBottleneck(rate, 4<<20)
		}
		nw.SetPath(bwClientAddr, simServerAddr, up)
		nw.SetPath(simServerAddr, bwClientAddr, down)
		mc := message.Config{Channels: msgcfg.Channels(), MaxMessageSize: 1 << 20}
		var held atomic.Int64 // when the server held the last message
		simListen(t, nw, Config{Handler: messageFunc(func(c *Conn, ch int, msg []byte) {
			held.Store(time.Now().UnixNano())
			_ = c.SendMessage(msgcfg.Reliable, []byte("got"))
		}), Messages: mc, Timeout: time.Minute, InboundPacketRate: -1})
		got := make(chan struct{}, 1)
		cli, err := simDial(t, nw, Config{Handler: messageFunc(func(*Conn, int, []byte) { got <- struct{}{} }),
			Messages: mc, Timeout: time.Minute, LocalAddr: bwClientAddr.String(), Linger: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		big := make([]byte, 1<<20)
		for k := range n {
			t0 := time.Now()
			if err := cli.Conn().SendMessage(msgcfg.Bulk, big); err != nil {
				t.Fatal(err)
			}
			<-got
			d = append(d, time.Since(t0))
			for _, h := range heldAt {
				*h = append(*h, time.Unix(0, held.Load()).Sub(t0))
			}
			st := cli.Conn().MessageStats()
			t.Logf("seed %d, transfer %d: %v (held after %v), resent %d in all; window %d B, pacing %d B/s, slow start %v",
				seed, k, d[k], time.Unix(0, held.Load()).Sub(t0), st.Resent, st.Path.Window, st.Path.PacingRate, st.Path.SlowStart)
			if k == 0 {
				ss = st.Path.SlowStart
			}
		}
	})
	return d, ss
}

// Target 5 of the bandwidth issue in virtual time. The first transfer
// starts from the initial window; the later ones find the window the first
// left (nothing shrinks it on an empty path) and should take little more
// than the ceiling's time (1 MiB at 32 MiB/s, 31 ms), a round trip and the
// repair of the flight's lost packets. Before the per-ack early-exit
// sample, the slow start's growth on the tail, the rack timer and the
// message timer's larger sends, transfers took 1.04 s, 0.49, 0.34, 0.24
// and 0.24 s.
func TestSimBulkFastPath(t *testing.T) {
	var warm []time.Duration
	ds, _ := simBulkTransfers(t, 1, 5, 0, 0)
	for k, d := range ds {
		limit := 250 * time.Millisecond // 5 round trips (0.125–0.135 s on a quiet machine)
		if k == 0 {
			limit = 700 * time.Millisecond // slow start from 10 packets: 7 round trips and the tail (0.5–0.55 s)
		}
		if d > limit {
			t.Errorf("transfer %d took %v, want ≤ %v", k, d, limit)
		}
		if k > 0 {
			warm = append(warm, d)
		}
	}
	// The later transfers' median: 2.6 round trips (0.13 s on a quiet
	// machine; the goroutines' order under load moves it by a few
	// ticks). Before this round's changes it was 0.29 s.
	slices.Sort(warm)
	if m := (warm[1] + warm[2]) / 2; m > 175*time.Millisecond {
		t.Errorf("the later transfers' median %v, want ≤ 175ms", m)
	}
}

// The later transfers' tail: a packet lost among the last of a flight is
// repaired once three packets sent after it are acknowledged (RACK's
// reorder window of 0 on a path that has not reordered), not a quarter
// round trip and the AckDelay after its ack was due. The flight's last
// packets leave about 31 ms after its first at the default ceiling; their
// repair then ends a transfer 2.5 round trips after its start (0.125–0.135
// s), where the timer made it 2.9 (0.15–0.155 s): before, 7 of these 16
// later transfers took more than 140 ms, after, 1 (one of a flight's last
// three packets lost, which only the timer finds). The test times the
// server's holding of each message (115 ms: 140 less the answer's 25),
// since under load the goroutines' order moves the 1 % losses onto other
// packets, now and then onto the answer itself, whose repair adds a round
// trip that is not the flight's tail.
func TestSimBulkTailRepair(t *testing.T) {
	slow := 0
	for _, seed := range []uint64{1, 3, 5, 7} {
		var held []time.Duration
		simBulkTransfers(t, seed, 5, 0, 0, &held)
		for k, d := range held {
			if k > 0 && d > 115*time.Millisecond {
				slow++
			}
		}
	}
	t.Logf("%d of 16 later transfers held after more than 115 ms", slow)
	// Without the packet threshold 6 of 16; with it 0 on a quiet machine,
	// 0–2 in 20 -race runs beside other tests.
	if slow > 3 {
		t.Errorf("%d of 16 later transfers held after more than 115 ms, want at most 3", slow)
	}
}

// A path a little slower than the send ceiling (200 Mbit/s against 256:
// bench's proxy on a loaded machine is one) ends the slow start of the
// second transfer, whose first burst queues. The window then falls back to
// the delivery rate slow start measured, times the base round trip and
// half the target; that rate had only the first transfer's ramp in it (11
// MB/s, where the link carries 25), and the window fell to 0.62–0.70 MB,
// half the path's 1.25 MB: each later transfer needed a second round trip
// (0.16–0.18 s). With the sample in progress at the exit (19.6 MB/s over
// its 8 ms) it falls to 1.06–1.19 MB, and they take 0.137–0.144 s.
func TestSimBulkExitKeepsThePath(t *testing.T) {
	slow := 0
	for _, seed := range []uint64{1, 3, 5} {
		ds, _ := simBulkTransfers(t, seed, 4, 200e6/8, 0)
		for k, d := range ds {
			if k > 0 && d > 150*time.Millisecond {
				slow++
			}
		}
	}
	if slow > 0 {
		t.Errorf("%d of 9 later transfers through 200 Mbit/s took more than 150 ms, want none", slow)
	}
}

// A path whose delay varies by up to 3 ms each way, as a loaded host's
// does (bench's msg-bulk on a shared 2-core machine): with slow start's
// early exit at 4 acks a quarter of the target (3 ms) above the base, the
// first 1 MiB message left slow start in 2 of 3 seeds, and the later ones
// took 0.18–0.45 s (median 0.28 s); at half the target (6 ms) none left,
// and the later ones took 0.18–0.26 s (median 0.19 s). The
// jitter reorders the flight's packets by more than the packet layer's 64,
// which it reports lost: over a thousand resends in these runs with the
// larger window (fifty to four hundred with the smaller), on main's fast
// repair too.
func TestSimBulkJitterKeepsSlowStart(t *testing.T) {
	var later []time.Duration
	left := 0
	for _, seed := range []uint64{1, 3, 5} {
		ds, ss := simBulkTransfers(t, seed, 4, 0, 3*time.Millisecond)
		if !ss {
			left++
		}
		later = append(later, ds[1:]...)
	}
	slices.Sort(later)
	if left > 0 {
		t.Errorf("the first message left slow start in %d of 3 runs, want none", left)
	}
	if m := later[len(later)/2]; m > 250*time.Millisecond {
		t.Errorf("the later messages' median %v, want ≤ 250ms", m)
	}
}
