// Package netem is an in-process UDP proxy for tests: it sits between
// clients and a server on loopback and drops, duplicates, reorders and
// delays datagrams with a seeded random source, reporting every decision so
// a test can compare what endpoints believe with what really happened. It
// can also be a bottleneck (Config.Rate): a rate and a drop-tail queue in
// each direction, as a home router or a mobile uplink is.
//
// Each client address gets its own upstream socket, as a NAT would, so the
// server sees one distinct source per client.
package netem

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Config sets the impairments, each applied independently per datagram and
// direction.
type Config struct {
	Loss      float64       // probability a datagram is dropped
	Duplicate float64       // probability a forwarded datagram is sent twice
	Reorder   float64       // probability a datagram is held back by an extra 2×Jitter
	Delay     time.Duration // base one-way delay
	Jitter    time.Duration // uniform extra delay in [0, Jitter)
	Seed      uint64
	// SocketBuffer, if > 0, sets the receive and send buffers of the
	// proxy's sockets (bytes, capped by the kernel), so a burst is not
	// dropped at the proxy itself (0: the system default).
	SocketBuffer int

	// Rate, if > 0, is a bottleneck in each direction: datagrams leave the
	// proxy at most Rate bytes per second per direction (shared by all
	// clients in that direction), after a drop-tail queue of QueueBytes
	// bytes (0 with Rate: DefaultQueueBytes); a datagram that would
	// overflow the queue is dropped. Bytes are UDP payload bytes: IP and
	// UDP headers are not counted. A datagram of n bytes accepted at time
	// t leaves at max(t, the previous datagram's departure) + n/Rate, and
	// is queued until then. Loss and Duplicate apply before the queue
	// (random loss on top of the bottleneck), and so does the Reorder
	// draw; Delay, Jitter and a reordered datagram's hold apply after it
	// (propagation). Close discards what is still queued.
	Rate       int64
	QueueBytes int
}

// DefaultQueueBytes is a bottleneck's queue when Config.QueueBytes is 0.
const DefaultQueueBytes = 64 << 10

// Direction of a datagram through the proxy.
type Direction uint8

const (
	ToServer Direction = iota
	ToClient
)

// Fate is what the proxy did with one datagram: Copies is how many copies
// it forwards, 0 (dropped), 1, or 2 (duplicated).
type Fate struct {
	Dir    Direction
	Client netip.AddrPort // the client's own address
	Copies int
	// Overflow is how many copies the bottleneck's full queue dropped
	// (Config.Rate); they are not in Copies.
	Overflow int
}

// BottleneckStats counts one direction's bottleneck (Config.Rate). The
// datagrams offered and neither dropped nor forwarded are queued (or were
// discarded by Close).
type BottleneckStats struct {
	Offered   uint64 // datagrams that reached the queue
	Dropped   uint64 // dropped by the full queue
	Forwarded uint64 // left the queue
	Bytes     uint64 // bytes (UDP payload) that left the queue
	MaxQueue  int    // most bytes queued at once
}

// Proxy forwards between clients (who send to Addr) and one server.
type Proxy struct {
	cfg    Config
	server netip.AddrPort
	front  *net.UDPConn

	mu       sync.Mutex
	rnd      *rand.Rand
	upstream map[netip.AddrPort]*net.UDPConn
	observe  func(Fate, []byte)
	closed   bool
	links    [2]*link // each direction's bottleneck, nil without Config.Rate
	lines    [2]*line // each direction's delay line, without Jitter
	done     chan struct{}
	wg       sync.WaitGroup
	timers   sync.WaitGroup
}

// New starts a proxy on 127.0.0.1 for server, which must be a loopback
// address.
func New(server netip.AddrPort, cfg Config) (*Proxy, error) {
	if !server.Addr().IsLoopback() {
		return nil, fmt.Errorf("netem: server %v is not a loopback address: tests stay on this machine", server)
	}
	front, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	setBuffers(front, cfg.SocketBuffer)
	p := &Proxy{
		cfg:      cfg,
		server:   server,
		front:    front,
		rnd:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		upstream: map[netip.AddrPort]*net.UDPConn{},
		done:     make(chan struct{}),
	}
	if cfg.Jitter <= 0 && cfg.Delay > 0 {
		for dir := range p.lines {
			l := &line{wake: make(chan struct{}, 1)}
			p.lines[dir] = l
			p.wg.Add(1)
			go p.carry(l)
		}
	}
	if cfg.Rate > 0 {
		limit := cfg.QueueBytes
		if limit <= 0 {
			limit = DefaultQueueBytes
		}
		for dir := range p.links {
			l := &link{rate: cfg.Rate, limit: limit, wake: make(chan struct{}, 1), line: p.lines[dir]}
			p.links[dir] = l
			p.wg.Add(1)
			go p.drain(l)
		}
	}
	p.wg.Add(1)
	go p.readFront()
	return p, nil
}

