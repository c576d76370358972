package cclient_test

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/message"
)

// planned is a reliable unit the generator will send.
type planned struct {
	id           uint16
	index, count uint16 // count 0: unfragmented
	data         []byte
	acked        bool // in a packet the receiver accepted
}

// msgGen makes random Messages payloads for the stock layout: reliable
// units out of order and repeated, fragments (sometimes inconsistent),
// sequenced ids going back and forth, unreliable entries, and now and
// then a bad channel, reserved bits or a cut payload.
type msgGen struct {
	rng    *rand.Rand
	plans  [2][]*planned // channels 0 and 3
	nextID [2]uint16
	seqID  uint16
}

func (g *msgGen) data(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.rng.IntN(256))
	}
	return b
}

func (g *msgGen) plan(c int) {
	for len(g.plans[c]) < 12 {
		if g.rng.IntN(4) == 0 {
			count := uint16(2 + g.rng.IntN(3))
			for i := uint16(0); i < count; i++ {
				p := &planned{id: g.nextID[c], index: i, count: count, data: g.data(g.rng.IntN(60))}
				if g.rng.IntN(50) == 0 { // an inconsistent fragment
					p.index = (i + 1) % count
				}
				g.plans[c] = append(g.plans[c], p)
				g.nextID[c]++
			}
		} else {
			g.plans[c] = append(g.plans[c], &planned{id: g.nextID[c], data: g.data(g.rng.IntN(200))})
			g.nextID[c]++
		}
	}
}

func appendEntry(b []byte, head byte, id *uint16, idx, cnt uint16, data []byte) []byte {
	b = append(b, head)
	if id != nil {
		b = binary.LittleEndian.AppendUint16(b, *id)
	}
	if head&0x20 != 0 {
		b = binary.LittleEndian.AppendUint16(b, idx)
		b = binary.LittleEndian.AppendUint16(b, cnt)
	}
	if len(data) < 128 {
		b = append(b, byte(len(data)))
	} else {
		b = append(b, byte(len(data))|0x80, byte(len(data)>>7))
	}
	return append(b, data...)
}

// payload returns a payload and the reliable units it carries.
func (g *msgGen) payload() ([]byte, []*planned) {
	var b []byte
	var carried []*planned
	for n := 1 + g.rng.IntN(5); n > 0; n-- {
		switch r := g.rng.IntN(100); {
		case r < 2:
			b = appendEntry(b, byte(4+g.rng.IntN(28)), nil, 0, 0, g.data(3)) // a channel not configured
		case r < 3:
			b = appendEntry(b, 0x41, nil, 0, 0, g.data(3)) // reserved bits
		case r < 20:
			b = appendEntry(b, byte(msgcfg.Unreliable), nil, 0, 0, g.data(g.rng.IntN(40)))
		case r < 35:
			id := g.seqID + uint16(g.rng.IntN(9)) - 3
			if int16(id-g.seqID) > 0 {
				g.seqID = id
			}
			b = appendEntry(b, byte(msgcfg.Sequenced), &id, 0, 0, g.data(g.rng.IntN(40)))
		default:
			c := g.rng.IntN(2)
			g.plan(c)
			p := g.plans[c][g.rng.IntN(min(8, len(g.plans[c])))]
			ch := []int{msgcfg.Reliable, msgcfg.Bulk}[c]
			head := byte(ch)
			if p.count > 0 {
				head |= 0x20
			}
			b = appendEntry(b, head, &p.id, p.index, p.count, p.data)
			carried = append(carried, p)
		}
	}
	if g.rng.IntN(50) == 0 && len(b) > 1 {
		b = b[:1+g.rng.IntN(len(b)-1)] // cut short
	}
	return b, carried
}

// accepted drops the units a receiver took from the front of the plans.
func (g *msgGen) accepted(carried []*planned) {
	for _, p := range carried {
		p.acked = true
	}
	for c := range g.plans {
		for len(g.plans[c]) > 0 && g.plans[c][0].acked {
			g.plans[c] = g.plans[c][1:]
		}
	}
}

// TestMessagesMatchGo: the C receiver refuses the same Messages payloads as
// Go's message.Endpoint (Check) and delivers the same messages in the same
// order (Receive, Next), over 5,000 random packets with reliable units out
// of order and repeated, fragmented messages (a few inconsistent),
// sequenced and unreliable entries and malformed ones.
func TestMessagesMatchGo(t *testing.T) {
	t.Parallel()
	prog := program(t, "msgdiff", plain)
	layer, err := message.NewLayer(msgcfg.Config(0, 0), 1181)
	if err != nil {
		t.Fatal(err)
	}
	e := layer.NewEndpoint()
	g := &msgGen{rng: rand.New(rand.NewPCG(3, 4))}
	var in, want strings.Builder
	for i := 0; i < 5000; i++ {
		p, carried := g.payload()
		fmt.Fprintf(&in, "%x\n", p)
		if e.Check(p) != message.DropNone {
			want.WriteString("refused\n")
		} else {
			want.WriteString("accepted\n")
			e.Receive(p, 0)
			g.accepted(carried)
		}
		for {
			ch, msg, ok := e.Next()
			if !ok {
				break
			}
			fmt.Fprintf(&want, "msg %d %s\n", ch, hex.EncodeToString(msg))
		}
		want.WriteString("end\n")
	}
	cmd := exec.Command(prog)
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("msgdiff: %v", err)
	}
	got, exp := strings.Split(string(out), "\n"), strings.Split(want.String(), "\n")
	inputs := strings.Split(in.String(), "\n")
	pkt, delivered, refused := 0, 0, 0
	for i := 0; i < len(exp) && i < len(got); i++ {
		if got[i] != exp[i] {
			if testing.Verbose() {
				for j := 0; j <= pkt; j++ {
					t.Logf("in %d: %s", j, inputs[j])
				}
			}
			t.Fatalf("packet %d (payload %s): C says %q, Go %q", pkt, inputs[pkt], got[i], exp[i])
		}
		switch {
		case exp[i] == "end":
			pkt++
		case strings.HasPrefix(exp[i], "msg"):
			delivered++
		case exp[i] == "refused":
			refused++
		}
	}
	if len(got) != len(exp) {
		t.Fatalf("C wrote %d lines, Go %d", len(got), len(exp))
	}
	t.Logf("%d packets, %d refused, %d messages delivered alike", pkt, refused, delivered)
}
