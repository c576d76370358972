package batchio

import (
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// autoMode is ModeAuto's choice on Linux: blocking sockets measured cheaper
// per packet than the netpoller in the echo harness (params.go).
const autoMode = ModeBlocking

// slotPad is the hidden space after each slot. Linux reports truncation
// with MSG_TRUNC, so none is needed.
const slotPad = 0

// sendmmsgHook, when set by tests, replaces the sendmmsg system call so
// that partial sends, EAGAIN and per-message errors can be injected.
var sendmmsgHook func(fd uintptr, hdrs []unix.Mmsghdr) (int, syscall.Errno)

// Why recvmmsg and sendmmsg are called by hand rather than through
// golang.org/x/net/ipv4's PacketConn.ReadBatch and WriteBatch, which issue
// the same system calls: x/net hands every received datagram's address
// back as a *net.UDPAddr, two allocations per datagram, and packs its
// message headers again on every call. Here the headers, iovecs and raw
// socket addresses are built once per Batch and addresses are converted
// straight to and from netip.AddrPort, so a batch costs no allocation
// (TestZeroAllocs checks it). The machine study measured x/net's batches
// against hand-written ones side by side (docs/limits.md §1.1, quoted in
// tuning.md's batchio section).
//
// batchSys holds a batch's kernel structures and the state of the call in
// progress. The callbacks handed to syscall.RawConn are method values bound
// once in init, so a Recv or Send allocates nothing.
//
// Headers carry no control buffer, in either direction: batchio needs no
// control message (kernel drops are read with Socket.Stats), and without a
// buffer the kernel has none to fill per datagram (see Config.Control).
type batchSys struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []rawSockaddr

	// dirty is the number of leading entries whose headers may differ
	// from the receive layout (the kernel rewrote lengths, or Send
	// pointed them at other memory); Recv restores them.
	dirty int

	recvFn    func(fd uintptr) bool
	sendFn    func(fd uintptr) bool
	ctlSendFn func(fd uintptr) // sendFn for RawConn.Control (Send)
	tryFn     func(fd uintptr)
	pollOneFn func(fd uintptr)
	waitMs    int // RecvWithin's wait
	pfd       [1]unix.PollFd
	vlen      int  // headers the next recvmmsg may fill
	dontwait  bool // the next recvmmsg must not sleep (TryRecv, RecvWithin)

	// State of the current call.
	sock   *Socket
	rn     int           // datagrams received
	rerr   syscall.Errno // receive error
	soff   int           // next header to send
	scount int           // headers to send
	serr   syscall.Errno // fatal send error
	tx     txBatch
}

func (bs *batchSys) init(b *Batch) {
	size := len(b.Msgs)
	bs.hdrs = make([]unix.Mmsghdr, size)
	bs.iovs = make([]unix.Iovec, size)
	bs.names = make([]rawSockaddr, size)
	bs.dirty = size
	bs.recvFn = b.recvmmsg
	bs.sendFn = b.sendmmsg
	bs.ctlSendFn = func(fd uintptr) { b.sendmmsg(fd) }
	bs.tryFn = b.tryRecvmmsg
	bs.pollOneFn = b.pollOne
}

// resetRecv restores the receive layout of the entries a previous call
// changed: every slot at full size, the name buffer at full length.
func (b *Batch) resetRecv() {
	bs := &b.sys
	for i := range bs.dirty {
		off := i * b.stride
		iov := &bs.iovs[i]
		iov.Base = &b.slots[off]
		iov.SetLen(b.msgSize)
		h := &bs.hdrs[i].Hdr
		h.Name = &bs.names[i][0]
		h.Namelen = unix.SizeofSockaddrInet6
		h.Iov = iov
		h.SetIovlen(1)
		b.Msgs[i].Buf = b.slots[off : off+b.msgSize : off+b.msgSize]
	}
	bs.dirty = 0
}

