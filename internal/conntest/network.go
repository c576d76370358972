package conntest

import (
	"hash/maphash"
	"net"
	"net/netip"
	"sync"

	"github.com/udpgate/udpgate/batchio"
)

// DefaultQueueLen is an endpoint's receive queue, in datagrams, unless
// Network.QueueLen says otherwise: a datagram arriving at a full queue is
// dropped and counted in the endpoint's Stats.RxDrops, as a kernel socket
// buffer would.
const DefaultQueueLen = 4096

// Network delivers datagrams between the endpoints bound on it, in memory.
// Delivery is immediate and in order; a datagram to an address nobody has
// bound is lost (and counted by Undeliverable). It is safe for concurrent
// use.
type Network struct {
	// Drop, if set, is asked about every datagram before delivery; true
	// loses it. Set it before traffic starts.
	Drop func(from, to netip.AddrPort, p []byte) bool
	// QueueLen bounds each endpoint's receive queue (0: DefaultQueueLen).
	// Set it before binding.
	QueueLen int

	mu            sync.Mutex
	groups        map[netip.AddrPort]*Group
	seed          maphash.Seed
	undeliverable uint64
	dropped       uint64
}

// NewNetwork returns an empty network.
func NewNetwork() *Network {
	return &Network{groups: make(map[netip.AddrPort]*Group), seed: maphash.MakeSeed()}
}

// Listen binds n endpoints to addr, as a group of SO_REUSEPORT sockets:
// every datagram of one source reaches the same endpoint. It panics if addr
// is bound already.
func (nw *Network) Listen(addr netip.AddrPort, n int) *Group {
	g := &Group{nw: nw, addr: addr}
	for range max(n, 1) {
		g.eps = append(g.eps, newEndpoint(nw, g, addr))
	}
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if _, ok := nw.groups[addr]; ok {
		panic("conntest: address bound twice: " + addr.String())
	}
	nw.groups[addr] = g
	return g
}

// Bind binds one endpoint to addr (a client's socket).
func (nw *Network) Bind(addr netip.AddrPort) *Endpoint { return nw.Listen(addr, 1).eps[0] }

// Deliver sends p from any address, bound or not, as a spoofer or a crowd
// of clients that never read their replies would.
func (nw *Network) Deliver(from, to netip.AddrPort, p []byte) { nw.deliver(from, to, p) }

// Undeliverable counts datagrams sent to an address nobody had bound.
func (nw *Network) Undeliverable() uint64 {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.undeliverable
}

// Dropped counts datagrams Drop lost.
func (nw *Network) Dropped() uint64 {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.dropped
}

func (nw *Network) deliver(from, to netip.AddrPort, p []byte) {
	if nw.Drop != nil && nw.Drop(from, to, p) {
		nw.mu.Lock()
		nw.dropped++
		nw.mu.Unlock()
		return
	}
	nw.mu.Lock()
	g := nw.groups[to]
	if g == nil {
		nw.undeliverable++
		nw.mu.Unlock()
		return
	}
	ep := g.eps[0]
	if len(g.eps) > 1 {
		ep = g.eps[maphash.Comparable(nw.seed, from)%uint64(len(g.eps))]
	}
	nw.mu.Unlock()
	ep.enqueue(from, p)
}

func (nw *Network) unbind(g *Group) {
	nw.mu.Lock()
	if nw.groups[g.addr] == g {
		delete(nw.groups, g.addr)
	}
	nw.mu.Unlock()
}

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
		t.RxDrops += s.RxDrops
		t.TxPackets += s.TxPackets
		t.TxBytes += s.TxBytes
		t.TxCalls += s.TxCalls
	}
	return t
}

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

type datagram struct {
	from netip.AddrPort
	p    []byte
}

// Endpoint is one socket on a Network: it receives the datagrams sent to
// its address (or, in a group, its share of them) and sends from that
// address.
type Endpoint struct {
	nw    *Network
	group *Group
	addr  netip.AddrPort

	mu     sync.Mutex
	ready  sync.Cond // signalled when queue grows or the endpoint closes
	queue  []datagram
	closed bool
	stats  batchio.Stats
}

func newEndpoint(nw *Network, g *Group, addr netip.AddrPort) *Endpoint {
	ep := &Endpoint{nw: nw, group: g, addr: addr}
	ep.ready.L = &ep.mu
	return ep
}

