package netsim

import (
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/udpgate/udpgate/batchio"
)

// Group is a set of endpoints bound to one address: what a server sees of
// its sockets as a whole.
type Group struct {
	nw   *Network
	addr netip.AddrPort
	eps  []*Endpoint
	once sync.Once
}

// Endpoints returns the group's endpoints. The slice must not be modified.
func (g *Group) Endpoints() []*Endpoint { return g.eps }

// LocalAddr is the address the group is bound to.
func (g *Group) LocalAddr() netip.AddrPort { return g.addr }

// Steered is false: the network does not steer by payload.
func (g *Group) Steered() bool { return false }

// Stats sums the endpoints' counters.
func (g *Group) Stats() batchio.Stats {
	var t batchio.Stats
	for _, ep := range g.eps {
		s := ep.Stats()
		t.RxPackets += s.RxPackets
		t.RxBytes += s.RxBytes
		t.RxBatches += s.RxBatches
		t.RxTruncated += s.RxTruncated
		t.RxDrops += s.RxDrops
		t.TxPackets += s.TxPackets
		t.TxBytes += s.TxBytes
		t.TxCalls += s.TxCalls
	}
	return t
}

// SentBytes is Stats().TxBytes.
func (g *Group) SentBytes() uint64 { return g.Stats().TxBytes }

// Close unbinds the address and closes every endpoint.
func (g *Group) Close() error {
	g.once.Do(func() {
		g.nw.unbind(g)
		for _, ep := range g.eps {
			ep.close()
		}
	})
	return nil
}

// Endpoint is one socket on a Network: it receives the datagrams sent to
// its address (or, in a group, its share of them) and sends from that
// address. It serves a server's receive loop (Recv, Send) and a client
// (ReadFrom, WriteTo, SetReadDeadline) alike, and is safe for concurrent
// use.
type Endpoint struct {
	nw    *Network
	group *Group
	addr  netip.AddrPort

	mu       sync.Mutex
	ready    sync.Cond // signalled when the queue grows, the deadline moves or the endpoint closes
	queue    ring
	closed   bool
	deadline time.Time
	dlTimer  *time.Timer
	stats    batchio.Stats
}

func newEndpoint(nw *Network, g *Group, addr netip.AddrPort) *Endpoint {
	ep := &Endpoint{nw: nw, group: g, addr: addr}
	ep.ready.L = &ep.mu
	return ep
}

// enqueue queues p for a reader and counts its fate in the network's
// counters before a reader can see it, so that a reader that has just taken
// a datagram always finds it counted.
func (ep *Endpoint) enqueue(from netip.AddrPort, p []byte, limit int) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		ep.nw.undeliverable.Add(1)
		return
	}
	if ep.queue.len() >= limit {
		ep.stats.RxDrops++
		ep.nw.queueDrops.Add(1)
		return
	}
	ep.nw.delivered.Add(1)
	ep.queue.push(newPacket(from, p))
	ep.ready.Signal()
}

// LocalAddr is the endpoint's address.
func (ep *Endpoint) LocalAddr() netip.AddrPort { return ep.addr }

// Network is the network the endpoint is bound on.
func (ep *Endpoint) Network() *Network { return ep.nw }

// Class is batchio.ClassAll: the endpoint takes every datagram sent to it.
func (ep *Endpoint) Class() batchio.Class { return batchio.ClassAll }

// Pending is how many datagrams wait in the endpoint's queue.
func (ep *Endpoint) Pending() int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.queue.len()
}

// waitLocked waits until a datagram is queued, the endpoint closes
// (net.ErrClosed) or the read deadline passes (os.ErrDeadlineExceeded).
// ep.mu is held.
func (ep *Endpoint) waitLocked() error {
	for {
		if ep.closed {
			return net.ErrClosed
		}
		if ep.queue.len() > 0 {
			return nil
		}
		if !ep.deadline.IsZero() && !time.Now().Before(ep.deadline) {
			return os.ErrDeadlineExceeded
		}
		ep.ready.Wait()
	}
}

// Recv waits until a datagram is queued, moves up to len(b.Msgs) of them
// into b and returns how many, as batchio.Socket.Recv does. A datagram
// longer than the batch's slots is cut and flagged Truncated. It returns
// net.ErrClosed once the endpoint is closed, and os.ErrDeadlineExceeded
// when the read deadline passes first.
func (ep *Endpoint) Recv(b *batchio.Batch) (int, error) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if err := ep.waitLocked(); err != nil {
		return 0, err
	}
	n := min(ep.queue.len(), len(b.Msgs))
	for i := range n {
		pk := ep.queue.pop()
		m := &b.Msgs[i]
		m.Buf = m.Buf[:cap(m.Buf)]
		m.N = copy(m.Buf, pk.data)
		m.Truncated = len(pk.data) > len(m.Buf)
		if m.Truncated {
			ep.stats.RxTruncated++
		}
		m.Addr = pk.from
		ep.stats.RxBytes += uint64(len(pk.data))
		freePacket(pk)
	}
	ep.stats.RxPackets += uint64(n)
	ep.stats.RxBatches++
	return n, nil
}