// line is one direction's delay line when every datagram is delayed
// alike (no Jitter; after the bottleneck's queue, if any): one goroutine sends them in the order
// they came, as a wire does. A timer per datagram (as with Jitter) lets
// the runtime's timers and scheduler reorder datagrams that are due
// together, by tens of them at tens of thousands a second on a busy
// machine: a reordering nobody asked for, which the receiver's sequence
// window drops as stale.
type line struct {
	mu   sync.Mutex
	q    []departure // in order of due time (departure.at)
	wake chan struct{}
}

func (l *line) push(d departure) {
	l.mu.Lock()
	l.q = append(l.q, d)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// carry sends l's datagrams when due, until the proxy closes.
func (p *Proxy) carry(l *line) {
	defer p.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		l.mu.Lock()
		if len(l.q) == 0 {
			l.mu.Unlock()
			select {
			case <-l.wake:
				continue
			case <-p.done:
				return
			}
		}
		d := l.q[0]
		wait := time.Until(d.at)
		if wait <= 0 {
			l.q[0] = departure{}
			l.q = l.q[1:]
			if len(l.q) == 0 {
				l.q = l.q[:0:0] // let the backing array go
			}
			l.mu.Unlock()
			d.send(d.pkt)
			continue
		}
		l.mu.Unlock()
		t.Reset(wait)
		select {
		case <-t.C:
		case <-p.done:
			return
		}
	}
}

// Bottleneck returns the counters of dir's bottleneck (zero without
// Config.Rate).
func (p *Proxy) Bottleneck(dir Direction) BottleneckStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.links[dir]; l != nil {
		return l.stats
	}
	return BottleneckStats{}
}

// Addr is where clients send.
func (p *Proxy) Addr() netip.AddrPort { return p.front.LocalAddr().(*net.UDPAddr).AddrPort() }

// Observe sets a callback told of every datagram's fate (with its bytes,
// valid only during the call). It runs on the proxy's goroutines. With a
// bottleneck (Config.Rate), a copy may leave the proxy before the
// callback has returned.
func (p *Proxy) Observe(fn func(Fate, []byte)) {
	p.mu.Lock()
	p.observe = fn
	p.mu.Unlock()
}

// Close stops the proxy and waits for datagrams in flight.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	for _, u := range p.upstream {
		u.Close()
	}
	p.mu.Unlock()
	err := p.front.Close()
	p.wg.Wait()
	p.timers.Wait()
	return err
}

func (p *Proxy) readFront() {
	defer p.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, from, err := p.front.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		up, err := p.up(from)
		if err != nil {
			continue
		}
		p.forward(ToServer, from, buf[:n], func(b []byte) { _, _ = up.Write(b) })
	}
}

// up returns the client's upstream socket, making it on first use.
func (p *Proxy) up(client netip.AddrPort) (*net.UDPConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, net.ErrClosed
	}
	if u, ok := p.upstream[client]; ok {
		return u, nil
	}
	u, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, net.UDPAddrFromAddrPort(p.server))
	if err != nil {
		return nil, err
	}
	setBuffers(u, p.cfg.SocketBuffer)
	p.upstream[client] = u
	p.wg.Add(1)
	go p.readUp(client, u)
	return u, nil
}

// setBuffers sets a socket's receive and send buffers when n > 0.
func setBuffers(c *net.UDPConn, n int) {
	if n > 0 {
		_ = c.SetReadBuffer(n)
		_ = c.SetWriteBuffer(n)
	}
}

func (p *Proxy) readUp(client netip.AddrPort, u *net.UDPConn) {
	defer p.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, err := u.Read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.forward(ToClient, client, buf[:n], func(b []byte) { _, _ = p.front.WriteToUDPAddrPort(b, client) })
	}
}

