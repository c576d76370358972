package token

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// Offsets of the fixed fields of a connect token (TokenBytes):
//
//	   0  version info        13  "NETCODE 1.02\0"
//	  13  protocol id          8  u64
//	  21  create timestamp     8  u64, Unix seconds
//	  29  expire timestamp     8  u64, Unix seconds
//	  37  nonce               24
//	  61  sealed private    1024  ciphertext (1008) ‖ MAC (16)
//	1085  timeout seconds      4  i32 (negative: no timeout)
//	1089  address count        4  u32, 1..32
//	1093  addresses               7 (IPv4) or 19 (IPv6) bytes each
//	   …  client→server key   32
//	   …  server→client key   32
//	   …  zeros up to 2048
const (
	tokVersion  = 0
	tokProtocol = tokVersion + VersionInfoBytes
	tokCreate   = tokProtocol + 8
	tokExpire   = tokCreate + 8
	tokNonce    = tokExpire + 8
	tokSealed   = tokNonce + NonceBytes
	tokTimeout  = tokSealed + PrivateBytes
	tokNumAddrs = tokTimeout + 4
	tokAddrs    = tokNumAddrs + 4
)

// Offsets of the private part before sealing (PrivatePlainBytes):
//
//	 0  client id            8  u64
//	 8  timeout seconds      4  i32
//	12  address count        4  u32, 1..32
//	16  addresses               7 or 19 bytes each
//	 …  client→server key   32
//	 …  server→client key   32
//	 …  user data          256
//	 …  zeros up to 1008
const (
	privClientID = 0
	privTimeout  = 8
	privNumAddrs = 12
	privAddrs    = 16
)

// Offsets of the connection-request body (RequestBytes). netcode's
// connection request packet is the byte 0 followed by this body.
//
//	 0  version info        13
//	13  protocol id          8  u64
//	21  expire timestamp     8  u64
//	29  nonce               24
//	53  sealed private    1024
const (
	reqVersion  = 0
	reqProtocol = reqVersion + VersionInfoBytes
	reqExpire   = reqProtocol + 8
	reqNonce    = reqExpire + 8
	reqSealed   = reqNonce + NonceBytes
)

// appendHead appends size zero bytes to b and writes into them the head a
// token and a request share (tokVersion = reqVersion, tokProtocol =
// reqProtocol): the version info and the protocol id. It returns the grown b
// and the appended part.
func appendHead(b []byte, size int, protocolID uint64) (grown, d []byte) {
	start := len(b)
	b = append(b, make([]byte, size)...)
	d = b[start:]
	copy(d[tokVersion:], VersionInfo)
	binary.LittleEndian.PutUint64(d[tokProtocol:], protocolID)
	return b, d
}

// associatedBytes is the AEAD associated data of the private part: version
// info ‖ protocol id ‖ expire timestamp. The clear protocol id and expire
// timestamp are thereby authenticated.
const associatedBytes = VersionInfoBytes + 8 + 8

func putAssociated(ad *[associatedBytes]byte, protocolID, expire uint64) {
	copy(ad[:], VersionInfo)
	binary.LittleEndian.PutUint64(ad[VersionInfoBytes:], protocolID)
	binary.LittleEndian.PutUint64(ad[VersionInfoBytes+8:], expire)
}

// Address encoding (both lists): a type byte, 1 = IPv4, 2 = IPv6, then the
// address and the port as u16 LE. IPv4 is a, b, c, d in dotted order. IPv6 is
// its eight 16-bit groups each written as a u16 LE, so, unlike network order,
// ::1 ends 01 00.
const (
	addrTypeIPv4  = 1
	addrTypeIPv6  = 2
	addrIPv4Bytes = 1 + 4 + 2
	addrIPv6Bytes = 1 + 16 + 2
)

