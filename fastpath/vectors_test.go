package fastpath

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"sort"
	"strconv"
	"testing"
)

// The byte-exact examples of docs/protocol.md live in testdata/vectors.json
// (docs/protocol.md §9); the repository's copy is the contract
// (docs/decisions.md).
const codecVectors = "testdata/vectors.json"

type codecVectorFile struct {
	Packets []struct {
		Name   string                     `json:"name"`
		Fields map[string]json.RawMessage `json:"fields"`
		Hex    string                     `json:"hex"`
	} `json:"packets"`
	Terminator []struct {
		Hex         string `json:"hex"`
		PayloadBits *int   `json:"payload_bits"`
		Valid       bool   `json:"valid"`
	} `json:"terminator"`
}

func codecLoadVectors(t *testing.T) *codecVectorFile {
	t.Helper()
	data, err := os.ReadFile(codecVectors)
	if err != nil {
		t.Fatal(err)
	}
	var v codecVectorFile
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", codecVectors, err)
	}
	if len(v.Packets) == 0 || len(v.Terminator) == 0 {
		t.Fatalf("%s: no packet or terminator vectors", codecVectors)
	}
	return &v
}

func codecHex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		tb.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// codecFields reads a vector's fields and fails the test on a field it never
// read, so a field added to vectors.json cannot be silently ignored.
type codecFields struct {
	t    *testing.T
	name string
	m    map[string]json.RawMessage
	used map[string]bool
}

func (f *codecFields) has(k string) bool { _, ok := f.m[k]; return ok }

func (f *codecFields) get(k string, v any) {
	f.t.Helper()
	raw, ok := f.m[k]
	if !ok {
		f.t.Fatalf("%s: field %q missing", f.name, k)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		f.t.Fatalf("%s: field %q: %v", f.name, k, err)
	}
	f.used[k] = true
}

func (f *codecFields) uint(k string, bits int) uint64 {
	f.t.Helper()
	var v uint64
	f.get(k, &v)
	if bits < 64 && v >= 1<<bits {
		f.t.Fatalf("%s: field %q = %d does not fit %d bits", f.name, k, v, bits)
	}
	return v
}

func (f *codecFields) str(k string) string {
	f.t.Helper()
	var s string
	f.get(k, &s)
	return s
}

func (f *codecFields) hex(k string) []byte {
	f.t.Helper()
	return codecHex(f.t, f.str(k))
}

func (f *codecFields) done() {
	f.t.Helper()
	var unread []string
	for k := range f.m {
		if !f.used[k] {
			unread = append(unread, k)
		}
	}
	sort.Strings(unread)
	if len(unread) > 0 {
		f.t.Errorf("%s: fields not checked by the test: %v", f.name, unread)
	}
}

func TestVectorPackets(t *testing.T) {
	v := codecLoadVectors(t)
	types := map[PacketType]bool{}
	kinds := map[Kind]bool{}
	for _, p := range v.Packets {
		f := &codecFields{t: t, name: p.Name, m: p.Fields, used: map[string]bool{}}
		wire := codecHex(t, p.Hex)
		m, err := ParseMagic(f.str("magic"))
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		switch {
		case f.has("type"):
			h := codecVectorHandshake(f)
			types[h.Type] = true
			codecCheckHandshakeVector(t, p.Name, m, &h, wire)
		case f.has("kind"):
			h, payload := codecVectorConn(f)
			kinds[h.Kind] = true
			codecCheckConnVector(t, p.Name, m, &h, payload, wire)
		default:
			t.Fatalf("%s: neither a handshake (type) nor a connection packet (kind)", p.Name)
		}
		f.done()
	}
	for typ := range numPacketTypes {
		if !types[typ] {
			t.Errorf("no vector for handshake type %v", typ)
		}
	}
	for _, k := range []Kind{KindData, KindKeepAlive, KindDisconnect} {
		if !kinds[k] {
			t.Errorf("no vector for connection kind %d", k)
		}
	}
}

func codecVectorHandshake(f *codecFields) Handshake {
	f.t.Helper()
	h := Handshake{
		SessionID:       uint8(f.uint("session_id", 2)),
		ClientID:        uint8(f.uint("client_id", 3)),
		MinVersion:      uint8(f.uint("min_version", 8)),
		CurVersion:      uint8(f.uint("cur_version", 8)),
		Type:            PacketType(f.uint("type", 8)),
		SentCount:       uint8(f.uint("sent_count", 8)),
		NetworkVersion:  uint32(f.uint("network_version", 32)),
		NetworkFeatures: uint16(f.uint("network_features", 16)),
	}
	f.get("restart", &h.Restart)
	random := f.hex("random")
	if len(random) > MaxRandomBytes {
		f.t.Fatalf("%s: %d random bytes", f.name, len(random))
	}
	h.RandomLen = uint8(copy(h.Random[:], random))
	if f.has("secret_id") {
		h.SecretID = uint8(f.uint("secret_id", 1))
	}
	if f.has("timestamp") {
		f.get("timestamp", &h.Timestamp)
	}
	if f.has("cookie") {
		if copy(h.Cookie[:], f.hex("cookie")) != len(h.Cookie) {
			f.t.Fatalf("%s: short cookie", f.name)
		}
	}
	if f.has("orig_cookie") {
		if copy(h.OrigCookie[:], f.hex("orig_cookie")) != len(h.OrigCookie) {
			f.t.Fatalf("%s: short orig_cookie", f.name)
		}
	}
	if f.has("reason") {
		h.Reason = uint8(f.uint("reason", 8))
	}
	return h
}

