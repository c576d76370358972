package netsim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultQueueLen is an endpoint's receive queue, in datagrams, unless
// Network.QueueLen says otherwise: a datagram arriving at a full queue is
// dropped and counted (Stats.QueueDrops, and the endpoint's
// batchio.Stats.RxDrops), as a kernel socket buffer would drop it.
const DefaultQueueLen = 4096

// Ephemeral ports: Bind and Listen pick from this range when asked for port
// 0, as the kernel does (Linux's ip_local_port_range is 32768..60999; IANA's
// is used here).
const (
	FirstEphemeralPort = 49152
	LastEphemeralPort  = 65535
)

// ErrAddrInUse is returned by Listen and Bind for an address bound already.
var ErrAddrInUse = errors.New("netsim: address already in use")

// Link is how a path treats its datagrams. The zero Link is a perfect
// wire: no loss, no delay, order kept.
//
// For each datagram the link draws, in this order and from the random
// stream of the rule that chose it: loss; then duplication; then, for the
// datagram and for its duplicate if any, the jitter and whether it is
// reordered. A probability of 0 draws nothing, so a rule with only
// Latency set consumes no randomness.
//
// With a Bottleneck, each copy that survives the loss draw goes through
// its queue, and its delay (Latency, Jitter, Reorder) counts from its
// departure. A copy the queue drops has made its draws too, so a
// Bottleneck changes no random outcome of the rule.
type Link struct {
	// Loss is the probability that a datagram is lost.
	Loss float64
	// Duplicate is the probability that a datagram is delivered twice;
	// the copy takes its own jitter and reordering draws.
	Duplicate float64
	// Reorder is the probability that a datagram is held back ReorderDelay
	// longer than its delay, so that the datagrams sent after it within
	// that time overtake it.
	Reorder float64
	// Latency delays every datagram.
	Latency time.Duration
	// Jitter adds to each datagram's delay a duration drawn uniformly in
	// [0, Jitter]. Datagrams can overtake one another when Jitter exceeds
	// the time between their sends, as on a real network.
	Jitter time.Duration
	// ReorderDelay is how much longer a reordered datagram is held: 0
	// means Latency+Jitter, and at least a millisecond.
	ReorderDelay time.Duration
	// Seed seeds the rule's random stream: equal seeds and equal traffic
	// give equal outcomes.
	Seed uint64
	// Bottleneck, if not nil, is the path's narrowest hop: a rate and a
	// drop-tail queue, shared by every path whose Link names it.
	Bottleneck *Bottleneck
}

func (l *Link) reorderDelay() time.Duration {
	if l.ReorderDelay > 0 {
		return l.ReorderDelay
	}
	return max(l.Latency+l.Jitter, time.Millisecond)
}

// rule is a Link and its random stream.
type rule struct {
	link Link
	rng  *rand.Rand
}

func newRule(l Link) *rule {
	return &rule{link: l, rng: rand.New(rand.NewPCG(l.Seed, l.Seed^0x9e3779b97f4a7c15))}
}

// chance draws true with probability p; p <= 0 draws nothing.
func (r *rule) chance(p float64) bool {
	if p <= 0 {
		return false
	}
	return r.rng.Float64() < p
}

// delay draws one datagram's delay and whether it was reordered.
func (r *rule) delay() (time.Duration, bool) {
	l := &r.link
	d := l.Latency
	if l.Jitter > 0 {
		d += time.Duration(r.rng.Int64N(int64(l.Jitter) + 1))
	}
	if r.chance(l.Reorder) {
		return d + l.reorderDelay(), true
	}
	return d, false
}

type pathKey struct{ from, to netip.AddrPort }

// Stats are a network's counters (see the package documentation for how
// they add up).
type Stats struct {
	// Sent counts datagrams handed to the network: by Endpoint.WriteTo,
	// Endpoint.Send and Network.Deliver.
	Sent uint64
	// Dropped counts datagrams Network.Drop lost.
	Dropped uint64
	// Lost counts datagrams their link lost (Link.Loss).
	Lost uint64
	// Duplicated counts copies made by Link.Duplicate.
	Duplicated uint64
	// Reordered counts datagrams held back by Link.Reorder.
	Reordered uint64
	// Delivered counts datagrams placed in a receive queue.
	Delivered uint64
	// Undeliverable counts datagrams whose destination nobody had bound (or
	// had closed) when they arrived.
	Undeliverable uint64
	// QueueDrops counts datagrams that arrived at a full receive queue.
	QueueDrops uint64
	// BottleneckDrops counts datagrams (and copies) a full Bottleneck
	// queue dropped.
	BottleneckDrops uint64
	// InFlight is how many datagrams are held on their links now: queued
	// at a Bottleneck or delayed.
	InFlight uint64
}