// checkAddr reports why a cannot go into a token: netcode addresses have no
// zone and must be a real IP.
func checkAddr(a netip.AddrPort) error {
	if !a.Addr().IsValid() {
		return fmt.Errorf("token: server address %v is not an IP address and port", a)
	}
	if a.Addr().Zone() != "" {
		return fmt.Errorf("token: server address %v has an IPv6 zone, which a token cannot carry", a)
	}
	return nil
}

// addrLen is the encoded size of a (valid, zone-free) address.
func addrLen(a netip.AddrPort) int {
	if a.Addr().Is4() {
		return addrIPv4Bytes
	}
	return addrIPv6Bytes
}

// putAddr writes a at the start of b, which has room, and returns the bytes
// written. An IPv4-mapped IPv6 address stays IPv6 (type 2), as netcode would
// write it.
func putAddr(b []byte, a netip.AddrPort) int {
	ip := a.Addr()
	if ip.Is4() {
		b[0] = addrTypeIPv4
		v4 := ip.As4()
		copy(b[1:5], v4[:])
		binary.LittleEndian.PutUint16(b[5:], a.Port())
		return addrIPv4Bytes
	}
	b[0] = addrTypeIPv6
	v6 := ip.As16()
	for i := 0; i < 16; i += 2 {
		b[1+i], b[2+i] = v6[i+1], v6[i] // group i/2 as u16 LE
	}
	binary.LittleEndian.PutUint16(b[17:], a.Port())
	return addrIPv6Bytes
}

// readAddr parses one address at the start of b and returns it with its
// encoded size; ok is false for an unknown type or a short b.
func readAddr(b []byte) (a netip.AddrPort, n int, ok bool) {
	if len(b) == 0 {
		return a, 0, false
	}
	switch b[0] {
	case addrTypeIPv4:
		if len(b) < addrIPv4Bytes {
			return a, 0, false
		}
		ip := netip.AddrFrom4([4]byte{b[1], b[2], b[3], b[4]})
		return netip.AddrPortFrom(ip, binary.LittleEndian.Uint16(b[5:])), addrIPv4Bytes, true
	case addrTypeIPv6:
		if len(b) < addrIPv6Bytes {
			return a, 0, false
		}
		var v6 [16]byte
		for i := 0; i < 16; i += 2 {
			v6[i], v6[i+1] = b[2+i], b[1+i]
		}
		return netip.AddrPortFrom(netip.AddrFrom16(v6), binary.LittleEndian.Uint16(b[17:])), addrIPv6Bytes, true
	}
	return a, 0, false
}

// readAddrs parses a u32 count (1..MaxServerAddresses) followed by that many
// addresses from b into dst, and returns the count and the bytes read.
func readAddrs(b []byte, dst *[MaxServerAddresses]netip.AddrPort) (count, n int, ok bool) {
	if len(b) < 4 {
		return 0, 0, false
	}
	c := binary.LittleEndian.Uint32(b)
	if c < 1 || c > MaxServerAddresses {
		return 0, 0, false
	}
	n = 4
	for i := range int(c) {
		a, k, ok := readAddr(b[n:])
		if !ok {
			return 0, 0, false
		}
		dst[i] = a
		n += k
	}
	return int(c), n, true
}

// putAddrs writes the u32 count and the addresses, which fit (checked by the
// caller: at most 32, and 32 IPv6 addresses fit both layouts).
func putAddrs(b []byte, addrs []netip.AddrPort) int {
	binary.LittleEndian.PutUint32(b, uint32(len(addrs)))
	n := 4
	for _, a := range addrs {
		n += putAddr(b[n:], a)
	}
	return n
}

// checkAddrs validates an address list for a token.
func checkAddrs(what string, addrs []netip.AddrPort) error {
	if len(addrs) < 1 || len(addrs) > MaxServerAddresses {
		return fmt.Errorf("token: %d %s server addresses; a token carries 1 to %d", len(addrs), what, MaxServerAddresses)
	}
	for _, a := range addrs {
		if err := checkAddr(a); err != nil {
			return err
		}
	}
	return nil
}
