package batchio

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"

	"golang.org/x/sys/unix"
)

// rawSockaddr is storage for a struct sockaddr_in6, which also holds a
// struct sockaddr_in in its first 16 bytes. Addresses are encoded and
// decoded by hand, so converting to and from netip.AddrPort allocates
// nothing (unlike unix.Sockaddr, an interface).
type rawSockaddr [unix.SizeofSockaddrInet6]byte

// decodeSockaddr returns the address in sa. IPv4-mapped IPv6 addresses, as
// a dual-stack socket reports IPv4 peers, are returned as plain IPv4. A
// link-local IPv6 address keeps its scope as a numeric zone ("fe80::1%2"),
// which encodeSockaddr turns back into the same scope.
func decodeSockaddr(sa *rawSockaddr) netip.AddrPort {
	port := binary.BigEndian.Uint16(sa[2:4])
	switch binary.NativeEndian.Uint16(sa[0:2]) {
	case unix.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(sa[4:8])), port)
	case unix.AF_INET6:
		ip := netip.AddrFrom16([16]byte(sa[8:24]))
		if ip.Is4In6() {
			return netip.AddrPortFrom(ip.Unmap(), port)
		}
		if scope := binary.NativeEndian.Uint32(sa[24:28]); scope != 0 {
			ip = ip.WithZone(strconv.FormatUint(uint64(scope), 10))
		}
		return netip.AddrPortFrom(ip, port)
	}
	return netip.AddrPort{}
}

// encodeSockaddr writes ap into sa in the form a socket of the given family
// accepts and returns the length to pass as msg_namelen, or 0 if ap cannot
// be reached through such a socket (an invalid address, or an IPv6 address
// for an IPv4 socket). IPv4 destinations of an IPv6 socket are written
// IPv4-mapped, which a dual-stack socket sends as IPv4.
func encodeSockaddr(sa *rawSockaddr, ap netip.AddrPort, family int) uint32 {
	ip := ap.Addr()
	port := ap.Port()
	if family == unix.AF_INET {
		ip = ip.Unmap()
		if !ip.Is4() {
			return 0
		}
		binary.NativeEndian.PutUint16(sa[0:2], unix.AF_INET)
		binary.BigEndian.PutUint16(sa[2:4], port)
		a := ip.As4()
		copy(sa[4:8], a[:])
		clear(sa[8:16])
		return unix.SizeofSockaddrInet4
	}
	if !ip.IsValid() {
		return 0
	}
	binary.NativeEndian.PutUint16(sa[0:2], unix.AF_INET6)
	binary.BigEndian.PutUint16(sa[2:4], port)
	clear(sa[4:8]) // flow info
	a := ip.As16()
	copy(sa[8:24], a[:])
	binary.NativeEndian.PutUint32(sa[24:28], zoneIndex(ip.Zone()))
	return unix.SizeofSockaddrInet6
}

// zoneIndex returns the interface index of an IPv6 zone: numeric zones as
// decodeSockaddr makes them without a lookup, names through the system.
func zoneIndex(zone string) uint32 {
	if zone == "" {
		return 0
	}
	if n, err := strconv.ParseUint(zone, 10, 32); err == nil {
		return uint32(n)
	}
	if ifi, err := net.InterfaceByName(zone); err == nil {
		return uint32(ifi.Index)
	}
	return 0
}

// toSockaddr converts ap for bind(2).
func toSockaddr(ap netip.AddrPort, family int) unix.Sockaddr {
	if family == unix.AF_INET {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16(), ZoneId: zoneIndex(ap.Addr().Zone())}
}

// fromSockaddr converts a getsockname(2) result.
func fromSockaddr(sa unix.Sockaddr) netip.AddrPort {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		ip := netip.AddrFrom16(sa.Addr)
		if sa.ZoneId != 0 {
			ip = ip.WithZone(strconv.FormatUint(uint64(sa.ZoneId), 10))
		}
		return netip.AddrPortFrom(ip, uint16(sa.Port))
	}
	return netip.AddrPort{}
}
