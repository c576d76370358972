package main

import (
	"strings"
	"testing"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/protocol"
)

// TestSprayCommand sprays 5000 packets from one connection at a server
// whose inbound budget is 10 packets a second: whatever speed the machine
// gives the sender, at most about a hundred pass, and the rest are dropped
// as inbound_limited, before parsing; the connection stays.
func TestSprayCommand(t *testing.T) {
	srv, _ := startServer(t, conn.Config{NetworkVersion: 1, InboundPacketRate: 10})
	code, out, errb := runCmd(t, "", "spray", "-server", srv.Addr().String(),
		"-count", "5000", "-rate", "50000", "-duration", "10s", "-kind", "mixed")
	if code != exitOK {
		t.Fatalf("status %d; stderr:\n%s\nstdout:\n%s", code, errb, out)
	}
	if !strings.Contains(out, "sent 5000 packets (2500 malformed, 2500 valid)") {
		t.Errorf("report:\n%s", out)
	}
	st := srv.Stats()
	if n := st.Drops[protocol.DropInboundLimited]; n < 4000 {
		t.Errorf("%d dropped as inbound_limited, want most of 5000 (drops %v)", n, st.Drops)
	}
	if srv.Len() != 1 {
		t.Errorf("%d connections after the spray, want the sprayer's", srv.Len())
	}
}

func TestSprayFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-rate", "0"}, "-rate 0 is out of range"},
		{[]string{"-count", "0"}, "-count 0 is out of range"},
		{[]string{"-duration", "2m"}, "at most 1m0s"},
		{[]string{"-kind", "nice"}, "use malformed, data or mixed"},
		{[]string{"-server", "10.0.0.1:7777"}, "not a loopback address"},
	} {
		code, _, errb := runCmd(t, "", append([]string{"spray"}, c.args...)...)
		if code != exitUsage || !strings.Contains(errb, c.want) {
			t.Errorf("%v: status %d, stderr %q, want %q", c.args, code, errb, c.want)
		}
	}
}
