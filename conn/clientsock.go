package conn

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/udpgate/udpgate/netsim"
)

// clientSocket is a client's socket: a UDP socket (udpSocket), or an
// endpoint of a simulated network (simSocket) when Config.Network is set.
type clientSocket interface {
	// ReadFrom waits for a datagram, copies it into p and returns its
	// length and plain (unmapped) source. It returns net.ErrClosed once
	// the socket is closed; other errors (an ICMP port unreachable,
	// ECONNREFUSED) leave the socket usable.
	ReadFrom(p []byte) (n int, from netip.AddrPort, err error)
	// WriteToUDPAddrPort sends p to addr, as net.UDPConn's method.
	WriteToUDPAddrPort(p []byte, addr netip.AddrPort) (int, error)
	// LocalAddr is the address the socket is bound to.
	LocalAddr() netip.AddrPort
	// Close closes the socket; a blocked ReadFrom returns net.ErrClosed.
	Close() error
	// link is where a connection over this socket sends.
	link() link
}

// listenClient opens the socket a client binds at local (an address and
// port, port 0 for any): on nw if it is set, else a UDP socket.
func listenClient(nw *netsim.Network, local string) (clientSocket, error) {
	if nw != nil {
		ap, err := nw.Resolve(local)
		if err != nil {
			return nil, fmt.Errorf("conn: bad local address %q: %v", local, err)
		}
		ep, err := nw.Bind(ap)
		if err != nil {
			return nil, fmt.Errorf("conn: cannot bind %s on the simulated network: %w", local, err)
		}
		return simSocket{ep}, nil
	}
	la, err := net.ResolveUDPAddr("udp", local)
	if err != nil {
		return nil, fmt.Errorf("conn: bad local address %q: %v", local, err)
	}
	udp, err := net.ListenUDP("udp", la)
	if err != nil {
		return nil, fmt.Errorf("conn: cannot open a UDP socket on %s: %w", local, err)
	}
	enableRecvErr(udp)
	return udpSocket{udp}, nil
}

// udpSocket is a client's UDP socket, reporting ICMP errors on Linux
// (enableRecvErr).
type udpSocket struct{ udp *net.UDPConn }

func (u udpSocket) ReadFrom(p []byte) (int, netip.AddrPort, error) {
	n, from, err := u.udp.ReadFromUDPAddrPort(p)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			drainErrQueue(u.udp)
		}
		return 0, netip.AddrPort{}, err
	}
	return n, netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), nil
}

func (u udpSocket) WriteToUDPAddrPort(p []byte, addr netip.AddrPort) (int, error) {
	return u.udp.WriteToUDPAddrPort(p, addr)
}

func (u udpSocket) LocalAddr() netip.AddrPort { return u.udp.LocalAddr().(*net.UDPAddr).AddrPort() }
func (u udpSocket) Close() error              { return u.udp.Close() }
func (u udpSocket) link() link                { return link{udp: u.udp} }

// simSocket is a client's endpoint on a simulated network. Nothing answers
// with ICMP there: a Dial to an address nobody listens on times out.
type simSocket struct{ ep *netsim.Endpoint }

func (s simSocket) ReadFrom(p []byte) (int, netip.AddrPort, error) { return s.ep.ReadFrom(p) }

func (s simSocket) WriteToUDPAddrPort(p []byte, addr netip.AddrPort) (int, error) {
	if err := s.ep.WriteTo(p, addr); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (s simSocket) LocalAddr() netip.AddrPort { return s.ep.LocalAddr() }
func (s simSocket) Close() error              { return s.ep.Close() }

// link sends through the endpoint as a transport, as a server connection
// sends through its socket.
func (s simSocket) link() link { return link{sock: s.ep} }

var _ transport = (*netsim.Endpoint)(nil)
