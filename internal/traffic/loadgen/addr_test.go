package loadgen

import (
	"net/netip"
	"strings"
	"testing"
)

func TestSourceAddresses(t *testing.T) {
	first := netip.MustParseAddr("127.1.0.250")
	r := newSourceRange(first, 2000)
	seen := map[netip.Addr]bool{}
	for k := range 2000 {
		a, err := sourceAddr(first, k)
		if err != nil {
			t.Fatal(err)
		}
		b := a.As4()
		if b[3] == 0 || b[3] == 255 {
			t.Fatalf("address %d is %v: .0 and .255 must be skipped", k, a)
		}
		if seen[a] {
			t.Fatalf("address %d (%v) repeats", k, a)
		}
		seen[a] = true
		if r.addr4(k) != b {
			t.Fatalf("addr4(%d) = %v, want %v", k, r.addr4(k), a)
		}
		if got, ok := r.index(b); !ok || got != k {
			t.Fatalf("index(%v) = %d, %v; want %d", a, got, ok, k)
		}
	}
	if a, _ := sourceAddr(first, 0); a != first {
		t.Fatalf("address 0 is %v, want %v", a, first)
	}
	if a, _ := sourceAddr(first, 5); a != netip.MustParseAddr("127.1.1.1") {
		t.Fatalf("address 5 is %v, want 127.1.1.1 (after .254, skipping .255 and .0)", a)
	}
	for _, a := range []string{"127.1.0.249", "127.0.0.1", "127.1.8.0", "127.1.8.255", "10.0.0.1", "127.200.0.1"} {
		if k, ok := r.index(netip.MustParseAddr(a).As4()); ok {
			t.Errorf("index(%s) = %d, want not in range", a, k)
		}
	}
}

func TestSourceAddressLimits(t *testing.T) {
	if _, err := sourceAddr(netip.MustParseAddr("127.255.255.250"), 10); err == nil {
		t.Error("addresses past 127.255.255.254 accepted")
	}
	if _, err := sourceAddr(netip.MustParseAddr("10.0.0.1"), 0); err == nil {
		t.Error("first source outside 127/8 accepted")
	}
	if a, err := sourceAddr(netip.MustParseAddr("127.255.255.250"), 4); err != nil || a != netip.MustParseAddr("127.255.255.254") {
		t.Errorf("last address: %v, %v", a, err)
	}
}

func TestCheckServer(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:7777", "127.9.8.7:1", "[::ffff:127.0.0.1]:7777"} {
		if err := CheckServer(netip.MustParseAddrPort(ok)); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for bad, why := range map[string]string{
		"10.0.0.1:7777":  "not a loopback",
		"0.0.0.0:7777":   "not a loopback",
		"8.8.8.8:53":     "not a loopback",
		"[::1]:7777":     "IPv6",
		"127.0.0.1:0":    "host:port",
		"[fe80::1]:7777": "not a loopback",
	} {
		err := CheckServer(netip.MustParseAddrPort(bad))
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: error %v, want one saying %q", bad, err, why)
		}
	}
}

func TestConfigSources(t *testing.T) {
	base := Config{Server: netip.MustParseAddrPort("127.0.0.1:7777"), Clients: 1000}
	c, err := base.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Sockets != DefaultSockets || c.SourcesUsed() != 500 {
		t.Errorf("defaults: %d sockets, %d sources; want %d, 500", c.Sockets, c.SourcesUsed(), DefaultSockets)
	}
	base.Sources = 200
	if c, _ = base.withDefaults(); c.Sockets != 5 || c.SourcesUsed() != 200 {
		t.Errorf("200 sources: %d sockets, %d sources; want 5, 200", c.Sockets, c.SourcesUsed())
	}
	base.Sources, base.Clients = 1, 2000
	if _, err := base.withDefaults(); err == nil {
		t.Error("2000 sockets for 1 source should be refused")
	}
	clients := 0
	c = Config{Server: base.Server, Clients: 7, Sockets: 3}
	if c, err = c.withDefaults(); err != nil {
		t.Fatal(err)
	}
	for s := range c.Sockets {
		clients += c.perSocket(s)
	}
	if clients != 7 || c.perSocket(0) != 3 || c.perSocket(2) != 2 {
		t.Errorf("7 clients over 3 sockets: %d, %d, %d", c.perSocket(0), c.perSocket(1), c.perSocket(2))
	}
}
