package wire

// Test-only hooks: what the tests check that no caller of the package
// needs.

// Bits returns the number of bits written.
func (w *BitWriter) Bits() int { return w.pos }

// newBitReader returns a reader over the payload bits of datagram, or
// false if payloadBits rejects it.
func newBitReader(datagram []byte) (bitReader, bool) {
	n, ok := payloadBits(datagram)
	if !ok {
		return bitReader{}, false
	}
	return bitReader{buf: datagram, limit: n}, true
}
