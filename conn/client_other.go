//go:build !linux

package conn

import "net"

// enableRecvErr does nothing here: only Linux is taught to report ICMP
// errors to an unconnected socket, so elsewhere Dial waits ConnectTimeout
// for a server that is not there.
func enableRecvErr(*net.UDPConn) {}

// drainErrQueue does nothing: there is no error queue to drain.
func drainErrQueue(*net.UDPConn) {}
