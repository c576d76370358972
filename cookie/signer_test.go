package cookie

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"math"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"sync"
	"testing"
)

var (
	testAddr = netip.MustParseAddrPort("127.0.0.1:7777")
	testTS   = vecCookies[0].ts // vecT0 + 0.25, under secret 0
)

func TestVerifyRules(t *testing.T) {
	g := NewSigner(NewSecretsFrom(vecSnapshot(t)))
	c0 := g.GenerateWith(0, testTS, testAddr)
	c1 := g.GenerateWith(1, vecT0-1, testAddr) // under the inactive secret, before the rotation
	forged := c0
	forged[Size-1] ^= 1
	badActive := g.GenerateWith(0, vecT0-1, testAddr)
	badInactive := g.GenerateWith(1, testTS, testAddr)
	v6 := netip.MustParseAddrPort("[2001:db8::42]:50000")
	c6 := g.GenerateWith(0, testTS, v6)

	for _, tc := range []struct {
		name string
		id   uint8
		ts   float64
		addr netip.AddrPort
		c    Cookie
		now  float64
		want Result
	}{
		{"valid", 0, testTS, testAddr, c0, testTS + 1, Valid},
		{"valid at once", 0, testTS, testAddr, c0, testTS, Valid},
		{"valid just before expiry", 0, testTS, testAddr, c0, testTS + MaxLifetime - 0.001, Valid},
		{"valid inactive secret", 1, vecT0 - 1, testAddr, c1, vecT0 + 1, Valid},
		{"valid IPv6", 0, testTS, v6, c6, testTS + 1, Valid},
		{"valid mapped IPv4", 0, testTS, netip.MustParseAddrPort("[::ffff:127.0.0.1]:7777"), c0, testTS + 1, Valid},
		{"expired at 40 s", 0, testTS, testAddr, c0, testTS + MaxLifetime, Expired},
		{"expired long ago", 0, testTS, testAddr, c0, testTS + 1e6, Expired},
		{"from the future", 0, testTS, testAddr, c0, testTS - 0.001, Expired},
		{"NaN timestamp", 0, math.NaN(), testAddr, c0, testTS, Expired},
		{"+Inf timestamp", 0, math.Inf(1), testAddr, c0, testTS, Expired},
		{"-Inf timestamp", 0, math.Inf(-1), testAddr, c0, testTS, Expired},
		{"NaN now", 0, testTS, testAddr, c0, math.NaN(), Expired},
		{"active secret, before its update", 0, vecT0 - 1, testAddr, badActive, vecT0, WrongSecret},
		{"inactive secret, after the update", 1, testTS, testAddr, badInactive, testTS + 1, WrongSecret},
		{"cookie of the other secret", 1, vecT0 - 1, testAddr, c0, vecT0, Mismatch},
		{"other address", 0, testTS, netip.MustParseAddrPort("127.0.0.2:7777"), c0, testTS + 1, Mismatch},
		{"other port", 0, testTS, netip.MustParseAddrPort("127.0.0.1:7778"), c0, testTS + 1, Mismatch},
		{"other timestamp", 0, testTS + 0.5, testAddr, c0, testTS + 1, Mismatch},
		{"forged", 0, testTS, testAddr, forged, testTS + 1, Mismatch},
		{"zero cookie", 0, testTS, testAddr, Cookie{}, testTS + 1, Mismatch},
		{"secret id 2", 2, testTS, testAddr, c0, testTS + 1, Mismatch},
		{"secret id 255", 255, testTS, testAddr, c0, testTS + 1, Mismatch},
	} {
		if got := g.Verify(tc.id, tc.ts, tc.addr, &tc.c, tc.now); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestVerifyAcrossRotations: a rotation keeps the previous secret valid and
// refills the one before it.
func TestVerifyAcrossRotations(t *testing.T) {
	s := NewSecretsFrom(vecSnapshot(t))
	g := NewSigner(s)
	rotate := func(at float64) {
		t.Helper()
		if err := s.Rotate(at); err != nil {
			t.Fatal(err)
		}
	}
	orig := s.Load().Secrets[0]
	id, c := g.Generate(testTS, testAddr)
	if id != 0 {
		t.Fatalf("generated under secret %d, want the active 0", id)
	}

	t1 := vecT0 + 16
	rotate(t1)
	if r := g.Verify(id, testTS, testAddr, &c, t1+1); r != Valid {
		t.Fatalf("after one rotation: %v, want valid", r)
	}
	if id2, _ := g.Generate(t1, testAddr); id2 != 1 {
		t.Errorf("after one rotation new cookies use secret %d, want 1", id2)
	}

	t2 := t1 + 16
	rotate(t2)
	if r := g.Verify(id, testTS, testAddr, &c, t2+1); r != WrongSecret {
		t.Errorf("after two rotations: %v, want wrong_secret", r)
	}
	// A timestamp moved past the new update passes rule 2, but secret 0 was
	// refilled, so the original secret's cookie no longer matches.
	moved := refCookie(&orig, t2+0.5, testAddr)
	if r := g.Verify(0, t2+0.5, testAddr, &moved, t2+1); r != Mismatch {
		t.Errorf("original secret after refill: %v, want mismatch", r)
	}
}

// TestSignerFollowsRotation: the Signer rebuilds its key states from each new
// snapshot, for both secrets.
func TestSignerFollowsRotation(t *testing.T) {
	s, err := NewSecrets(1000, rand.NewChaCha8([32]byte{4}))
	if err != nil {
		t.Fatal(err)
	}
	g := NewSigner(s)
	for i := range 4 {
		now := 1000 + 16*float64(i)
		if i > 0 {
			if err := s.Rotate(now); err != nil {
				t.Fatal(err)
			}
		}
		p := g.Snapshot()
		if p != s.Load() {
			t.Fatalf("rotation %d: Signer uses gen %d, published gen %d", i, p.Gen, s.Load().Gen)
		}
		id, c := g.Generate(now, testAddr)
		if id != p.Active || c != refCookie(&p.Secrets[id], now, testAddr) {
			t.Errorf("rotation %d: Generate under secret %d differs from HMAC", i, id)
		}
		other := id ^ 1
		if c := g.GenerateWith(other, now, testAddr); c != refCookie(&p.Secrets[other], now, testAddr) {
			t.Errorf("rotation %d: GenerateWith secret %d differs from HMAC", i, other)
		}
	}
}

// TestConcurrentSigners is for -race: signers on several goroutines while the
// single writer rotates.
func TestConcurrentSigners(t *testing.T) {
	s, err := NewSecrets(1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	const readers, iters, rotations = 3, 2000, 200
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range rotations {
			if err := s.Rotate(1000 + 16*float64(i+1)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := NewSigner(s)
			addr := netip.AddrPortFrom(testAddr.Addr(), uint16(r))
			for range iters {
				before := g.Snapshot()
				ts := before.LastUpdate
				c := g.GenerateWith(before.Active, ts, addr)
				res := g.Verify(before.Active, ts, addr, &c, ts+1)
				if g.Snapshot() != before {
					continue // rotated meanwhile: either result is right
				}
				if res != Valid || c != refCookie(&before.Secrets[before.Active], ts, addr) {
					t.Errorf("reader %d gen %d: %v", r, before.Gen, res)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// raceEnabled is set by race_test.go.
var raceEnabled bool

func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	s := NewSecretsFrom(vecSnapshot(t))
	g := NewSigner(s)
	var c Cookie
	g.GenerateTo(&c, testTS, testAddr)
	if n := testing.AllocsPerRun(100, func() { g.GenerateTo(&c, testTS, testAddr) }); n != 0 {
		t.Errorf("GenerateTo: %v allocs", n)
	}
	if n := testing.AllocsPerRun(100, func() { g.Verify(0, testTS, testAddr, &c, testTS+1) }); n != 0 {
		t.Errorf("Verify: %v allocs", n)
	}

	// Rebuilding the key states after a rotation allocates nothing either.
	cp := *s.Load()
	snaps := [2]*Snapshot{s.Load(), &cp}
	i := 0
	if n := testing.AllocsPerRun(100, func() {
		i++
		s.cur.Store(snaps[i&1])
		if g.Verify(0, testTS, testAddr, &c, testTS+1) != Valid {
			t.Fatal("invalid after rebuild")
		}
	}); n != 0 {
		t.Errorf("Verify with a rebuild: %v allocs", n)
	}
}

func FuzzVerify(f *testing.F) {
	v := vecCookies[0]
	vc, _ := hex.DecodeString(v.cookie)
	f.Add(v.secretID, v.ts, []byte{127, 0, 0, 1}, uint16(7777), vc, v.ts+1)
	f.Add(uint8(1), vecT0-1, []byte{0x20, 1, 0xd, 0xb8, 15: 1}, uint16(0), []byte{}, vecT0+39)
	f.Add(uint8(2), math.NaN(), []byte{}, uint16(1), make([]byte, Size), math.Inf(1))
	g := NewSigner(NewSecretsFrom(vecSnapshot(f)))
	snap := g.Snapshot()
	f.Fuzz(func(t *testing.T, id uint8, ts float64, ip []byte, port uint16, raw []byte, now float64) {
		var addr netip.AddrPort
		switch len(ip) {
		case 4:
			addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip)), port)
		case 16:
			addr = netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip)), port)
		}
		var c Cookie
		copy(c[:], raw)
		if g.Verify(id, ts, addr, &c, now) == Valid && (id > 1 || c != refCookie(&snap.Secrets[id], ts, addr)) {
			t.Fatalf("valid without being generated: id %d ts %v %v %x", id, ts, addr, c)
		}

		// A generated cookie fails only by rules 1 and 2.
		id &= 1
		c = g.GenerateWith(id, ts, addr)
		want := Valid
		if age := now - ts; !(age >= 0 && age < MaxLifetime) {
			want = Expired
		} else if (id == snap.Active && !(ts >= snap.LastUpdate)) || (id != snap.Active && !(ts <= snap.LastUpdate)) {
			want = WrongSecret
		}
		if got := g.Verify(id, ts, addr, &c, now); got != want {
			t.Fatalf("generated id %d ts %v now %v: %v, want %v", id, ts, now, got, want)
		}
	})
}

func BenchmarkGenerate(b *testing.B) {
	g := NewSigner(NewSecretsFrom(vecSnapshot(b)))
	var c Cookie
	b.ReportAllocs()
	for b.Loop() {
		g.GenerateTo(&c, testTS, testAddr)
	}
}

func BenchmarkVerify(b *testing.B) {
	g := NewSigner(NewSecretsFrom(vecSnapshot(b)))
	_, c := g.Generate(testTS, testAddr)
	b.ReportAllocs()
	for b.Loop() {
		if g.Verify(0, testTS, testAddr, &c, testTS+1) != Valid {
			b.Fatal("invalid")
		}
	}
}

// BenchmarkVerifyHMACNew is the baseline: the textbook HMAC per cookie.
func BenchmarkVerifyHMACNew(b *testing.B) {
	snap := vecSnapshot(b)
	c := refCookie(&snap.Secrets[0], testTS, testAddr)
	var msg [InputSize]byte
	b.ReportAllocs()
	for b.Loop() {
		Input(&msg, testTS, testAddr)
		m := hmac.New(sha1.New, snap.Secrets[0][:])
		m.Write(msg[:])
		if !hmac.Equal(m.Sum(nil), c[:]) {
			b.Fatal("invalid")
		}
	}
}

// BenchmarkVerifyHMACReset is crypto/hmac at its best: one instance, Reset.
func BenchmarkVerifyHMACReset(b *testing.B) {
	snap := vecSnapshot(b)
	c := refCookie(&snap.Secrets[0], testTS, testAddr)
	var msg [InputSize]byte
	var sum [sha1.Size]byte
	m := hmac.New(sha1.New, snap.Secrets[0][:])
	b.ReportAllocs()
	for b.Loop() {
		Input(&msg, testTS, testAddr)
		m.Reset()
		m.Write(msg[:])
		if !hmac.Equal(m.Sum(sum[:0]), c[:]) {
			b.Fatal("invalid")
		}
	}
}

// TestDirectPath: on this toolchain crypto/sha1's digest is laid out as
// Signer expects, so the fast path is on. If this fails after a Go upgrade,
// cookies are still right (the textbook path) but slower: update
// sha1Digest.
func TestDirectPath(t *testing.T) {
	if reflect.TypeOf(sha1.New()).String() != "*sha1.digest" {
		t.Skipf("sha1.New returns %T (boringcrypto or FIPS build): the textbook path is expected", sha1.New())
	}
	if !signerDirectOK() {
		t.Fatal("crypto/sha1's digest failed the layout or HMAC check; Signer falls back to the textbook path")
	}
	if g := NewSigner(NewSecretsFrom(vecSnapshot(t))); g.d == nil {
		t.Fatal("NewSigner did not take the direct path")
	}
}

// TestTextbookPath: the fallback gives the same cookies and verdicts, with
// no allocation either.
func TestTextbookPath(t *testing.T) {
	s := NewSecretsFrom(vecSnapshot(t))
	g := newSigner(s, false)
	if g.d != nil {
		t.Fatal("newSigner(direct=false) took the direct path")
	}
	fast := NewSigner(s)
	snap := g.Snapshot()
	for _, v := range vecCookies {
		addr := netip.MustParseAddrPort(v.addr)
		c := g.GenerateWith(v.secretID, v.ts, addr)
		if got := hex.EncodeToString(c[:]); got != v.cookie {
			t.Errorf("%s secret %d: cookie %s, want %s", v.addr, v.secretID, got, v.cookie)
		}
	}
	r := rand.New(rand.NewPCG(5, 5))
	for range 200 {
		var ip [16]byte
		for i := range ip {
			ip[i] = byte(r.Uint32())
		}
		addr := netip.AddrPortFrom(netip.AddrFrom16(ip), uint16(r.Uint32()))
		ts := vecT0 + r.Float64()*30
		id := uint8(r.IntN(2))
		want := refCookie(&snap.Secrets[id], ts, addr)
		if c := g.GenerateWith(id, ts, addr); c != want {
			t.Fatalf("textbook %v id %d ts %v: %x, want %x", addr, id, ts, c, want)
		}
		if c := fast.GenerateWith(id, ts, addr); c != want {
			t.Fatalf("NewSigner %v id %d ts %v: %x, want %x", addr, id, ts, c, want)
		}
		if res := g.Verify(id, ts, addr, &want, ts+1); id == snap.Active && res != Valid {
			t.Fatalf("textbook Verify: %v", res)
		}
	}
	if raceEnabled {
		return
	}
	if n := testing.AllocsPerRun(100, func() { g.Generate(testTS, testAddr) }); n != 0 {
		t.Errorf("textbook Generate: %v allocs", n)
	}
}

// notSHA1 is a hash.Hash that is not crypto/sha1's digest.
type notSHA1 struct{ hash.Hash }

func TestDigestOfRefusesOtherHashes(t *testing.T) {
	for _, h := range []hash.Hash{notSHA1{sha1.New()}, &notSHA1{sha1.New()}, sha256.New(), (*notSHA1)(nil),
		hmac.New(sha1.New, make([]byte, 64))} {
		if digestOf(h) != nil {
			t.Errorf("digestOf(%T) accepted it", h)
		}
	}
}

func BenchmarkGenerateTextbook(b *testing.B) {
	g := newSigner(NewSecretsFrom(vecSnapshot(b)), false)
	g.sync()
	var c Cookie
	b.ReportAllocs()
	for b.Loop() {
		g.GenerateTo(&c, testTS, testAddr)
	}
}
