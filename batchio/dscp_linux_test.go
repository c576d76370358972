package batchio

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// tosReceiver is a plain socket that reports the TOS byte or traffic class
// of each datagram it receives.
type tosReceiver struct {
	fd     int
	family int
	addr   netip.AddrPort
}

func newTOSReceiver(t *testing.T, ip netip.Addr) *tosReceiver {
	t.Helper()
	r := &tosReceiver{family: unix.AF_INET}
	level, opt := unix.IPPROTO_IP, unix.IP_RECVTOS
	if ip.Is6() {
		r.family = unix.AF_INET6
		level, opt = unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS
	}
	sa := toSockaddr(netip.AddrPortFrom(ip, 0), r.family)
	fd, err := unix.Socket(r.family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.fd = fd
	t.Cleanup(func() { unix.Close(fd) })
	tv := unix.NsecToTimeval(2e9)
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptInt(fd, level, opt, 1); err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		t.Fatal(err)
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	r.addr = fromSockaddr(got)
	return r
}

// tos receives one datagram and returns its TOS byte (IPv4) or traffic
// class (IPv6).
func (r *tosReceiver) tos(t *testing.T) int {
	t.Helper()
	buf, oob := make([]byte, 64), make([]byte, 256)
	_, oobn, _, _, err := unix.Recvmsg(r.fd, buf, oob, 0)
	if err != nil {
		t.Fatalf("receive at %v: %v", r.addr, err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) >= 1:
			return int(m.Data[0])
		case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_TCLASS && len(m.Data) >= 4:
			return int(binary.NativeEndian.Uint32(m.Data))
		}
	}
	t.Fatalf("no TOS or traffic class among %d control messages", len(msgs))
	return -1
}

// TestDSCP: Config.DSCP sets IP_TOS where the socket sends IPv4 and
// IPV6_TCLASS where it sends IPv6 (both on a dual-stack socket), the
// datagrams leave with that DSCP, and 0 leaves the options at the system
// default.
func TestDSCP(t *testing.T) {
	v4, v6 := netip.MustParseAddr("127.0.0.3"), netip.IPv6Loopback()
	for _, tc := range []struct {
		addr   string
		ipTOS  bool // IP_TOS applies (IPv4 traffic)
		tclass bool // IPV6_TCLASS applies (IPv6 traffic)
		peers  []netip.Addr
	}{
		{"127.0.0.1:0", true, false, []netip.Addr{v4}},
		{"[::1]:0", false, true, []netip.Addr{v6}},
		{"[::]:0", true, true, []netip.Addr{v4, v6}},
	} {
		for _, dscp := range []int{0, 46, 63} {
			t.Run(fmt.Sprintf("%s/dscp%d", tc.addr, dscp), func(t *testing.T) {
				g := listen(t, tc.addr, Config{Sockets: 2, DSCP: dscp})
				if g.Config().DSCP != dscp {
					t.Errorf("Config().DSCP = %d, want %d", g.Config().DSCP, dscp)
				}
				want := dscp << 2
				for i, s := range g.Sockets() {
					var tos, tclass int
					var terr, cerr error
					s.sys.rc.Control(func(fd uintptr) {
						if tc.ipTOS {
							tos, terr = unix.GetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS)
						}
						if tc.tclass {
							tclass, cerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TCLASS)
						}
					})
					if terr != nil || cerr != nil {
						t.Fatalf("socket %d: getsockopt: %v, %v", i, terr, cerr)
					}
					if tc.ipTOS && tos != want {
						t.Errorf("socket %d: IP_TOS = %#x, want %#x", i, tos, want)
					}
					if tc.tclass && tclass != want {
						t.Errorf("socket %d: IPV6_TCLASS = %#x, want %#x", i, tclass, want)
					}
				}
				// What the network sees, from every socket.
				for _, peer := range tc.peers {
					r := newTOSReceiver(t, peer)
					for i, s := range g.Sockets() {
						if err := s.WriteTo([]byte("dscp"), r.addr); err != nil {
							t.Fatal(err)
						}
						if got := r.tos(t); got != want {
							t.Errorf("socket %d to %v: datagram with TOS/traffic class %#x, want %#x", i, peer, got, want)
						}
					}
				}
			})
		}
	}
}

// TestConfigErrors: settings with no sensible reading fail Listen with the
// cause and the fix, before any socket is made.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want []string
	}{
		{Config{DSCP: -1}, []string{"DSCP -1 is out of range", "1 to 63", "or 0"}},
		{Config{DSCP: 64}, []string{"DSCP 64 is out of range", "1 to 63", "or 0"}},
		{Config{Steer: Steer{Enabled: true, Bit: -1}}, []string{"Steer.Bit -1 is out of range", "0 to 524055", "+ 5"}},
		{Config{Steer: Steer{Enabled: true, Bit: maxSteerBit + 1}}, []string{"Steer.Bit 524056 is out of range"}},
	} {
		g, err := Listen("127.0.0.1:0", tc.cfg)
		if err == nil {
			g.Close()
			t.Errorf("%+v: Listen succeeded", tc.cfg)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %q lacks %q", tc.cfg, err, w)
			}
		}
	}
	// An unused Bit is not checked.
	g, err := Listen("127.0.0.1:0", Config{Sockets: 1, Steer: Steer{Bit: -1}})
	if err != nil {
		t.Fatalf("Steer off with Bit -1: %v", err)
	}
	g.Close()
}
