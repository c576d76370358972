// Package wiretest is the codec's test kit: the byte-exact vectors of
// docs/protocol.md (fastpath/testdata/vectors.json, the one copy) and
// random or garbage handshakes, shared by the tests of wire and of the
// packages built on it. Only tests import it.
package wiretest

import (
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"testing"

	"github.com/udpgate/udpgate/internal/protocol"
)

// Magics are magic headers that put the handshake fields at every
// alignment, including none and the longest.
var Magics = []string{"", "1", "01", "101", "1011", "10110", "011011", "1110001", "10110011",
	"101100111", "1011001110001111", "10110011100011110000111110000011"}

// RandHandshake returns a valid handshake of type t with random fields;
// fields t does not carry are zero, as DecodeHandshake returns them.
// Timestamps are random bit patterns, NaNs included, to prove the codec moves
// bits rather than numbers.
func RandHandshake(rng *rand.Rand, t protocol.PacketType) protocol.Handshake {
	h := protocol.Handshake{
		SessionID:       uint8(rng.IntN(4)),
		ClientID:        uint8(rng.IntN(8)),
		Restart:         rng.IntN(2) == 1,
		MinVersion:      uint8(rng.Uint32()),
		CurVersion:      uint8(rng.Uint32()),
		Type:            t,
		SentCount:       uint8(rng.Uint32()),
		NetworkVersion:  rng.Uint32(),
		NetworkFeatures: uint16(rng.Uint32()),
		RandomLen:       uint8(protocol.MinRandomBytes + rng.IntN(protocol.MaxRandomBytes-protocol.MinRandomBytes+1)),
	}
	for i := range h.RandomLen {
		h.Random[i] = byte(rng.Uint32())
	}
	fill := func(b []byte) {
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
	}
	switch t {
	case protocol.TypeChallenge, protocol.TypeResponse, protocol.TypeAck, protocol.TypeRestartResponse:
		h.SecretID = uint8(rng.IntN(2))
		h.Timestamp = math.Float64frombits(rng.Uint64())
		fill(h.Cookie[:])
		if t == protocol.TypeRestartResponse {
			fill(h.OrigCookie[:])
			h.Restart = true
		}
	case protocol.TypeDenied:
		h.Reason = uint8(rng.Uint32())
		fill(h.Cookie[:])
	case protocol.TypeRestartHandshake:
		h.Restart = true
	case protocol.TypeVersionUpgrade:
		h.Restart = false
	case protocol.TypeInitial:
		if rng.IntN(2) == 1 {
			h.Layout = RandLayout(rng)
		}
	case protocol.TypeLayoutMismatch:
		h.Layout = RandLayout(rng)
	}
	return h
}

// RandLayout returns a random declared, valid Layout (docs/protocol.md
// §3.7).
func RandLayout(rng *rand.Rand) protocol.Layout {
	l := protocol.Layout{
		Channels:    uint8(1 + rng.IntN(32)), // 32 channels at most (§3.7),
		MaxDatagram: uint16(1 + rng.IntN(1<<16-1)),
	}
	reliable := false
	for i := range int(l.Channels) {
		k := uint64(1 + rng.IntN(3))
		l.Kinds |= k << (2 * i)
		reliable = reliable || k == 1
	}
	if reliable {
		l.MaxMessage = 1 + rng.Uint32()>>1
	}
	return l
}

// Garbage is a Handshake with every byte set, to catch a decoder that
// leaves a field it should zero.
func Garbage() protocol.Handshake {
	h := protocol.Handshake{SessionID: 0xFF, ClientID: 0xFF, Restart: true, MinVersion: 0xFF, CurVersion: 0xFF,
		Type: 0xFF, SentCount: 0xFF, NetworkVersion: 0xFFFFFFFF, NetworkFeatures: 0xFFFF,
		SecretID: 0xFF, Timestamp: math.Inf(1), Reason: 0xFF, RandomLen: 0xFF,
		Layout: protocol.Layout{Channels: 0xFF, MaxDatagram: 0xFFFF, MaxMessage: 0xFFFFFFFF, Kinds: 1<<64 - 1}}
	for i := range h.Cookie {
		h.Cookie[i], h.OrigCookie[i] = 0xFF, 0xFF
	}
	for i := range h.Random {
		h.Random[i] = 0xFF
	}
	return h
}

// Vectors is the repository's byte-exact examples of docs/protocol.md
// (§9), fastpath/testdata/vectors.json: the wire contract client authors
// test against. The tests read only this copy (docs/decisions.md).
var Vectors = filepath.Join(repoDir(), "fastpath", "testdata", "vectors.json")

// repoDir is the repository's root, found from this file's, so the vectors
// load from any package's tests.
func repoDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

type VectorFile struct {
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

func LoadVectors(t *testing.T) *VectorFile {
	t.Helper()
	data, err := os.ReadFile(Vectors)
	if err != nil {
		t.Fatalf("the wire contract's vectors: %v", err)
	}
	var v VectorFile
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", Vectors, err)
	}
	if len(v.Packets) == 0 || len(v.Terminator) == 0 {
		t.Fatalf("%s: no packet or terminator vectors", Vectors)
	}
	return &v
}

func Hex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		tb.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// Fields reads a vector's fields and fails the test on a field it never
// read, so a field added to vectors.json cannot be silently ignored.
type Fields struct {
	t    *testing.T
	name string
	m    map[string]json.RawMessage
	used map[string]bool
}

