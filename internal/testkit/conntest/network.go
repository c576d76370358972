package conntest

import (
	"net/netip"

	"github.com/udpgate/udpgate/netsim"
)

// DefaultQueueLen is an endpoint's receive queue, in datagrams, unless
// Network.QueueLen says otherwise (netsim.DefaultQueueLen).
const DefaultQueueLen = netsim.DefaultQueueLen

// Network is a netsim.Network with the shorthands conn's tests use: Listen
// and Bind panic instead of returning an error. Its links are perfect
// unless the test sets them, so delivery is immediate and in order. Pass
// its embedded *netsim.Network to conn.Config.Network.
type Network struct {
	*netsim.Network
}

// Group is a set of endpoints bound to one address (netsim.Group).
type Group = netsim.Group

// Endpoint is one socket on a Network (netsim.Endpoint).
type Endpoint = netsim.Endpoint

// NewNetwork returns an empty network.
func NewNetwork() *Network { return &Network{netsim.New()} }

// Listen binds n endpoints to addr, as a group of SO_REUSEPORT sockets:
// every datagram of one source reaches the same endpoint. It panics if addr
// is bound already.
func (nw *Network) Listen(addr netip.AddrPort, n int) *Group {
	g, err := nw.Network.Listen(addr, n)
	if err != nil {
		panic("conntest: " + err.Error())
	}
	return g
}

// Bind binds one endpoint to addr (a client's socket). It panics if addr is
// bound already.
func (nw *Network) Bind(addr netip.AddrPort) *Endpoint { return nw.Listen(addr, 1).Endpoints()[0] }

// Undeliverable counts datagrams sent to an address nobody had bound.
func (nw *Network) Undeliverable() uint64 { return nw.Stats().Undeliverable }

// Dropped counts datagrams Drop lost.
func (nw *Network) Dropped() uint64 { return nw.Stats().Dropped }
