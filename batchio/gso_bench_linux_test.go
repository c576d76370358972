package batchio

import (
	"net"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// What segmentation offload (UDP_SEGMENT, Linux 4.18) would save a bulk
// sender (issue 28): one connection's burst of 48 datagrams of 1200 bytes
// to one peer, sent as sendmmsg does today (one call, 48 datagrams through
// the stack) and as one sendmsg of 57 600 bytes the kernel cuts into the
// same 48 datagrams. Both send to a loopback socket nobody reads (the
// kernel drops at its full buffer after the send's cost is paid), so the
// figures are the sender's. tuning.md, "Bandwidth", has the numbers.

const (
	gsoSeg   = 1200
	gsoBurst = 48 // a GSO send carries at most 64 KiB of payload
)

// gsoPair returns a connected sender's descriptor and closes both sockets
// when the benchmark ends.
func gsoPair(b *testing.B) int {
	b.Helper()
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	tx, err := net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tx.Close(); rx.Close() })
	rc, err := tx.SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	var fd int
	_ = rc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

func BenchmarkBulkSendmmsg(b *testing.B) {
	fd := gsoPair(b)
	buf := make([]byte, gsoSeg*gsoBurst)
	iovs := make([]unix.Iovec, gsoBurst)
	hdrs := make([]unix.Mmsghdr, gsoBurst)
	for i := range hdrs {
		iovs[i].Base = &buf[i*gsoSeg]
		iovs[i].SetLen(gsoSeg)
		hdrs[i].Hdr.Iov = &iovs[i]
		hdrs[i].Hdr.SetIovlen(1)
	}
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for range b.N {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[0])), gsoBurst, 0, 0, 0)
		if e != 0 && e != unix.EAGAIN && e != unix.ENOBUFS {
			b.Fatal(e)
		}
		_ = r
	}
}

func BenchmarkBulkGSO(b *testing.B) {
	fd := gsoPair(b)
	buf := make([]byte, gsoSeg*gsoBurst)
	oob := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&oob[unix.CmsgLen(0)])) = gsoSeg
	if err := unix.Sendmsg(fd, buf, oob, nil, 0); err != nil {
		b.Skipf("UDP_SEGMENT not supported here: %v", err)
	}
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for range b.N {
		if err := unix.Sendmsg(fd, buf, oob, nil, 0); err != nil && err != unix.EAGAIN && err != unix.ENOBUFS {
			b.Fatal(err)
		}
	}
}
