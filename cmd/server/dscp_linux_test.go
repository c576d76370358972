package main

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDSCP: -dscp reaches the sockets: the server's replies carry the code
// point in their IPv4 TOS byte, read back with IP_RECVTOS.
func TestDSCP(t *testing.T) {
	r := start(t, []string{"-dscp", "46"}, env())
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	raw, err := pc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
	}); err != nil || serr != nil {
		t.Fatalf("IP_RECVTOS: %v %v", err, serr)
	}
	dst, err := net.ResolveUDPAddr("udp4", r.udp)
	if err != nil {
		t.Fatal(err)
	}
	// An Initial draws a Challenge (resent until one comes back: UDP).
	initial := fastpathInitial(t)
	buf, oob := make([]byte, 2048), make([]byte, 128)
	for range 20 {
		if _, err := pc.WriteToUDP(initial, dst); err != nil {
			t.Fatal(err)
		}
		_ = pc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, oobn, _, _, err := pc.ReadMsgUDP(buf, oob)
		if err != nil {
			continue
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) > 0 {
				if dscp := m.Data[0] >> 2; dscp != 46 {
					t.Errorf("reply's DSCP %d, want 46", dscp)
				}
				return
			}
		}
		t.Fatal("the reply came without its TOS byte")
	}
	t.Fatal("no reply to the Initials")
}
