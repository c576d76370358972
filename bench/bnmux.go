package main

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
)

// bnMux puts two servers behind one address, so that one netem proxy (one
// bottleneck) can carry a udpgate and a quic-go connection (bn-vs-quic):
// each source's first datagram decides its server for good, quic-go's if
// it is a QUIC version 1 Initial (a long header, version 1, padded to at
// least 1200 bytes, as every client Initial is), udpgate's otherwise.
// Like netem, it gives every source a socket of its own toward its
// server. It runs in the harness, on loopback.
type bnMux struct {
	front   *net.UDPConn
	udpgate netip.AddrPort
	quic    netip.AddrPort

	mu     sync.Mutex
	ups    map[netip.AddrPort]*net.UDPConn
	closed bool
	wg     sync.WaitGroup
}

// isQUICInitial reports whether b looks like a QUIC v1 client Initial.
func isQUICInitial(b []byte) bool {
	return len(b) >= 1200 && b[0]&0xc0 == 0xc0 && binary.BigEndian.Uint32(b[1:5]) == 1
}

func newBnMux(udpgate, quic netip.AddrPort) (*bnMux, error) {
	front, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	setBuffers(front, msgSocketBuffer)
	m := &bnMux{front: front, udpgate: udpgate, quic: quic, ups: map[netip.AddrPort]*net.UDPConn{}}
	m.wg.Add(1)
	go m.readFront()
	return m, nil
}

func (m *bnMux) addr() netip.AddrPort { return m.front.LocalAddr().(*net.UDPAddr).AddrPort() }

func (m *bnMux) readFront() {
	defer m.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, from, err := m.front.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		m.mu.Lock()
		up, ok := m.ups[from]
		if !ok && !m.closed {
			to := m.udpgate
			if isQUICInitial(buf[:n]) {
				to = m.quic
			}
			if up, err = net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, net.UDPAddrFromAddrPort(to)); err == nil {
				setBuffers(up, msgSocketBuffer)
				m.ups[from] = up
				m.wg.Add(1)
				go m.readUp(from, up)
			}
		}
		m.mu.Unlock()
		if up != nil {
			_, _ = up.Write(buf[:n])
		}
	}
}

func (m *bnMux) readUp(client netip.AddrPort, up *net.UDPConn) {
	defer m.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, err := up.Read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		_, _ = m.front.WriteToUDPAddrPort(buf[:n], client)
	}
}

func (m *bnMux) close() {
	m.mu.Lock()
	m.closed = true
	for _, u := range m.ups {
		u.Close()
	}
	m.mu.Unlock()
	m.front.Close()
	m.wg.Wait()
}

// setBuffers sets a socket's receive and send buffers.
func setBuffers(c *net.UDPConn, n int) {
	_ = c.SetReadBuffer(n)
	_ = c.SetWriteBuffer(n)
}
