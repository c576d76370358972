package wire

import (
	"encoding/binary"
	"math/bits"
)

// The bitstream of docs/protocol.md §1: bit n of a datagram lives in byte n>>3
// under mask 1<<(n&7), and an N-bit field is written value-bit 0 first. That
// makes the whole datagram one little-endian integer, so a field of up to 64
// bits at any bit offset is one unaligned 64-bit little-endian load or store
// plus a shift, with a ninth byte only when the field straddles it. The
// writer and reader below take that path whenever eight bytes are available
// and fall back to byte steps only at the tail of a buffer.
//
// Both types are small values over a caller-owned buffer, meant to live on
// the stack of one encode or decode; neither allocates.

// BitWriter writes an LSB-first bitstream into a caller-owned buffer.
//
// It never writes past len(buf) and never grows it: a write that does not fit
// sets Overflow and writes nothing, and every later write is ignored, so an
// encoder can write all its fields and check Overflow once at the end.
//
// The buffer need not be zeroed: the writer zeroes bytes as it enters them.
// To use 64-bit stores it may also zero bytes after Len() (never past
// len(buf)); only buf[:Len()] is the output.
type BitWriter struct {
	buf      []byte
	pos      int // bits written
	overflow bool
}

// NewBitWriter returns a writer that fills buf from bit 0.
func NewBitWriter(buf []byte) BitWriter { return BitWriter{buf: buf} }

// WriteBits writes the low n bits of v, value-bit 0 first. Bits of v above n
// are ignored. n must be in 0..64.
func (w *BitWriter) WriteBits(v uint64, n int) {
	if uint(n) > 64 {
		panic("fastpath: BitWriter.WriteBits: n out of range 0..64")
	}
	if w.overflow || n == 0 {
		return
	}
	if n > 8*len(w.buf)-w.pos {
		w.overflow = true
		return
	}
	if n < 64 {
		v &= 1<<uint(n) - 1
	}
	i, off := w.pos>>3, uint(w.pos&7)
	w.pos += n
	if i+8 <= len(w.buf) {
		// Keep the bits already written in byte i, put the field above
		// them and zero the rest of the word. A field that reaches past
		// bit 63 of the word spills into byte i+8, which exists because
		// the field fits in buf.
		keep := uint64(w.buf[i]) & (1<<off - 1)
		binary.LittleEndian.PutUint64(w.buf[i:], keep|v<<off)
		if off+uint(n) > 64 {
			w.buf[i+8] = byte(v >> (64 - off))
		}
		return
	}
	w.writeTail(v, n, i, off)
}

// writeTail is WriteBits within the last eight bytes of the buffer, where a
// 64-bit store would pass len(buf). The field fits, so it touches at most
// len(buf)-i ≤ 7 bytes and, shifted by off, fits one word; storing that word
// byte by byte also zeroes the unused bits of the last byte touched.
func (w *BitWriter) writeTail(v uint64, n int, i int, off uint) {
	x := uint64(w.buf[i])&(1<<off-1) | v<<off
	end := (int(off) + n + 7) >> 3
	for k := range w.buf[i : i+end] {
		w.buf[i+k] = byte(x)
		x >>= 8
	}
}

// WriteBool writes one bit: 1 for true.
func (w *BitWriter) WriteBool(b bool) {
	var v uint64
	if b {
		v = 1
	}
	w.WriteBits(v, 1)
}

// WriteBytes writes p byte by byte, each as an 8-bit field (§1). On a byte
// boundary that is a copy; otherwise each eight bytes are one shifted 64-bit
// store plus the spill into the ninth byte.
func (w *BitWriter) WriteBytes(p []byte) {
	if w.overflow || len(p) == 0 {
		return
	}
	if len(p) > (8*len(w.buf)-w.pos)/8 {
		w.overflow = true
		return
	}
	buf := w.buf
	i, off := w.pos>>3, uint(w.pos&7)
	w.pos += 8 * len(p)
	if off == 0 {
		copy(buf[i:], p)
		return
	}
	// Byte i holds off bits already written; every store below keeps
	// them and zeroes the bits above the data it writes. The last byte
	// written, i+1 after the final step, exists because p fits.
	low := byte(1)<<off - 1
	for len(p) >= 8 && i+9 <= len(buf) {
		v := binary.LittleEndian.Uint64(p)
		binary.LittleEndian.PutUint64(buf[i:], uint64(buf[i]&low)|v<<off)
		buf[i+8] = byte(v >> (64 - off))
		p = p[8:]
		i += 8
	}
	for _, c := range p {
		buf[i] = buf[i]&low | c<<off
		buf[i+1] = c >> (8 - off)
		i++
	}
}

