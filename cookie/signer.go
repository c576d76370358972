package cookie

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/binary"
	"hash"
	"net/netip"
	"reflect"
	"sync"
)

// Result is the outcome of Verify, one value per rule of docs/protocol.md §4 so
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

// Signer makes and verifies cookies for one goroutine; it is not safe for
// concurrent use. Each receive loop owns one, so the precomputed states and
// scratch blocks are never shared or locked.
//
// HMAC-SHA1 of the 26-byte input takes four block compressions; two of them
// (the key blocks) depend only on the secret and are done once per rotation.
// For the two left, Signer sets crypto/sha1's chaining value to the key
// block's, hands it one block it has padded itself and reads the chaining
// value back, which after a padded final block is the digest. crypto/sha1
// offers no API for that, so Signer reaches into its digest (see
// sha1Digest). Where the digest is not laid out as expected, Signer computes
// the textbook HMAC instead: slower, never wrong.
//
// Why by hand rather than with crypto/hmac: every Initial from any source,
// spoofed or not, costs the server a cookie, so the cookie is the price of a
// handshake flood. A crypto/hmac instance reused with Reset restores both
// key states for every cookie by parsing a marshaled copy of the whole hash
// state, and pads and copies through Sum; hmac.New per cookie compresses
// the key blocks again and allocates. The direct path does the two
// compressions that depend on the input and little else.
// BenchmarkVerify measures it against BenchmarkVerifyHMACReset,
// BenchmarkVerifyHMACNew and the fallback (BenchmarkGenerateTextbook);
// the figures are in tuning.md, "cookie: the cost of a cookie".
type Signer struct {
	secrets *Secrets
	snap    *Snapshot // the snapshot the key states were built from
	h       hash.Hash
	// d is h's digest, or nil when its layout did not check out and
	// every cookie takes the textbook path through h's public API.
	d *sha1Digest

	keys [2]keys // direct path: chaining values after the key blocks
	pads [2]pads // textbook path: the key blocks themselves

	inner [sha1.BlockSize]byte // input ‖ padding: the inner hash's last block
	outer [sha1.BlockSize]byte // inner digest ‖ padding: the outer hash's last block
	sum   [sha1.Size]byte      // textbook path: scratch for Sum
}

// keys holds one secret's chaining values after the ipad and opad blocks. A
// 64-byte secret is exactly one block, so both are fixed for the secret's
// life and a cookie needs only the two final blocks.
type keys struct{ inner, outer [5]uint32 }

// pads holds one secret ⊕ ipad and ⊕ opad, for the textbook path.
type pads struct{ inner, outer [sha1.BlockSize]byte }

// sha1Digest mirrors crypto/sha1's unexported digest. Signer writes its
// chaining value h and reads it back around a Write of one whole block;
// nx and len are set so that Write compresses that block at once.
//
// digestOf checks the mirror field by field against the real type (names,
// types, offsets, size) before any pointer conversion, and signerDirectOK
// checks the result against crypto/hmac; either failing, a Signer takes the
// textbook path. A boringcrypto build returns another type from sha1.New,
// which digestOf refuses.
type sha1Digest struct {
	h   [5]uint32
	x   [sha1.BlockSize]byte
	nx  int
	len uint64
}

// digestOf returns h's state as a *sha1Digest when h is a crypto/sha1
// digest laid out exactly as sha1Digest, else nil.
func digestOf(h hash.Hash) *sha1Digest {
	v := reflect.ValueOf(h)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return nil
	}
	got, want := v.Type().Elem(), reflect.TypeFor[sha1Digest]()
	if got.Kind() != reflect.Struct || got.PkgPath() != "crypto/sha1" || got.Name() != "digest" ||
		got.Size() != want.Size() || got.NumField() != want.NumField() {
		return nil
	}
	for i := range want.NumField() {
		g, w := got.Field(i), want.Field(i)
		if g.Name != w.Name || g.Type != w.Type || g.Offset != w.Offset {
			return nil
		}
	}
	return (*sha1Digest)(v.UnsafePointer())
}

// Accelerated reports whether Signers take the direct path. When it is
// false, crypto/sha1's internals no longer match what Signer expects and
// every cookie costs the textbook HMAC, about twice the CPU: cookies stay
// correct, and updating udpgate restores the speed.
func Accelerated() bool { return signerDirectOK() }

// NewSigner returns a Signer reading s.
func NewSigner(s *Secrets) *Signer {
	g := newSigner(s, signerDirectOK())
	g.sync()
	return g
}

// newSigner returns a Signer that takes the direct path when direct is set
// and the digest checks out, the textbook path otherwise.
func newSigner(s *Secrets, direct bool) *Signer {
	g := &Signer{secrets: s, h: sha1.New()}
	if direct {
		g.d = digestOf(g.h)
	}
	// SHA-1 padding of the final blocks: a 1 bit, zeros, then the message
	// length in bits, which counts the key block before each.
	g.inner[InputSize] = 0x80
	binary.BigEndian.PutUint64(g.inner[56:], (sha1.BlockSize+InputSize)*8)
	g.outer[sha1.Size] = 0x80
	binary.BigEndian.PutUint64(g.outer[56:], (sha1.BlockSize+sha1.Size)*8)
	return g
}

