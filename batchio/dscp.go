package batchio

import (
	"fmt"
	"net"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// maxDSCP is the largest Config.DSCP: the field is six bits (RFC 2474).
const maxDSCP = 63

// setDSCP marks the datagrams c sends with dscp: the IPv4 TOS byte for
// IPv4 traffic (v4: an IPv4 socket, or the IPv4 peers of a dual-stack one)
// and the IPv6 traffic class for IPv6 traffic (v6). DSCP is the upper six
// bits of either byte; the lower two, ECN, stay 0 (not ECN-capable), as
// the server does not react to congestion marks.
//
// Through golang.org/x/net/ipv4 and ipv6, which know each platform's
// option numbers and value encodings, so the Linux sockets and the
// portable fallback share this one path (docs/decisions.md).
func setDSCP(c net.Conn, v4, v6 bool, dscp int) error {
	tos := dscp << 2
	if v4 {
		if err := ipv4.NewConn(c).SetTOS(tos); err != nil {
			return fmt.Errorf("batchio: cannot mark IPv4 datagrams with DSCP %d (IP_TOS %#x): %w; set DSCP to 0 to leave the marking to the network", dscp, tos, err)
		}
	}
	if v6 {
		if err := ipv6.NewConn(c).SetTrafficClass(tos); err != nil {
			return fmt.Errorf("batchio: cannot mark IPv6 datagrams with DSCP %d (IPV6_TCLASS %#x): %w; set DSCP to 0 to leave the marking to the network", dscp, tos, err)
		}
	}
	return nil
}
