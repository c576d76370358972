package conn

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
)

// wireTally sorts the datagrams of the latency scenario (simLatency) by
// what they carry, each direction apart: where every wire byte of an
// echoed message goes (tuning.md, "Messages": the byte breakdown).
type wireTally struct {
	mu sync.Mutex
	// seen: times each reliable unit (direction, client, id) was put on
	// the wire, to tell a first send from a repeat.
	seen map[unitKey]int
	dir  [2]dirTally // 0: client → server, 1: server → client
}

type unitKey struct {
	dir    int
	client netip.AddrPort
	id     uint16
}

type dirTally struct {
	keepAlives, messages   int // datagrams
	headerBytes            int // connection-packet overhead of both kinds
	firstBytes, firstUnits int // entries of units sent the first time
	// againBytes, again: entries of units sent before (copies and
	// resends); againN[k]: units sent a (k+2)th time.
	againBytes, again int
	againN            [4]int
	otherBytes        int // entries of other kinds (none in the scenario)
}

func newWireTally() *wireTally { return &wireTally{seen: map[unitKey]int{}} }

// observe is a netsim Drop hook's body: it counts b, sent from → to.
func (w *wireTally) observe(from, to netip.AddrPort, b []byte) {
	d, client := 0, from
	if from == simServerAddr {
		d, client = 1, to
	}
	var h protocol.ConnHeader
	payload, r := wire.DecodeConn(wire.Magic{}, b, &h)
	if r != protocol.DropNone {
		return // a handshake packet
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t := &w.dir[d]
	switch h.Kind {
	case protocol.KindKeepAlive:
		t.keepAlives++
		t.headerBytes += len(b)
		return
	case protocol.KindMessages:
		t.messages++
		t.headerBytes += len(b) - len(payload)
	default:
		return
	}
	for len(payload) > 0 {
		// docs/protocol.md §14.2, with testChannels: 0 reliable-ordered,
		// 1 unreliable, 2 sequenced; the scenario sends no fragments.
		ch := payload[0] & 31
		hl := 1
		if ch != 1 {
			hl += 2
		}
		n, ln := int(payload[hl]), 1
		if n >= 0x80 {
			n, ln = n&0x7f|int(payload[hl+1])<<7, 2
		}
		size := hl + ln + n
		if ch != 0 {
			t.otherBytes += size
		} else {
			k := unitKey{d, client, uint16(payload[1]) | uint16(payload[2])<<8}
			if w.seen[k] == 0 {
				t.firstBytes += size
				t.firstUnits++
			} else {
				t.againBytes += size
				t.again++
				t.againN[min(w.seen[k]-1, len(t.againN)-1)]++
			}
			w.seen[k]++
		}
		payload = payload[size:]
	}
}

// reset forgets what was counted (the handshakes), not the units seen.
func (w *wireTally) reset() {
	w.mu.Lock()
	w.dir = [2]dirTally{}
	w.mu.Unlock()
}

// String is the breakdown per echoed message: echoed messages, then each
// direction's bytes by kind.
func (w *wireTally) breakdown(echoed int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	per := func(v int) float64 { return float64(v) / float64(echoed) }
	total := 0
	for d, name := range []string{"client→server", "server→client"} {
		t := &w.dir[d]
		sum := t.headerBytes + t.firstBytes + t.againBytes + t.otherBytes
		total += sum
		fmt.Fprintf(&b, "%s per echoed message: %.1f B = headers %.1f (%.3f Messages + %.3f KeepAlive datagrams) + first sends %.1f + repeats %.1f (%.3f entries: 2nd %.3f, 3rd %.3f, 4th %.3f, later %.3f)\n",
			name, per(sum), per(t.headerBytes), per(t.messages), per(t.keepAlives), per(t.firstBytes),
			per(t.againBytes), per(t.again), per(t.againN[0]), per(t.againN[1]), per(t.againN[2]), per(t.againN[3]))
	}
	fmt.Fprintf(&b, "both ways: %.1f B per echoed message, %.3f per payload byte", per(total), per(total)/200)
	return b.String()
}

// The lossy path (simLatency) costs the wire bytes and gives the
// round trips measured when the copy policy was last tuned (tuning.md,
// "Messages", where the logged breakdown is explained), within a hair:
// at 0 % loss speculative copies go only while the path is new (2.44
// wire bytes per payload byte when they rode along regardless); at 5 %
// they buy the p99 (170 ms without them). A change to what goes on the
// wire fails here before the bench sees it:
//
//	go test ./conn -run TestSimMessageBytes -v
func TestSimMessageBytes(t *testing.T) {
	for _, tc := range []struct {
		loss          float64
		wire          float64 // at most, per echoed payload byte
		p50, p99      time.Duration
		copiesPerEcho float64 // at most, both sides
	}{
		{loss: 0, wire: 1.45, p50: 54500 * time.Microsecond, p99: 58 * time.Millisecond, copiesPerEcho: 0.25},
		{loss: 0.05, wire: 2.50, p50: 55 * time.Millisecond, p99: 108 * time.Millisecond, copiesPerEcho: 2.3},
	} {
		loss := tc.loss
		t.Run(fmt.Sprintf("loss=%v", loss), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tally := newWireTally()
				r := simLatencyTally(t, loss, message.Config{}, tally)
				copies := float64(r.copies[0]+r.copies[1]) / float64(r.echoed)
				if r.wire > tc.wire || r.p50 > tc.p50 || r.p99 > tc.p99 || copies > tc.copiesPerEcho {
					t.Errorf("loss %v: %.3f wire bytes per payload byte, p50 %v, p99 %v, %.3f copies per echoed message; want at most %.2f, %v, %v, %.2f",
						loss, r.wire, r.p50, r.p99, copies, tc.wire, tc.p50, tc.p99, tc.copiesPerEcho)
				}
				t.Logf("loss %.0f%%: p50 %v p99 %v; %.3f wire bytes per payload byte; per echoed message: client resends %.3f copies %.3f, server resends %.3f copies %.3f\n%s", loss*100,
					r.p50.Round(time.Millisecond/10), r.p99.Round(time.Millisecond/10), r.wire,
					float64(r.resent[0])/float64(r.echoed), float64(r.copies[0])/float64(r.echoed),
					float64(r.resent[1])/float64(r.echoed), float64(r.copies[1])/float64(r.echoed), tally.breakdown(r.echoed))
			})
		})
	}
}

