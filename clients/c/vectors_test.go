package cclient_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// vectorFiles finds every testdata/vectors*.json of the repository.
func vectorFiles(t *testing.T) []string {
	var files []string
	err := filepath.WalkDir("../..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && filepath.Base(filepath.Dir(p)) == "testdata" &&
			strings.HasPrefix(d.Name(), "vectors") && strings.HasSuffix(d.Name(), ".json") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found %d vector files, want at least fastpath's and message's", len(files))
	}
	return files
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// vectorLines converts one vector file into the line format test/vectors.c
// reads, and counts the packets.
func vectorLines(t *testing.T, path string) (string, int) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	n := 0
	known := 0
	if p, ok := doc["packets"]; ok {
		known++
		var pkts []struct {
			Name   string         `json:"name"`
			Hex    string         `json:"hex"`
			Fields map[string]any `json:"fields"`
		}
		if err := json.Unmarshal(p, &pkts); err != nil {
			t.Fatal(err)
		}
		for _, pk := range pkts {
			f := pk.Fields
			num := func(k string) uint64 {
				v, _ := f[k].(float64)
				return uint64(v)
			}
			str := func(k string) string { s, _ := f[k].(string); return s }
			if _, ok := f["kind"]; ok {
				fmt.Fprintf(&b, "conn %s %s %s %d %d %d %d %d %s %d %s\n", pk.Name, dash(str("magic")), pk.Hex,
					num("session_id"), num("client_id"), num("tag"), num("seq"), num("ack"),
					strings.TrimPrefix(str("ack_bits"), "0x"), num("kind"), dash(str("payload")))
			} else {
				restart := 0
				if r, _ := f["restart"].(bool); r {
					restart = 1
				}
				ts, _ := f["timestamp"].(float64)
				fmt.Fprintf(&b, "hs %s %s %s %d %d %d %d %d %d %d %d %d %d %016x %s %s %d %s\n", pk.Name,
					dash(str("magic")), pk.Hex, num("session_id"), num("client_id"), num("type"), restart,
					num("min_version"), num("cur_version"), num("sent_count"), num("network_version"),
					num("network_features"), num("secret_id"), math.Float64bits(ts), dash(str("cookie")),
					dash(str("orig_cookie")), num("reason"), dash(str("random")))
			}
			n++
		}
	}
	if p, ok := doc["terminator"]; ok {
		known++
		var cases []struct {
			Hex         string `json:"hex"`
			Valid       bool   `json:"valid"`
			PayloadBits int    `json:"payload_bits"`
		}
		if err := json.Unmarshal(p, &cases); err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			v := 0
			if c.Valid {
				v = 1
			}
			fmt.Fprintf(&b, "term %s %d %d\n", dash(c.Hex), v, c.PayloadBits)
			n++
		}
	}
	if p, ok := doc["cookies"]; ok {
		known++
		var cs []struct {
			Cookie     string `json:"cookie"`
			ServerSeq  int    `json:"server_seq"`
			ClientSeq  int    `json:"client_seq"`
			SessionTag uint32 `json:"session_tag"`
		}
		if err := json.Unmarshal(p, &cs); err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			fmt.Fprintf(&b, "cookie %s %d %d %d\n", c.Cookie, c.ServerSeq, c.ClientSeq, c.SessionTag)
			n++
		}
	}
	if _, ok := doc["secrets"]; ok {
		known++ // the server's secrets: nothing a client computes
	}
	if p, ok := doc["messages"]; ok {
		known++
		var ms []struct {
			Name     string   `json:"name"`
			Hex      string   `json:"hex"`
			Channels []string `json:"channels"`
			Entries  []struct {
				Channel int    `json:"channel"`
				ID      int    `json:"id"`
				Index   int    `json:"fragment_index"`
				Count   int    `json:"fragment_count"`
				Data    string `json:"data_hex"`
			} `json:"entries"`
		}
		if err := json.Unmarshal(p, &ms); err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			kinds := ""
			for _, c := range m.Channels {
				kinds += map[string]string{"reliable_ordered": "R", "unreliable": "U", "sequenced": "S"}[c]
			}
			fmt.Fprintf(&b, "msg %s %s %s %d\n", m.Name, m.Hex, kinds, len(m.Entries))
			for _, e := range m.Entries {
				fmt.Fprintf(&b, "entry %d %d %d %d %s\n", e.Channel, e.ID, e.Index, e.Count, dash(e.Data))
			}
			n++
		}
	}
	if known != len(doc) {
		t.Fatalf("%s: %d top-level keys, %d known: teach vectorLines the new ones", path, len(doc), known)
	}
	return b.String(), n
}

// TestVectors: every packet of every vector file decodes in C into its
// fields and re-encodes to its bytes (issue 30, target 2).
func TestVectors(t *testing.T) {
	for _, v := range []variant{plain, sanitize} {
		t.Run(string(v), func(t *testing.T) {
			prog := program(t, "vectors", v)
			for _, f := range vectorFiles(t) {
				lines, n := vectorLines(t, f)
				if n == 0 {
					t.Fatalf("%s: no packets", f)
				}
				cmd := exec.Command(prog)
				cmd.Stdin = strings.NewReader(lines)
				out, err := cmd.CombinedOutput()
				if err != nil || !strings.HasPrefix(string(out), fmt.Sprintf("ok %d\n", n)) {
					t.Fatalf("%s: %v\n%s", f, err, out)
				}
			}
		})
	}
}
