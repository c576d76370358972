package cookie

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// fillReader returns b forever.
type fillReader byte

func (r fillReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// limitedReader yields n bytes of a counter, then fails.
type limitedReader struct{ n, i int }

var errDrained = errors.New("drained")

func (r *limitedReader) Read(p []byte) (int, error) {
	for k := range p {
		if r.i == r.n {
			return k, errDrained
		}
		p[k] = byte(r.i)
		r.i++
	}
	return len(p), nil
}

func TestNewSecrets(t *testing.T) {
	s, err := NewSecrets(1000, rand.NewChaCha8([32]byte{1}))
	if err != nil {
		t.Fatal(err)
	}
	p := s.Load()
	if p.Active != 0 || p.LastUpdate != 1000 || p.Gen != 0 {
		t.Errorf("start: active %d, last update %v, gen %d", p.Active, p.LastUpdate, p.Gen)
	}
	var zero [SecretSize]byte
	if p.Secrets[0] == zero || p.Secrets[1] == zero || p.Secrets[0] == p.Secrets[1] {
		t.Errorf("secrets not both filled: %x %x", p.Secrets[0], p.Secrets[1])
	}
	if d := p.NextRotate - p.LastUpdate; d < rotateInterval || d > rotateInterval+rotateJitter {
		t.Errorf("first rotation after %v s", d)
	}

	if _, err := NewSecrets(0, nil); err != nil {
		t.Errorf("crypto/rand: %v", err)
	}
	for _, n := range []int{0, SecretSize, 2 * SecretSize} {
		if _, err := NewSecrets(0, &limitedReader{n: n}); !errors.Is(err, errDrained) {
			t.Errorf("random fails after %d bytes: err %v", n, err)
		}
	}
}

func TestRotateTiming(t *testing.T) {
	for _, tc := range []struct {
		b        byte
		min, max float64
	}{
		{0x00, rotateInterval, rotateInterval},
		{0xff, rotateInterval + rotateJitter - 1e-9, rotateInterval + rotateJitter},
	} {
		s, err := NewSecrets(1000, fillReader(tc.b))
		if err != nil {
			t.Fatal(err)
		}
		now := 1000.0
		for range 3 {
			next := s.Load().NextRotate
			if d := next - now; d < tc.min || d > tc.max {
				t.Errorf("random %#x: rotation after %v s, want %v..%v", tc.b, d, tc.min, tc.max)
			}
			if ok, err := s.MaybeRotate(next - 1e-6); ok || err != nil {
				t.Fatalf("rotated early: %v %v", ok, err)
			}
			if ok, err := s.MaybeRotate(next); !ok || err != nil {
				t.Fatalf("did not rotate at NextRotate: %v %v", ok, err)
			}
			now = next
			if p := s.Load(); p.LastUpdate != now {
				t.Fatalf("LastUpdate %v, want %v", p.LastUpdate, now)
			}
		}
	}
}

// TestRotateJitterFresh: every interval draws its own jitter, spread over
// the whole window.
func TestRotateJitterFresh(t *testing.T) {
	s, err := NewSecrets(1000, rand.NewChaCha8([32]byte{2}))
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := 100.0, 0.0
	now := 1000.0
	for range 1000 {
		p := s.Load()
		d := p.NextRotate - p.LastUpdate
		lo, hi = min(lo, d), max(hi, d)
		now += 0.5
		for {
			ok, err := s.MaybeRotate(now)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				break
			}
			now += 0.5
		}
	}
	if lo < rotateInterval || hi > rotateInterval+rotateJitter || lo > 15.1 || hi < 19.9 {
		t.Errorf("intervals %v..%v, want spread over [15, 20)", lo, hi)
	}
	if g := s.Load().Gen; g != 1000 {
		t.Errorf("gen %d after 1000 rotations", g)
	}
}

func TestRotateSnapshotImmutable(t *testing.T) {
	s, err := NewSecrets(1000, rand.NewChaCha8([32]byte{3}))
	if err != nil {
		t.Fatal(err)
	}
	old := s.Load()
	saved := *old
	if err := s.Rotate(1016); err != nil {
		t.Fatal(err)
	}
	if *old != saved {
		t.Fatal("Rotate changed a published snapshot")
	}
	p := s.Load()
	switch {
	case p == old:
		t.Fatal("Rotate published no new snapshot")
	case p.Active != 1 || p.LastUpdate != 1016 || p.Gen != old.Gen+1:
		t.Errorf("after rotation: active %d, last update %v, gen %d", p.Active, p.LastUpdate, p.Gen)
	case p.Secrets[0] != old.Secrets[0]:
		t.Error("the previous active secret changed")
	case p.Secrets[1] == old.Secrets[1]:
		t.Error("the newly active secret was not refilled")
	}
}

func TestRotateErrorPublishesNothing(t *testing.T) {
	s := NewSecretsFrom(Snapshot{LastUpdate: 1, NextRotate: 16})
	for _, n := range []int{0, SecretSize} { // fails on the secret, then on the jitter
		s.random = &limitedReader{n: n}
		before := s.Load()
		if ok, err := s.MaybeRotate(20); ok || !errors.Is(err, errDrained) {
			t.Errorf("drained after %d: %v %v", n, ok, err)
		}
		if s.Load() != before {
			t.Errorf("drained after %d: a snapshot was published", n)
		}
	}
}

func TestNewSecretsFrom(t *testing.T) {
	snap := Snapshot{Active: 1, LastUpdate: 5, NextRotate: 9, Gen: 7}
	snap.Secrets[1][0] = 1
	s := NewSecretsFrom(snap)
	if p := s.Load(); *p != snap {
		t.Fatalf("got %+v", p)
	}
	if err := s.Rotate(9); err != nil {
		t.Fatal(err)
	}
	p := s.Load()
	if p.Active != 0 || p.Gen != 8 || p.Secrets[1] != snap.Secrets[1] || p.Secrets[0] == [SecretSize]byte{} {
		t.Errorf("after rotation: %+v", p)
	}
}
