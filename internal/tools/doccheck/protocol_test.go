package doccheck

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
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
	// Wherever else a document states it, it is the same.
	want := uint64(math.MaxUint64) - wire.RefusalCounter(0) + 1
	for _, name := range []string{"README.md", "docs/threat-model.md", "docs/operations.md", "docs/architecture.md"} {
		for _, m := range counterRE.FindAllStringSubmatch(readDoc(t, name), -1) {
			if k, _ := strconv.ParseUint(m[1], 10, 64); k != want {
				t.Errorf("%s says a sealed refusal's counter is 2^64 − %d + reason; it is 2^64 − %d + reason", name, k, want)
			}
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

// TestAckTimestamps: §13's Ack Timestamps are the server's, unsealed and
// sealed (the sealed Ack tells a client without a token that it needs
// one, §11.3).
func TestAckTimestamps(t *testing.T) {
	doc := readDoc(t, "docs/protocol.md")
	got := row(t, section(t, doc, "## 13."), "Ack Timestamp")[1]
	want := fmt.Sprintf("−%g; −%g from a sealed server", -handshake.AckTimestamp, -handshake.SealedAckTimestamp)
	if got != want {
		t.Errorf("§13 Ack Timestamp: %q, the server's: %q", got, want)
	}
}

// TestMessagePayload: §14.1's table of P and the fragment size F, unsealed
// and sealed, is what a connection uses: P is the maximum datagram less
// the codec's overhead (as conn.Config computes it), and a fragmented
// message's fragment fills a packet of P bytes exactly with F bytes of
// data (issue 31: a client that used the unsealed P on a sealed
// connection had every fragment dropped).
func TestMessagePayload(t *testing.T) {
	doc := readDoc(t, "docs/protocol.md")
	s141 := section(t, doc, "### 14.1")
	if !strings.Contains(s141, "default maximum datagram of 1200") || protocol.DefaultMaxDatagram != 1200 {
		t.Fatal("§14.1's table is no longer for the default maximum datagram of 1200 bytes")
	}
	for _, mode := range []struct {
		name     string
		overhead func(wire.Magic) int
		expr     string
	}{
		{"unsealed", func(m wire.Magic) int { return wire.ConnLen(m, protocol.KindMessages, 0) }, "o + 18 (§7.2)"},
		{"sealed", func(m wire.Magic) int { return wire.SealedConnLen(m, 0) }, "o + 42 (§11.2)"},
	} {
		r := row(t, s141, mode.name)
		if r[1] != mode.expr {
			t.Errorf("§14.1 %s: overhead %q, want %q", mode.name, r[1], mode.expr)
		}
		for _, bits := range []string{"", "1011", "1", "101100111000111100001111100000"} {
			m, err := wire.ParseMagic(bits)
			if err != nil {
				t.Fatal(err)
			}
			k, _ := strconv.Atoi(strings.Fields(mode.expr)[2])
			if got := mode.overhead(m); got != wire.ConnHeaderOffset(m)+k {
				t.Errorf("%s overhead with a %d-bit magic header: %d, the document's %s = %d", mode.name, len(bits), got, mode.expr, wire.ConnHeaderOffset(m)+k)
			}
		}
		p := protocol.DefaultMaxDatagram - mode.overhead(wire.Magic{})
		if r[2] != strconv.Itoa(p) {
			t.Errorf("§14.1 %s: P %s; at 1200 bytes without a magic header it is %d", mode.name, r[2], p)
		}
		if f := fragmentData(t, p); r[3] != strconv.Itoa(f) {
			t.Errorf("§14.1 %s: fragment %s; the message layer's fragments of a %d-byte payload carry %d", mode.name, r[3], p, f)
		}
	}
}

// fragmentData returns the data bytes of a large message's first fragment
// when packets carry p bytes of entries, checking that its entry fills
// the packet.
func fragmentData(t *testing.T, p int) int {
	t.Helper()
	l, err := message.NewLayer(message.Config{Channels: []message.ChannelConfig{{Kind: message.ReliableOrdered}}}, p)
	if err != nil {
		t.Fatal(err)
	}
	e := l.NewEndpoint()
	const now = 1_700_000_000_000_000_000
	if err := e.Send(0, make([]byte, 3*p), now); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, p)
	n := e.WritePayload(buf, 0, now)
	// §14.2: head (F set), id, index, count, then the length (uvarint).
	if n != p || buf[0] != 0x20 {
		t.Fatalf("the first fragment's packet: %d of %d bytes, head %#x", n, p, buf[0])
	}
	d, w := 0, 0
	for i, b := range buf[7:] {
		d |= int(b&0x7f) << (7 * i)
		if b < 0x80 {
			w = i + 1
			break
		}
	}
	if 7+w+d != p {
		t.Fatalf("a fragment of %d bytes in an entry of %d, packet %d", d, 7+w+d, p)
	}
	return d
}

// TestStockLayout: §14.1's table of the stock channel layout is the one
// the server and tools configure (internal/msgcfg).
func TestStockLayout(t *testing.T) {
	doc := readDoc(t, "docs/protocol.md")
	var got []string
	for _, r := range rows(section(t, doc, "### 14.1")) {
		if len(r) == 3 && r[0] != "channel" {
			got = append(got, strings.Join(r, " "))
		}
	}
	kinds := map[message.Kind]string{message.ReliableOrdered: "reliable-ordered", message.Unreliable: "unreliable", message.Sequenced: "sequenced"}
	var want []string
	for i, c := range msgcfg.Channels() {
		bulk := "no"
		if c.Bulk {
			bulk = "yes"
		}
		want = append(want, fmt.Sprintf("%d %s %s", i, kinds[c.Kind], bulk))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("§14.1's stock layout:\n%s\ninternal/msgcfg's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if c := msgcfg.Config(0, 0); c.MaxMessageSize != 0 || message.DefaultMaxMessageSize != 256<<10 {
		t.Error("§14.1 says the stock layout's MaxMessageSize is 256 KiB by default")
	}
}

// TestContents: the contents line of protocol.md names every section.
func TestContents(t *testing.T) {
	doc := readDoc(t, "docs/protocol.md")
	_, after, _ := strings.Cut(doc, "**Contents.**")
	contents, _, _ := strings.Cut(after, "\n\n")
	for _, m := range regexp.MustCompile(`(?m)^## (\d+)\. (\S+)`).FindAllStringSubmatch(doc, -1) {
		if !strings.Contains(strings.Join(strings.Fields(contents), " "), "§"+m[1]+" ") {
			t.Errorf("the contents line does not list §%s %s", m[1], m[2])
		}
	}
}

// TestDropReasons: every drop reason the server or client counts has its
// rule in protocol.md (§10, or sealed mode's §11.5) and is listed in
// operations.md's drop reasons; every message drop reason in §14.5 and in
// operations.md's row of udpgate_message_drops_total.
func TestDropReasons(t *testing.T) {
	doc := readDoc(t, "docs/protocol.md")
	ops := readDoc(t, "docs/operations.md")
	inRules := map[string]bool{}
	for _, sec := range []string{"## 10.", "### 11.5"} {
		for _, r := range rows(section(t, doc, sec)) {
			for _, l := range strings.Split(r[0], ", ") {
				inRules[strings.Trim(l, "`")] = true
			}
		}
	}
	_, opsList, ok := strings.Cut(ops, "Drop reasons (")
	if !ok {
		t.Fatal("operations.md has no \"Drop reasons (\" paragraph")
	}
	opsList, _, _ = strings.Cut(opsList, "\n\n")
	listed := labels(opsList)
	for r := protocol.DropReason(1); r < protocol.NumDropReasons; r++ {
		if !inRules[r.String()] {
			t.Errorf("drop reason %s has no row in protocol.md §10 or §11.5", r)
		}
		if !listed[r.String()] {
			t.Errorf("drop reason %s is not in operations.md's list of drop reasons", r)
		}
	}
	s145 := labels(section(t, doc, "### 14.5"))
	opsRow := ""
	for _, r := range rows(ops) {
		if strings.HasPrefix(r[0], "udpgate_message_drops_total") {
			opsRow = strings.Join(r, " ")
		}
	}
	opsMsg := labels(opsRow)
	for r := message.DropReason(1); r < message.NumDropReasons; r++ {
		if !s145[r.Label()] {
			t.Errorf("message drop reason %s is not in protocol.md §14.5", r)
		}
		if !opsMsg[r.Label()] {
			t.Errorf("message drop reason %s is not in operations.md's row of udpgate_message_drops_total", r)
		}
	}
	if strings.Contains(section(t, doc, "### 14.5"), "Layer.Drops") {
		t.Error("§14.5 names its counters by a Go API; a client author reads the metric")
	}
}
