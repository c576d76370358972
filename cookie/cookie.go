// Package cookie keeps the server's handshake secrets and makes and checks
// the stateless cookies of docs/protocol.md §4.
//
// A cookie lets the server answer an Initial without remembering it: the
// Challenge carries an HMAC over the timestamp and the client's address, and
// the Response echoes it back. Recomputing the HMAC proves the client can
// receive at that address, so memory is spent only on proven clients; a flood
// of spoofed sources costs the server CPU per packet, never memory per source.
//
// Two secrets rotate every 15–20 s (Secrets, published as immutable
// Snapshots); each receive loop owns a Signer that keeps precomputed HMAC
// states for both, so a cookie costs two SHA-1 block compressions and no
// allocation.
package cookie

import (
	"encoding/binary"
	"math"
	"net/netip"
)

const (
	// Size is a cookie's length: an HMAC-SHA1 output.
	Size = 20
	// SecretSize is one secret's length.
	SecretSize = 64
	// MaxLifetime bounds now − Timestamp for a valid cookie, in seconds:
	// (15 + 5) × 2, so a cookie outlives at most one rotation.
	MaxLifetime = 40.0
	// InputSize is the HMAC message: Timestamp (8) ‖ address (16) ‖ port (2).
	InputSize = 26
)

// A secret rotates every rotateInterval + uniform[0, rotateJitter) seconds
// (docs/protocol.md §4).
const (
	rotateInterval = 15.0
	rotateJitter   = 5.0
)

// Cookie is the 20-byte proof that a client received a Challenge at its
// address. A value type, so it can be a map key and is copied, not shared.
type Cookie [Size]byte

// Sequences returns the initial sequence numbers derived from a cookie
// (docs/protocol.md §4).
func Sequences(c *Cookie) (serverSeq, clientSeq uint16) {
	return binary.LittleEndian.Uint16(c[0:2]) & 0x3FFF, binary.LittleEndian.Uint16(c[2:4]) & 0x3FFF
}

// SessionTag returns the session tag carried by connection packets.
func SessionTag(c *Cookie) uint32 { return binary.LittleEndian.Uint32(c[4:8]) }

// Input writes the HMAC message for a cookie. The address is always taken in
// its 16-byte form, so an IPv4 client gets the same cookie whether a
// dual-stack socket reports it as a.b.c.d or ::ffff:a.b.c.d; the zone is
// ignored because it names a local interface, not the client.
func Input(dst *[InputSize]byte, ts float64, addr netip.AddrPort) {
	binary.LittleEndian.PutUint64(dst[0:8], math.Float64bits(ts))
	ip := addr.Addr()
	if ip.Is4() || ip.Is4In6() {
		// ::ffff:a.b.c.d written from As4: As16's result is copied as
		// one 16-byte load from the two 8-byte halves it has just
		// stored, which the CPU cannot forward from those stores, a
		// stall every cookie for an IPv4 client would pay.
		a := ip.As4()
		binary.BigEndian.PutUint64(dst[8:16], 0)
		binary.BigEndian.PutUint64(dst[16:24], 0xffff<<32|uint64(binary.BigEndian.Uint32(a[:])))
	} else {
		a := ip.As16()
		copy(dst[8:24], a[:])
	}
	binary.LittleEndian.PutUint16(dst[24:26], addr.Port())
}
