package token

import (
	"encoding/binary"
	"net/netip"
)

// Private is the private part of a connect token, as the server reads it
// after opening: who the client is, where it may connect, the keys of both
// directions and the backend's user data. Only the backend and the servers
// can read it.
//
// A Private is a fixed-size value (no pointers into other memory), so a
// server can keep one per receive loop and open tokens into it without
// allocating.
type Private struct {
	// ClientID is the backend's globally unique id for the client.
	ClientID uint64
	// TimeoutSeconds is the connection timeout the backend chose; negative
	// disables the timeout (netcode: development only).
	TimeoutSeconds int32
	// ClientToServerKey seals the client's packets, ServerToClientKey the
	// server's.
	ClientToServerKey [KeyBytes]byte
	ServerToClientKey [KeyBytes]byte
	// UserData is opaque to the protocol: the backend's data for the game
	// server.
	UserData [UserDataBytes]byte

	numServers int
	servers    [MaxServerAddresses]netip.AddrPort
}

// ServerAddresses returns the servers the token admits to (netcode's
// "internal" list). The slice aliases p: it is valid until p changes.
func (p *Private) ServerAddresses() []netip.AddrPort {
	return p.servers[:p.numServers:p.numServers]
}

// SetServerAddresses sets the list the token admits to: 1 to 32 addresses,
// IPv4 or IPv6 without zone.
func (p *Private) SetServerAddresses(addrs []netip.AddrPort) error {
	if err := checkAddrs("private", addrs); err != nil {
		return err
	}
	p.numServers = copy(p.servers[:], addrs)
	return nil
}

// HasServerAddress reports whether the token admits to a: the same port and
// the same IP, an IPv4-mapped IPv6 address matching its IPv4 form (a
// dual-stack socket may report either). The zone is ignored.
func (p *Private) HasServerAddress(a netip.AddrPort) bool {
	ip := a.Addr().Unmap().WithZone("")
	for _, s := range p.servers[:p.numServers] {
		if s.Port() == a.Port() && s.Addr().Unmap() == ip {
			return true
		}
	}
	return false
}

// put writes the plaintext private part into b: the fields at the offsets of
// layout.go and zeros up to PrivatePlainBytes. p's addresses were checked
// when set.
func (p *Private) put(b *[PrivatePlainBytes]byte) {
	binary.LittleEndian.PutUint64(b[privClientID:], p.ClientID)
	binary.LittleEndian.PutUint32(b[privTimeout:], uint32(p.TimeoutSeconds))
	n := privNumAddrs + putAddrs(b[privNumAddrs:], p.ServerAddresses())
	n += copy(b[n:], p.ClientToServerKey[:])
	n += copy(b[n:], p.ServerToClientKey[:])
	n += copy(b[n:], p.UserData[:])
	clear(b[n:])
}

// parse reads the plaintext private part. Like netcode it ignores the bytes
// after the user data (a sender writes zeros; they were authenticated).
func (p *Private) parse(b *[PrivatePlainBytes]byte) error {
	count, k, ok := readAddrs(b[privNumAddrs:], &p.servers)
	if !ok {
		p.numServers = 0
		return ErrMalformed
	}
	p.ClientID = binary.LittleEndian.Uint64(b[privClientID:])
	p.TimeoutSeconds = int32(binary.LittleEndian.Uint32(b[privTimeout:]))
	p.numServers = count
	n := privNumAddrs + k
	n += copy(p.ClientToServerKey[:], b[n:])
	n += copy(p.ServerToClientKey[:], b[n:])
	copy(p.UserData[:], b[n:])
	return nil
}
