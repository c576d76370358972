package cookie

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"sync/atomic"
)

// Snapshot is one published state of the secrets (docs/protocol.md §4). It is
// immutable once published: readers on every receive loop hold it without
// locks, so a rotation publishes a new Snapshot instead of changing this one.
type Snapshot struct {
	Secrets    [2][SecretSize]byte
	Active     uint8   // ActiveSecret: the secret new cookies are made with, 0 or 1
	LastUpdate float64 // LastSecretUpdate, Unix seconds
	NextRotate float64 // when MaybeRotate rotates next: LastUpdate + 15 + uniform[0, 5)
	Gen        uint64  // incremented by every rotation
}

// Secrets publishes the current Snapshot to any number of readers.
//
// It has a single writer: only one goroutine (the server's housekeeping) may
// call Rotate or MaybeRotate. Readers need nothing but Load, which is one
// atomic load, so the per-packet path never waits for a rotation.
type Secrets struct {
	cur    atomic.Pointer[Snapshot]
	random io.Reader // read only by the writer
}

// NewSecrets fills both secrets from random (crypto/rand.Reader when nil),
// with ActiveSecret 0 and LastSecretUpdate now.
func NewSecrets(now float64, random io.Reader) (*Secrets, error) {
	if random == nil {
		random = rand.Reader
	}
	s := &Secrets{random: random}
	snap := &Snapshot{LastUpdate: now}
	for i := range snap.Secrets {
		if err := s.fill(&snap.Secrets[i]); err != nil {
			return nil, err
		}
	}
	if err := s.schedule(snap); err != nil {
		return nil, err
	}
	s.cur.Store(snap)
	return s, nil
}

// NewSecretsFrom publishes snap as given, for tests and vectors. Later
// rotations draw from crypto/rand.Reader.
func NewSecretsFrom(snap Snapshot) *Secrets {
	s := &Secrets{random: rand.Reader}
	s.cur.Store(&snap)
	return s
}

// Load returns the current snapshot. The caller must not modify it.
func (s *Secrets) Load() *Snapshot { return s.cur.Load() }

// Rotate flips ActiveSecret, refills the newly active secret and publishes
// the result. The previously active secret is kept, so cookies made under it
// stay valid until their 40 s lifetime ends; the secret before that is the
// one overwritten. On error nothing is published. Single writer only.
func (s *Secrets) Rotate(now float64) error {
	next := *s.cur.Load()
	next.Active ^= 1
	if err := s.fill(&next.Secrets[next.Active]); err != nil {
		return err
	}
	next.LastUpdate = now
	if err := s.schedule(&next); err != nil {
		return err
	}
	next.Gen++
	s.cur.Store(&next)
	return nil
}

// MaybeRotate rotates when now has reached NextRotate and reports whether it
// did. The housekeeping goroutine calls it on every tick. Single writer only.
func (s *Secrets) MaybeRotate(now float64) (bool, error) {
	if !(now >= s.cur.Load().NextRotate) {
		return false, nil
	}
	if err := s.Rotate(now); err != nil {
		return false, err
	}
	return true, nil
}

func (s *Secrets) fill(secret *[SecretSize]byte) error {
	if _, err := io.ReadFull(s.random, secret[:]); err != nil {
		return fmt.Errorf("cookie: reading secret: %w", err)
	}
	return nil
}

// schedule sets NextRotate with a fresh jitter, so an observer cannot predict
// rotations from earlier ones.
func (s *Secrets) schedule(snap *Snapshot) error {
	var b [8]byte
	if _, err := io.ReadFull(s.random, b[:]); err != nil {
		return fmt.Errorf("cookie: reading jitter: %w", err)
	}
	// 53 random bits scaled into [0, 1): exact in a float64, never 1.
	u := float64(binary.LittleEndian.Uint64(b[:])>>11) / (1 << 53)
	snap.NextRotate = snap.LastUpdate + rotateInterval + u*rotateJitter
	return nil
}
