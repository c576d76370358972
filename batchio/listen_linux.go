package batchio

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// reusePortBalances reports that SO_REUSEPORT spreads datagrams over the
// sockets of a group (Linux ≥ 3.9).
const reusePortBalances = true

// socketSys is the Linux part of a Socket.
type socketSys struct {
	file     *os.File // owns the descriptor; its poll.FD guards it against reuse after Close
	rc       syscall.RawConn
	family   int  // unix.AF_INET or unix.AF_INET6
	blocking bool // ModeBlocking: blocking descriptor, no netpoller

	// SO_MEMINFO read-back for readDrops. memMu serializes concurrent
	// Stats callers, so drop counts reach the counters in the order the
	// kernel reported them (a stale value applied after a newer one would
	// look like a wrap).
	memMu  sync.Mutex
	mem    [unix.SK_MEMINFO_VARS]uint32
	memLen uint32 // socklen_t: in, the size of mem; out, what the kernel wrote
	memErr syscall.Errno
	memFn  func(fd uintptr) // s.getMemInfo, bound once
}

// readDrops brings c's kernel drop count up to date and reports whether
// the kernel could tell. The count comes from getsockopt(SO_MEMINFO),
// which Stats callers pay for, rather than from SO_RXQ_OVFL, which makes
// the kernel write a control message into every received datagram, for
// the rest of the socket's life once it has dropped anything (a visible
// share of the server's CPU profile; see params.go).
// Both report the same kernel counter (sk_drops).
func (s *socketSys) readDrops(c *counters) bool {
	s.memMu.Lock()
	defer s.memMu.Unlock()
	if s.rc.Control(s.memFn) != nil || s.memErr != 0 || s.memLen < (unix.SK_MEMINFO_DROPS+1)*4 {
		return false // closed, or a kernel without SO_MEMINFO (before 4.12)
	}
	c.noteDrops(s.mem[unix.SK_MEMINFO_DROPS])
	return true
}

// getMemInfo is the RawConn.Control callback of readDrops.
func (s *socketSys) getMemInfo(fd uintptr) {
	s.memLen = uint32(len(s.mem) * 4)
	_, _, s.memErr = unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&s.mem[0])), uintptr(unsafe.Pointer(&s.memLen)), 0)
}

func (s *socketSys) close() error {
	if s.blocking {
		// A thread asleep in recvmmsg does not notice close(2): the file
		// stays referenced until the call returns. shutdown(2) marks the
		// socket and wakes every sleeper (it reports ENOTCONN for an
		// unconnected UDP socket, but does its work all the same).
		_ = s.rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_RDWR) })
	}
	// For a blocking descriptor, os.File defers the real close(2) until
	// the last call using it returns, so the number cannot be reused under
	// a receiver still in the kernel.
	return s.file.Close()
}

func (g *Group) listen(la listenAddr, addr string) error {
	family, v6only := unix.AF_INET6, !la.dualStack
	if la.ap.Addr().Is4() {
		family, v6only = unix.AF_INET, false
	}
	// An empty host means "every address": dual-stack where the host has
	// IPv6, plain IPv4 where it does not.
	if la.hostEmpty {
		if fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err == nil {
			unix.Close(fd)
		} else {
			la = listenAddr{ap: netip.AddrPortFrom(netip.IPv4Unspecified(), la.ap.Port())}
			family, v6only = unix.AF_INET, false
		}
	}
	// Steering decides the number of sockets, so it is settled first.
	var plan *steerPlan
	if g.cfg.Steer.Enabled {
		if plan = g.planSteer(family); plan != nil {
			g.cfg.Sockets = plan.set + plan.clear
			g.cfg.Steer.SetSockets, g.cfg.Steer.ClearSockets = plan.set, plan.clear
		} else {
			g.cfg.Steer.Enabled = false
		}
	}
	// Port 0 draws a port; if another program takes it between the probe
	// and the group's bind, draw again.
	var err error
	for range 3 {
		if err = g.listenOnce(la, family, v6only); err == nil || la.ap.Port() != 0 || !errors.Is(err, unix.EADDRINUSE) {
			break
		}
	}
	if err != nil {
		return friendlyListenError(addr, err)
	}
	if plan != nil {
		g.steer(plan)
	}
	return nil
}

