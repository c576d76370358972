// Package cookie keeps the server's handshake secrets and makes and checks
// the stateless cookies of PROTOCOL.md §4.
package cookie

import "encoding/binary"

const (
	// Size is a cookie's length: an HMAC-SHA1 output.
	Size = 20
	// SecretSize is one secret's length.
	SecretSize = 64
	// MaxLifetime bounds now − Timestamp for a valid cookie, in seconds:
	// (15 + 5) × 2, so a cookie outlives at most one rotation.
	MaxLifetime = 40.0
	// RotateInterval and RotateJitter: a secret rotates every
	// RotateInterval + uniform[0, RotateJitter) seconds.
	RotateInterval = 15.0
	RotateJitter   = 5.0
	// InputSize is the HMAC message: Timestamp (8) ‖ address (16) ‖ port (2).
	InputSize = 26
)

// Cookie is the 20-byte proof that a client received a Challenge at its
// address. A value type, so it can be a map key and is copied, not shared.
type Cookie [Size]byte

// Sequences returns the initial sequence numbers derived from a cookie
// (PROTOCOL.md §4).
func Sequences(c *Cookie) (serverSeq, clientSeq uint16) {
	return binary.LittleEndian.Uint16(c[0:2]) & 0x3FFF, binary.LittleEndian.Uint16(c[2:4]) & 0x3FFF
}

// SessionTag returns the session tag carried by connection packets.
func SessionTag(c *Cookie) uint32 { return binary.LittleEndian.Uint32(c[4:8]) }
