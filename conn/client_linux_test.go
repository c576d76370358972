package conn

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLinkWriteAfterPortUnreachable: a client's socket reports ICMP errors
// (enableRecvErr), and Linux hands a pending one to the next send, which it
// then does not make. A connected client's write must neither fail nor lose
// its datagram for the port unreachable of an earlier one (CI once failed
// TestMessagesStall's SendMessage with "sendto: connection refused").
func TestLinkWriteAfterPortUnreachable(t *testing.T) {
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	enableRecvErr(udp)
	closed, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	gone := closed.LocalAddr().(*net.UDPAddr).AddrPort()
	closed.Close()
	peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	to := peer.LocalAddr().(*net.UDPAddr).AddrPort()

	l := link{udp: udp}
	if err := l.write([]byte("to nobody"), gone); err != nil {
		t.Fatalf("first write: %v", err)
	}
	waitSocketError(t, udp)
	if err := l.write([]byte("next"), to); err != nil {
		t.Fatalf("write after a port unreachable: %v, want nil", err)
	}
	buf := make([]byte, 64)
	if err := peer.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, _, err := peer.ReadFromUDPAddrPort(buf)
	if err != nil || string(buf[:n]) != "next" {
		t.Fatalf("peer read %q, %v; want the datagram the write was given", buf[:n], err)
	}
}

// waitSocketError waits until the kernel has queued an error on udp
// (POLLERR), for up to 10 s.
func waitSocketError(t *testing.T, udp *net.UDPConn) {
	t.Helper()
	rc, err := udp.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var polled bool
	if err := rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: 0}}
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			n, err := unix.Poll(fds, 100)
			if err == unix.EINTR {
				continue
			}
			if n > 0 && fds[0].Revents&unix.POLLERR != 0 {
				polled = true
				return
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if !polled {
		t.Fatal("no ICMP port unreachable reported within 10 s")
	}
}
