package wire

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// bitsRefSet and bitsRefGet are the §1 bit rule written the obvious way; the
// word-at-a-time BitWriter and bitReader are checked against them.
func bitsRefSet(b []byte, n int, v bool) {
	if v {
		b[n>>3] |= 1 << (n & 7)
	} else {
		b[n>>3] &^= 1 << (n & 7)
	}
}

func bitsRefGet(b []byte, n int) bool { return b[n>>3]&(1<<(n&7)) != 0 }

// bitsRefWrite writes v's low n bits at bit pos, value-bit 0 first.
func bitsRefWrite(b []byte, pos int, v uint64, n int) {
	for i := range n {
		bitsRefSet(b, pos+i, v>>i&1 != 0)
	}
}

func bitsRefRead(b []byte, pos, n int) uint64 {
	var v uint64
	for i := range n {
		if bitsRefGet(b, pos+i) {
			v |= 1 << i
		}
	}
	return v
}

func TestBitWriterBitOrder(t *testing.T) {
	// Bit n lands in byte n>>3 under mask 1<<(n&7), and multi-bit fields
	// go value-bit 0 first, so a u16 at an unaligned offset is its
	// little-endian bytes shifted.
	var buf [4]byte
	w := NewBitWriter(buf[:])
	w.WriteBits(0b101, 3)       // bits 0, 2
	w.WriteBits(0xBEEF, 16)     // bits 3..18
	w.WriteBool(true)           // bit 19
	w.WriteBits(0xFFFF_FFFF, 0) // nothing
	want := uint32(0b101) | 0xBEEF<<3 | 1<<19
	got := uint32(buf[0]) | uint32(buf[1])<<8 | uint32(buf[2])<<16 | uint32(buf[3])<<24
	if got != want || w.Bits() != 20 || w.Len() != 3 {
		t.Fatalf("got %#x bits=%d len=%d, want %#x bits=20 len=3", got, w.Bits(), w.Len(), want)
	}
	w.WriteTerminator()
	if w.Bits() != 24 || w.Len() != 3 || buf[2] != byte(want>>16)|1<<4 {
		t.Fatalf("after terminator: bits=%d len=%d byte2=%#x", w.Bits(), w.Len(), buf[2])
	}
	if w.Overflow() {
		t.Fatal("unexpected overflow")
	}
}

// bitsOp is one field of a random bitstream.
type bitsOp struct {
	v     uint64
	n     int
	bytes []byte // if non-nil, a WriteBytes of these instead of v, n
}

func (op bitsOp) bits() int {
	if op.bytes != nil {
		return 8 * len(op.bytes)
	}
	return op.n
}

func bitsRandomOps(rng *rand.Rand, maxBits int) []bitsOp {
	var ops []bitsOp
	total := 0
	for {
		var op bitsOp
		if rng.IntN(5) == 0 {
			op.bytes = make([]byte, rng.IntN(25))
			for i := range op.bytes {
				op.bytes[i] = byte(rng.Uint32())
			}
		} else {
			op.n = rng.IntN(65)
			op.v = rng.Uint64() // high bits beyond n must be ignored
		}
		if total+op.bits() > maxBits {
			return ops
		}
		total += op.bits()
		ops = append(ops, op)
	}
}

func TestBitWriterMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 3000 {
		size := rng.IntN(80)
		ops := bitsRandomOps(rng, 8*size)
		// The writer gets a window of a larger array filled with 0xA5:
		// it must zero what it writes into and never touch the guard
		// bytes past len(buf).
		backing := bytes.Repeat([]byte{0xA5}, size+16)
		buf := backing[:size:size]
		ref := make([]byte, size)
		w := NewBitWriter(buf)
		pos := 0
		for _, op := range ops {
			if op.bytes != nil {
				w.WriteBytes(op.bytes)
				for _, c := range op.bytes {
					bitsRefWrite(ref, pos, uint64(c), 8)
					pos += 8
				}
			} else {
				w.WriteBits(op.v, op.n)
				bitsRefWrite(ref, pos, op.v, op.n)
				pos += op.n
			}
		}
		if w.Overflow() || w.Bits() != pos || w.Len() != (pos+7)/8 {
			t.Fatalf("iter %d: overflow=%v bits=%d len=%d, want bits=%d", iter, w.Overflow(), w.Bits(), w.Len(), pos)
		}
		if !bytes.Equal(buf[:w.Len()], ref[:w.Len()]) {
			t.Fatalf("iter %d: got %x, want %x", iter, buf[:w.Len()], ref[:w.Len()])
		}
		if g := backing[size:]; !bytes.Equal(g, bytes.Repeat([]byte{0xA5}, 16)) {
			t.Fatalf("iter %d: wrote past len(buf): %x", iter, g)
		}
	}
}