// Recv blocks until at least one datagram has arrived, fills b.Msgs[:n]
// with up to len(b.Msgs) datagrams (N, Addr, Truncated; Buf is the slot)
// and returns n. It returns net.ErrClosed once the socket is closed,
// including when Close is called during the wait.
//
// On Linux it is one recvmmsg call per batch and allocates nothing.
func (s *Socket) Recv(b *Batch) (int, error) {
	b.resetRecv()
	bs := &b.sys
	bs.sock, bs.vlen, bs.dontwait = s, len(bs.hdrs), false
	for {
		if s.closed.Load() {
			return 0, net.ErrClosed
		}
		// Nothing received (SO_RCVTIMEO expired, or a socket error
		// counted) goes round again.
		if n, err := s.recvResult(b, s.sys.rc.Read(bs.recvFn)); n > 0 || err != nil {
			return n, err
		}
	}
}

// recvResult turns what a recvmmsg call left in b, and the RawConn's err,
// into a receive's result: the count of a batch that got datagrams, an
// error when the socket cannot receive, and 0 with no error when the call
// got nothing (a timeout, nothing queued, or a pending socket error, such
// as an ICMP report, which the kernel returns once and which is counted
// here).
func (s *Socket) recvResult(b *Batch, err error) (int, error) {
	bs := &b.sys
	// After Close, shutdown(2) makes a blocked recvmmsg return empty
	// "datagrams" (a read of 0 at end of stream), which must not reach
	// the caller; the closed flag tells them apart.
	if s.closed.Load() {
		return 0, net.ErrClosed
	}
	if err != nil {
		return 0, err
	}
	if bs.rn > 0 {
		return s.received(b), nil
	}
	switch bs.rerr {
	case 0:
	case unix.EBADF, unix.ENOTSOCK, unix.EFAULT, unix.EINVAL:
		return 0, os.NewSyscallError("recvmmsg", bs.rerr)
	default:
		s.ctr.rxErrors.Add(1)
	}
	return 0, nil
}

// received decodes the headers of the batch recvmmsg just filled into
// b.Msgs and counts it on s.
func (s *Socket) received(b *Batch) int {
	bs := &b.sys
	n := bs.rn
	bs.dirty = n
	var rx rxBatch
	for i := range n {
		h := &bs.hdrs[i]
		m := &b.Msgs[i]
		m.N = int(h.Len)
		m.Addr = decodeSockaddr(&bs.names[i])
		m.Truncated = h.Hdr.Flags&unix.MSG_TRUNC != 0
		if m.Truncated {
			rx.truncated++
		}
		rx.bytes += uint64(h.Len)
	}
	rx.packets = uint64(n)
	s.ctr.publishRx(rx)
	return n
}

// RecvWithin is Recv that gives up after about d (rounded up to a
// millisecond): it returns 0 when nothing arrived on s by then; with d ≤ 0
// it only takes what is queued. udpgate's connection loops use it to look
// at the server's state every few milliseconds while a handshake backlog
// lasts. It sleeps in poll(2) in either Mode.
func (s *Socket) RecvWithin(b *Batch, d time.Duration) (int, error) {
	b.resetRecv()
	bs := &b.sys
	if n, err := s.tryRecv(b, len(bs.hdrs)); n > 0 || err != nil || d <= 0 {
		return n, err
	}
	bs.waitMs = int((d + time.Millisecond - 1) / time.Millisecond)
	if err := s.sys.rc.Control(bs.pollOneFn); err != nil {
		if s.closed.Load() {
			return 0, net.ErrClosed
		}
		return 0, err
	}
	return s.tryRecv(b, len(bs.hdrs))
}