// NewFields starts reading the fields of the vector named name.
func NewFields(t *testing.T, name string, m map[string]json.RawMessage) *Fields {
	return &Fields{t: t, name: name, m: m, used: map[string]bool{}}
}

func (f *Fields) Has(k string) bool { _, ok := f.m[k]; return ok }

func (f *Fields) Get(k string, v any) {
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

func (f *Fields) Uint(k string, bits int) uint64 {
	f.t.Helper()
	var v uint64
	f.Get(k, &v)
	if bits < 64 && v >= 1<<bits {
		f.t.Fatalf("%s: field %q = %d does not fit %d bits", f.name, k, v, bits)
	}
	return v
}

func (f *Fields) Str(k string) string {
	f.t.Helper()
	var s string
	f.Get(k, &s)
	return s
}

func (f *Fields) HexField(k string) []byte {
	f.t.Helper()
	return Hex(f.t, f.Str(k))
}

func (f *Fields) Done() {
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

func VectorHandshake(f *Fields) protocol.Handshake {
	f.t.Helper()
	h := protocol.Handshake{
		SessionID:       uint8(f.Uint("session_id", 2)),
		ClientID:        uint8(f.Uint("client_id", 3)),
		MinVersion:      uint8(f.Uint("min_version", 8)),
		CurVersion:      uint8(f.Uint("cur_version", 8)),
		Type:            protocol.PacketType(f.Uint("type", 8)),
		SentCount:       uint8(f.Uint("sent_count", 8)),
		NetworkVersion:  uint32(f.Uint("network_version", 32)),
		NetworkFeatures: uint16(f.Uint("network_features", 16)),
	}
	f.Get("restart", &h.Restart)
	random := f.HexField("random")
	if len(random) > protocol.MaxRandomBytes {
		f.t.Fatalf("%s: %d random bytes", f.name, len(random))
	}
	h.RandomLen = uint8(copy(h.Random[:], random))
	if f.Has("secret_id") {
		h.SecretID = uint8(f.Uint("secret_id", 1))
	}
	if f.Has("timestamp") {
		f.Get("timestamp", &h.Timestamp)
	}
	if f.Has("cookie") {
		if copy(h.Cookie[:], f.HexField("cookie")) != len(h.Cookie) {
			f.t.Fatalf("%s: short cookie", f.name)
		}
	}
	if f.Has("orig_cookie") {
		if copy(h.OrigCookie[:], f.HexField("orig_cookie")) != len(h.OrigCookie) {
			f.t.Fatalf("%s: short orig_cookie", f.name)
		}
	}
	if f.Has("reason") {
		h.Reason = uint8(f.Uint("reason", 8))
	}
	if f.Has("layout") {
		var l struct {
			Kinds       []uint8 `json:"kinds"`
			MaxMessage  uint32  `json:"max_message"`
			MaxDatagram uint16  `json:"max_datagram"`
		}
		f.Get("layout", &l)
		h.Layout = protocol.Layout{Channels: uint8(len(l.Kinds)), MaxMessage: l.MaxMessage, MaxDatagram: l.MaxDatagram}
		for i, k := range l.Kinds {
			h.Layout.Kinds |= uint64(k) << (2 * i)
		}
	}
	return h
}

func VectorConn(f *Fields) (protocol.ConnHeader, []byte) {
	f.t.Helper()
	h := protocol.ConnHeader{
		SessionID: uint8(f.Uint("session_id", 2)),
		ClientID:  uint8(f.Uint("client_id", 3)),
		Tag:       uint32(f.Uint("tag", 32)),
		Seq:       uint16(f.Uint("seq", 14)),
		Ack:       uint16(f.Uint("ack", 14)),
		Kind:      protocol.Kind(f.Uint("kind", 8)),
	}
	bits, err := strconv.ParseUint(f.Str("ack_bits"), 0, 64)
	if err != nil {
		f.t.Fatalf("%s: ack_bits: %v", f.name, err)
	}
	h.AckBits = bits
	return h, f.HexField("payload")
}

// Each benchmark runs with no magic header (fields byte-aligned after the
// prefix, so byte runs are copies) and with a 4-bit one (every field
// unaligned), the two shapes a deployment can have.
var benchMagics = []struct {
	name  string
	magic string
}{{"M=0", ""}, {"M=4", "1011"}}

// BenchEachMagic runs f as a sub-benchmark under each magic header a codec
// benchmark runs with, as parse (wire.ParseMagic) makes it: this kit
// cannot import wire, whose own tests import it.
func BenchEachMagic[M any](b *testing.B, parse func(string) (M, error), f func(b *testing.B, m M)) {
	for _, bm := range benchMagics {
		b.Run(bm.name, func(b *testing.B) {
			m, err := parse(bm.magic)
			if err != nil {
				b.Fatal(err)
			}
			f(b, m)
		})
	}
}

// BenchHandshake is the handshake packet of type t that the codec
// benchmarks decode: a random one with 12 random bytes, written by encode.
func BenchHandshake(tb testing.TB, t protocol.PacketType, encode func(dst []byte, h *protocol.Handshake) int) []byte {
	h := RandHandshake(rand.New(rand.NewPCG(1, 1)), t)
	h.RandomLen = 12
	pkt := make([]byte, 128)
	n := encode(pkt, &h)
	if n == 0 {
		tb.Fatal("encode failed")
	}
	return pkt[:n]
}
