package cclient_test

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
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
				// The message layout (§3.7): channels, kinds as a
				// hex word, largest message, largest datagram.
				var lc, lm, ld, lk uint64
				if l, ok := f["layout"].(map[string]any); ok {
					kinds, _ := l["kinds"].([]any)
					lc = uint64(len(kinds))
					for i, k := range kinds {
						kv, _ := k.(float64)
						lk |= uint64(kv) << (2 * i)
					}
					mm, _ := l["max_message"].(float64)
					md, _ := l["max_datagram"].(float64)
					lm, ld = uint64(mm), uint64(md)
				}
				fmt.Fprintf(&b, "hs %s %s %s %d %d %d %d %d %d %d %d %d %d %016x %s %s %d %s %d %016x %d %d\n", pk.Name,
					dash(str("magic")), pk.Hex, num("session_id"), num("client_id"), num("type"), restart,
					num("min_version"), num("cur_version"), num("sent_count"), num("network_version"),
					num("network_features"), num("secret_id"), math.Float64bits(ts), dash(str("cookie")),
					dash(str("orig_cookie")), num("reason"), dash(str("random")), lc, lk, lm, ld)
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
	t.Parallel()
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

// sealedLines converts internal/seal/testdata/sealed_example.txt (every
// packet of a sealed connection, docs/protocol.md §11.2), netcode_aead.txt
// (the salted AEAD) and token/testdata/netcode_ref.txt (a token written by
// netcode.io's reference implementation) into test/vectors.c's lines.
func sealedLines(t *testing.T) (string, int) {
	var b strings.Builder
	n := 0
	keyC2S := hexRange(0x40, 32)
	keyS2C := hexRange(0x80, 32)
	raw, err := os.ReadFile("../../internal/seal/testdata/sealed_example.txt")
	if err != nil {
		t.Fatal(err)
	}
	salt := ""
	if m := regexp.MustCompile(`Authorised cookie ([0-9a-f]{40})`).FindStringSubmatch(string(raw)); m != nil {
		salt = m[1][:32]
	} else {
		t.Fatal("sealed_example.txt: no authorised cookie")
	}
	type field struct{ name, hex string }
	flush := func(title string, fields []field) {
		if title == "" {
			return
		}
		var pkt, plain string
		ad := -1
		var counter uint64
		for _, f := range fields {
			switch {
			case f.name == "plaintext":
				plain = f.hex
				continue
			case f.name == "ciphertext":
				ad = len(pkt) / 2
			case strings.HasPrefix(f.name, "counter"):
				c, _ := hex.DecodeString(f.hex)
				counter = binary.LittleEndian.Uint64(c)
			}
			pkt += f.hex
		}
		key := keyS2C
		if strings.Contains(title, "client → server") {
			key = keyC2S
		}
		name := strings.ReplaceAll(strings.Fields(title)[0], ",", "")
		fmt.Fprintf(&b, "sealed %s %s %d %s %s %d %s\n", name, pkt, ad, key, salt, counter, plain)
		n++
	}
	var title string
	var fields []field
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			flush(title, fields)
			title, fields = line[3:], nil
		case strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" || strings.HasPrefix(line, "```") ||
			strings.HasPrefix(line, "<!--") || title == "":
		case line[0] == ' ' && strings.HasPrefix(strings.TrimSpace(line), "plaintext"):
			fields = append(fields, field{"plaintext", strings.ReplaceAll(strings.TrimPrefix(strings.TrimSpace(line), "plaintext"), " ", "")})
		case line[0] == ' ':
			fields[len(fields)-1].hex += strings.ReplaceAll(strings.TrimSpace(line), " ", "")
		default:
			parts := regexp.MustCompile(`\s{2,}`).Split(line, 2)
			fields = append(fields, field{parts[0], strings.ReplaceAll(parts[1], " ", "")})
		}
	}
	flush(title, fields)

	// The salted AEAD of netcode_aead.txt, as a sealed packet: associated
	// data a0..a8 ‖ N (u64 LE), plaintext 00..3f, terminator added.
	raw, err = os.ReadFile("../../internal/seal/testdata/netcode_aead.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(k, "xaead_seq_") {
			continue
		}
		seq, err := strconv.ParseUint(strings.TrimPrefix(k, "xaead_seq_"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		var c [8]byte
		binary.LittleEndian.PutUint64(c[:], seq)
		ad := hexRange(0xa0, 9) + hex.EncodeToString(c[:])
		fmt.Fprintf(&b, "sealed %s %s01 %d %s %s %d %s\n", k, ad+v, 17, hexRange(0x80, 32), hexRange(0xc0, 16), seq, hexRange(0, 64))
		n++
	}

	// netcode.io's own token: the request body is the request packet
	// without its leading 00.
	raw, err = os.ReadFile("../../token/testdata/netcode_ref.txt")
	if err != nil {
		t.Fatal(err)
	}
	kv := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(k, "#") {
			kv[k] = v
		}
	}
	if kv["token"] == "" || !strings.HasPrefix(kv["request_packet"], "00") {
		t.Fatal("netcode_ref.txt: no token or request_packet")
	}
	fmt.Fprintf(&b, "token %s %s %s %s 10 127.0.0.1:40000,[2001:db8:1:2:3:4:5:6]:40001,[::1]:40002\n",
		kv["token"], kv["request_packet"][2:], keyC2S, keyS2C)
	n++
	return b.String(), n
}

// hexRange is the hex of n bytes counting up from first.
func hexRange(first, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(first + i)
	}
	return hex.EncodeToString(b)
}

// TestSealedVectors: every sealed packet of the worked example (proof,
// KeepAlive, Data both ways, Disconnect, refusal) opens in C to its
// plaintext and seals back to its bytes; the salted AEAD matches netcode's;
// netcode.io's own token parses to its request body, keys and addresses.
func TestSealedVectors(t *testing.T) {
	t.Parallel()
	prog := program(t, "vectors", plain)
	lines, n := sealedLines(t)
	if n < 9 {
		t.Fatalf("%d sealed vectors, want the example's 6, 3 AEAD and a token", n)
	}
	cmd := exec.Command(prog)
	cmd.Stdin = strings.NewReader(lines)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), fmt.Sprintf("ok %d\n", n)) {
		t.Fatalf("%v\n%s\ninput:\n%s", err, out, lines)
	}
	t.Logf("%d sealed vectors checked", n)
}