// TryRecv takes up to max datagrams queued on s, never sleeping: it
// returns 0 when none is. A socket may have several receivers at once and
// the kernel gives each datagram to one of them, so another goroutine can
// take datagrams with TryRecv while the socket's own loop sleeps in Recv:
// udpgate's connection loops take a login storm's handshakes so. It
// returns net.ErrClosed once s is closed, and allocates nothing.
func (s *Socket) TryRecv(b *Batch, max int) (int, error) {
	b.resetRecv()
	return s.tryRecv(b, min(max, len(b.sys.hdrs)))
}

// tryRecv takes up to max datagrams queued on s without sleeping: 0 when
// none is.
func (s *Socket) tryRecv(b *Batch, max int) (int, error) {
	bs := &b.sys
	bs.sock, bs.vlen, bs.dontwait = s, max, true
	if s.closed.Load() {
		return 0, net.ErrClosed
	}
	// Control, not Read: Read holds the descriptor's read lock, which a
	// blocking Recv by the socket's own loop keeps while it sleeps.
	return s.recvResult(b, s.sys.rc.Control(bs.tryFn))
}

// tryRecvmmsg is tryRecv's call, which cannot sleep.
func (b *Batch) tryRecvmmsg(fd uintptr) { b.recvmmsg(fd) }

// pollOne is RecvWithin's wait.
func (b *Batch) pollOne(fd uintptr) {
	bs := &b.sys
	bs.pfd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	_, _ = unix.Poll(bs.pfd[:], bs.waitMs)
}

// recvmmsg is the RawConn.Read callback. Returning false asks the netpoller
// to wait for readability, which only a non-blocking socket may do.
func (b *Batch) recvmmsg(fd uintptr) bool {
	bs := &b.sys
	blocking := bs.sock.sys.blocking
	for {
		var r uintptr
		var errno syscall.Errno
		p, n := uintptr(unsafe.Pointer(&bs.hdrs[0])), uintptr(bs.vlen)
		// Blocking: sleep until one datagram arrives, then take what
		// else is queued without sleeping again. Non-blocking: take
		// what is queued. Syscall, not RawSyscall, even when the call
		// cannot block: RawSyscall keeps the P through the call, and
		// with it sources stalled in the echo harness (params.go).
		flags := uintptr(0)
		switch {
		case bs.dontwait:
			flags = unix.MSG_DONTWAIT
		case blocking:
			flags = unix.MSG_WAITFORONE
		}
		r, _, errno = unix.Syscall6(unix.SYS_RECVMMSG, fd, p, n, flags, 0, 0)
		switch errno {
		case 0:
			bs.rn, bs.rerr = int(r), 0
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			if !blocking && !bs.dontwait {
				return false
			}
			bs.rn, bs.rerr = 0, 0 // SO_RCVTIMEO expired, or nothing queued
			return true
		default:
			bs.rn, bs.rerr = 0, errno
			return true
		}
	}
}

// Send sends b.Msgs[:n], each Buf[:N] to its Addr, in as few sendmmsg calls
// as the kernel allows, and returns once every datagram has been handed to
// the kernel or skipped. When the socket buffer is full it waits for room
// (through the netpoller, or asleep in the kernel in ModeBlocking) rather
// than dropping or spinning. A datagram the kernel refuses for a reason of
// its own (unreachable or forbidden destination, wrong address family, too
// large) is skipped and counted in Stats.TxErrors and the rest are still
// sent. Send returns an error only if the socket cannot send at all:
// net.ErrClosed after Close.
//
// Several goroutines may Send on one socket at once, each with its own
// batch. On a blocking socket (ModeBlocking) their sendmmsg calls overlap,
// the kernel ordering them a datagram at a time; on a netpoll socket they
// take turns a call at a time.
//
// Send changes nothing in b.Msgs. It allocates nothing.
func (s *Socket) Send(b *Batch, n int) error {
	if n <= 0 {
		return nil
	}
	bs := &b.sys
	count, bad := b.prepareSend(n, s.sys.family)
	bs.sock = s
	bs.soff, bs.scount, bs.serr = 0, count, 0
	bs.tx = txBatch{errors: bad}
	var err error
	switch {
	case count == 0:
	case s.sys.blocking:
		// Control, not Write: Write holds the descriptor's write lock
		// through the whole sendmmsg, so a receive loop and the
		// promotion workers sending on its socket took turns a batch at
		// a time (a storm's handshake loop waited behind hundreds of
		// Acks); the kernel takes its own socket lock a datagram at a
		// time. A blocking sendmmsg needs no poller (EAGAIN comes only
		// with a send timeout, which sendmmsg waits out itself).
		err = s.sys.rc.Control(bs.ctlSendFn)
	default:
		err = s.sys.rc.Write(bs.sendFn)
	}
	s.ctr.publishTx(bs.tx)
	if err == nil && bs.serr == 0 {
		return nil
	}
	if s.closed.Load() {
		return net.ErrClosed
	}
	if err != nil {
		return err
	}
	return os.NewSyscallError("sendmmsg", bs.serr)
}

