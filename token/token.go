// Package token makes and reads netcode.io 1.02 connect tokens, byte for
// byte, so that a game backend that already issues netcode.io tokens can send
// its players to a udpgate server unchanged, and a Go backend can issue them
// with this package.
//
// A connect token has a public part, which the backend hands the client over
// HTTPS (ConnectToken, 2048 bytes), and a private part sealed with
// XChaCha20-Poly1305 under a 32-byte private key that only the backend and
// the servers know (Private, 1024 bytes sealed). The client proves its token
// to a server by sending the connection-request body (Request, 1077 bytes):
// the version, protocol id, expire timestamp, nonce and sealed private part.
// The server opens it with an Opener, which costs no allocation, and learns
// the client id, the keys of both directions and the user data.
//
// All integers are little-endian. The layouts, with offsets, are in
// layout.go; the normative source is netcode.io's STANDARD.md and its
// reference implementation netcode.c (NETCODE 1.02).
package token

import "errors"

// Sizes of netcode.io 1.02 (netcode.h, netcode.c).
const (
	// VersionInfo is the version string every token and request starts
	// with, NUL included.
	VersionInfo = "NETCODE 1.02\x00"
	// VersionInfoBytes is len(VersionInfo).
	VersionInfoBytes = 13
	// KeyBytes is the size of the private key and of each packet key.
	KeyBytes = 32
	// NonceBytes is the size of a token's XChaCha20 nonce.
	NonceBytes = 24
	// MACBytes is the size of the Poly1305 tag ending the sealed private part.
	MACBytes = 16
	// PrivateBytes is the size of the sealed private part: PrivatePlainBytes
	// of ciphertext followed by the MAC.
	PrivateBytes = 1024
	// PrivatePlainBytes is the size of the private part before sealing.
	PrivatePlainBytes = PrivateBytes - MACBytes
	// UserDataBytes is the size of the user data in the private part.
	UserDataBytes = 256
	// TokenBytes is the size of a whole (public) connect token.
	TokenBytes = 2048
	// MaxServerAddresses bounds the address lists (1..32).
	MaxServerAddresses = 32
	// RequestBytes is the size of the connection-request body: version (13),
	// protocol id (8), expire timestamp (8), nonce (24), sealed private
	// part (1024).
	RequestBytes = VersionInfoBytes + 8 + 8 + NonceBytes + PrivateBytes
	// RequestPacketBytes is netcode's whole connection request packet: the
	// prefix byte 0 followed by the body.
	RequestPacketBytes = 1 + RequestBytes
)

// Errors. Decoders and the Opener return these sentinels unwrapped on the
// server's path (no allocation per hostile datagram); the token file reader
// (ConnectToken.UnmarshalBinary) and Generate wrap them with details.
var (
	// ErrMalformed: the bytes do not have the layout of a token or request
	// (wrong size, address count outside 1..32, unknown address type).
	ErrMalformed = errors.New("token: malformed connect token or request")
	// ErrVersion: the version info is not "NETCODE 1.02" with its NUL.
	ErrVersion = errors.New(`token: not a netcode.io 1.02 token (version info is not "NETCODE 1.02")`)
	// ErrProtocolID: the clear protocol id is not the server's; the token
	// was made for another game or build: check -protocol-id on both the
	// backend and the server.
	ErrProtocolID = errors.New("token: made for another protocol id (check -protocol-id on the backend and the server)")
	// ErrExpired: the expire timestamp is at or before now; ask the backend
	// for a new token (or check the clocks of backend and server).
	ErrExpired = errors.New("token: connect token expired (get a new one from the backend; check the clocks)")
	// ErrInvalid: the private part does not open: wrong private key, or the
	// protocol id, expire timestamp, nonce or private part was modified.
	ErrInvalid = errors.New("token: connect token invalid (wrong private key or protocol id, or tampered)")
)
