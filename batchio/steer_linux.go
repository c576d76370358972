package batchio

import (
	"math/rand/v2"
	"os"

	"golang.org/x/sys/unix"
)

// attachSteerHook, when set by tests, replaces the setsockopt that attaches
// the steering program, so the fallback can be exercised on a kernel that
// supports steering.
var attachSteerHook func(fd int, prog *unix.SockFprog) error

// steerPlan is a group's steering program, built before the sockets.
type steerPlan struct {
	set, clear int
	seed       uint32
	filter     []unix.SockFilter
}

// planSteer builds the steering program for g.cfg and checks that the
// kernel accepts it on a socket of the group's family before any socket is
// bound, so that a kernel without steering gets the unsteered group of
// Config.Sockets sockets. It returns nil, after a warning, when steering
// cannot be had.
func (g *Group) planSteer(family int) *steerPlan {
	set, clear := steerCounts(g.cfg)
	p := &steerPlan{set: set, clear: clear, seed: rand.Uint32()}
	raw, err := steerProgramMatch(g.cfg.Steer.Bit, set, clear, p.seed, g.cfg.Steer.Match)
	if err == nil {
		p.filter = make([]unix.SockFilter, len(raw))
		for i, r := range raw {
			p.filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
		}
		err = probeSteer(family, p)
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
func probeSteer(family int, p *steerPlan) error {
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		return os.NewSyscallError("setsockopt SO_REUSEPORT", err)
	}
	return attachSteer(fd, p)
}

// attachSteer attaches p's program to the reuseport group of fd.
func attachSteer(fd int, p *steerPlan) error {
	prog := &unix.SockFprog{Len: uint16(len(p.filter)), Filter: &p.filter[0]}
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
	var err error
	if cerr := g.sockets[0].sys.rc.Control(func(fd uintptr) { err = attachSteer(int(fd), p) }); cerr != nil {
		err = cerr
	}
	if err != nil {
		g.cfg.Steer.Enabled = false
		g.warn(steerWarning(g.cfg.Steer.Bit, err, len(g.sockets)))
		return
	}
	g.steerSeed = p.seed
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