func (ep *Endpoint) enqueue(from netip.AddrPort, p []byte) {
	limit := ep.nw.QueueLen
	if limit <= 0 {
		limit = DefaultQueueLen
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return
	}
	if len(ep.queue) >= limit {
		ep.stats.RxDrops++
		return
	}
	ep.queue = append(ep.queue, datagram{from: from, p: append([]byte(nil), p...)})
	ep.ready.Signal()
}

// LocalAddr is the endpoint's address.
func (ep *Endpoint) LocalAddr() netip.AddrPort { return ep.addr }

// Class is batchio.ClassAll: the endpoint takes every datagram sent to it.
func (ep *Endpoint) Class() batchio.Class { return batchio.ClassAll }

// Pending is how many datagrams wait in the endpoint's queue.
func (ep *Endpoint) Pending() int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return len(ep.queue)
}

// Recv waits until a datagram is queued, moves up to len(b.Msgs) of them
// into b and returns how many, as batchio.Socket.Recv does. A datagram
// longer than the batch's slots is cut and flagged Truncated. It returns
// net.ErrClosed once the endpoint is closed.
func (ep *Endpoint) Recv(b *batchio.Batch) (int, error) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	for len(ep.queue) == 0 && !ep.closed {
		ep.ready.Wait()
	}
	if ep.closed {
		return 0, net.ErrClosed
	}
	n := min(len(ep.queue), len(b.Msgs))
	for i, d := range ep.queue[:n] {
		m := &b.Msgs[i]
		m.Buf = m.Buf[:cap(m.Buf)]
		m.N = copy(m.Buf, d.p)
		m.Truncated = len(d.p) > len(m.Buf)
		m.Addr = d.from
		ep.stats.RxBytes += uint64(len(d.p))
	}
	ep.stats.RxPackets += uint64(n)
	ep.stats.RxBatches++
	rest := copy(ep.queue, ep.queue[n:])
	clear(ep.queue[rest:])
	ep.queue = ep.queue[:rest]
	return n, nil
}

// RecvFrom takes the oldest queued datagram into p without waiting, for a
// test playing a client: ok is false when none is queued.
func (ep *Endpoint) RecvFrom(p []byte) (n int, from netip.AddrPort, ok bool) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if len(ep.queue) == 0 {
		return 0, netip.AddrPort{}, false
	}
	d := ep.queue[0]
	ep.queue = append(ep.queue[:0], ep.queue[1:]...)
	ep.stats.RxPackets++
	ep.stats.RxBytes += uint64(len(d.p))
	return copy(p, d.p), d.from, true
}

// Send sends b.Msgs[:n], each Buf[:N] to its Addr.
func (ep *Endpoint) Send(b *batchio.Batch, n int) error {
	if ep.isClosed() {
		return net.ErrClosed
	}
	for i := range b.Msgs[:n] {
		m := &b.Msgs[i]
		ep.count(m.N)
		ep.nw.deliver(ep.addr, m.Addr, m.Buf[:m.N])
	}
	ep.mu.Lock()
	ep.stats.TxCalls++
	ep.mu.Unlock()
	return nil
}

// WriteTo sends p to addr.
func (ep *Endpoint) WriteTo(p []byte, addr netip.AddrPort) error {
	if ep.isClosed() {
		return net.ErrClosed
	}
	if !addr.IsValid() {
		return batchio.ErrInvalidAddr
	}
	ep.count(len(p))
	ep.mu.Lock()
	ep.stats.TxCalls++
	ep.mu.Unlock()
	ep.nw.deliver(ep.addr, addr, p)
	return nil
}

// Stats returns the endpoint's counters: packets, bytes, receive batches,
// send calls and datagrams dropped at a full queue.
func (ep *Endpoint) Stats() batchio.Stats {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.stats
}

// Close closes the endpoint's whole group (for a Bind, the endpoint):
// blocked and later Recv calls return net.ErrClosed.
func (ep *Endpoint) Close() error { return ep.group.Close() }

func (ep *Endpoint) close() {
	ep.mu.Lock()
	ep.closed = true
	ep.queue = nil
	ep.ready.Broadcast()
	ep.mu.Unlock()
}

func (ep *Endpoint) isClosed() bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.closed
}

func (ep *Endpoint) count(n int) {
	ep.mu.Lock()
	ep.stats.TxPackets++
	ep.stats.TxBytes += uint64(n)
	ep.mu.Unlock()
}