func TestBitWriterOverflow(t *testing.T) {
	backing := bytes.Repeat([]byte{0xA5}, 8)
	buf := backing[:3:3]
	w := NewBitWriter(buf)
	w.WriteBits(0x3, 20)
	w.WriteBits(0xF, 5) // 25 > 24: refused whole
	if !w.Overflow() || w.Bits() != 20 {
		t.Fatalf("overflow=%v bits=%d, want true, 20", w.Overflow(), w.Bits())
	}
	w.WriteBits(1, 1) // would fit, but the writer has failed
	w.WriteBytes([]byte{1})
	w.WriteTerminator()
	if w.Bits() != 20 {
		t.Fatalf("writes after overflow moved the position to %d", w.Bits())
	}
	if !bytes.Equal(backing, []byte{0x03, 0x00, 0x00, 0xA5, 0xA5, 0xA5, 0xA5, 0xA5}) {
		t.Fatalf("buffer %x", backing)
	}

	w = NewBitWriter(make([]byte, 2))
	w.WriteBits(0, 3)
	w.WriteBytes([]byte{1, 2}) // 16 bits into 13 left
	if !w.Overflow() || w.Bits() != 3 {
		t.Fatalf("WriteBytes: overflow=%v bits=%d", w.Overflow(), w.Bits())
	}

	w = NewBitWriter(make([]byte, 1))
	w.WriteBits(0, 8)
	w.WriteTerminator() // no room for the 1 bit
	if !w.Overflow() || w.Bits() != 8 {
		t.Fatalf("terminator: overflow=%v bits=%d", w.Overflow(), w.Bits())
	}

	w = NewBitWriter(nil)
	w.WriteBits(0, 0)
	w.WriteBytes(nil)
	if w.Overflow() {
		t.Fatal("empty writes into an empty buffer overflowed")
	}
}

func TestBitWriterTerminator(t *testing.T) {
	for pos := range 17 {
		buf := bytes.Repeat([]byte{0xFF}, 4)
		w := NewBitWriter(buf)
		w.WriteBits(0, pos)
		w.WriteTerminator()
		n := w.Len()
		if w.Bits() != 8*n || n != pos/8+1 {
			t.Fatalf("pos %d: bits=%d len=%d", pos, w.Bits(), n)
		}
		got, ok := payloadBits(buf[:n])
		if !ok || got != pos {
			t.Fatalf("pos %d: payloadBits = %d, %v", pos, got, ok)
		}
	}
}

func TestBitPanicsOnBadWidth(t *testing.T) {
	for _, n := range []int{-1, 65} {
		for name, f := range map[string]func(){
			"WriteBits": func() { w := NewBitWriter(make([]byte, 16)); w.WriteBits(0, n) },
			"ReadBits":  func() { r, _ := newBitReader(bytes.Repeat([]byte{1}, 16)); r.ReadBits(n) },
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s(%d) did not panic", name, n)
					}
				}()
				f()
			}()
		}
	}
}

func TestPayloadBits(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		bits int
		ok   bool
	}{
		{nil, 0, false},
		{[]byte{}, 0, false},
		{[]byte{0}, 0, false},
		{[]byte{1, 0}, 0, false},
		{[]byte{1}, 0, true},
		{[]byte{0x80}, 7, true},
		{[]byte{0xFF, 0x02}, 9, true},
		{[]byte{0, 0, 0x10}, 20, true},
	} {
		bits, ok := payloadBits(tc.in)
		if bits != tc.bits || ok != tc.ok {
			t.Errorf("payloadBits(%x) = %d, %v; want %d, %v", tc.in, bits, ok, tc.bits, tc.ok)
		}
		r, ok := newBitReader(tc.in)
		if ok != tc.ok || r.Left() != tc.bits {
			t.Errorf("newBitReader(%x): ok=%v left=%d", tc.in, ok, r.Left())
		}
	}
}

func TestBitReaderMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 3000 {
		size := 1 + rng.IntN(80)
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		if data[size-1] == 0 {
			data[size-1] = 1 << rng.IntN(8)
		}
		limit, _ := payloadBits(data)
		r, ok := newBitReader(data)
		if !ok {
			t.Fatal("newBitReader refused a valid datagram")
		}
		pos := 0
		for r.Left() > 0 {
			if rng.IntN(4) == 0 {
				dst := make([]byte, rng.IntN(r.Left()/8+1))
				r.ReadBytes(dst)
				for i, c := range dst {
					if want := byte(bitsRefRead(data, pos+8*i, 8)); c != want {
						t.Fatalf("iter %d: ReadBytes at bit %d byte %d = %#x, want %#x", iter, pos, i, c, want)
					}
				}
				pos += 8 * len(dst)
				continue
			}
			n := rng.IntN(min(64, r.Left()) + 1)
			if got, want := r.ReadBits(n), bitsRefRead(data, pos, n); got != want {
				t.Fatalf("iter %d: ReadBits(%d) at bit %d = %#x, want %#x", iter, n, pos, got, want)
			}
			pos += n
			if r.Left() != limit-pos {
				t.Fatalf("iter %d: Left = %d, want %d", iter, r.Left(), limit-pos)
			}
		}
		if r.Overrun() {
			t.Fatalf("iter %d: overrun within the payload", iter)
		}
	}
}