func codecCheckHandshakeVector(t *testing.T, name string, m Magic, h *Handshake, wire []byte) {
	t.Helper()
	buf := make([]byte, 128)
	n := EncodeHandshake(buf, m, h)
	if !bytes.Equal(buf[:n], wire) {
		t.Errorf("%s: encode\n got %x\nwant %x", name, buf[:n], wire)
	}
	if want := HandshakeLen(m, h.Type, int(h.RandomLen)); len(wire) != want {
		t.Errorf("%s: %d bytes, HandshakeLen says %d", name, len(wire), want)
	}
	got := codecGarbage()
	if r := DecodeHandshake(m, wire, &got); r != DropNone {
		t.Errorf("%s: decode: %v", name, r)
	} else if !codecHandshakeEqual(&got, h) {
		t.Errorf("%s: decode\n got %+v\nwant %+v", name, got, *h)
	}
	if p, r := DecodePrefix(m, wire); r != DropNone || p != (Prefix{h.SessionID, h.ClientID, true}) {
		t.Errorf("%s: DecodePrefix = %+v, %v", name, p, r)
	}
	var c ConnHeader
	if _, r := DecodeConn(m, wire, &c); r != DropUnexpectedType {
		t.Errorf("%s: DecodeConn of a handshake: %v", name, r)
	}
}

func codecVectorConn(f *codecFields) (ConnHeader, []byte) {
	f.t.Helper()
	h := ConnHeader{
		SessionID: uint8(f.uint("session_id", 2)),
		ClientID:  uint8(f.uint("client_id", 3)),
		Tag:       uint32(f.uint("tag", 32)),
		Seq:       uint16(f.uint("seq", 14)),
		Ack:       uint16(f.uint("ack", 14)),
		Kind:      Kind(f.uint("kind", 8)),
	}
	bits, err := strconv.ParseUint(f.str("ack_bits"), 0, 64)
	if err != nil {
		f.t.Fatalf("%s: ack_bits: %v", f.name, err)
	}
	h.AckBits = bits
	return h, f.hex("payload")
}

func codecCheckConnVector(t *testing.T, name string, m Magic, h *ConnHeader, payload, wire []byte) {
	t.Helper()
	buf := make([]byte, 128)
	n := EncodeConn(buf, m, h, payload)
	if !bytes.Equal(buf[:n], wire) {
		t.Errorf("%s: encode\n got %x\nwant %x", name, buf[:n], wire)
	}
	if want := ConnLen(m, h.Kind, len(payload)); len(wire) != want {
		t.Errorf("%s: %d bytes, ConnLen says %d", name, len(wire), want)
	}
	var got ConnHeader
	gotPayload, r := DecodeConn(m, wire, &got)
	if r != DropNone || got != *h || !bytes.Equal(gotPayload, payload) {
		t.Errorf("%s: decode %+v payload %x %v\nwant %+v payload %x", name, got, gotPayload, r, *h, payload)
	}
	if p, r := DecodePrefix(m, wire); r != DropNone || p != (Prefix{h.SessionID, h.ClientID, false}) {
		t.Errorf("%s: DecodePrefix = %+v, %v", name, p, r)
	}
	var hs Handshake
	if r := DecodeHandshake(m, wire, &hs); r != DropUnexpectedType {
		t.Errorf("%s: DecodeHandshake of a connection packet: %v", name, r)
	}
}

func TestVectorTerminator(t *testing.T) {
	v := codecLoadVectors(t)
	for _, tc := range v.Terminator {
		b := codecHex(t, tc.Hex)
		bits, ok := payloadBits(b)
		if ok != tc.Valid {
			t.Errorf("%q: valid = %v, want %v", tc.Hex, ok, tc.Valid)
			continue
		}
		if tc.Valid {
			if tc.PayloadBits == nil {
				t.Fatalf("%q: valid vector without payload_bits", tc.Hex)
			}
			if bits != *tc.PayloadBits {
				t.Errorf("%q: payload bits %d, want %d", tc.Hex, bits, *tc.PayloadBits)
			}
		}
		r, rok := newBitReader(b)
		if rok != tc.Valid || (rok && r.Left() != bits) {
			t.Errorf("%q: newBitReader ok=%v left=%d", tc.Hex, rok, r.Left())
		}
	}
}
