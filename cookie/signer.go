package cookie

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/subtle"
	"encoding"
	"encoding/binary"
	"hash"
	"net/netip"
	"sync"
)

// Result is the outcome of Verify, one value per rule of PROTOCOL.md §4 so
// the server can count each kind of failure.
type Result uint8

const (
	Valid       Result = iota
	Expired            // rule 1: older than MaxLifetime, from the future, or not a finite time
	WrongSecret        // rule 2: SecretId and Timestamp disagree with the rotation history
	Mismatch           // rule 3: the recomputed cookie differs, or SecretId is not 0 or 1
)

var resultNames = [...]string{"valid", "expired", "wrong_secret", "mismatch"}

func (r Result) String() string {
	if int(r) < len(resultNames) {
		return resultNames[r]
	}
	return "unknown"
}

const (
	// stateSize is the length of a marshaled crypto/sha1 state: a 4-byte
	// magic, the 20-byte chaining value, the 64-byte buffer and the length.
	stateSize = 4 + sha1.Size + sha1.BlockSize + 8
	// chainOffset is where the chaining value starts in a marshaled state.
	chainOffset = 4
)

// keys holds one secret's HMAC states after the ipad and opad blocks. A
// 64-byte secret is exactly one block, so both are fixed for the secret's
// life and a cookie needs only the two final blocks.
type keys struct{ inner, outer [stateSize]byte }

// Signer makes and verifies cookies for one goroutine; it is not safe for
// concurrent use. Each receive loop owns one, so the precomputed states and
// scratch blocks are never shared or locked.
//
// HMAC-SHA1 of the 26-byte input takes four block compressions; two of them
// (the key blocks) depend only on the secret and are done once per rotation.
// For the two left, Signer hands crypto/sha1 whole blocks it has padded
// itself and reads the chaining value back from the marshaled state, instead
// of calling Sum, which copies the whole digest and pads through a second
// Write. Measured (BenchmarkVerify*): Verify ≈ 130 ns, of which the two
// SHA-NI compressions are ≈ 80; a reused crypto/hmac ≈ 195 ns; hmac.New per
// cookie ≈ 525 ns and 6 allocations.
type Signer struct {
	secrets *Secrets
	snap    *Snapshot // the snapshot keys was built from
	keys    [2]keys

	h    hash.Hash
	load encoding.BinaryUnmarshaler
	save encoding.BinaryAppender

	inner [sha1.BlockSize]byte // input ‖ padding: the inner hash's last block
	outer [sha1.BlockSize]byte // inner digest ‖ padding: the outer hash's last block
	state [stateSize]byte      // scratch for reading a chaining value
	pad   [sha1.BlockSize]byte // scratch for secret ⊕ ipad/opad
}

// NewSigner returns a Signer reading s.
func NewSigner(s *Secrets) *Signer {
	if !stateLayoutOK() {
		panic("cookie: crypto/sha1 changed its marshaled state; Signer must be updated")
	}
	g := newSigner(s)
	g.sync()
	return g
}

func newSigner(s *Secrets) *Signer {
	h := sha1.New()
	g := &Signer{
		secrets: s,
		h:       h,
		load:    h.(encoding.BinaryUnmarshaler),
		save:    h.(encoding.BinaryAppender),
	}
	// SHA-1 padding of the final blocks: a 1 bit, zeros, then the message
	// length in bits, which counts the key block before each.
	g.inner[InputSize] = 0x80
	binary.BigEndian.PutUint64(g.inner[56:], (sha1.BlockSize+InputSize)*8)
	g.outer[sha1.Size] = 0x80
	binary.BigEndian.PutUint64(g.outer[56:], (sha1.BlockSize+sha1.Size)*8)
	return g
}