// WriteTerminator ends the stream as §1 requires: a 1 bit, then 0 bits up to
// the byte boundary. Len() is then the datagram's length.
func (w *BitWriter) WriteTerminator() {
	w.WriteBits(1, 1)
	if !w.overflow {
		// The bits above pos in the current byte are already zero:
		// every write zeroes the rest of the bytes it touches.
		w.pos = (w.pos + 7) &^ 7
	}
}

// Len returns the number of bytes holding written bits.
func (w *BitWriter) Len() int { return (w.pos + 7) >> 3 }

// Overflow reports whether a write did not fit in the buffer.
func (w *BitWriter) Overflow() bool { return w.overflow }

// payloadBits applies the receiving rule of §1 to a datagram: it is dropped
// (false) when empty or when its last byte is zero; otherwise the highest set
// bit of the last byte is the terminator and the payload is every bit before
// it.
func payloadBits(datagram []byte) (int, bool) {
	n := len(datagram)
	if n == 0 || datagram[n-1] == 0 {
		return 0, false
	}
	return 8*(n-1) + bits.Len8(datagram[n-1]) - 1, true
}

// bitReader reads an LSB-first bitstream from a caller-owned datagram, up to
// the terminator (§1).
//
// A read that runs past the terminator sets Overrun and returns zeros, and so
// does every later read (Left is then 0); decoders read a fixed run of fields
// and check Overrun once, instead of a bounds check per field.
type bitReader struct {
	buf     []byte
	pos     int // bits read
	limit   int // payload bits: reads never pass this
	overrun bool
}

// ReadBits reads an n-bit field, value-bit 0 first. n must be in 0..64.
func (r *bitReader) ReadBits(n int) uint64 {
	if uint(n) > 64 {
		panic("fastpath: bitReader.ReadBits: n out of range 0..64")
	}
	if n > r.limit-r.pos {
		r.fail()
		return 0
	}
	if n == 0 {
		return 0
	}
	i, off := r.pos>>3, uint(r.pos&7)
	r.pos += n
	var v uint64
	if i+8 <= len(r.buf) {
		// Bits of the word past the field (even past the terminator,
		// but never past the buffer) are masked off below.
		v = binary.LittleEndian.Uint64(r.buf[i:]) >> off
		if off+uint(n) > 64 {
			v |= uint64(r.buf[i+8]) << (64 - off)
		}
	} else {
		// The tail: gather the bytes the field touches (at most eight,
		// since it fits in the buffer and i+8 > len).
		for k, c := range r.buf[i:] {
			v |= uint64(c) << (8 * uint(k))
		}
		v >>= off
	}
	if n < 64 {
		v &= 1<<uint(n) - 1
	}
	return v
}

// fail marks an overrun. Pulling the limit down to the position makes every
// later read fail too, without a separate check on the fast path.
func (r *bitReader) fail() {
	r.overrun = true
	r.limit = r.pos
}

// ReadBool reads one bit.
func (r *bitReader) ReadBool() bool { return r.ReadBits(1) != 0 }

// ReadBytes fills dst with len(dst) 8-bit fields. On an overrun dst is
// zeroed. On a byte boundary it is a copy; otherwise each eight bytes are one
// 64-bit load, shifted, plus the ninth byte's low bits.
func (r *bitReader) ReadBytes(dst []byte) {
	if len(dst) > (r.limit-r.pos)/8 {
		r.fail()
		clear(dst)
		return
	}
	src := r.buf
	i, off := r.pos>>3, uint(r.pos&7)
	r.pos += 8 * len(dst)
	if off == 0 {
		copy(dst, src[i:])
		return
	}
	// Output byte k is src[i+k]>>off | src[i+k+1]<<(8-off). The last
	// src byte touched holds a payload bit, so it is below the
	// terminator's byte and i+k+1 is in range.
	for len(dst) >= 8 && i+9 <= len(src) {
		v := binary.LittleEndian.Uint64(src[i:])>>off | uint64(src[i+8])<<(64-off)
		binary.LittleEndian.PutUint64(dst, v)
		dst = dst[8:]
		i += 8
	}
	for k := range dst {
		dst[k] = src[i+k]>>off | src[i+k+1]<<(8-off)
	}
}

// Left returns the payload bits not yet read.
func (r *bitReader) Left() int { return r.limit - r.pos }

// Overrun reports whether a read ran past the terminator.
func (r *bitReader) Overrun() bool { return r.overrun }
