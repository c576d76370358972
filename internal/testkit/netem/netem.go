// Package netem is an in-process UDP proxy for tests: it sits between
// clients and a server on loopback and drops, duplicates, reorders and
// delays datagrams with a seeded random source, reporting every decision so
// a test can compare what endpoints believe with what really happened.
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
}

// Direction of a datagram through the proxy.
type Direction uint8

const (
	ToServer Direction = iota
	ToClient
)

// Fate is what the proxy did with one datagram: Copies is 0 (dropped), 1,
// or 2 (duplicated).
type Fate struct {
	Dir    Direction
	Client netip.AddrPort // the client's own address
	Copies int
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
	}
	p.wg.Add(1)
	go p.readFront()
	return p, nil
}

// Addr is where clients send.
func (p *Proxy) Addr() netip.AddrPort { return p.front.LocalAddr().(*net.UDPAddr).AddrPort() }

// Observe sets a callback told of every datagram's fate (with its bytes,
// valid only during the call). It runs on the proxy's goroutines.
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
	p.mu.Unlock()
	if observe != nil {
		observe(Fate{Dir: dir, Client: client, Copies: copies}, b)
	}
	if closed || copies == 0 {
		return
	}
	pkt := append([]byte(nil), b...)
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