// forward decides a datagram's fate and schedules its copies.
func (p *Proxy) forward(dir Direction, client netip.AddrPort, b []byte, send func([]byte)) {
	p.mu.Lock()
	copies := 1
	if p.rnd.Float64() < p.cfg.Loss {
		copies = 0
	} else if p.rnd.Float64() < p.cfg.Duplicate {
		copies = 2
	}
	delays := [2]time.Duration{}
	for i := range copies {
		d := p.cfg.Delay
		if p.cfg.Jitter > 0 {
			d += time.Duration(p.rnd.Int64N(int64(p.cfg.Jitter)))
			if p.rnd.Float64() < p.cfg.Reorder {
				d += 2 * p.cfg.Jitter
			}
		}
		delays[i] = d
	}
	observe, closed := p.observe, p.closed
	overflow := 0
	l := p.links[dir]
	if l != nil && !closed && copies > 0 {
		pkt := append([]byte(nil), b...)
		now := time.Now()
		admitted := 0
		for i := range copies {
			if l.admitLocked(now, departure{pkt: pkt, delay: delays[i], send: send}) {
				admitted++
			}
		}
		copies, overflow = admitted, copies-admitted
	}
	p.mu.Unlock()
	if observe != nil {
		observe(Fate{Dir: dir, Client: client, Copies: copies, Overflow: overflow}, b)
	}
	if closed || copies == 0 || l != nil {
		return
	}
	pkt := append([]byte(nil), b...)
	if ln := p.lines[dir]; ln != nil {
		due := time.Now().Add(p.cfg.Delay)
		for range copies {
			ln.push(departure{at: due, pkt: pkt, send: send})
		}
		return
	}
	for i := range copies {
		if delays[i] <= 0 {
			send(pkt)
			continue
		}
		p.timers.Add(1)
		time.AfterFunc(delays[i], func() {
			defer p.timers.Done()
			send(pkt)
		})
	}
}

// link is one direction's bottleneck: a drop-tail queue that a goroutine
// (drain) empties at the link's rate. Its fields but rate, limit and wake
// are guarded by Proxy.mu.
type link struct {
	rate  int64 // bytes per second
	limit int   // the queue's bytes
	wake  chan struct{}
	line  *line // the propagation delay after the queue, nil with Jitter

	queue  []departure // accepted and not yet sent, by departure time
	queued int         // bytes in queue
	last   time.Time   // departure of the last datagram accepted
	rem    int64       // what last's division by rate left over, in ns×rate
	stats  BottleneckStats
}

// departure is a datagram in a bottleneck's queue.
type departure struct {
	at    time.Time     // when it leaves the queue, ideally
	delay time.Duration // its propagation delay after that
	pkt   []byte
	send  func([]byte)
}

// admitLocked queues d unless the queue is too full for it, and sets its
// departure time; now is d's arrival. Proxy.mu is held.
func (l *link) admitLocked(now time.Time, d departure) bool {
	l.stats.Offered++
	// The bytes queued are those whose departure time has not come: the
	// ones drain has not sent yet, late, have left the queue already.
	queued := l.queued
	for i := 0; i < len(l.queue) && !l.queue[i].at.After(now); i++ {
		queued -= len(l.queue[i].pkt)
	}
	n := len(d.pkt)
	if queued+n > l.limit {
		l.stats.Dropped++
		return false
	}
	// Departures follow from the ideal times, never from when drain got
	// to send, so timer slop does not accumulate and the long-run rate
	// is exact; rem carries the nanosecond fractions along.
	start := l.last
	if start.Before(now) {
		start, l.rem = now, 0
	}
	ns := int64(n)*int64(time.Second) + l.rem
	l.last = start.Add(time.Duration(ns / l.rate))
	l.rem = ns % l.rate
	d.at = l.last
	l.queue = append(l.queue, d)
	l.queued += n
	l.stats.MaxQueue = max(l.stats.MaxQueue, queued+n)
	if len(l.queue) == 1 {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// drain sends l's queued datagrams at their departure times, in order,
// until the proxy closes.
func (p *Proxy) drain(l *link) {
	defer p.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return
		}
		if len(l.queue) == 0 {
			p.mu.Unlock()
			select {
			case <-l.wake:
				continue
			case <-p.done:
				return
			}
		}
		d := l.queue[0]
		if wait := time.Until(d.at); wait > 0 {
			p.mu.Unlock()
			timer.Reset(wait)
			select {
			case <-timer.C:
				continue
			case <-p.done:
				timer.Stop()
				return
			}
		}
		l.queue[0] = departure{}
		l.queue = l.queue[1:]
		l.queued -= len(d.pkt)
		l.stats.Forwarded++
		l.stats.Bytes += uint64(len(d.pkt))
		p.mu.Unlock()
		if d.delay <= 0 {
			d.send(d.pkt)
			continue
		}
		if l.line != nil {
			l.line.push(departure{at: d.at.Add(d.delay), pkt: d.pkt, send: d.send})
			continue
		}
		p.timers.Add(1)
		time.AfterFunc(time.Until(d.at.Add(d.delay)), func() {
			defer p.timers.Done()
			d.send(d.pkt)
		})
	}
}
