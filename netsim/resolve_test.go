package netsim

import (
	"net/netip"
	"strings"
	"testing"
)

// Resolve reads literal addresses, SetHost's names, "localhost" and an
// empty host, and never asks the real DNS: an unknown name is an error
// that names SetHost.
func TestResolve(t *testing.T) {
	nw := New()
	nw.SetHost("game.example", netip.MustParseAddr("10.0.0.1"))
	nw.SetHost("v6.example", netip.MustParseAddr("fd00::1"))
	for _, tc := range []struct{ in, want, err string }{
		{"10.0.0.2:7777", "10.0.0.2:7777", ""},
		{"[::ffff:10.0.0.2]:7", "10.0.0.2:7", ""},
		{"[::1]:0", "[::1]:0", ""},
		{"game.example:7777", "10.0.0.1:7777", ""},
		{"v6.example:1", "[fd00::1]:1", ""},
		{"localhost:9", "127.0.0.1:9", ""},
		{":7777", "0.0.0.0:7777", ""},
		{"example.com:80", "", "Network.SetHost"},
		{"game.example", "", "host:port"},
		{"game.example:99999", "", "port"},
	} {
		got, err := nw.Resolve(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Resolve(%q) = %v, %v; want an error naming %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("Resolve(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	nw.SetHost("localhost", netip.MustParseAddr("10.9.9.9"))
	if got, _ := nw.Resolve("localhost:1"); got.String() != "10.9.9.9:1" {
		t.Errorf("a named localhost resolved to %v", got)
	}
}
