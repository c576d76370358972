package message

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var codecKinds = []Kind{ReliableOrdered, Unreliable, Sequenced}

// TestCodecEntries encodes entries and decodes them back, byte for byte.
func TestCodecEntries(t *testing.T) {
	long := bytes.Repeat([]byte{0xab}, 200)
	for _, tc := range []struct {
		name string
		e    entry
		hex  string
	}{
		{"reliable", entry{ch: 0, id: 0x1234, data: []byte("hi")}, "00 3412 02 6869"},
		{"reliable_empty", entry{ch: 0, id: 1}, "00 0100 00"},
		{"fragment", entry{ch: 0, id: 7, frag: true, idx: 1, cnt: 3, data: []byte{9}}, "20 0700 0100 0300 01 09"},
		{"unreliable", entry{ch: 1, data: []byte("abc")}, "01 03 616263"},
		{"sequenced", entry{ch: 2, id: 0xffff, data: []byte{1}}, "02 ffff 01 01"},
		{"two_byte_len", entry{ch: 1, data: long}, "01 c801" + strings.Repeat("ab", 200)},
		{"channel31", entry{ch: 31, data: []byte{5}}, "1f 01 05"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kinds := codecKinds
			if tc.e.ch == 31 {
				kinds = make([]Kind, 32)
				kinds[31] = Unreliable
			}
			want := unhex(t, tc.hex)
			buf := make([]byte, 300)
			n := putEntry(buf, kinds[tc.e.ch], &tc.e)
			if !bytes.Equal(buf[:n], want) {
				t.Fatalf("encoded % x, want % x", buf[:n], want)
			}
			if putEntry(buf[:n-1], kinds[tc.e.ch], &tc.e) != 0 {
				t.Fatal("encoded into a short buffer")
			}
			var got entry
			m, r := getEntry(want, kinds, &got)
			if r != DropNone || m != len(want) || got.ch != tc.e.ch || got.id != tc.e.id ||
				got.frag != tc.e.frag || got.idx != tc.e.idx || got.cnt != tc.e.cnt || !bytes.Equal(got.data, tc.e.data) {
				t.Fatalf("decoded %+v (%d, %v), want %+v", got, m, r, tc.e)
			}
		})
	}
}

// releaseAll releases the endpoints of l and fails the test unless l then
// holds no receive budget: Release returns all of an endpoint's.
func releaseAll(t testing.TB, l *Layer, es ...*Endpoint) {
	t.Helper()
	for _, e := range es {
		e.Release()
	}
	if h := l.Held(); h != 0 {
		t.Fatalf("held %d after Release", h)
	}
}

// testLayer: channels reliable, unreliable, sequenced; 100-byte payloads
// (fragments of 91 bytes); messages up to 1000 bytes (11 fragments).
func testLayer(t testing.TB, mod func(*Config)) *Layer {
	t.Helper()
	cfg := Config{Channels: []ChannelConfig{{Kind: ReliableOrdered}, {Kind: Unreliable}, {Kind: Sequenced}}, MaxMessageSize: 1000}
	if mod != nil {
		mod(&cfg)
	}
	l, err := NewLayer(cfg, 100)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestCheckDropReasons: every malformed or hostile payload is refused
// whole, with its reason, and counted.
func TestCheckDropReasons(t *testing.T) {
	for _, tc := range []struct {
		name string
		hex  string
		want DropReason
	}{
		{"ok_reliable", "00 0000 02 6869", DropNone},
		{"ok_three_kinds", "00 0000 01 61 01 01 62 02 0500 01 63", DropNone},
		{"ok_duplicate_behind", "00 f0ff 01 61", DropNone},
		{"ok_window_edge", "00 ff00 01 61", DropNone},
		{"ok_fragment", "20 0000 0000 0b00 01 61", DropNone},
		{"empty", "", DropMalformed},
		{"truncated_id", "00 00", DropMalformed},
		{"no_len", "00 0000", DropMalformed},
		{"len_past_end", "00 0000 05 6869", DropMalformed},
		{"len_unterminated", "01 80", DropMalformed},
		{"len_three_bytes", "01 8080 01", DropMalformed},
		{"len_not_minimal", "01 8000", DropMalformed},
		{"trailing_garbage", "01 01 61 01", DropMalformed},
		{"truncated_fragment", "20 0000 0000", DropMalformed},
		{"reserved_bit6", "40 01 61", DropReservedBits},
		{"reserved_bit7", "81 01 61", DropReservedBits},
		{"bad_channel", "03 01 61", DropBadChannel},
		{"bad_channel_31", "1f 01 61", DropBadChannel},
		{"fragment_unreliable", "21 0000 0200 01 61", DropBadFragment},
		{"fragment_sequenced", "22 0000 0000 0200 01 61", DropBadFragment},
		{"fragment_count_1", "20 0000 0000 0100 01 61", DropBadFragment},
		{"fragment_count_0", "20 0000 0000 0000 01 61", DropBadFragment},
		{"fragment_index_past_count", "20 0000 0300 0300 01 61", DropBadFragment},
		{"fragment_count_over_limit", "20 0000 0000 0c00 01 61", DropTooLarge},
		{"fragment_count_forged_max", "20 0000 0000 ffff 01 61", DropTooLarge},
		{"fragment_too_long", "20 0000 0000 0200 5c" + strings.Repeat("00", 92), DropTooLarge},
		{"reliable_too_long", "00 0000 60" + strings.Repeat("00", 96), DropTooLarge},
		{"unreliable_too_long", "01 62" + strings.Repeat("00", 98), DropTooLarge},
		{"sequenced_too_long", "02 0000 60" + strings.Repeat("00", 96), DropTooLarge},
		{"ok_unreliable_max", "01 61" + strings.Repeat("00", 97), DropNone},
		{"out_of_window", "00 0004 01 61", DropOutOfWindow}, // unit 1024: the window is [0, 1024)
		{"out_of_window_far", "00 ff7f 01 61", DropOutOfWindow},
		{"bad_after_good", "00 0000 01 61 c0", DropReservedBits},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := testLayer(t, nil)
			e := l.NewEndpoint()
			p := unhex(t, tc.hex)
			if r := e.Check(p); r != tc.want {
				t.Fatalf("Check = %v, want %v", r, tc.want)
			}
			if tc.want != DropNone && l.Drops()[tc.want] != 1 {
				t.Fatalf("drops %v", l.Drops())
			}
			e.Receive(p, 1) // must not panic either way
			for {
				if _, _, ok := e.Next(); !ok {
					break
				}
			}
			releaseAll(t, l, e)
		})
	}
}

func TestDropReasonLabels(t *testing.T) {
	seen := map[string]bool{}
	for r := DropReason(0); r < NumDropReasons; r++ {
		s := r.Label()
		if s == "" || seen[s] || s != r.String() || strings.ToLower(s) != s || strings.Contains(s, " ") {
			t.Fatalf("label %d %q", r, s)
		}
		seen[s] = true
	}
	if DropNone.Label() != "none" || DropOverBudget.Label() != "over_budget" || DropReason(NumDropReasons).Label() != "unknown_13" {
		t.Fatal(DropNone.Label(), DropOverBudget.Label(), DropReason(NumDropReasons).Label())
	}
}
