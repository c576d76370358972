// Package batchio moves UDP datagrams between the kernel and the server's
// loops in batches, without allocating. It never parses a datagram.
//
// A Group is a set of sockets bound to one address with SO_REUSEPORT, one per
// P by default, so the kernel spreads peers over the sockets and each
// socket's loop owns its peers' state without locks. A loop receives with
// Socket.Recv into a Batch (one recvmmsg per batch on Linux), handles the
// datagrams, and answers with Socket.Send of the same or another Batch (as
// few sendmmsg calls as the kernel allows). Other goroutines send through
// Socket.WriteTo, which combines concurrent senders into shared sendmmsg
// calls.
//
// # Receive modes
//
// ModeNetpoll parks an idle receiver in Go's netpoller; ModeBlocking lets it
// sleep in recvmmsg(MSG_WAITFORONE) on a blocking socket, which avoids the
// scheduler's work around every wake-up and measured fastest (params.go).
// Close wakes a blocked Recv at once in both modes. RecvWithin is Recv with
// a bound on the wait, and TryRecv takes what is queued without sleeping,
// even while the socket's own loop sleeps in Recv: udpgate's connection
// loops use the two to take a login storm's handshakes off the handshake
// sockets.
//
// # Concurrency
//
// All Socket and Group methods are safe for concurrent use. A Batch belongs
// to one goroutine at a time. Counters are kept per socket and published
// once per system call, and the kernel's drop count is asked for only when
// Stats is read, so reading Stats never slows the loops.
//
// # Steering
//
// With Config.Steer the kernel sorts datagrams by one payload bit between
// two disjoint sets of the group's sockets before it queues them (a
// classic BPF program on the SO_REUSEPORT group), so a flood of datagrams
// with the bit set fills only its own sockets' queues and the others'
// datagrams are never dropped or delayed behind it. udpgate steers by its
// HandshakeBit: handshake packets to one set, connection packets to the
// other. Within a set, one source always reaches the same socket.
// Socket.Class tells a loop which datagrams it gets; where the kernel
// refuses the program the group runs unsteered and Config.Logger is told
// why.
//
// # Socket options
//
// On Linux IPv4 datagrams go out with the don't-fragment bit set unless
// Config.AllowFragmentation says otherwise, which spares the kernel an IP
// ID lookup per datagram (params.go). IPv6 keeps the system default.
// Config.DSCP marks outgoing datagrams with a DSCP, through
// golang.org/x/net/ipv4 and ipv6.
//
// # Portability
//
// Linux gets the batched, zero-allocation path. Elsewhere a portable
// fallback with the same API uses one socket and one datagram per system
// call.
package batchio
