package agones

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// pathGameServer is the SDK's GetGameServer over REST.
const pathGameServer = "/gameserver"

// Backoff of WaitPublicAddress: the sidecar answers on localhost, so the
// first retries are quick; the controller may take seconds to write the
// address, so later ones are spaced out.
const (
	addressRetryMin = 100 * time.Millisecond
	addressRetryMax = 2 * time.Second
)

// GameServer is what this package reads of the GameServer object that
// GET /gameserver returns.
type GameServer struct {
	Name  string // object_meta.name
	State string // status.state: "Scheduled", "RequestReady", "Ready", ...
	// Address is status.address: the node's address, set once the pod is
	// scheduled. Agones takes the node's external IP, else its internal
	// IP; some versions and clusters give a host name instead.
	Address string
	// Addresses is status.addresses (newer Agones versions): every
	// address of the node, by Kubernetes type ("ExternalIP",
	// "InternalIP", "Hostname", ...).
	Addresses []NodeAddress
	// Ports is status.ports: each port of spec.ports by name, with the
	// host port clients send to.
	Ports []Port
}

// NodeAddress is one entry of status.addresses.
type NodeAddress struct {
	Type    string `json:"type"`
	Address string `json:"address"`
}

// Port is one entry of status.ports.
type Port struct {
	Name string `json:"name"`
	Port int32  `json:"port"`
}

// gameServerJSON is the answer of GET /gameserver as the SDK's OpenAPI
// description documents it (sdk.swagger.json, definition sdkGameServer),
// the fields read and no more.
type gameServerJSON struct {
	ObjectMeta struct {
		Name string `json:"name"`
	} `json:"object_meta"`
	Status struct {
		State     string        `json:"state"`
		Address   string        `json:"address"`
		Addresses []NodeAddress `json:"addresses"`
		Ports     []Port        `json:"ports"`
	} `json:"status"`
}

// GameServer reads this game server's GameServer from the sidecar.
func (s *SDK) GameServer(ctx context.Context) (GameServer, error) {
	var j gameServerJSON
	if err := s.call(ctx, http.MethodGet, pathGameServer, nil, &j); err != nil {
		return GameServer{}, err
	}
	return GameServer{
		Name:      j.ObjectMeta.Name,
		State:     j.Status.State,
		Address:   j.Status.Address,
		Addresses: j.Status.Addresses,
		Ports:     j.Status.Ports,
	}, nil
}

// errNotYet marks what PublicAddress lacks only until the GameServer's pod
// is scheduled: WaitPublicAddress asks again.
var errNotYet = errors.New("not set yet")

// PublicAddress is the IP:port clients send to: the node's IP and the
// host port of the port named portName ("": the first port). The IP is
// status.address when it is one; when that is a host name (a connect
// token holds IP addresses only), the first ExternalIP of
// status.addresses.
func (g GameServer) PublicAddress(portName string) (netip.AddrPort, error) {
	if g.Address == "" {
		return netip.AddrPort{}, fmt.Errorf("agones: GameServer %q (state %q): status.address is %w: Agones sets it once the pod is scheduled", g.Name, g.State, errNotYet)
	}
	ip, err := g.ip()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var p *Port
	for i := range g.Ports {
		if portName == "" || g.Ports[i].Name == portName {
			p = &g.Ports[i]
			break
		}
	}
	switch {
	case len(g.Ports) == 0:
		return netip.AddrPort{}, fmt.Errorf("agones: GameServer %q has no ports in status.ports: give it one in spec.ports (the UDP port the server listens on)", g.Name)
	case p == nil:
		return netip.AddrPort{}, fmt.Errorf("agones: GameServer %q has no port named %q (its ports are %s)", g.Name, portName, g.portNames())
	case p.Port == 0:
		return netip.AddrPort{}, fmt.Errorf("agones: GameServer %q: the host port of port %q is %w", g.Name, p.Name, errNotYet)
	case p.Port < 0 || p.Port > 65535:
		return netip.AddrPort{}, fmt.Errorf("agones: GameServer %q: port %q is %d, not a port number", g.Name, p.Name, p.Port)
	}
	return netip.AddrPortFrom(ip, uint16(p.Port)), nil
}

// ip is the node's IP address, as PublicAddress describes.
func (g GameServer) ip() (netip.Addr, error) {
	if a, err := netip.ParseAddr(g.Address); err == nil && usable(a) {
		return a.Unmap(), nil
	}
	for _, na := range g.Addresses {
		if a, err := netip.ParseAddr(na.Address); err == nil && na.Type == "ExternalIP" && usable(a) {
			return a.Unmap(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("agones: GameServer %q: status.address %q is not an IP address, and status.addresses holds no ExternalIP; a connect token lists IP addresses only", g.Name, g.Address)
}

// usable reports whether a can stand in a connect token as the address
// clients send to.
func usable(a netip.Addr) bool { return a.Zone() == "" && !a.IsUnspecified() }

func (g GameServer) portNames() string {
	names := make([]string, len(g.Ports))
	for i, p := range g.Ports {
		names[i] = fmt.Sprintf("%q", p.Name)
	}
	return strings.Join(names, ", ")
}

// WaitPublicAddress asks the sidecar for the GameServer until it has a
// public address (GameServer.PublicAddress) or ctx ends, with backoff:
// the sidecar may start after the game server, and the address is set
// only once the pod is scheduled. It gives up at once on a GameServer
// whose address cannot be used (a host name alone, no such port). It
// returns the GameServer it took the address from, and on failure the
// last cause. log (nil: none) gets a line while it waits.
func (s *SDK) WaitPublicAddress(ctx context.Context, portName string, log *slog.Logger) (netip.AddrPort, GameServer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	wait := addressRetryMin
	var gs GameServer
	var last error // the last cause, of an answer rather than of ctx ending
	for attempt := 1; ; attempt++ {
		g, err := s.GameServer(ctx)
		if err == nil {
			gs = g
			var ap netip.AddrPort
			if ap, err = gs.PublicAddress(portName); err == nil {
				return ap, gs, nil
			}
			if !errors.Is(err, errNotYet) {
				return netip.AddrPort{}, gs, err
			}
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		if attempt == 1 {
			log.Info("agones: waiting for the GameServer's address", "sdk", s.URL(), "cause", err)
		} else {
			log.Debug("agones: still no GameServer address", "attempt", attempt, "cause", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return netip.AddrPort{}, gs, fmt.Errorf("agones: no public address after %d attempts (%w); the last: %w", attempt, context.Cause(ctx), last)
		}
		wait = min(2*wait, addressRetryMax)
	}
}