// Network delivers datagrams between the endpoints bound on it, in memory,
// through Links. It is safe for concurrent use.
//
// The network has no interfaces: a datagram goes to whoever bound its
// destination address exactly, and binding an unspecified address
// (0.0.0.0, ::) binds the loopback address of its family.
type Network struct {
	// Drop, if set, is asked about every datagram as it is sent, before
	// its link; true loses it (counted in Stats.Dropped). It is called
	// without the network's locks held, from the sending goroutine. Set it
	// before traffic starts.
	Drop func(from, to netip.AddrPort, p []byte) bool
	// QueueLen bounds each endpoint's receive queue (0: DefaultQueueLen).
	// Set it before binding.
	QueueLen int

	mu       sync.Mutex
	groups   map[netip.AddrPort]*Group
	nextPort int
	hosts    map[string]netip.Addr
	def      *rule
	paths    map[pathKey]*rule

	// Delayed datagrams, a heap by due time then send order, and the one
	// timer that delivers them.
	heap    []*packet
	seq     uint64
	timer   *time.Timer
	armedAt time.Time // when timer fires; zero if it is not armed

	sent, dropped, lost, duplicated, reordered   atomic.Uint64
	delivered, undeliverable, queueDrops, flight atomic.Uint64
	bottleneckDrops                              atomic.Uint64
}

// New returns an empty network whose links are perfect.
func New() *Network {
	return &Network{groups: make(map[netip.AddrPort]*Group), nextPort: FirstEphemeralPort}
}

// SetHost names addr host on this network, for Resolve: a simulated
// network has no DNS, so a test that dials by name says what the name is.
// Names are compared as given (use lower case).
func (nw *Network) SetHost(host string, addr netip.Addr) {
	nw.mu.Lock()
	if nw.hosts == nil {
		nw.hosts = make(map[string]netip.Addr)
	}
	nw.hosts[host] = addr
	nw.mu.Unlock()
}

// Resolve reads hostport, "host:port", as an address of this network: a
// literal address ("10.0.0.1:7777", "[::1]:0"), a host named with SetHost,
// "localhost" (127.0.0.1 unless SetHost says otherwise) or no host
// (":7777", the unspecified IPv4 address). IPv4-mapped IPv6 addresses are
// unmapped. It never asks the real DNS.
func (nw *Network) Resolve(hostport string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(hostport); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("netsim: bad address %q: %v (use host:port)", hostport, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("netsim: bad port in %q (use host:port, port 0..65535)", hostport)
	}
	nw.mu.Lock()
	addr, ok := nw.hosts[host]
	nw.mu.Unlock()
	switch {
	case ok:
	case host == "":
		addr, ok = netip.IPv4Unspecified(), true
	case host == "localhost":
		addr, ok = netip.AddrFrom4([4]byte{127, 0, 0, 1}), true
	default:
		addr, err = netip.ParseAddr(host)
		ok = err == nil
	}
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("netsim: no host %q on this network: name its address with Network.SetHost", host)
	}
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}

// SetLink makes l the link of every path SetPath does not name.
func (nw *Network) SetLink(l Link) {
	nw.mu.Lock()
	nw.def = newRule(l)
	nw.mu.Unlock()
}

// SetPath makes l the link of the datagrams from from to to (one
// direction). A zero (invalid) from or to matches any address: SetPath({},
// server, l) sets the link of everything sent to server. A datagram takes
// the first rule that matches, looking for (from, to), (from, any), (any,
// to), then the default of SetLink. Each call makes a new rule with its
// own random stream, seeded by l.Seed.
func (nw *Network) SetPath(from, to netip.AddrPort, l Link) {
	nw.mu.Lock()
	if nw.paths == nil {
		nw.paths = make(map[pathKey]*rule)
	}
	nw.paths[pathKey{from, to}] = newRule(l)
	nw.mu.Unlock()
}

// ClearPath removes the rule SetPath made for (from, to).
func (nw *Network) ClearPath(from, to netip.AddrPort) {
	nw.mu.Lock()
	delete(nw.paths, pathKey{from, to})
	nw.mu.Unlock()
}