// prepareSend points the first headers at the messages to send and returns
// how many it prepared and how many it had to skip because their address
// cannot be used with the socket's family.
func (b *Batch) prepareSend(n, family int) (count int, bad uint64) {
	bs := &b.sys
	j := 0
	for i := range b.Msgs[:n] {
		m := &b.Msgs[i]
		namelen := encodeSockaddr(&bs.names[j], m.Addr, family)
		if namelen == 0 {
			bad++
			continue
		}
		p := m.Buf[:m.N]
		iov := &bs.iovs[j]
		iov.Base = unsafe.SliceData(p)
		iov.SetLen(len(p))
		h := &bs.hdrs[j].Hdr
		h.Name = &bs.names[j][0]
		h.Namelen = namelen
		h.Iov = iov
		h.SetIovlen(1)
		j++
	}
	bs.dirty = max(bs.dirty, j)
	return j, bad
}

// sendmmsg is the RawConn.Write callback: it sends headers soff..scount,
// and returns false to wait for writability through the netpoller.
func (b *Batch) sendmmsg(fd uintptr) bool {
	bs := &b.sys
	blocking := bs.sock.sys.blocking
	for bs.soff < bs.scount {
		want := bs.scount - bs.soff
		var r uintptr
		var errno syscall.Errno
		p := uintptr(unsafe.Pointer(&bs.hdrs[bs.soff]))
		switch {
		case sendmmsgHook != nil:
			var k int
			k, errno = sendmmsgHook(fd, bs.hdrs[bs.soff:bs.scount])
			r = uintptr(k)
		default:
			r, _, errno = unix.Syscall6(unix.SYS_SENDMMSG, fd, p, uintptr(want), 0, 0, 0)
		}
		switch errno {
		case 0:
			k := int(r)
			bs.tx.calls++
			bs.tx.packets += uint64(k)
			if k < want {
				bs.tx.partial++
			}
			for i := bs.soff; i < bs.soff+k; i++ {
				bs.tx.bytes += uint64(bs.hdrs[i].Len)
			}
			bs.soff += k
		case unix.EINTR:
		case unix.EAGAIN:
			bs.tx.waits++
			if !blocking {
				return false
			}
			// A blocking socket returns EAGAIN only if a send timeout
			// is set (Config.Control may set one). Sleep until writable,
			// waking periodically to notice Close.
			if bs.sock.closed.Load() {
				bs.serr = unix.EPIPE
				return true
			}
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
			_, _ = unix.Poll(pfd, int(blockingWakeInterval.Milliseconds()))
		case unix.EBADF, unix.ENOTSOCK, unix.EPIPE, unix.ESHUTDOWN:
			bs.serr = errno
			return true
		default:
			// The error belongs to the first datagram of the call
			// (sendmmsg reports an error only when it sent nothing).
			// Skip that one and send on.
			bs.tx.calls++
			bs.tx.errors++
			bs.soff++
		}
	}
	return true
}
