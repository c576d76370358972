package token

import (
	"crypto/rand"
	"fmt"
	"io"
	"math"
	"net/netip"
	"time"

	"golang.org/x/crypto/chacha20poly1305"
)

// Params describe a connect token for Generate.
type Params struct {
	ProtocolID uint64
	ClientID   uint64
	// ServerAddresses are where the client may connect, tried in order
	// (netcode's public list): 1 to 32 addresses without zone.
	ServerAddresses []netip.AddrPort
	// InternalServerAddresses, if not nil, is the list sealed in the private
	// part, which the server checks its own address against; netcode lets
	// it differ from the public list (a server behind a proxy or NAT). It
	// must have as many entries as ServerAddresses. nil: the same list.
	InternalServerAddresses []netip.AddrPort
	// Expire is how long the token may be used to connect, from now, in
	// whole seconds (at least 1 s; a fraction is dropped).
	Expire time.Duration
	// Timeout is the connection timeout the token carries, in whole seconds
	// (at least 1 s), or negative for none (netcode: development only).
	Timeout time.Duration
	// UserData is up to 256 bytes for the game server, zero padded.
	UserData []byte
	// Rand supplies the nonce and the two keys, read in that order (24, 32
	// and 32 bytes). nil: crypto/rand. Tests inject a fixed source.
	Rand io.Reader
	// Now is the clock for the create timestamp. nil: time.Now.
	Now func() time.Time
}

// Generate makes a connect token for p, sealing its private part under the
// 32-byte private key shared with the servers. Like netcode's generator the
// create timestamp is now, the expire timestamp now + Expire, and the keys
// and nonce are fresh random bytes.
func Generate(privateKey *[KeyBytes]byte, p *Params) (*ConnectToken, error) {
	if err := checkAddrs("public", p.ServerAddresses); err != nil {
		return nil, err
	}
	internal := p.InternalServerAddresses
	if internal == nil {
		internal = p.ServerAddresses
	} else if len(internal) != len(p.ServerAddresses) {
		return nil, fmt.Errorf("token: %d internal server addresses for %d public ones; netcode pairs them one to one",
			len(internal), len(p.ServerAddresses))
	}
	if p.Expire < time.Second {
		return nil, fmt.Errorf("token: expire %v is under 1 s; a token must be usable for at least a second", p.Expire)
	}
	timeout, err := timeoutSeconds(p.Timeout)
	if err != nil {
		return nil, err
	}
	if len(p.UserData) > UserDataBytes {
		return nil, fmt.Errorf("token: %d bytes of user data; a token carries at most %d", len(p.UserData), UserDataBytes)
	}

	var priv Private
	if err := priv.SetServerAddresses(internal); err != nil {
		return nil, err
	}
	priv.ClientID = p.ClientID
	priv.TimeoutSeconds = timeout
	copy(priv.UserData[:], p.UserData)

	t := &ConnectToken{
		ProtocolID:      p.ProtocolID,
		TimeoutSeconds:  timeout,
		ServerAddresses: append([]netip.AddrPort(nil), p.ServerAddresses...),
	}
	r := p.Rand
	if r == nil {
		r = rand.Reader
	}
	for _, b := range [][]byte{t.Nonce[:], priv.ClientToServerKey[:], priv.ServerToClientKey[:]} {
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, fmt.Errorf("token: reading random bytes: %w", err)
		}
	}
	t.ClientToServerKey, t.ServerToClientKey = priv.ClientToServerKey, priv.ServerToClientKey

	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	t.CreateTimestamp = unixSeconds(now())
	t.ExpireTimestamp = t.CreateTimestamp + uint64(p.Expire/time.Second)

	if err := sealPrivate(&t.SealedPrivate, &priv, privateKey, p.ProtocolID, t.ExpireTimestamp, &t.Nonce); err != nil {
		return nil, err
	}
	return t, nil
}

// sealPrivate seals p into dst under the private key, with the associated
// data of protocol id and expire timestamp and the given nonce, as
// netcode_encrypt_connect_token_private does: the 1008 plaintext bytes are
// encrypted in place and the MAC fills the last 16.
func sealPrivate(dst *[PrivateBytes]byte, p *Private, privateKey *[KeyBytes]byte, protocolID, expire uint64, nonce *[NonceBytes]byte) error {
	aead, err := chacha20poly1305.NewX(privateKey[:])
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	plain := (*[PrivatePlainBytes]byte)(dst[:PrivatePlainBytes])
	p.put(plain)
	var ad [associatedBytes]byte
	putAssociated(&ad, protocolID, expire)
	aead.Seal(dst[:0], nonce[:], plain[:], ad[:])
	return nil
}

// timeoutSeconds converts Params.Timeout to the token's i32 seconds.
func timeoutSeconds(d time.Duration) (int32, error) {
	if d < 0 {
		return -1, nil
	}
	if d < time.Second {
		return 0, fmt.Errorf("token: timeout %v is under 1 s; use at least 1 s, or a negative value for none", d)
	}
	s := d / time.Second
	if s > math.MaxInt32 {
		return 0, fmt.Errorf("token: timeout %v does not fit the token's 32-bit seconds", d)
	}
	return int32(s), nil
}