// listenOnce binds the group's sockets.
//
// It first binds a probe socket without SO_REUSEPORT. The kernel lets any
// socket of the same user with SO_REUSEPORT join a port, so without the
// probe a second server started by mistake on the same port would silently
// take half the traffic; the probe fails with EADDRINUSE instead. For port
// 0 the probe also draws a port that nobody else has bound, with or without
// SO_REUSEPORT.
func (g *Group) listenOnce(la listenAddr, family int, v6only bool) error {
	port, err := probePort(la.ap, family, v6only)
	if err != nil {
		return err
	}
	bindAP := netip.AddrPortFrom(la.ap.Addr(), port)
	sockets := make([]*Socket, 0, g.cfg.Sockets)
	for range g.cfg.Sockets {
		s, err := g.newSocket(bindAP, family, v6only)
		if err != nil {
			for _, s := range sockets {
				s.close()
			}
			return err
		}
		sockets = append(sockets, s)
	}
	g.sockets = sockets
	g.local = sockets[0].local
	return nil
}

// probePort binds a plain socket to ap and returns the port it got.
func probePort(ap netip.AddrPort, family int, v6only bool) (uint16, error) {
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return 0, os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	if family == unix.AF_INET6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, boolInt(v6only)); err != nil {
			return 0, os.NewSyscallError("setsockopt IPV6_V6ONLY", err)
		}
	}
	if err := unix.Bind(fd, toSockaddr(ap, family)); err != nil {
		return 0, os.NewSyscallError("bind", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return 0, os.NewSyscallError("getsockname", err)
	}
	return fromSockaddr(sa).Port(), nil
}

// newSocket creates, configures and binds one socket of the group.
func (g *Group) newSocket(ap netip.AddrPort, family int, v6only bool) (*Socket, error) {
	cfg := &g.cfg
	blocking := cfg.Mode == ModeBlocking
	typ := unix.SOCK_DGRAM | unix.SOCK_CLOEXEC
	if !blocking {
		// os.NewFile registers a non-blocking descriptor with the
		// netpoller; a blocking one it leaves alone.
		typ |= unix.SOCK_NONBLOCK
	}
	fd, err := unix.Socket(family, typ, unix.IPPROTO_UDP)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	network := "udp4"
	if family == unix.AF_INET6 {
		network = "udp6"
	}
	f := os.NewFile(uintptr(fd), network+":"+ap.String())
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &Socket{mode: cfg.Mode, sys: socketSys{file: f, rc: rc, family: family, blocking: blocking}}
	s.sys.memFn = s.sys.getMemInfo
	if !s.sys.readDrops(&s.ctr) {
		g.warn("the kernel does not report socket drops (SO_MEMINFO needs Linux 4.12): Stats.RxDrops stays 0")
	}
	fail := func(err error) (*Socket, error) {
		f.Close()
		return nil, err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = g.setOptions(int(fd), family, v6only, blocking) }); err != nil {
		return fail(err)
	}
	if serr != nil {
		return fail(serr)
	}
	if cfg.DSCP != 0 {
		// IPv4 traffic on IPv4 and dual-stack sockets, IPv6 traffic on
		// IPv6 ones.
		if err := setDSCP(optConn{rc: rc}, family == unix.AF_INET || !v6only, family == unix.AF_INET6, cfg.DSCP); err != nil {
			return fail(err)
		}
	}
	if cfg.Control != nil {
		if err := cfg.Control(network, ap.String(), rc); err != nil {
			return fail(fmt.Errorf("Config.Control: %w", err))
		}
	}
	var sa unix.Sockaddr
	if err := rc.Control(func(fd uintptr) {
		if serr = unix.Bind(int(fd), toSockaddr(ap, family)); serr != nil {
			serr = os.NewSyscallError("bind", serr)
			return
		}
		sa, serr = unix.Getsockname(int(fd))
	}); err != nil {
		return fail(err)
	}
	if serr != nil {
		return fail(serr)
	}
	s.local = fromSockaddr(sa)
	if s.local.Addr().Is4In6() {
		s.local = netip.AddrPortFrom(s.local.Addr().Unmap(), s.local.Port())
	}
	s.q.init(cfg.QueueSize, cfg.MessageSize)
	return s, nil
}

