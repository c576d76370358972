package conn

import (
	"net/netip"

	"github.com/udpgate/udpgate/batchio"
)

// transport is one server socket as conn uses it: a receive loop takes a
// batch with Recv and answers with one Send, promotion workers Send their
// batches of replies, and connections sending outside a loop use WriteTo.
// *batchio.Socket is the transport of a listening server; tests run the
// same loops over an in-memory network (internal/testkit/conntest).
//
// The loop calls it once per batch, not per datagram, so the interface's
// indirect call is spread over up to a batch of datagrams
// (BenchmarkLoopTransport compares it with the direct call).
type transport interface {
	// Recv blocks until datagrams arrive, fills b.Msgs[:n] and returns n;
	// it returns net.ErrClosed once the transport is closed.
	Recv(b *batchio.Batch) (n int, err error)
	// Send sends b.Msgs[:n], each Buf[:N] to its Addr.
	Send(b *batchio.Batch, n int) error
	// WriteTo sends one datagram; p may be reused once it returns.
	WriteTo(p []byte, addr netip.AddrPort) error
	// Class is which datagrams the transport receives (batchio.Steer).
	Class() batchio.Class
	// Stats are its counters, for Server.SocketStats.
	Stats() batchio.Stats
}

// transportGroup is the set of a server's transports as a whole: its
// address, whether the kernel steers between them, their summed counters
// (and the bytes sent alone),
// and Close, which makes every blocked Recv return net.ErrClosed.
type transportGroup interface {
	LocalAddr() netip.AddrPort
	Steered() bool
	Stats() batchio.Stats
	// SentBytes is Stats().TxBytes, cheap enough for the egress budget
	// to read every few milliseconds.
	SentBytes() uint64
	Close() error
}

var (
	_ transport      = (*batchio.Socket)(nil)
	_ transportGroup = (*batchio.Group)(nil)
)

// socketTransports are a group's sockets as transports.
func socketTransports(g *batchio.Group) []transport {
	socks := g.Sockets()
	out := make([]transport, len(socks))
	for i, so := range socks {
		out[i] = so
	}
	return out
}
