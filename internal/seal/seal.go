// Package seal seals the connection packets of udpgate's sealed mode, as
// netcode.io seals its packets: ChaCha20-Poly1305 (IETF) with one key per
// direction from the client's connect token, a 64-bit per-direction packet
// counter as the nonce, the packet's clear header as associated data, and
// netcode's replay protection.
//
// A packet is sealed in place in the caller's buffer:
//
//	b[:hdr]          clear header, authenticated; its last CounterBytes bytes
//	                 are the counter, u64 LE, written by Seal
//	b[hdr:len-16]    ciphertext of the packet's body
//	b[len-16:]       Poly1305 tag (TagBytes)
//
// What the clear header holds besides the counter is the caller's (the
// layout is in docs/protocol.md §11.2). The 96-bit nonce is netcode's:
// four zero bytes, then the counter as u64 LE.
//
// A nonce must never repeat under one key, but each Sealer counts from 0, and
// a connect token's keys outlive a connection: a client that proves the same
// token on a second connection would repeat every counter. So Init takes a
// per-connection salt: the packets are then sealed under HChaCha20(key,
// salt), which is XChaCha20-Poly1305 under the token's key with the 24-byte
// nonce salt ‖ counter, and two connections with different salts share no
// nonce. udpgate's proposal uses the first 16 bytes of the connection's
// authorised cookie, which the server never grants twice.
//
// Sealer and Opener are not safe for concurrent use (a connection's sends are
// serialised by its lock, its receives by its loop). Neither allocates per
// packet: the AEAD is made once, by Init, and the nonce lives in the struct.
package seal

import (
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"math"

	"golang.org/x/crypto/chacha20"
	"golang.org/x/crypto/chacha20poly1305"
)

const (
	// KeyBytes is the size of a direction's key.
	KeyBytes = chacha20poly1305.KeySize
	// CounterBytes is the size of the counter at the end of the clear header.
	CounterBytes = 8
	// TagBytes is the size of the Poly1305 tag after the ciphertext.
	TagBytes = chacha20poly1305.Overhead
	// Overhead is what sealing adds to a packet: counter and tag.
	Overhead = CounterBytes + TagBytes
	// SaltBytes is the size of a connection's salt.
	SaltBytes = 16
)

var (
	// ErrShort: the buffer cannot hold the header's counter, or, when
	// opening, the tag.
	ErrShort = errors.New("seal: packet too short for a counter and a tag")
	// ErrNoRoom: Seal needs TagBytes of capacity past the plaintext.
	ErrNoRoom = errors.New("seal: no room for the tag after the plaintext")
	// ErrReplay: the counter was received already, or is older than the
	// newest received minus ReplayWindow.
	ErrReplay = errors.New("seal: replayed or too old packet counter")
	// ErrAuth: the packet does not authenticate: forged, modified, or
	// sealed under another key.
	ErrAuth = errors.New("seal: packet does not authenticate (forged, modified or wrong key)")
	// ErrExhausted: the sender used every counter; the connection must
	// end (2^64 − 1 packets: never in practice).
	ErrExhausted = errors.New("seal: packet counter exhausted; reconnect")
)

// Sealer seals one direction's packets under one key.
type Sealer struct {
	aead  cipher.AEAD
	next  uint64
	nonce [chacha20poly1305.NonceSize]byte
}

// Init makes s seal under key and salt (see the package comment; nil: key
// itself, as netcode does), starting at counter 0. key is copied.
func (s *Sealer) Init(key *[KeyBytes]byte, salt *[SaltBytes]byte) {
	*s = Sealer{aead: newAEAD(key, salt)}
}

// Next is the counter the next packet will carry.
func (s *Sealer) Next() uint64 { return s.next }

// SetNext makes n the counter of the next packet. Only for a one-off
// packet at a counter reserved for it (a server's refusal): a connection's
// counters only go up.
func (s *Sealer) SetNext(n uint64) { s.next = n }

// Seal writes the next counter into b[hdr-CounterBytes:hdr], encrypts
// b[hdr:] in place with b[:hdr] (counter included) as associated data, and
// returns b extended by the tag: b[:len(b)+TagBytes]. b must have that
// capacity, and hdr ≥ CounterBytes.
func (s *Sealer) Seal(b []byte, hdr int) ([]byte, error) {
	if hdr < CounterBytes || hdr > len(b) {
		return nil, ErrShort
	}
	if cap(b)-len(b) < TagBytes {
		return nil, ErrNoRoom
	}
	if s.next == math.MaxUint64 {
		return nil, ErrExhausted
	}
	c := s.next
	s.next++
	binary.LittleEndian.PutUint64(b[hdr-CounterBytes:], c)
	binary.LittleEndian.PutUint64(s.nonce[4:], c)
	return s.aead.Seal(b[:hdr], s.nonce[:], b[hdr:], b[:hdr]), nil
}

// Opener opens the other direction's packets under one key and drops
// replays.
type Opener struct {
	aead   cipher.AEAD
	replay Replay
	nonce  [chacha20poly1305.NonceSize]byte
}

// Init makes o open packets sealed under key and salt, with an empty replay
// window.
func (o *Opener) Init(key *[KeyBytes]byte, salt *[SaltBytes]byte) {
	*o = Opener{aead: newAEAD(key, salt)}
}

// Open authenticates and decrypts a packet sealed by Seal with the same hdr:
// it reads the counter from b[hdr-CounterBytes:hdr], refuses a replay
// (ErrReplay) before spending the decryption, decrypts in place (ErrAuth if
// the tag does not match), and only then marks the counter received. It
// returns the plaintext, b[hdr:len(b)-TagBytes], and the counter.
//
// After a successful Open, counter == o.Newest() tells that no later packet
// had arrived before this one: the rule for letting a packet move a
// connection to its source address, so that a delayed duplicate cannot.
//
// On ErrAuth the ciphertext in b is zeroed (the AEAD clears its output);
// the packet is to be dropped anyway.
func (o *Opener) Open(b []byte, hdr int) (plain []byte, counter uint64, err error) {
	if hdr < CounterBytes || len(b)-hdr < TagBytes {
		return nil, 0, ErrShort
	}
	c := binary.LittleEndian.Uint64(b[hdr-CounterBytes:])
	if o.replay.Seen(c) {
		return nil, c, ErrReplay
	}
	binary.LittleEndian.PutUint64(o.nonce[4:], c)
	plain, err = o.aead.Open(b[hdr:hdr], o.nonce[:], b[hdr:], b[:hdr])
	if err != nil {
		return nil, c, ErrAuth
	}
	o.replay.Mark(c)
	return plain, c, nil
}

// Newest is the newest counter opened so far (0 before any).
func (o *Opener) Newest() uint64 { return o.replay.last }

func newAEAD(key *[KeyBytes]byte, salt *[SaltBytes]byte) cipher.AEAD {
	k := key[:]
	if salt != nil {
		var err error
		if k, err = chacha20.HChaCha20(k, salt[:]); err != nil {
			panic("seal: " + err.Error()) // lengths are fixed by the types
		}
	}
	aead, err := chacha20poly1305.New(k)
	if err != nil {
		// Only a wrong key length or FIPS-140-only mode fail; the key
		// length is fixed by the type.
		panic("seal: " + err.Error())
	}
	return aead
}