// TestSimMessageBytesSweep: the latency scenario at 5 % loss over several
// network seeds, for tuning.md's figures (skipped without the variable):
//
//	UDPGATE_SIM_SEEDS=8 go test ./conn -run TestSimMessageBytesSweep -v
func TestSimMessageBytesSweep(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("UDPGATE_SIM_SEEDS"))
	if n <= 0 {
		t.Skip("UDPGATE_SIM_SEEDS unset")
	}
	loss := 0.05
	if v, err := strconv.ParseFloat(os.Getenv("UDPGATE_SIM_LOSS"), 64); err == nil {
		loss = v
	}
	var mc message.Config
	if v, err := strconv.ParseFloat(os.Getenv("UDPGATE_RESEND_FACTORS"), 64); err == nil {
		mc.ResendFactor = v
	}
	var p50s, p99s []time.Duration
	var wires []float64
	for seed := range n {
		synctest.Test(t, func(t *testing.T) {
			r := simLatencySeed(t, loss, mc, nil, uint64(seed)+11)
			p50s, p99s, wires = append(p50s, r.p50), append(p99s, r.p99), append(wires, r.wire)
		})
	}
	slices.Sort(wires)
	t.Logf("loss %v, %d seeds: median p50 %v p99 %v (p99s %v), wire bytes per payload byte %.3f (%.3f–%.3f)", loss, n,
		percentile(p50s, 0.5).Round(time.Millisecond/10), percentile(p99s, 0.5).Round(time.Millisecond/10), p99s, wires[n/2], wires[0], wires[n-1])
}
