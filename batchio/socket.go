package batchio

import (
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
)

var (
	// ErrTooLarge is returned by WriteTo for a datagram larger than the
	// group's Config.MessageSize.
	ErrTooLarge = errors.New("batchio: datagram larger than the configured MessageSize")
	// ErrInvalidAddr is returned by WriteTo for a zero or unusable
	// destination.
	ErrInvalidAddr = errors.New("batchio: invalid destination address")
)

// Socket is one of a Group's sockets. All its methods are safe for
// concurrent use; a Batch, however, belongs to one goroutine at a time.
//
// The intended use is one loop goroutine per socket that calls Recv, handles
// the batch and answers with Send, while other goroutines send through
// WriteTo.
type Socket struct {
	local  netip.AddrPort
	mode   Mode
	class  Class
	closed atomic.Bool
	q      writeQueue
	sys    socketSys
	ctr    counters
}

// Class returns which datagrams the socket receives: ClassAll unless the
// group is steered (Config.Steer).
func (s *Socket) Class() Class { return s.class }

// Stats returns the socket's counters. It asks the kernel for the drop
// count (one getsockopt), so the loops pay nothing for it; after Close it
// returns the count read at Close.
func (s *Socket) Stats() Stats {
	s.sys.readDrops(&s.ctr)
	return s.ctr.snapshot()
}

// close marks the socket closed, fails queued and future WriteTo calls,
// wakes a blocked Recv and releases the descriptor once no call uses it.
func (s *Socket) close() error {
	if s.closed.Swap(true) {
		return net.ErrClosed
	}
	s.q.close()
	// The descriptor is about to go: keep its last drop count for Stats.
	s.sys.readDrops(&s.ctr)
	return s.sys.close()
}