// ruleLocked is the rule of a path, nil for a perfect link. nw.mu is held.
func (nw *Network) ruleLocked(from, to netip.AddrPort) *rule {
	if len(nw.paths) > 0 {
		if r := nw.paths[pathKey{from, to}]; r != nil {
			return r
		}
		if r := nw.paths[pathKey{from: from}]; r != nil {
			return r
		}
		if r := nw.paths[pathKey{to: to}]; r != nil {
			return r
		}
	}
	return nw.def
}

// Listen binds n endpoints (at least one) to addr, as a group of
// SO_REUSEPORT sockets: every datagram of one source reaches the same
// endpoint. Port 0 picks a free ephemeral port; an unspecified or invalid
// address binds the loopback address (127.0.0.1 for an invalid one). It
// fails with ErrAddrInUse if the address is bound already.
func (nw *Network) Listen(addr netip.AddrPort, n int) (*Group, error) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	ip := addr.Addr()
	switch {
	case !ip.IsValid():
		ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	case ip.IsUnspecified() && ip.Is4():
		ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	case ip.IsUnspecified():
		ip = netip.IPv6Loopback()
	}
	ip = ip.Unmap()
	if addr.Port() == 0 {
		a, ok := nw.freePortLocked(ip)
		if !ok {
			return nil, fmt.Errorf("netsim: no free port on %v", ip)
		}
		addr = a
	} else {
		addr = netip.AddrPortFrom(ip, addr.Port())
	}
	if _, ok := nw.groups[addr]; ok {
		return nil, fmt.Errorf("netsim: bind %v: %w", addr, ErrAddrInUse)
	}
	g := &Group{nw: nw, addr: addr}
	for range max(n, 1) {
		g.eps = append(g.eps, newEndpoint(nw, g, addr))
	}
	nw.groups[addr] = g
	return g, nil
}

func (nw *Network) freePortLocked(ip netip.Addr) (netip.AddrPort, bool) {
	for range LastEphemeralPort - FirstEphemeralPort + 1 {
		p := nw.nextPort
		nw.nextPort++
		if nw.nextPort > LastEphemeralPort {
			nw.nextPort = FirstEphemeralPort
		}
		a := netip.AddrPortFrom(ip, uint16(p))
		if _, ok := nw.groups[a]; !ok {
			return a, true
		}
	}
	return netip.AddrPort{}, false
}

// Bind binds one endpoint to addr, a client's socket; see Listen for port 0
// and unspecified addresses.
func (nw *Network) Bind(addr netip.AddrPort) (*Endpoint, error) {
	g, err := nw.Listen(addr, 1)
	if err != nil {
		return nil, err
	}
	return g.eps[0], nil
}

// Deliver sends p from any address, bound or not, as a spoofer or a crowd
// of clients that never read their replies would. p may be reused once it
// returns.
func (nw *Network) Deliver(from, to netip.AddrPort, p []byte) { nw.send(from, to, p) }

// Balanced reports whether every datagram sent and every duplicate made is
// accounted for exactly once (the sum in the package documentation): a
// test of a simulation checks it after its traffic.
func (s Stats) Balanced() bool {
	return s.Sent+s.Duplicated == s.Dropped+s.Lost+s.Delivered+s.Undeliverable+s.QueueDrops+s.BottleneckDrops+s.InFlight
}

// Stats returns the network's counters.
func (nw *Network) Stats() Stats {
	return Stats{
		Sent:            nw.sent.Load(),
		Dropped:         nw.dropped.Load(),
		Lost:            nw.lost.Load(),
		Duplicated:      nw.duplicated.Load(),
		Reordered:       nw.reordered.Load(),
		Delivered:       nw.delivered.Load(),
		Undeliverable:   nw.undeliverable.Load(),
		QueueDrops:      nw.queueDrops.Load(),
		BottleneckDrops: nw.bottleneckDrops.Load(),
		InFlight:        nw.flight.Load(),
	}
}

// send takes one datagram through Drop and its link.
func (nw *Network) send(from, to netip.AddrPort, p []byte) {
	nw.sent.Add(1)
	if nw.Drop != nil && nw.Drop(from, to, p) {
		nw.dropped.Add(1)
		return
	}
	nw.mu.Lock()
	r := nw.ruleLocked(from, to)
	if r == nil {
		nw.arriveLocked(from, to, p)
		nw.mu.Unlock()
		return
	}
	if r.chance(r.link.Loss) {
		nw.lost.Add(1)
		nw.mu.Unlock()
		return
	}
	copies := 1
	if r.chance(r.link.Duplicate) {
		nw.duplicated.Add(1)
		copies = 2
	}
	var now time.Time
	for range copies {
		d, reordered := r.delay()
		b := r.link.Bottleneck
		if b == nil && d <= 0 {
			if reordered {
				nw.reordered.Add(1)
			}
			nw.arriveLocked(from, to, p)
			continue
		}
		if now.IsZero() {
			now = time.Now()
		}
		due := now
		if b != nil {
			left, ok := b.admit(now, len(p))
			if !ok {
				nw.bottleneckDrops.Add(1)
				continue
			}
			due = left
		}
		if reordered {
			nw.reordered.Add(1)
		}
		if due = due.Add(d); !due.After(now) {
			nw.arriveLocked(from, to, p)
			continue
		}
		nw.scheduleLocked(from, to, p, due)
	}
	nw.mu.Unlock()
}

