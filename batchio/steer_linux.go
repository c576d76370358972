package batchio

import (
	"errors"
	"math/rand/v2"
	"os"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// attachSteerHook, when set by tests, replaces the setsockopt that attaches
// the steering program, so the fallback can be exercised on a kernel that
// supports steering.
var attachSteerHook func(fd int, prog *unix.SockFprog) error

// steerPlan is a group's steering programs, built before the sockets:
// filters[0] keeps the classes apart, filters[1] spreads the bit-clear
// class over every socket (Steer.Spread). Both are built and probed at
// Listen, so switching between them is one setsockopt.
type steerPlan struct {
	set, clear int
	seed       uint32
	filters    [2][]unix.SockFilter
}

// planSteer builds the steering program for g.cfg and checks that the
// kernel accepts it on a socket of the group's family before any socket is
// bound, so that a kernel without steering gets the unsteered group of
// Config.Sockets sockets. It returns nil, after a warning, when steering
// cannot be had.
func (g *Group) planSteer(family int) *steerPlan {
	set, clear := steerCounts(g.cfg)
	p := &steerPlan{set: set, clear: clear, seed: rand.Uint32()}
	var err error
	for k, spread := range []bool{false, true} {
		var raw []bpf.RawInstruction
		if raw, err = steerProgramMatch(g.cfg.Steer.Bit, set, clear, spread, p.seed, g.cfg.Steer.Match); err != nil {
			break
		}
		p.filters[k] = make([]unix.SockFilter, len(raw))
		for i, r := range raw {
			p.filters[k][i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
		}
		if err = probeSteer(family, p.filters[k]); err != nil {
			break
		}
	}
	if err != nil {
		g.warn(steerWarning(g.cfg.Steer.Bit, err, g.cfg.Sockets))
		return nil
	}
	return p
}

// probeSteer attaches p's program to an unbound SO_REUSEPORT socket, which
// the kernel accepts exactly when it would accept it on the group. (The
// program must not be attached to a group socket before bind: such a
// socket forms a group of its own and its bind fails with EADDRINUSE.)
func probeSteer(family int, filter []unix.SockFilter) error {
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		return os.NewSyscallError("setsockopt SO_REUSEPORT", err)
	}
	return attachSteer(fd, filter)
}

// attachSteer attaches filter to the reuseport group of fd, replacing the
// program it had.
func attachSteer(fd int, filter []unix.SockFilter) error {
	prog := &unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if attachSteerHook != nil {
		return attachSteerHook(fd, prog)
	}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, prog); err != nil {
		return os.NewSyscallError("setsockopt SO_ATTACH_REUSEPORT_CBPF", err)
	}
	return nil
}

// steer attaches p's program to the bound group and labels the sockets
// with their class. Attaching to one socket serves the whole group; it is
// done once every socket has joined, so the program never sees a group
// smaller than the indices it returns.
func (g *Group) steer(p *steerPlan) {
	if err := g.attach(p, g.cfg.Steer.Spread); err != nil {
		g.cfg.Steer.Enabled = false
		g.warn(steerWarning(g.cfg.Steer.Bit, err, len(g.sockets)))
		return
	}
	g.steerSeed = p.seed
	g.steerPlan = p
	g.spread.Store(g.cfg.Steer.Spread)
	for i, s := range g.sockets {
		s.class = ClassBitClear
		if i < p.set {
			s.class = ClassBitSet
			if want := g.cfg.Steer.SetRecvBuffer; want > 0 {
				var w string
				_ = s.sys.rc.Control(func(fd uintptr) {
					w = setBuffer(int(fd), "receive", unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, want)
				})
				if w != "" {
					g.warn(w)
				}
			}
		}
	}
}

// attach attaches p's program, the spreading one if spread, to the group.
func (g *Group) attach(p *steerPlan, spread bool) error {
	f := p.filters[0]
	if spread {
		f = p.filters[1]
	}
	var err error
	if cerr := g.sockets[0].sys.rc.Control(func(fd uintptr) { err = attachSteer(int(fd), f) }); cerr != nil {
		err = cerr
	}
	return err
}

// SetSpread switches a steered group between spreading bit-clear datagrams
// over every socket (on) and keeping them to the bit-clear sockets (off):
// see Steer.Spread. It attaches the other of the two programs built at
// Listen, so the switch is one system call; datagrams already queued stay
// where they are. It is safe for concurrent use, does nothing when the
// group already is as asked, and fails when the group is not steered or
// the kernel refuses the program, leaving the group as it was.
func (g *Group) SetSpread(on bool) error {
	if g.steerPlan == nil {
		return errors.New("batchio: SetSpread: the group is not steered")
	}
	g.spreadMu.Lock()
	defer g.spreadMu.Unlock()
	if g.spread.Load() == on {
		return nil
	}
	if err := g.attach(g.steerPlan, on); err != nil {
		return err
	}
	g.spread.Store(on)
	return nil
}