// stateLayoutOK checks once, against crypto/hmac, that the chaining value
// sits where Signer reads it. If a future crypto/sha1 moved it, Signer would
// otherwise emit cookies that need no secret to forge.
var stateLayoutOK = sync.OnceValue(func() bool {
	var snap Snapshot
	for i := range snap.Secrets[0] {
		snap.Secrets[0][i] = byte(i)
	}
	g := newSigner(NewSecretsFrom(snap))
	g.sync()
	ap := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, 1}), 4242)
	var got Cookie
	g.sign(&got, 0, 1.5, ap)

	var msg [InputSize]byte
	Input(&msg, 1.5, ap)
	m := hmac.New(sha1.New, snap.Secrets[0][:])
	m.Write(msg[:])
	return bytes.Equal(got[:], m.Sum(nil))
})

// Snapshot returns the snapshot the Signer uses, catching up with the
// latest one first.
func (g *Signer) Snapshot() *Snapshot { return g.sync() }

// Generate makes a cookie under the active secret, for a Challenge.
func (g *Signer) Generate(ts float64, addr netip.AddrPort) (secretID uint8, c Cookie) {
	secretID = g.sync().Active
	g.sign(&c, secretID, ts, addr)
	return secretID, c
}

// GenerateWith makes a cookie under secret secretID, which must be 0 or 1.
func (g *Signer) GenerateWith(secretID uint8, ts float64, addr netip.AddrPort) Cookie {
	g.sync()
	var c Cookie
	g.sign(&c, secretID, ts, addr)
	return c
}

// Verify applies the three rules of PROTOCOL.md §4 to a Response's SecretId,
// Timestamp and Cookie received from addr, in the order of their cost.
func (g *Signer) Verify(secretID uint8, ts float64, addr netip.AddrPort, c *Cookie, now float64) Result {
	if secretID > 1 {
		return Mismatch
	}
	// Written so that NaN and ±Inf fail.
	if age := now - ts; !(age >= 0 && age < MaxLifetime) {
		return Expired
	}
	snap := g.sync()
	if secretID == snap.Active {
		if !(ts >= snap.LastUpdate) {
			return WrongSecret
		}
	} else if !(ts <= snap.LastUpdate) {
		return WrongSecret
	}
	var want Cookie
	g.sign(&want, secretID, ts, addr)
	if subtle.ConstantTimeCompare(want[:], c[:]) != 1 {
		return Mismatch
	}
	return Valid
}

// sync rebuilds the key states when a rotation has published a new snapshot.
// Snapshots are never reused or changed, so comparing pointers is exact.
func (g *Signer) sync() *Snapshot {
	if p := g.secrets.cur.Load(); p != g.snap {
		g.rebuild(p)
	}
	return g.snap
}

// rebuild runs on the receive loop once per rotation and allocates nothing.
func (g *Signer) rebuild(p *Snapshot) {
	for i := range p.Secrets {
		g.keyState(&g.keys[i].inner, &p.Secrets[i], 0x36)
		g.keyState(&g.keys[i].outer, &p.Secrets[i], 0x5c)
	}
	clear(g.pad[:])
	g.snap = p
}

func (g *Signer) keyState(dst *[stateSize]byte, secret *[SecretSize]byte, pad byte) {
	for i, b := range secret {
		g.pad[i] = b ^ pad
	}
	g.h.Reset()
	g.h.Write(g.pad[:])
	g.save.AppendBinary(dst[:0])
}

// sign computes HMAC-SHA1(secret[id], Input(ts, addr)) from the key states:
// exactly two block compressions.
func (g *Signer) sign(c *Cookie, id uint8, ts float64, addr netip.AddrPort) {
	k := &g.keys[id]
	Input((*[InputSize]byte)(g.inner[:InputSize]), ts, addr)
	g.load.UnmarshalBinary(k.inner[:])
	g.h.Write(g.inner[:])
	g.chain(g.outer[:sha1.Size])
	g.load.UnmarshalBinary(k.outer[:])
	g.h.Write(g.outer[:])
	g.chain(c[:])
}

// chain copies out the chaining value, which after a padded final block is
// the digest.
func (g *Signer) chain(dst []byte) {
	g.save.AppendBinary(g.state[:0])
	copy(dst, g.state[chainOffset:chainOffset+sha1.Size])
}