// arriveLocked queues p at the endpoint bound to to. nw.mu is held.
func (nw *Network) arriveLocked(from, to netip.AddrPort, p []byte) {
	g := nw.groups[to]
	if g == nil {
		nw.undeliverable.Add(1)
		return
	}
	ep := g.eps[0]
	if len(g.eps) > 1 {
		ep = g.eps[hashAddr(from)%uint64(len(g.eps))]
	}
	ep.enqueue(from, p, nw.queueLen())
}

func (nw *Network) queueLen() int {
	if nw.QueueLen > 0 {
		return nw.QueueLen
	}
	return DefaultQueueLen
}

// hashAddr spreads sources over a group's endpoints (FNV-1a), the same way
// on every run.
func hashAddr(a netip.AddrPort) uint64 {
	h := uint64(14695981039346656037)
	b := a.Addr().As16()
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	h = (h ^ uint64(a.Port()&0xff)) * 1099511628211
	h = (h ^ uint64(a.Port()>>8)) * 1099511628211
	return h
}

func (nw *Network) unbind(g *Group) {
	nw.mu.Lock()
	if nw.groups[g.addr] == g {
		delete(nw.groups, g.addr)
	}
	nw.mu.Unlock()
}

// packet is a datagram held by the network: delayed on a link or queued
// at an endpoint. Packets are pooled, so a network in its steady state
// allocates nothing per datagram.
type packet struct {
	from, to netip.AddrPort
	due      time.Time
	seq      uint64
	data     []byte
}

// maxPooled is the largest buffer the pool keeps.
const maxPooled = 2048

var packets = sync.Pool{New: func() any { return &packet{data: make([]byte, 0, maxPooled)} }}

func newPacket(from netip.AddrPort, p []byte) *packet {
	pk := packets.Get().(*packet)
	pk.from = from
	pk.data = append(pk.data[:0], p...)
	return pk
}

func freePacket(pk *packet) {
	if cap(pk.data) > maxPooled {
		return
	}
	*pk = packet{data: pk.data[:0]}
	packets.Put(pk)
}

// scheduleLocked holds p until due. nw.mu is held.
func (nw *Network) scheduleLocked(from, to netip.AddrPort, p []byte, due time.Time) {
	pk := newPacket(from, p)
	pk.to = to
	pk.due = due
	nw.seq++
	pk.seq = nw.seq
	nw.push(pk)
	nw.flight.Add(1)
	if nw.armedAt.IsZero() || due.Before(nw.armedAt) {
		d := time.Until(due)
		if nw.timer == nil {
			nw.timer = time.AfterFunc(d, nw.fire)
		} else {
			nw.timer.Reset(d)
		}
		nw.armedAt = due
	}
}

// fire delivers the delayed datagrams that are due and sets the timer for
// the next.
func (nw *Network) fire() {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	now := time.Now()
	for len(nw.heap) > 0 && !nw.heap[0].due.After(now) {
		pk := nw.pop()
		nw.flight.Add(^uint64(0))
		nw.arriveLocked(pk.from, pk.to, pk.data)
		freePacket(pk)
	}
	if len(nw.heap) == 0 {
		nw.armedAt = time.Time{}
		return
	}
	nw.armedAt = nw.heap[0].due
	nw.timer.Reset(nw.armedAt.Sub(now))
}

func less(a, b *packet) bool {
	if !a.due.Equal(b.due) {
		return a.due.Before(b.due)
	}
	return a.seq < b.seq
}

func (nw *Network) push(pk *packet) {
	h := append(nw.heap, pk)
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !less(h[i], h[parent]) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
	nw.heap = h
}

func (nw *Network) pop() *packet {
	h := nw.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = nil
	h = h[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && less(h[r], h[l]) {
			m = r
		}
		if !less(h[m], h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	nw.heap = h
	return top
}
