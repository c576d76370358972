package batchio

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
)

// Group is a set of UDP sockets bound to one address with SO_REUSEPORT. The
// kernel spreads datagrams over the sockets by a hash of the source and
// destination, so every datagram of one peer arrives on the same socket.
type Group struct {
	sockets  []*Socket
	local    netip.AddrPort
	cfg      Config
	warnings []string
	// steerSeed is the seed of the steering program's source hash.
	steerSeed uint32
	// steerPlan is the steering programs (nil when not steered); spread
	// is whether the spreading one is attached, changed under spreadMu.
	steerPlan *steerPlan
	spreadMu  sync.Mutex
	spread    atomic.Bool
}

// Listen binds cfg.Sockets UDP sockets to addr and returns them as a Group
// (cfg.Steer.SetSockets + cfg.Steer.ClearSockets when steered).
//
// addr is "host:port". An IPv4 host ("0.0.0.0", "127.0.0.1") gives IPv4
// sockets; an IPv6 host gives IPv6 sockets, and the unspecified "[::]" (or an
// empty host) gives dual-stack sockets on which IPv4 peers appear as plain
// IPv4 addresses. A host name is resolved and its first address used. Port 0
// picks a free port for the whole group.
//
// Errors name the cause and the fix, and wrap the system error, so
// errors.Is(err, syscall.EADDRINUSE) still works.
func Listen(addr string, cfg Config) (*Group, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.normalize()
	la, err := resolveListenAddr(addr)
	if err != nil {
		return nil, err
	}
	g := &Group{cfg: cfg}
	if err := g.listen(la, addr); err != nil {
		return nil, err
	}
	for _, w := range g.warnings {
		if cfg.Logger != nil {
			cfg.Logger.Warn("batchio: " + w)
		}
	}
	return g, nil
}

// listenAddr is a parsed listen address.
type listenAddr struct {
	ap        netip.AddrPort // Addr unmapped; zone kept for link-local
	dualStack bool           // wildcard IPv6 that also accepts IPv4
	hostEmpty bool           // the host was empty: dual-stack if possible
}

func resolveListenAddr(addr string) (listenAddr, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return listenAddr{}, fmt.Errorf("batchio: listen address %q: %w (want host:port, e.g. 0.0.0.0:7777 or [::]:7777)", addr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		p, lerr := net.LookupPort("udp", portStr)
		if lerr != nil {
			return listenAddr{}, fmt.Errorf("batchio: listen address %q: port %q is not a number from 0 to 65535", addr, portStr)
		}
		port = uint64(p)
	}
	var ip netip.Addr
	switch {
	case host == "":
		return listenAddr{ap: netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(port)), dualStack: true, hostEmpty: true}, nil
	default:
		ip, err = netip.ParseAddr(host)
		if err != nil {
			ips, lerr := net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
			if lerr != nil || len(ips) == 0 {
				return listenAddr{}, fmt.Errorf("batchio: listen address %q: cannot resolve host %q: %v", addr, host, lerr)
			}
			ip = ips[0]
		}
	}
	ip = ip.Unmap()
	return listenAddr{
		ap:        netip.AddrPortFrom(ip, uint16(port)),
		dualStack: ip == netip.IPv6Unspecified(),
	}, nil
}

// LocalAddr returns the address the group is bound to, with the port the
// kernel picked if Listen was given port 0.
func (g *Group) LocalAddr() netip.AddrPort { return g.local }

// Sockets returns the group's sockets. The slice must not be modified.
func (g *Group) Sockets() []*Socket { return g.sockets }

// Config returns the group's configuration with every default filled in:
// Sockets is the number of sockets the group has, and Steer.Enabled
// reports whether it is steered.
func (g *Group) Config() Config { return g.cfg }

// Steered reports whether the kernel steers the group's datagrams by
// Config.Steer (see Socket.Class). It is false when steering was not asked
// for, and when it was but the kernel refused it (Config.Logger is told
// why).
func (g *Group) Steered() bool { return g.cfg.Steer.Enabled }

// Spreading reports whether the group spreads bit-clear datagrams over
// every socket (Steer.Spread, Group.SetSpread).
func (g *Group) Spreading() bool { return g.spread.Load() }

// NewBatch returns a batch of Config.BatchSize slots of Config.MessageSize
// bytes.
func (g *Group) NewBatch() *Batch { return NewBatch(g.cfg.BatchSize, g.cfg.MessageSize) }

// Stats returns the sum of the sockets' counters.
func (g *Group) Stats() Stats {
	var st Stats
	for _, s := range g.sockets {
		st.add(s.Stats())
	}
	return st
}

// SentBytes is the bytes of the datagrams all sockets handed to the
// kernel (Stats().TxBytes) without the rest: a few atomic loads and no
// system call, for a caller that reads it every few milliseconds (conn's
// egress budget).
func (g *Group) SentBytes() uint64 {
	var n uint64
	for _, s := range g.sockets {
		n += s.ctr.txBytes.Load()
	}
	return n
}

// Close closes every socket. Blocked Recv calls return net.ErrClosed, and
// so does every later call.
func (g *Group) Close() error {
	var errs []error
	for _, s := range g.sockets {
		if err := s.close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// warn records a warning once.
func (g *Group) warn(w string) {
	for _, have := range g.warnings {
		if have == w {
			return
		}
	}
	g.warnings = append(g.warnings, w)
}

// bufferWarning returns the warning for a socket buffer the kernel granted
// smaller than wanted, or "" if it was granted. got is in the same units as
// want (Linux reports twice the granted size; the caller halves it).
func bufferWarning(dir string, want, got int) string {
	if want <= 0 || got >= want {
		return ""
	}
	sysctl := "net.core.rmem_max"
	if dir == "send" {
		sysctl = "net.core.wmem_max"
	}
	return fmt.Sprintf("%s buffer capped at %d bytes (wanted %d): raise it with sysctl -w %s=%d", dir, got, want, sysctl, want)
}

// listenError is a Listen failure with a message that says what to do.
type listenError struct {
	msg string
	err error
}

func (e *listenError) Error() string { return e.msg }
func (e *listenError) Unwrap() error { return e.err }

// friendlyListenError explains a bind or socket failure for addr.
func friendlyListenError(addr string, err error) error {
	var msg string
	switch {
	case isErrno(err, errAddrInUse):
		msg = fmt.Sprintf("address %s is already in use: stop the other process or choose another port", addr)
	case isErrno(err, errAddrNotAvail):
		msg = fmt.Sprintf("address %s is not an address of this host: listen on 0.0.0.0 or [::], or on one of this host's addresses", addr)
	case isErrno(err, errAccess):
		msg = fmt.Sprintf("permission denied binding %s: ports below 1024 need root or CAP_NET_BIND_SERVICE; choose a port from 1024 up", addr)
	case isErrno(err, errAFNoSupport):
		msg = fmt.Sprintf("cannot listen on %s: IPv6 is not available on this host; listen on an IPv4 address such as 0.0.0.0", addr)
	default:
		msg = fmt.Sprintf("batchio: listen %s: %v", addr, err)
	}
	return &listenError{msg: msg, err: err}
}
