package loadgen

import (
	"net/netip"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A load socket is a blocking IPv4 UDP socket bound to 0.0.0.0 on a kernel
// chosen port, with IP_PKTINFO on. It is driven by one goroutine on a locked
// thread, which sleeps in recvmmsg(MSG_WAITFORONE) until a reply arrives or
// SO_RCVTIMEO (the worker's tick) expires; that is the cheapest way to wait
// on Linux (batchio's measurements), and the timeout lets the worker pace
// its sends and notice the end of a phase without another wake-up source.

// slotSize is the buffer per message. Replies are at most
// protocol.MaxDatagramLimit bytes; larger ones arrive truncated and are not
// answers.
const slotSize = 2048

// ctrlStride is the control buffer per message: one IP_PKTINFO message
// (CmsgSpace(12) = 32 bytes) with room to spare.
const ctrlStride = 64

var pktinfoSpace = unix.CmsgSpace(unix.SizeofInet4Pktinfo)

type sock struct {
	fd   int
	port uint16
}

func openSock(rcvbuf, sndbuf int, tick time.Duration) (*sock, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	s := &sock{fd: fd}
	fail := func(what string, err error) (*sock, error) {
		unix.Close(fd)
		return nil, os.NewSyscallError(what, err)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1); err != nil {
		return fail("setsockopt IP_PKTINFO", err)
	}
	// The *FORCE options pass net.core.[rw]mem_max when the process may;
	// otherwise the plain ones get what the sysctl allows.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sndbuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, sndbuf)
	}
	if err := s.setTick(tick); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// 0.0.0.0, because the socket must receive replies addressed to any of
	// its clients' 127/8 addresses.
	if err := unix.Bind(fd, &unix.SockaddrInet4{}); err != nil {
		return fail("bind", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	s.port = uint16(sa.(*unix.SockaddrInet4).Port)
	return s, nil
}

// setTick sets how long a receive waits for the first datagram.
func (s *sock) setTick(d time.Duration) error {
	tv := unix.NsecToTimeval(max(d, 100*time.Microsecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return os.NewSyscallError("setsockopt SO_RCVTIMEO", err)
	}
	return nil
}

func (s *sock) close() error { return unix.Close(s.fd) }

// txBatch is a batch of outgoing datagrams, all to the server, each from
// its own source address. Slots hold packets built per message; a message
// may instead point at a shared read-only template.
type txBatch struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	ctrl  []byte
	slots []byte
	dst   unix.RawSockaddrInet4
	n     int // messages prepared
}

func newTxBatch(size int, server netip.AddrPort) *txBatch {
	b := &txBatch{
		hdrs:  make([]unix.Mmsghdr, size),
		iovs:  make([]unix.Iovec, size),
		ctrl:  make([]byte, size*ctrlStride),
		slots: make([]byte, size*slotSize),
	}
	b.dst.Family = unix.AF_INET
	p := (*[2]byte)(unsafe.Pointer(&b.dst.Port))
	p[0], p[1] = byte(server.Port()>>8), byte(server.Port())
	b.dst.Addr = server.Addr().As4()
	for i := range b.hdrs {
		c := b.ctrl[i*ctrlStride:]
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		h.Level = unix.IPPROTO_IP
		h.Type = unix.IP_PKTINFO
		h.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
		m := &b.hdrs[i].Hdr
		m.Name = (*byte)(unsafe.Pointer(&b.dst))
		m.Namelen = unix.SizeofSockaddrInet4
		m.Iov = &b.iovs[i]
		m.SetIovlen(1)
		m.Control = &c[0]
		m.SetControllen(pktinfoSpace)
	}
	return b
}

// slot returns message i's own buffer.
func (b *txBatch) slot(i int) []byte { return b.slots[i*slotSize : (i+1)*slotSize : (i+1)*slotSize] }

// add appends a message carrying p (a slot's prefix or a template, which
// must stay unchanged until the batch is sent) from source address src.
func (b *txBatch) add(p []byte, src [4]byte) {
	i := b.n
	b.iovs[i].Base = unsafe.SliceData(p)
	b.iovs[i].SetLen(len(p))
	// ipi_spec_dst: the source address of the datagram. ipi_ifindex stays
	// 0, so the route decides (loopback).
	pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&b.ctrl[i*ctrlStride+unix.CmsgLen(0)]))
	pi.Spec_dst = src
	b.n++
}

