package netsim

import (
	"net"
	"net/netip"
	"time"
)

// PacketConn returns ep as a net.PacketConn, for code written against the
// standard interface. Its addresses are *net.UDPAddr; write deadlines are
// accepted and ignored (a send never blocks).
func (ep *Endpoint) PacketConn() net.PacketConn { return packetConn{ep} }

type packetConn struct{ ep *Endpoint }

func (c packetConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, from, err := c.ep.ReadFrom(p)
	if err != nil {
		return 0, nil, err
	}
	return n, net.UDPAddrFromAddrPort(from), nil
}

func (c packetConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return 0, &net.AddrError{Err: "not a UDP address", Addr: addr.String()}
	}
	ap := ua.AddrPort()
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	if err := c.ep.WriteTo(p, ap); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c packetConn) Close() error                      { return c.ep.Close() }
func (c packetConn) LocalAddr() net.Addr               { return net.UDPAddrFromAddrPort(c.ep.LocalAddr()) }
func (c packetConn) SetDeadline(t time.Time) error     { return c.ep.SetReadDeadline(t) }
func (c packetConn) SetReadDeadline(t time.Time) error { return c.ep.SetReadDeadline(t) }
func (c packetConn) SetWriteDeadline(time.Time) error  { return nil }
