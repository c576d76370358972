package doccheck

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

// counterRE reads "2^64 − K + reason" and the example "reason R: `0x…`".
var (
	counterRE = regexp.MustCompile(`2\^64 − (\d+) \+ reason`)
	exampleRE = regexp.MustCompile("reason (\\d+): `0x([0-9a-f]{16})`")
)

// refusalFormula returns K of "2^64 − K + reason" in text, and the
// example it gives, if any.
func refusalFormula(t *testing.T, where, text string) (k uint64, reason uint8, example uint64) {
	t.Helper()
	m := counterRE.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("%s: no \"2^64 − K + reason\"", where)
	}
	k, _ = strconv.ParseUint(m[1], 10, 64)
	if e := exampleRE.FindStringSubmatch(text); e != nil {
		r, _ := strconv.ParseUint(e[1], 10, 8)
		example, _ = strconv.ParseUint(e[2], 16, 64)
		reason = uint8(r)
	}
	return k, reason, example
}

// TestRefusalCounter: the sealed refusal's reserved counter that §11.3's
// text and §13's table state is the one the server seals refusals at
// (issue 31: a client that checked the document's number rejected every
// sealed refusal).
func TestRefusalCounter(t *testing.T) {
	doc := readDoc(t, "docs/protocol.md")
	for _, src := range []struct{ where, text string }{
		{"§11.3", section(t, doc, "### 11.3")},
		{"§13", strings.Join(row(t, section(t, doc, "## 13."), "sealed refusal counter"), " | ")},
	} {
		k, reason, example := refusalFormula(t, src.where, src.text)
		for r := range 256 {
			want := uint64(math.MaxUint64) - k + 1 + uint64(r) // 2^64 − k + r
			if got := wire.RefusalCounter(uint8(r)); got != want {
				t.Fatalf("%s says the refusal with reason %d has counter 2^64 − %d + %d = %#x; the server seals it at %#x",
					src.where, r, k, r, want, got)
			}
		}
		if example == 0 {
			t.Errorf("%s gives no example (reason R: `0x…`)", src.where)
		} else if got := wire.RefusalCounter(reason); got != example {
			t.Errorf("%s's example: reason %d at %#x; the server uses %#x", src.where, reason, example, got)
		}
	}
}

// TestSealedSizes: §13's proof packet and sealed overhead, and §11.2's
// largest sealed payload, are the codec's.
func TestSealedSizes(t *testing.T) {
	doc := readDoc(t, "docs/protocol.md")
	consts := section(t, doc, "## 13.")
	var m wire.Magic
	o := wire.ConnHeaderOffset(m)
	if got, want := row(t, consts, "proof packet")[1], fmt.Sprintf("o + %d bytes, version info at o + 33", wire.ProofLen(m)-o); got != want {
		t.Errorf("§13 proof packet: %q, the codec's: %q", got, want)
	}
	if got, want := row(t, consts, "sealed packet overhead")[1], fmt.Sprintf("%d bytes (counter 8, MAC 16)", wire.SealedConnLen(m, 0)-wire.ConnLen(m, protocol.KindData, 0)); got != want {
		t.Errorf("§13 sealed packet overhead: %q, the codec's: %q", got, want)
	}
	want := fmt.Sprintf("The largest payload at the\n  default 1200-byte maximum is %d bytes.", protocol.DefaultMaxDatagram-wire.SealedConnLen(m, 0))
	if !strings.Contains(section(t, doc, "### 11.2"), want) {
		t.Errorf("§11.2 does not say %q", want)
	}
}

