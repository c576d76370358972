package cclient_test

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seqwin"
)

// TestSeqWindowMatchesGo: the C client's receive window (§7.3: stale,
// duplicate, suspect Acks, jumps held and confirmed) takes the same
// decision as Go's internal/seqwin on 20,000 random packets around the
// window, with jumps, replays and Acks ahead of what was sent.
func TestSeqWindowMatchesGo(t *testing.T) {
	t.Parallel()
	prog := program(t, "seqdiff", plain)
	const serverSeq, clientSeq = 9264, 8159 // test/seqdiff.c's cookie
	var s seqwin.SeqState
	s.Init(clientSeq, serverSeq, 0)
	s.Send(0) // the C client's first KeepAlive
	rng := rand.New(rand.NewPCG(1, 2))
	var in strings.Builder
	var want []string
	cur := serverSeq
	for i := 0; i < 20000; i++ {
		var seq int
		switch r := rng.IntN(100); {
		case r < 70:
			seq = cur + rng.IntN(9) - 3
		case r < 85:
			seq = cur - rng.IntN(80)
		case r < 97:
			seq = cur + 60 + rng.IntN(80)
		default:
			seq = rng.IntN(16384)
		}
		seq &= 16383
		acks := []int{clientSeq - 1, clientSeq, clientSeq, clientSeq + 1, clientSeq - 2 - rng.IntN(100)}
		ack := acks[rng.IntN(len(acks))] & 16383
		bits := rng.Uint64()
		fmt.Fprintf(&in, "%d %d %x\n", seq, ack, bits)
		var rep seqwin.AckReport
		switch s.Receive(uint16(seq), uint16(ack), bits, 0, &rep) {
		case protocol.DropNone:
			want = append(want, "accept")
			if d := (seq - cur) & 16383; d < 8192 {
				cur = seq
			}
		case protocol.DropStaleSequence:
			want = append(want, "stale")
		case protocol.DropSuspectSequence:
			want = append(want, "suspect")
		default:
			want = append(want, "other")
		}
	}
	cmd := exec.Command(prog)
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("seqdiff: %v\n%s", err, out)
	}
	got := strings.Fields(string(out))
	if len(got) != len(want) {
		t.Fatalf("C gave %d verdicts, Go %d", len(got), len(want))
	}
	lines := strings.Split(in.String(), "\n")
	counts := map[string]int{}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("packet %d (%s): C says %s, Go's seqwin %s", i, lines[i], got[i], want[i])
		}
		counts[want[i]]++
	}
	t.Logf("verdicts: %v", counts)
}