func TestBitReaderOverrun(t *testing.T) {
	// 0xFF 0x03: payload is 9 bits, all ones.
	r, _ := newBitReader([]byte{0xFF, 0x03})
	if v := r.ReadBits(4); v != 0xF {
		t.Fatalf("ReadBits(4) = %#x", v)
	}
	if v := r.ReadBits(6); v != 0 || !r.Overrun() || r.Left() != 0 {
		t.Fatalf("past the terminator: v=%#x overrun=%v left=%d", v, r.Overrun(), r.Left())
	}
	// Sticky: a read that would have fitted before the overrun fails too.
	if v := r.ReadBits(1); v != 0 {
		t.Fatalf("read after overrun = %#x", v)
	}
	if r.ReadBool() {
		t.Fatal("ReadBool after overrun = true")
	}

	r, _ = newBitReader([]byte{0xAA, 0xBB, 0x01})
	dst := []byte{9, 9, 9}
	r.ReadBytes(dst)
	if !r.Overrun() || !bytes.Equal(dst, []byte{0, 0, 0}) {
		t.Fatalf("ReadBytes past the end: overrun=%v dst=%x", r.Overrun(), dst)
	}

	r, _ = newBitReader([]byte{0xAA, 0xBB, 0x01})
	r.ReadBits(3)
	r.ReadBytes(dst[:2]) // 16 bits with 13 left
	if !r.Overrun() {
		t.Fatal("unaligned ReadBytes of 16 bits with 13 left did not overrun")
	}
}

// TestBitRoundTrip writes random fields with the writer and reads them back
// with the reader across a terminator, at every alignment.
func TestBitRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for iter := range 2000 {
		ops := bitsRandomOps(rng, 8*rng.IntN(100))
		buf := make([]byte, 101)
		w := NewBitWriter(buf)
		for _, op := range ops {
			if op.bytes != nil {
				w.WriteBytes(op.bytes)
			} else {
				w.WriteBits(op.v, op.n)
			}
		}
		total := w.Bits()
		w.WriteTerminator()
		if w.Overflow() {
			t.Fatalf("iter %d: overflow", iter)
		}
		r, ok := newBitReader(buf[:w.Len()])
		if !ok || r.Left() != total {
			t.Fatalf("iter %d: reader ok=%v left=%d, want %d", iter, ok, r.Left(), total)
		}
		for i, op := range ops {
			if op.bytes != nil {
				got := make([]byte, len(op.bytes))
				r.ReadBytes(got)
				if !bytes.Equal(got, op.bytes) {
					t.Fatalf("iter %d op %d: bytes %x, want %x", iter, i, got, op.bytes)
				}
				continue
			}
			want := op.v
			if op.n < 64 {
				want &= 1<<op.n - 1
			}
			if got := r.ReadBits(op.n); got != want {
				t.Fatalf("iter %d op %d: ReadBits(%d) = %#x, want %#x", iter, i, op.n, got, want)
			}
		}
		if r.Left() != 0 || r.Overrun() {
			t.Fatalf("iter %d: left=%d overrun=%v", iter, r.Left(), r.Overrun())
		}
	}
}

func TestBitCodecAllocs(t *testing.T) {
	buf := make([]byte, 64)
	cookie := make([]byte, 20)
	if n := testing.AllocsPerRun(100, func() {
		w := NewBitWriter(buf)
		w.WriteBits(0x1234, 13)
		w.WriteBytes(cookie)
		w.WriteTerminator()
		r, _ := newBitReader(buf[:w.Len()])
		r.ReadBits(13)
		r.ReadBytes(cookie)
	}); n != 0 {
		t.Fatalf("bit codec allocates %v times", n)
	}
}

func TestParseMagic(t *testing.T) {
	for _, tc := range []struct {
		in   string
		bits uint32
		ok   bool
		hint string // in the error
	}{
		{"", 0, true, ""},
		{"1", 1, true, ""},
		{"0", 0, true, ""},
		{"1011", 0b1101, true, ""}, // first character is bit 0
		{strings.Repeat("1", 32), 0xFFFF_FFFF, true, ""},
		{"10" + strings.Repeat("0", 29) + "1", 1 | 1<<31, true, ""},
		{strings.Repeat("1", 33), 0, false, "at most 32"},
		{"10a1", 0, false, "'a' at byte 2"},
		{"1 0", 0, false, "only the characters '0' and '1'"},
		{"0b101", 0, false, "'b'"},
		{"1€", 0, false, "'€'"},
	} {
		m, err := ParseMagic(tc.in)
		if !tc.ok {
			if err == nil || !strings.Contains(err.Error(), tc.hint) {
				t.Errorf("ParseMagic(%q) error = %v, want one mentioning %q", tc.in, err, tc.hint)
			}
			continue
		}
		if err != nil || m.bits != tc.bits || m.Len() != len(tc.in) || m.String() != tc.in {
			t.Errorf("ParseMagic(%q) = {%#x %d} %q, %v", tc.in, m.bits, m.Len(), m.String(), err)
		}
	}
	if (Magic{}).String() != "" || (Magic{}).Len() != 0 {
		t.Error("zero Magic is not the empty header")
	}
}

// codecMagic parses a magic header in tests.
func codecMagic(tb testing.TB, s string) Magic {
	tb.Helper()
	m, err := ParseMagic(s)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}
