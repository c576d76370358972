package main

import (
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// childAttr makes a child server die with the harness: if the harness is
// killed, the kernel sends the child SIGKILL. (The child also stops by
// itself after its maximum duration.)
func childAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// dontFragment is a batchio Control hook that sets the don't-fragment bit
// on a socket's datagrams (IP_PMTUDISC_PROBE: DF set, path MTU ignored).
// Without DF the kernel picks an IP ID for every datagram from a table
// hashed by destination (__ip_select_ident), which at 100k destinations is
// a cache miss per packet.
func dontFragment(network, address string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE)
	}); err != nil {
		return err
	}
	return serr
}