// full reports that no message can be added.
func (b *txBatch) full() bool { return b.n == len(b.hdrs) }

// next returns the slot of the message add will append next.
func (b *txBatch) next() []byte { return b.slot(b.n) }

// flush sends the prepared messages and empties the batch. It returns how
// many the kernel took and how many it refused; only a broken socket is an
// error.
func (s *sock) flush(b *txBatch) (sent, refused int, err error) {
	off := 0
	for off < b.n {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(s.fd),
			uintptr(unsafe.Pointer(&b.hdrs[off])), uintptr(b.n-off), 0, 0, 0)
		switch e {
		case 0:
			off += int(r)
			sent += int(r)
		case unix.EINTR, unix.EAGAIN, unix.ENOBUFS:
			// Interrupted, or (with a send timeout) briefly out of
			// buffer: try again.
		case unix.EBADF, unix.ENOTSOCK, unix.EFAULT, unix.EINVAL:
			b.n = 0
			return sent, refused, os.NewSyscallError("sendmmsg", e)
		default:
			// The first datagram's own error (sendmmsg reports one only
			// when it sent nothing): skip it.
			off++
			refused++
		}
	}
	b.n = 0
	return sent, refused, nil
}

// rxBatch is a batch of incoming datagrams with their source address and
// the IP_PKTINFO that names the local address each was sent to.
type rxBatch struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet4
	ctrl  []byte
	slots []byte
}

func newRxBatch(size int) *rxBatch {
	b := &rxBatch{
		hdrs:  make([]unix.Mmsghdr, size),
		iovs:  make([]unix.Iovec, size),
		names: make([]unix.RawSockaddrInet4, size),
		ctrl:  make([]byte, size*ctrlStride),
		slots: make([]byte, size*slotSize),
	}
	for i := range b.hdrs {
		b.iovs[i].Base = &b.slots[i*slotSize]
		b.iovs[i].SetLen(slotSize)
		m := &b.hdrs[i].Hdr
		m.Name = (*byte)(unsafe.Pointer(&b.names[i]))
		m.Iov = &b.iovs[i]
		m.SetIovlen(1)
		m.Control = &b.ctrl[i*ctrlStride]
	}
	return b
}

// recv waits up to the socket's tick for datagrams and returns how many
// arrived (0 on timeout).
func (s *sock) recv(b *rxBatch) (int, error) { return s.recvFlags(b, unix.MSG_WAITFORONE) }

// recvNow returns the datagrams already queued, without waiting.
func (s *sock) recvNow(b *rxBatch) (int, error) { return s.recvFlags(b, unix.MSG_DONTWAIT) }

func (s *sock) recvFlags(b *rxBatch, flags int) (int, error) {
	for i := range b.hdrs {
		m := &b.hdrs[i].Hdr
		m.Namelen = unix.SizeofSockaddrInet4
		m.SetControllen(ctrlStride)
		m.Flags = 0
	}
	for {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(s.fd),
			uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(len(b.hdrs)), uintptr(flags), 0, 0)
		switch e {
		case 0:
			return int(r), nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return 0, nil
		case unix.EBADF, unix.ENOTSOCK, unix.EFAULT, unix.EINVAL:
			return 0, os.NewSyscallError("recvmmsg", e)
		default:
			// A pending socket error (an ICMP report): receive on.
			return 0, nil
		}
	}
}

// msg returns datagram i of the last recv: its bytes, its source and the
// local address it was sent to (from IP_PKTINFO). ok is false for a
// truncated datagram or one without IP_PKTINFO.
func (b *rxBatch) msg(i int) (p []byte, from unix.RawSockaddrInet4, to [4]byte, ok bool) {
	h := &b.hdrs[i]
	if h.Hdr.Flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || h.Hdr.Controllen < uint64(unix.CmsgLen(unix.SizeofInet4Pktinfo)) {
		return nil, from, to, false
	}
	c := b.ctrl[i*ctrlStride:]
	ch := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
	if ch.Level != unix.IPPROTO_IP || ch.Type != unix.IP_PKTINFO {
		return nil, from, to, false
	}
	pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&c[unix.CmsgLen(0)]))
	return b.slots[i*slotSize : i*slotSize+int(h.Len)], b.names[i], pi.Addr, true
}

// rawPort returns a sockaddr_in port in host order.
func rawPort(sa *unix.RawSockaddrInet4) uint16 {
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	return uint16(p[0])<<8 | uint16(p[1])
}
