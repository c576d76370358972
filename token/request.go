package token

import (
	"crypto/cipher"
	"encoding/binary"
	"time"

	"golang.org/x/crypto/chacha20poly1305"
)

// Request is netcode's connection-request body: what a client sends a server
// to prove its connect token (RequestBytes on the wire, layout in layout.go).
// netcode's own connection request packet is the byte 0 followed by it.
type Request struct {
	ProtocolID      uint64
	ExpireTimestamp uint64
	Nonce           [NonceBytes]byte
	SealedPrivate   [PrivateBytes]byte
}

// AppendBinary appends the RequestBytes bytes of r to b.
func (r *Request) AppendBinary(b []byte) ([]byte, error) {
	b, d := appendHead(b, RequestBytes, r.ProtocolID)
	binary.LittleEndian.PutUint64(d[reqExpire:], r.ExpireTimestamp)
	copy(d[reqNonce:], r.Nonce[:])
	copy(d[reqSealed:], r.SealedPrivate[:])
	return b, nil
}

// UnmarshalBinary reads a request body of exactly RequestBytes bytes with
// netcode 1.02's version info. It returns ErrMalformed or ErrVersion.
func (r *Request) UnmarshalBinary(b []byte) error {
	if err := checkRequest(b); err != nil {
		return err
	}
	r.ProtocolID = binary.LittleEndian.Uint64(b[reqProtocol:])
	r.ExpireTimestamp = binary.LittleEndian.Uint64(b[reqExpire:])
	copy(r.Nonce[:], b[reqNonce:])
	copy(r.SealedPrivate[:], b[reqSealed:])
	return nil
}

// MAC returns the Poly1305 tag that ends the sealed private part. It
// identifies a token (netcode keeps recently used tokens by it) and, unlike
// the client id, cannot be chosen by anyone without the private key.
func (r *Request) MAC() [MACBytes]byte {
	return [MACBytes]byte(r.SealedPrivate[PrivatePlainBytes:])
}

// RequestMAC is Request.MAC read straight from a request body b, which
// OpenRequest accepted.
func RequestMAC(b []byte) [MACBytes]byte {
	return [MACBytes]byte(b[reqSealed+PrivatePlainBytes : RequestBytes])
}

func checkRequest(b []byte) error {
	if len(b) != RequestBytes {
		return ErrMalformed
	}
	if string(b[reqVersion:reqProtocol]) != VersionInfo {
		return ErrVersion
	}
	return nil
}

// Opener opens the private part of connect tokens for one server: one
// private key and protocol id. It holds the AEAD and the scratch buffers, so
// opening a token allocates nothing. An Opener is not safe for concurrent
// use; give each receive goroutine its own (they are about 1.1 KiB).
type Opener struct {
	aead       cipher.AEAD
	protocolID uint64
	ad         [associatedBytes]byte
	nonce      [NonceBytes]byte
	plain      [PrivatePlainBytes]byte
}

// NewOpener returns an Opener for the server's private key and protocol id.
func NewOpener(privateKey *[KeyBytes]byte, protocolID uint64) *Opener {
	aead, err := chacha20poly1305.NewX(privateKey[:])
	if err != nil {
		// Only a wrong key length or FIPS-140-only mode fail; the key
		// length is fixed by the type.
		panic("token: " + err.Error())
	}
	return &Opener{aead: aead, protocolID: protocolID}
}

// OpenRequest checks a connection-request body b and opens its private part
// into dst, in the reference server's order: size (ErrMalformed), version
// (ErrVersion), protocol id (ErrProtocolID), expiry against now (ErrExpired),
// decryption (ErrInvalid), then the plaintext's layout (ErrMalformed). b is
// only read. dst is written only on success.
//
// Whether the token lists this server (Private.HasServerAddress) and whether
// it is already in use are the caller's checks.
func (o *Opener) OpenRequest(dst *Private, b []byte, now time.Time) error {
	if err := checkRequest(b); err != nil {
		return err
	}
	if binary.LittleEndian.Uint64(b[reqProtocol:]) != o.protocolID {
		return ErrProtocolID
	}
	return o.open(dst, binary.LittleEndian.Uint64(b[reqExpire:]),
		b[reqNonce:reqSealed], b[reqSealed:RequestBytes], now)
}

// Open opens a sealed private part given the clear fields that travel with
// it: expiry against now (ErrExpired), decryption under the Opener's key and
// protocol id (ErrInvalid), layout (ErrMalformed). dst is written only on
// success.
func (o *Opener) Open(dst *Private, expire uint64, nonce *[NonceBytes]byte, sealed *[PrivateBytes]byte, now time.Time) error {
	o.nonce = *nonce
	return o.open(dst, expire, o.nonce[:], sealed[:], now)
}

func (o *Opener) open(dst *Private, expire uint64, nonce, sealed []byte, now time.Time) error {
	if expire <= unixSeconds(now) {
		return ErrExpired
	}
	putAssociated(&o.ad, o.protocolID, expire)
	if _, err := o.aead.Open(o.plain[:0], nonce, sealed, o.ad[:]); err != nil {
		return ErrInvalid
	}
	var p Private // parsed aside, so a bad layout leaves dst untouched
	if err := p.parse(&o.plain); err != nil {
		return err
	}
	*dst = p
	return nil
}

// OpenPrivate opens one sealed private part: NewOpener(privateKey,
// protocolID).Open(…). It is for tools and tests; a server opens many tokens
// with one Opener, which does not allocate.
func OpenPrivate(privateKey *[KeyBytes]byte, protocolID, expire uint64, nonce *[NonceBytes]byte, sealed *[PrivateBytes]byte, now time.Time) (*Private, error) {
	p := new(Private)
	if err := NewOpener(privateKey, protocolID).Open(p, expire, nonce, sealed, now); err != nil {
		return nil, err
	}
	return p, nil
}

// unixSeconds is now in Unix seconds, 0 before 1970.
func unixSeconds(now time.Time) uint64 {
	return uint64(max(now.Unix(), 0))
}
