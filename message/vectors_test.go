package message

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

// messageVectors is testdata/vectors.json: whole Kind-3 datagrams and
// their entries (docs/protocol.md §14.7).
type messageVectors struct {
	Messages []struct {
		Name     string   `json:"name"`
		Hex      string   `json:"hex"`
		Channels []string `json:"channels"`
		Entries  []struct {
			Channel       int     `json:"channel"`
			ID            *uint16 `json:"id"`
			FragmentIndex uint16  `json:"fragment_index"`
			FragmentCount uint16  `json:"fragment_count"`
			DataHex       string  `json:"data_hex"`
		} `json:"entries"`
	} `json:"messages"`
}

var kindNames = map[string]Kind{"reliable_ordered": ReliableOrdered, "unreliable": Unreliable, "sequenced": Sequenced}

// TestVectors encodes each vector's entries into a datagram and compares
// it with hex, then decodes hex and compares the entries.
func TestVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v messageVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Messages) < 2 {
		t.Fatal("vectors missing")
	}
	m, err := wire.ParseMagic("")
	if err != nil {
		t.Fatal(err)
	}
	for i, vec := range v.Messages {
		t.Run(vec.Name, func(t *testing.T) {
			var kinds []Kind
			var cfg Config
			for _, name := range vec.Channels {
				k, ok := kindNames[name]
				if !ok {
					t.Fatalf("kind %q", name)
				}
				kinds = append(kinds, k)
				cfg.Channels = append(cfg.Channels, ChannelConfig{Kind: k})
			}
			var want []entry
			for _, ve := range vec.Entries {
				d, err := hex.DecodeString(ve.DataHex)
				if err != nil {
					t.Fatal(err)
				}
				en := entry{ch: ve.Channel, idx: ve.FragmentIndex, cnt: ve.FragmentCount, frag: ve.FragmentCount != 0, data: d}
				if (ve.ID != nil) != hasID(kinds[ve.Channel]) {
					t.Fatalf("entry %+v: id presence", ve)
				}
				if ve.ID != nil {
					en.id = *ve.ID
				}
				want = append(want, en)
			}
			pkt, _ := hex.DecodeString(vec.Hex)
			// Encode.
			payload := payloadOf(kinds, want...)
			h := protocol.ConnHeader{SessionID: 0, ClientID: 1, Tag: 0x56c5abbc, Seq: 8160 + uint16(i), Ack: 9263, Kind: protocol.KindMessages}
			buf := make([]byte, 1500)
			n := wire.EncodeConn(buf, m, &h, payload)
			if !bytes.Equal(buf[:n], pkt) {
				t.Fatalf("encoded %x\nwant    %x", buf[:n], pkt)
			}
			// Decode.
			var dh protocol.ConnHeader
			p, r := wire.DecodeConn(m, pkt, &dh)
			if r != protocol.DropNone || dh.Kind != protocol.KindMessages {
				t.Fatal(r, dh.Kind)
			}
			var got []entry
			for off := 0; off < len(p); {
				var en entry
				w, r := getEntry(p[off:], kinds, &en)
				if r != DropNone {
					t.Fatal(r)
				}
				off += w
				got = append(got, en)
			}
			if len(got) != len(want) {
				t.Fatalf("%d entries, want %d", len(got), len(want))
			}
			for j := range got {
				g, w := got[j], want[j]
				if g.ch != w.ch || g.id != w.id || g.frag != w.frag || g.idx != w.idx || g.cnt != w.cnt || !bytes.Equal(g.data, w.data) {
					t.Fatalf("entry %d: %+v, want %+v", j, g, w)
				}
			}
			// And an endpoint accepts it.
			l, err := NewLayer(cfg, 1180)
			if err != nil {
				t.Fatal(err)
			}
			if r := l.NewEndpoint().Check(p); r != DropNone {
				t.Fatal(r)
			}
		})
	}
}
