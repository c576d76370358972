package seal

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"
)

func seq(start byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = start + byte(i)
	}
	return b
}

func key(start byte) *[KeyBytes]byte { return (*[KeyBytes]byte)(seq(start, KeyBytes)) }

// packet returns a buffer holding a hdr-byte header (the bytes 0xa0…, the
// counter slot zero) and the payload, with room for the tag.
func packet(hdr int, payload []byte) []byte {
	b := make([]byte, hdr, hdr+len(payload)+TagBytes)
	copy(b, seq(0xa0, hdr-CounterBytes))
	return append(b, payload...)
}

// TestMatchesNetcode checks the nonce layout and the associated data against
// netcode's packet AEAD computed by the reference with libsodium, and the
// salted form against libsodium's XChaCha20-Poly1305 (testdata/netcode_aead.txt
// says how).
func TestMatchesNetcode(t *testing.T) {
	f, err := os.Open("testdata/netcode_aead.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	salt := (*[SaltBytes]byte)(seq(0xc0, SaltBytes))
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		name, v, _ := strings.Cut(line, "=")
		form, num, _ := strings.Cut(name, "_seq_")
		c, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := hex.DecodeString(v)
		var sa *[SaltBytes]byte
		if form == "xaead" {
			sa = salt
		}

		var s Sealer
		s.Init(key(0x80), sa)
		s.next = c
		b, err := s.Seal(packet(17, seq(0, 64)), 17)
		if err != nil {
			t.Fatal(err)
		}
		if binary.LittleEndian.Uint64(b[9:17]) != c || !bytes.Equal(b[17:], want) {
			t.Errorf("%s: sealed % x\nreference % x", name, b[17:], want)
		}
		var o Opener
		o.Init(key(0x80), sa)
		plain, got, err := o.Open(b, 17)
		if err != nil || got != c || !bytes.Equal(plain, seq(0, 64)) {
			t.Errorf("%s: open: %v %d", name, err, got)
		}
		n++
	}
	if n != 6 {
		t.Fatalf("%d vectors", n)
	}
}

