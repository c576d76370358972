package conn

import (
	"net"

	"golang.org/x/sys/unix"
)

// enableRecvErr asks the kernel to report ICMP errors on udp, which is not
// connected (IP_RECVERR, IPV6_RECVERR): without it Linux reports ICMP port
// unreachable only to connected sockets, and Dial would wait its whole
// timeout for a server that is not there. Both options, errors ignored: a
// dual-stack socket needs IP_RECVERR for its IPv4 peers, and an IPv4 socket
// refuses IPV6_RECVERR.
func enableRecvErr(udp *net.UDPConn) {
	rc, err := udp.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVERR, 1)
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVERR, 1)
	})
}

// drainErrQueue discards the ICMP errors queued on udp (MSG_ERRQUEUE):
// they count against its receive buffer, so left there they would crowd out
// datagrams. The read error that reported them has said all the client
// needs.
func drainErrQueue(udp *net.UDPConn) {
	rc, err := udp.SyscallConn()
	if err != nil {
		return
	}
	var b, oob [512]byte
	_ = rc.Read(func(fd uintptr) bool {
		for range 64 {
			if _, _, _, _, err := unix.Recvmsg(int(fd), b[:], oob[:], unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT); err != nil {
				break
			}
		}
		return true
	})
}