// ReadFrom waits for a datagram and copies it into p, as
// net.UDPConn.ReadFromUDPAddrPort does: a datagram longer than p is cut to
// len(p) and the rest discarded. It returns net.ErrClosed once the
// endpoint is closed, and os.ErrDeadlineExceeded when the read deadline
// (SetReadDeadline) passes first.
func (ep *Endpoint) ReadFrom(p []byte) (n int, from netip.AddrPort, err error) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if err := ep.waitLocked(); err != nil {
		return 0, netip.AddrPort{}, err
	}
	return ep.takeLocked(p)
}

// RecvFrom takes the oldest queued datagram into p without waiting, for a
// test playing a client: ok is false when none is queued.
func (ep *Endpoint) RecvFrom(p []byte) (n int, from netip.AddrPort, ok bool) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.queue.len() == 0 {
		return 0, netip.AddrPort{}, false
	}
	n, from, _ = ep.takeLocked(p)
	return n, from, true
}

func (ep *Endpoint) takeLocked(p []byte) (int, netip.AddrPort, error) {
	pk := ep.queue.pop()
	n, from := copy(p, pk.data), pk.from
	ep.stats.RxPackets++
	ep.stats.RxBytes += uint64(len(pk.data))
	freePacket(pk)
	return n, from, nil
}

// SetReadDeadline makes ReadFrom and Recv, blocked or later, return
// os.ErrDeadlineExceeded once t has passed (on the clock of time.Now, the
// fake one inside a synctest bubble). The zero t means no deadline.
func (ep *Endpoint) SetReadDeadline(t time.Time) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return net.ErrClosed
	}
	ep.deadline = t
	if !t.IsZero() {
		if d := time.Until(t); d > 0 {
			if ep.dlTimer == nil {
				ep.dlTimer = time.AfterFunc(d, ep.wake)
			} else {
				ep.dlTimer.Reset(d)
			}
		}
	} else if ep.dlTimer != nil {
		ep.dlTimer.Stop()
	}
	ep.ready.Broadcast()
	return nil
}

// wake lets blocked readers look at the deadline.
func (ep *Endpoint) wake() {
	ep.mu.Lock()
	ep.ready.Broadcast()
	ep.mu.Unlock()
}

// Send sends b.Msgs[:n], each Buf[:N] to its Addr.
func (ep *Endpoint) Send(b *batchio.Batch, n int) error {
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return net.ErrClosed
	}
	ep.stats.TxCalls++
	for i := range b.Msgs[:n] {
		ep.stats.TxPackets++
		ep.stats.TxBytes += uint64(b.Msgs[i].N)
	}
	ep.mu.Unlock()
	for i := range b.Msgs[:n] {
		m := &b.Msgs[i]
		ep.nw.send(ep.addr, m.Addr, m.Buf[:m.N])
	}
	return nil
}

// WriteTo sends p to addr; p may be reused once it returns. It fails with
// net.ErrClosed once the endpoint is closed and batchio.ErrInvalidAddr for
// an invalid addr.
func (ep *Endpoint) WriteTo(p []byte, addr netip.AddrPort) error {
	if !addr.IsValid() {
		return batchio.ErrInvalidAddr
	}
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return net.ErrClosed
	}
	ep.stats.TxCalls++
	ep.stats.TxPackets++
	ep.stats.TxBytes += uint64(len(p))
	ep.mu.Unlock()
	ep.nw.send(ep.addr, addr, p)
	return nil
}

// Stats returns the endpoint's counters: packets, bytes, receive batches,
// truncated datagrams, send calls and datagrams dropped at a full queue
// (RxDrops).
func (ep *Endpoint) Stats() batchio.Stats {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.stats
}

// Close closes the endpoint's whole group (for a Bind, the endpoint) and
// unbinds its address: blocked and later reads return net.ErrClosed, and
// the datagrams queued are discarded.
func (ep *Endpoint) Close() error { return ep.group.Close() }

func (ep *Endpoint) close() {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	ep.closed = true
	for ep.queue.len() > 0 {
		freePacket(ep.queue.pop())
	}
	ep.queue = ring{}
	if ep.dlTimer != nil {
		ep.dlTimer.Stop()
	}
	ep.ready.Broadcast()
}

// ring is a FIFO of packets.
type ring struct {
	buf        []*packet
	head, size int
}

func (r *ring) len() int { return r.size }

func (r *ring) push(pk *packet) {
	if r.size == len(r.buf) {
		nb := make([]*packet, max(16, 2*len(r.buf)))
		for i := range r.size {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.size)%len(r.buf)] = pk
	r.size++
}

func (r *ring) pop() *packet {
	pk := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	return pk
}
