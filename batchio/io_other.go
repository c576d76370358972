//go:build !linux

package batchio

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"syscall"
	"time"
)

// This is the portable fallback: one socket (SO_REUSEPORT does not spread
// unicast datagrams outside Linux), received and sent one datagram per
// system call through the standard library. It is correct everywhere and
// fast nowhere; the server's production platform is Linux. It sets no
// options of its own but Config.DSCP: Config.AllowFragmentation has no
// effect (the don't-fragment default answers a Linux cost, the per-datagram
// IP ID), Config.Steer is refused with a warning (one socket has nothing
// to steer between) and Stats.RxDrops stays 0.

const reusePortBalances = false

// autoMode: without raw system calls there is only the netpoller.
const autoMode = ModeNetpoll

// slotPad is one hidden byte after each slot: a datagram that fills it is
// larger than the slot, which is how truncation is detected without
// MSG_TRUNC.
const slotPad = 1

type socketSys struct {
	conn *net.UDPConn
}

func (s *socketSys) close() error { return s.conn.Close() }

// readDrops: the standard library exposes no kernel drop count, so
// Stats.RxDrops stays 0.
func (s *socketSys) readDrops(*counters) bool { return false }

type batchSys struct{}

func (bs *batchSys) init(*Batch) {}

func (g *Group) listen(la listenAddr, addr string) error {
	g.cfg.Mode = ModeNetpoll
	network := "udp6"
	switch {
	case la.ap.Addr().Is4():
		network = "udp4"
	case la.dualStack:
		network = "udp" // the standard library makes "[::]" dual-stack
	}
	lc := net.ListenConfig{}
	if g.cfg.Control != nil {
		lc.Control = g.cfg.Control
	}
	pc, err := lc.ListenPacket(context.Background(), network, la.ap.String())
	if err != nil {
		return friendlyListenError(addr, err)
	}
	conn := pc.(*net.UDPConn)
	if g.cfg.RecvBuffer > 0 {
		_ = conn.SetReadBuffer(g.cfg.RecvBuffer)
	}
	if g.cfg.SendBuffer > 0 {
		_ = conn.SetWriteBuffer(g.cfg.SendBuffer)
	}
	local := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	if g.cfg.DSCP != 0 {
		// IPv4 traffic on IPv4 and dual-stack sockets, IPv6 traffic on
		// IPv6 ones.
		v4, v6 := network != "udp6", local.Addr().Is6() && !local.Addr().Is4In6()
		if err := setDSCP(conn, v4, v6, g.cfg.DSCP); err != nil {
			conn.Close()
			return err
		}
	}
	if g.cfg.Steer.Enabled {
		g.cfg.Steer.Enabled = false
		g.warn(steerWarning(g.cfg.Steer.Bit, errors.New("SO_ATTACH_REUSEPORT_CBPF is Linux only"), 1))
	}
	s := &Socket{mode: ModeNetpoll, sys: socketSys{conn: conn}}
	s.local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	s.q.init(g.cfg.QueueSize, g.cfg.MessageSize)
	g.sockets = []*Socket{s}
	g.local = s.local
	return nil
}

// Recv blocks until a datagram has arrived and returns it in b.Msgs[0]; the
// portable fallback receives one datagram per call. It returns net.ErrClosed
// once the socket is closed.
func (s *Socket) Recv(b *Batch) (int, error) {
	m := &b.Msgs[0]
	for {
		n, _, _, addr, err := s.sys.conn.ReadMsgUDPAddrPort(b.slots[:b.stride], nil)
		truncated := n > b.msgSize
		if err != nil {
			if s.closed.Load() || errors.Is(err, net.ErrClosed) {
				return 0, net.ErrClosed
			}
			if !isMsgSize(err) {
				// Windows reports an earlier ICMP error on the next
				// read (WSAECONNRESET); count it and read on.
				s.ctr.rxErrors.Add(1)
				continue
			}
			truncated = true
		}
		m.Buf = b.slot(0)
		m.N = min(n, b.msgSize)
		m.Truncated = truncated
		m.Addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
		r := rxBatch{packets: 1, bytes: uint64(m.N)}
		if truncated {
			r.truncated = 1
		}
		s.ctr.publishRx(r)
		return 1, nil
	}
}

// RecvWithin and TryRecv are Recv on s in the portable fallback: see the
// Linux versions.
func (s *Socket) RecvWithin(b *Batch, d time.Duration) (int, error) { return s.Recv(b) }

func (s *Socket) TryRecv(b *Batch, max int) (int, error) { return s.Recv(b) }

// isMsgSize reports Windows' error for a datagram larger than the buffer.
func isMsgSize(err error) bool {
	return runtime.GOOS == "windows" && errors.Is(err, syscall.Errno(10040)) // WSAEMSGSIZE
}

// Send sends b.Msgs[:n], each Buf[:N] to its Addr, one system call per
// datagram. Datagrams refused for a reason of their own are skipped and
// counted in Stats.TxErrors. It returns net.ErrClosed after Close.
func (s *Socket) Send(b *Batch, n int) error {
	var t txBatch
	var err error
	for i := range b.Msgs[:n] {
		m := &b.Msgs[i]
		if !m.Addr.IsValid() {
			t.errors++
			continue
		}
		w, werr := s.sys.conn.WriteToUDPAddrPort(m.Buf[:m.N], m.Addr)
		t.calls++
		if werr != nil {
			if s.closed.Load() || errors.Is(werr, net.ErrClosed) {
				err = net.ErrClosed
				break
			}
			t.errors++
			continue
		}
		t.packets++
		t.bytes += uint64(w)
	}
	s.ctr.publishTx(t)
	return err
}

// steerPlan: no steering off Linux.
type steerPlan struct{}

// SetSpread fails off Linux: the group is never steered.
func (g *Group) SetSpread(on bool) error {
	return errors.New("batchio: SetSpread: the group is not steered")
}