// signerDirectOK checks once per process, against crypto/hmac, that the
// direct path computes HMAC-SHA1: digestOf proves the layout, this proves
// that Write and the chaining value behave as sign assumes. If a future
// crypto/sha1 broke that, the direct path could emit cookies that need no
// secret to forge; the textbook path is used instead.
var signerDirectOK = sync.OnceValue(func() bool {
	var snap Snapshot
	for i := range snap.Secrets {
		for k := range snap.Secrets[i] {
			snap.Secrets[i][k] = byte(i*SecretSize + k)
		}
	}
	g := newSigner(NewSecretsFrom(snap), true)
	if g.d == nil {
		return false
	}
	g.sync()
	for i, ap := range []netip.AddrPort{
		netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, 1}), 4242),
		netip.AddrPortFrom(netip.AddrFrom16([16]byte{0: 0x20, 1: 0x01, 2: 0x0d, 3: 0xb8, 15: 7}), 65535),
	} {
		ts := 1.5 + float64(i)
		var got Cookie
		g.sign(&got, uint8(i), ts, ap)
		var msg [InputSize]byte
		Input(&msg, ts, ap)
		m := hmac.New(sha1.New, snap.Secrets[i][:])
		m.Write(msg[:])
		if !bytes.Equal(got[:], m.Sum(nil)) {
			return false
		}
	}
	return true
})

// GenerateTo makes a cookie under the active secret, for a Challenge, and
// writes it into *c, so a Challenge is encoded from the cookie in place
// instead of from a returned array copied first. It returns the secret's id.
func (g *Signer) GenerateTo(c *Cookie, ts float64, addr netip.AddrPort) (secretID uint8) {
	secretID = g.sync().Active
	g.sign(c, secretID, ts, addr)
	return secretID
}

// Verify applies the three rules of docs/protocol.md §4 to a Response's SecretId,
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
		pd := &g.pads[i]
		for k, b := range p.Secrets[i] {
			pd.inner[k] = b ^ 0x36
			pd.outer[k] = b ^ 0x5c
		}
		if g.d != nil {
			g.keys[i].inner = g.keyState(&pd.inner)
			g.keys[i].outer = g.keyState(&pd.outer)
		}
	}
	if g.d != nil {
		// The direct path needs only the chaining values; keep no copy
		// of the secrets beyond the snapshot's.
		clear(g.pads[:])
	}
	g.snap = p
}

// keyState returns the chaining value after the one key block.
func (g *Signer) keyState(block *[sha1.BlockSize]byte) [5]uint32 {
	g.h.Reset()
	g.h.Write(block[:])
	return g.d.h
}

// sign computes HMAC-SHA1(secret[id], Input(ts, addr)).
func (g *Signer) sign(c *Cookie, id uint8, ts float64, addr netip.AddrPort) {
	Input((*[InputSize]byte)(g.inner[:InputSize]), ts, addr)
	if g.d == nil {
		g.signTextbook(c, id)
		return
	}
	// Exactly two block compressions: each Write starts from a key
	// block's chaining value with an empty buffer (nx 0) and gets one
	// whole block, which crypto/sha1 compresses without buffering. len
	// only has to be consistent with that; the padding was written by
	// newSigner.
	k := &g.keys[id]
	d := g.d
	d.h, d.nx, d.len = k.inner, 0, sha1.BlockSize
	g.h.Write(g.inner[:])
	putChain((*[sha1.Size]byte)(g.outer[:sha1.Size]), &d.h)
	d.h, d.nx, d.len = k.outer, 0, sha1.BlockSize
	g.h.Write(g.outer[:])
	putChain((*[sha1.Size]byte)(c), &d.h)
}

// putChain writes a chaining value as SHA-1 digest bytes.
func putChain(dst *[sha1.Size]byte, h *[5]uint32) {
	binary.BigEndian.PutUint32(dst[0:], h[0])
	binary.BigEndian.PutUint32(dst[4:], h[1])
	binary.BigEndian.PutUint32(dst[8:], h[2])
	binary.BigEndian.PutUint32(dst[12:], h[3])
	binary.BigEndian.PutUint32(dst[16:], h[4])
}

// signTextbook is HMAC as RFC 2104 writes it, through crypto/sha1's public
// API only: four compressions, since no state can be restored. The input
// is already in g.inner.
func (g *Signer) signTextbook(c *Cookie, id uint8) {
	pd := &g.pads[id]
	g.h.Reset()
	g.h.Write(pd.inner[:])
	g.h.Write(g.inner[:InputSize])
	g.h.Sum(g.sum[:0])
	g.h.Reset()
	g.h.Write(pd.outer[:])
	g.h.Write(g.sum[:])
	// Sum into the Signer's own scratch: a caller's Cookie passed through
	// the interface call would escape, an allocation per cookie.
	g.h.Sum(g.sum[:0])
	*c = g.sum
}