// TestSaltIsXChaCha: a salted Sealer is XChaCha20-Poly1305 under the key with
// the nonce salt ‖ counter, and salts keep connections apart.
func TestSaltIsXChaCha(t *testing.T) {
	salt := (*[SaltBytes]byte)(seq(0x10, SaltBytes))
	other := (*[SaltBytes]byte)(seq(0x11, SaltBytes))
	x, _ := chacha20poly1305.NewX(key(1)[:])
	var s, s2 Sealer
	s.Init(key(1), salt)
	s2.Init(key(1), other)
	for c := range uint64(5) {
		b, _ := s.Seal(packet(13, seq(0x30, 50)), 13)
		b2, _ := s2.Seal(packet(13, seq(0x30, 50)), 13)
		nonce := binary.LittleEndian.AppendUint64(bytes.Clone(salt[:]), c)
		want := x.Seal(nil, nonce, seq(0x30, 50), b[:13])
		if !bytes.Equal(b[13:], want) {
			t.Fatalf("counter %d: not XChaCha20-Poly1305 with nonce salt ‖ counter", c)
		}
		if bytes.Equal(b[13:], b2[13:]) {
			t.Fatal("two salts gave the same ciphertext")
		}
		var o Opener
		o.Init(key(1), other)
		if _, _, err := o.Open(b, 13); err != ErrAuth {
			t.Fatalf("opened under another connection's salt: %v", err)
		}
		o.Init(key(1), nil)
		if _, _, err := o.Open(b, 13); err != ErrAuth {
			t.Fatalf("opened without the salt: %v", err)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	var s Sealer
	var o Opener
	s.Init(key(1), nil)
	o.Init(key(1), nil)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 500 {
		hdr := CounterBytes + r.IntN(40)
		payload := make([]byte, r.IntN(1201))
		for k := range payload {
			payload[k] = byte(r.Uint32())
		}
		b, err := s.Seal(packet(hdr, payload), hdr)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != hdr+len(payload)+TagBytes {
			t.Fatalf("sealed length %d", len(b))
		}
		if len(payload) >= 16 && bytes.Contains(b, payload[:16]) {
			t.Fatal("plaintext visible in the sealed packet")
		}
		plain, c, err := o.Open(b, hdr)
		if err != nil || c != uint64(i) || !bytes.Equal(plain, payload) || c != o.Newest() {
			t.Fatalf("packet %d: %v counter %d newest %d", i, err, c, o.Newest())
		}
	}
	if s.Next() != 500 {
		t.Errorf("Next = %d", s.Next())
	}
}

// TestBitFlips: no single changed bit anywhere in a sealed packet (header,
// counter, ciphertext, tag) opens.
func TestBitFlips(t *testing.T) {
	var s Sealer
	s.Init(key(1), nil)
	const hdr = 12
	sealed, _ := s.Seal(packet(hdr, seq(0x30, 100)), hdr)
	for bit := range len(sealed) * 8 {
		b := bytes.Clone(sealed)
		b[bit/8] ^= 1 << (bit % 8)
		var o Opener
		o.Init(key(1), nil)
		if _, _, err := o.Open(b, hdr); err != ErrAuth {
			t.Fatalf("bit %d flipped: %v", bit, err)
		}
	}
	var o Opener
	o.Init(key(1), nil)
	if _, _, err := o.Open(bytes.Clone(sealed), hdr); err != nil {
		t.Fatal(err)
	}
}

func TestWrongKey(t *testing.T) {
	var s Sealer
	s.Init(key(1), nil)
	b, _ := s.Seal(packet(8, []byte("hello")), 8)
	var o Opener
	o.Init(key(2), nil) // e.g. the other direction's key
	if _, _, err := o.Open(b, 8); err != ErrAuth {
		t.Fatalf("wrong key: %v", err)
	}
	if o.Newest() != 0 || o.replay.Seen(0) {
		t.Error("a packet that failed to open was marked received")
	}
}

func TestReplayRefused(t *testing.T) {
	var s Sealer
	var o Opener
	s.Init(key(1), nil)
	o.Init(key(1), nil)
	var sent [][]byte
	for i := range 300 {
		b, _ := s.Seal(packet(8, []byte{byte(i)}), 8)
		sent = append(sent, bytes.Clone(b))
	}
	// Out of order within the window: each once.
	for _, i := range []int{5, 4, 6, 0} {
		if _, _, err := o.Open(bytes.Clone(sent[i]), 8); err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
	}
	for _, i := range []int{5, 4, 6, 0} {
		if _, _, err := o.Open(bytes.Clone(sent[i]), 8); err != ErrReplay {
			t.Fatalf("replayed packet %d: %v", i, err)
		}
	}
	if _, _, err := o.Open(bytes.Clone(sent[299]), 8); err != nil {
		t.Fatal(err)
	}
	// 299 − 256 = 43: counters 0..43 are now too old, 44..298 still welcome.
	if _, _, err := o.Open(bytes.Clone(sent[43]), 8); err != ErrReplay {
		t.Fatalf("counter 43: %v", err)
	}
	if _, c, err := o.Open(bytes.Clone(sent[44]), 8); err != nil || c == o.Newest() {
		t.Fatalf("counter 44: %v (newest %d)", err, o.Newest())
	}
}

func TestSealErrors(t *testing.T) {
	var s Sealer
	s.Init(key(1), nil)
	if _, err := s.Seal(make([]byte, 7, 100), 7); err != ErrShort {
		t.Errorf("hdr 7: %v", err)
	}
	if _, err := s.Seal(make([]byte, 8, 100), 9); err != ErrShort {
		t.Errorf("hdr past the end: %v", err)
	}
	if _, err := s.Seal(make([]byte, 20, 35), 8); err != ErrNoRoom {
		t.Errorf("no room: %v", err)
	}
	s.next = math.MaxUint64
	if _, err := s.Seal(make([]byte, 20, 36), 8); err != ErrExhausted {
		t.Errorf("exhausted: %v", err)
	}
	if s.Next() != math.MaxUint64 {
		t.Error("counter moved on a refused Seal")
	}
	var o Opener
	o.Init(key(1), nil)
	for _, c := range []struct{ n, hdr int }{{23, 8}, {100, 7}, {100, 90}} {
		if _, _, err := o.Open(make([]byte, c.n), c.hdr); err != ErrShort {
			t.Errorf("open %d bytes, hdr %d: %v", c.n, c.hdr, err)
		}
	}
}

// TestAllocs: sealing and opening a packet allocates nothing.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	var s Sealer
	var o Opener
	salt := (*[SaltBytes]byte)(seq(0x10, SaltBytes))
	s.Init(key(1), salt)
	o.Init(key(1), salt)
	buf := make([]byte, 1300)
	var err error
	n := testing.AllocsPerRun(1000, func() {
		b, _ := s.Seal(buf[:20+1200], 20)
		if _, _, err = o.Open(b, 20); err != nil {
			panic(err)
		}
	})
	if n != 0 {
		t.Errorf("%v allocations per Seal+Open", n)
	}
	// Refusals cost nothing either: a replay and a forgery.
	b, _ := s.Seal(buf[:20+64], 20)
	keep := bytes.Clone(b)
	o.Open(b, 20)
	n = testing.AllocsPerRun(1000, func() {
		copy(b, keep)
		o.Open(b, 20) // replay
		b[30] ^= 1
		binary.LittleEndian.PutUint64(b[12:], o.Newest()+1)
		o.Open(b, 20) // forged
	})
	if n != 0 {
		t.Errorf("%v allocations per refused Open", n)
	}
}

func BenchmarkSealOpen(b *testing.B) {
	for _, size := range []int{64, 1200} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			var s Sealer
			var o Opener
			salt := (*[SaltBytes]byte)(seq(0x10, SaltBytes))
			s.Init(key(1), salt)
			o.Init(key(1), salt)
			const hdr = 13 // prefix 1 + tag 4 + counter 8
			buf := make([]byte, hdr+size+TagBytes)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				p, _ := s.Seal(buf[:hdr+size], hdr)
				if _, _, err := o.Open(p, hdr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
