package token

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// ConnectToken is a whole netcode.io connect token: the 2048 bytes a backend
// hands a client. The client reads the server addresses and its keys from
// it and sends Request() to a server; it cannot read SealedPrivate.
type ConnectToken struct {
	ProtocolID uint64
	// CreateTimestamp and ExpireTimestamp are Unix seconds. A netcode client
	// gives up after ExpireTimestamp − CreateTimestamp seconds of trying; a
	// server refuses the token once its clock reaches ExpireTimestamp.
	CreateTimestamp uint64
	ExpireTimestamp uint64
	Nonce           [NonceBytes]byte
	SealedPrivate   [PrivateBytes]byte
	// TimeoutSeconds is the connection timeout (negative: none).
	TimeoutSeconds int32
	// ServerAddresses are where the client may connect, tried in order
	// (netcode's "public" list), 1 to 32.
	ServerAddresses   []netip.AddrPort
	ClientToServerKey [KeyBytes]byte
	ServerToClientKey [KeyBytes]byte
}

// MarshalBinary returns the TokenBytes bytes of t.
func (t *ConnectToken) MarshalBinary() ([]byte, error) {
	return t.AppendBinary(make([]byte, 0, TokenBytes))
}

// AppendBinary appends the TokenBytes bytes of t to b. It fails, appending
// nothing, when the address list is not 1 to 32 valid addresses without zone.
func (t *ConnectToken) AppendBinary(b []byte) ([]byte, error) {
	if err := checkAddrs("public", t.ServerAddresses); err != nil {
		return b, err
	}
	b, d := appendHead(b, TokenBytes, t.ProtocolID)
	binary.LittleEndian.PutUint64(d[tokCreate:], t.CreateTimestamp)
	binary.LittleEndian.PutUint64(d[tokExpire:], t.ExpireTimestamp)
	copy(d[tokNonce:], t.Nonce[:])
	copy(d[tokSealed:], t.SealedPrivate[:])
	binary.LittleEndian.PutUint32(d[tokTimeout:], uint32(t.TimeoutSeconds))
	n := tokNumAddrs + putAddrs(d[tokNumAddrs:], t.ServerAddresses)
	n += copy(d[n:], t.ClientToServerKey[:])
	copy(d[n:], t.ServerToClientKey[:])
	return b, nil // the rest is the zeros appended above
}

// UnmarshalBinary reads a token made by any netcode.io 1.02 implementation.
// It checks what the reference client checks: the size, the version info,
// create ≤ expire, 1 to 32 addresses of known types. Like the reference it
// ignores the padding after the keys.
func (t *ConnectToken) UnmarshalBinary(b []byte) error {
	if len(b) != TokenBytes {
		return fmt.Errorf("%w: a connect token is %d bytes, got %d", ErrMalformed, TokenBytes, len(b))
	}
	if string(b[tokVersion:tokProtocol]) != VersionInfo {
		return fmt.Errorf("%w (got %q)", ErrVersion, b[tokVersion:tokProtocol])
	}
	create := binary.LittleEndian.Uint64(b[tokCreate:])
	expire := binary.LittleEndian.Uint64(b[tokExpire:])
	if create > expire {
		return fmt.Errorf("%w: created at %d, after it expires (%d)", ErrMalformed, create, expire)
	}
	var addrs [MaxServerAddresses]netip.AddrPort
	count, k, ok := readAddrs(b[tokNumAddrs:], &addrs)
	if !ok {
		return fmt.Errorf("%w: bad server address list", ErrMalformed)
	}
	t.ProtocolID = binary.LittleEndian.Uint64(b[tokProtocol:])
	t.CreateTimestamp, t.ExpireTimestamp = create, expire
	copy(t.Nonce[:], b[tokNonce:])
	copy(t.SealedPrivate[:], b[tokSealed:])
	t.TimeoutSeconds = int32(binary.LittleEndian.Uint32(b[tokTimeout:]))
	t.ServerAddresses = append(t.ServerAddresses[:0], addrs[:count]...)
	n := tokNumAddrs + k
	n += copy(t.ClientToServerKey[:], b[n:])
	copy(t.ServerToClientKey[:], b[n:])
	return nil
}

// Request returns the connection-request body the client sends to prove t.
func (t *ConnectToken) Request() Request {
	return Request{
		ProtocolID:      t.ProtocolID,
		ExpireTimestamp: t.ExpireTimestamp,
		Nonce:           t.Nonce,
		SealedPrivate:   t.SealedPrivate,
	}
}