// setOptions applies batchio's socket options before bind.
func (g *Group) setOptions(fd, family int, v6only, blocking bool) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		return os.NewSyscallError("setsockopt SO_REUSEPORT", err)
	}
	if family == unix.AF_INET6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, boolInt(v6only)); err != nil {
			return os.NewSyscallError("setsockopt IPV6_V6ONLY", err)
		}
	}
	if w := setBuffer(fd, "receive", unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, g.cfg.RecvBuffer); w != "" {
		g.warn(w)
	}
	if w := setBuffer(fd, "send", unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, g.cfg.SendBuffer); w != "" {
		g.warn(w)
	}
	if !g.cfg.AllowFragmentation {
		// Without DF the server still works, only at a higher cost per
		// packet; not fatal.
		if err := setDontFragment(fd, family, v6only); err != nil {
			g.warn(fmt.Sprintf("cannot set the don't-fragment bit (%v): IPv4 datagrams go out without it, which costs kernel CPU per packet; set Config.AllowFragmentation to keep the default knowingly", err))
		}
	}
	if blocking {
		tv := unix.NsecToTimeval(blockingWakeInterval.Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return os.NewSyscallError("setsockopt SO_RCVTIMEO", err)
		}
	}
	return nil
}

// setDontFragment sets path-MTU discovery to PROBE (see
// Config.AllowFragmentation). A dual-stack socket sends IPv4 through the
// IPv4 option and IPv6 through the IPv6 one, so it needs both.
func setDontFragment(fd, family int, v6only bool) error {
	// IPv4 traffic only (an AF_INET socket, or a dual-stack one's mapped
	// peers). IPv6 gains nothing: Linux picks an IPv6 fragment ID only
	// when it fragments. And with DF there, datagrams of 1453-1472 bytes,
	// which docs/protocol.md allows, could not leave a 1500-byte link at all.
	if family == unix.AF_INET || !v6only {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE); err != nil {
			return os.NewSyscallError("setsockopt IP_MTU_DISCOVER", err)
		}
	}
	return nil
}

// setBuffer sets a socket buffer to want bytes and returns a warning if the
// kernel granted less. The *FORCE option (CAP_NET_ADMIN) ignores the
// net.core.[rw]mem_max cap; without the capability the plain option is
// silently capped, which the read-back detects. Linux reports twice the
// granted size (the doubling pays for its bookkeeping), so the read-back is
// halved to compare with want.
func setBuffer(fd int, dir string, force, opt, want int) string {
	if want < 0 {
		return ""
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, want) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, want)
	}
	got, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, opt)
	if err != nil {
		return ""
	}
	return bufferWarning(dir, want, got/2)
}

// optConn hands a descriptor batchio owns to golang.org/x/net/ipv4 and
// ipv6, whose NewConn takes a net.Conn: they accept any value with the
// methods of a *net.UDPConn that they look for (SyscallConn, ReadMsgUDP),
// and set options through SyscallConn alone. The embedded net.Conn is nil
// and never called. TestDSCP reads the options back from the kernel, so an
// x/net that stopped accepting this would fail it, not go unnoticed.
type optConn struct {
	net.Conn
	rc syscall.RawConn
}

func (c optConn) SyscallConn() (syscall.RawConn, error) { return c.rc, nil }

func (optConn) ReadMsgUDP(_, _ []byte) (n, oobn, flags int, addr *net.UDPAddr, err error) {
	return 0, 0, 0, nil, errors.ErrUnsupported
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
