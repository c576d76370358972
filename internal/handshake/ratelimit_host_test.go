package handshake

import (
	"net/netip"
	"testing"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/ratelimit"
	"github.com/udpgate/udpgate/internal/wire"
)

// Issue 12 items 5 and 6: Challenge budgets per IP and per network, and one
// VersionUpgrade budget for all of a server's receive loops.

func TestLimiterHostDefaults(t *testing.T) {
	c := ServerConfig{}.withDefaults()
	ip, px := c.ChallengeIPLimit, c.ChallengePrefixLimit
	if ip != (ratelimit.Limit{Rate: 64, Burst: 128}) || px != (ratelimit.Limit{Rate: 256, Burst: 512}) {
		t.Errorf("per-IP %+v, per-prefix %+v", ip, px)
	}
	// The per-IP burst admits at least half of conn's default cap of
	// connections per IP (256) at once, the rest within 2 s of resends.
	if ip.Burst+2*ip.Rate < 256 {
		t.Error("per-IP Challenge budget too small for 256 players behind one address")
	}
	if px.Burst+2*px.Rate < 1024 {
		t.Error("per-prefix Challenge budget too small for 1024 players in one network")
	}
	// Per-loop shares of the totals, and the defaults follow an
	// unlimited per-source budget unless set.
	c = ServerConfig{Loops: 4}.withDefaults()
	if c.ChallengeIPLimit != (ratelimit.Limit{Rate: 16, Burst: 32}) || c.ChallengePrefixLimit != (ratelimit.Limit{Rate: 64, Burst: 128}) {
		t.Errorf("4 loops: per-IP %+v, per-prefix %+v", c.ChallengeIPLimit, c.ChallengePrefixLimit)
	}
	if again := c.withDefaults(); again != c {
		t.Errorf("withDefaults twice: %+v, then %+v", c, again)
	}
	c = ServerConfig{ChallengeLimit: ratelimit.Limit{Rate: ratelimit.Unlimited}, ChallengePrefixLimit: ratelimit.Limit{Rate: 8}}.withDefaults()
	if c.ChallengeIPLimit.Rate >= 0 || c.ChallengePrefixLimit != (ratelimit.Limit{Rate: 8, Burst: 16}) {
		t.Errorf("unlimited per source: per-IP %+v, per-prefix %+v", c.ChallengeIPLimit, c.ChallengePrefixLimit)
	}
}

func TestLimitDivide(t *testing.T) {
	for _, tc := range []struct {
		l    ratelimit.Limit
		n    int
		want ratelimit.Limit
	}{
		{ratelimit.Limit{Rate: 64, Burst: 128}, 4, ratelimit.Limit{Rate: 16, Burst: 32}},
		{ratelimit.Limit{Rate: 64, Burst: 128}, 1, ratelimit.Limit{Rate: 64, Burst: 128}},
		{ratelimit.Limit{Rate: 64, Burst: 128}, 0, ratelimit.Limit{Rate: 64, Burst: 128}},
		{ratelimit.Limit{Rate: 4, Burst: 2}, 4, ratelimit.Limit{Rate: 1, Burst: 1}}, // never a burst below one reply
		{ratelimit.Limit{Rate: -1}, 8, ratelimit.Limit{Rate: -1}},
		{ratelimit.Limit{Rate: 5, Burst: 0}, 2, ratelimit.Limit{Rate: 5, Burst: 0}}, // allows nothing, still
	} {
		if got := tc.l.Divide(tc.n); got != tc.want {
			t.Errorf("%+v.Divide(%d) = %+v, want %+v", tc.l, tc.n, got, tc.want)
		}
	}
}

// initialFlood sends perPort Initials from each of the ports of ip each
// second for secs seconds and counts the Challenges.
func initialFlood(s *Server, pkt []byte, ips []netip.Addr, ports, perPort, secs int) int {
	out := make([]byte, MaxReplyLen)
	var d Decision
	var peer Peer
	sent := 0
	for sec := range secs {
		now := vecTS + float64(sec)
		for range perPort {
			for _, ip := range ips {
				for port := range ports {
					s.Handle(&d, netip.AddrPortFrom(ip, uint16(10000+port)), pkt, now, &peer, out)
					if d.Action == ActReply {
						sent++
					} else if d.Drop != protocol.DropRateLimited {
						panic(d.Drop.String())
					}
				}
			}
		}
	}
	return sent
}

// TestServerChallengesTowardOneHost is the reflection of issue 12 item 5:
// spoofed Initials from 1,000 ports of one victim, 40 per port per second
// (each port's own budget is 32/s), drew 38,300 Challenges/s toward it.
// With the per-IP budget the victim gets at most 64/s after a burst of 128,
// however many ports are spoofed.
func TestServerChallengesTowardOneHost(t *testing.T) {
	s, _ := testServer(t, nil)
	pkt := clientPacket(t, wire.Magic{}, nil)
	victim := []netip.Addr{netip.MustParseAddr("198.51.100.7")}
	const secs = 10
	got := initialFlood(s, pkt, victim, 1000, 40, secs)
	ip := s.cfg.ChallengeIPLimit
	if max := int(ip.Burst + ip.Rate*(secs-1)); got > max {
		t.Fatalf("1,000 ports of one host got %d Challenges in %d s, want at most %d", got, secs, max)
	}
	if got < int(ip.Burst) {
		t.Fatalf("only %d Challenges: the budget is not being given out", got)
	}
	t.Logf("Challenges toward one host with 1,000 ports: %d in %d s (%.0f/s), per loop", got, secs, float64(got)/secs)

	// A /24 of victims: the per-prefix budget caps the network.
	s, _ = testServer(t, nil)
	var hosts []netip.Addr
	for i := range 20 {
		hosts = append(hosts, netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}))
	}
	got = initialFlood(s, pkt, hosts, 100, 40, secs)
	px := s.cfg.ChallengePrefixLimit
	if max := int(px.Burst + px.Rate*(secs-1)); got > max {
		t.Fatalf("20 hosts of one /24 got %d Challenges in %d s, want at most %d", got, secs, max)
	}
	t.Logf("Challenges toward one /24 (20 hosts × 100 ports): %d in %d s", got, secs)

	// Another host is untouched by the victim's exhaustion.
	var d Decision
	var peer Peer
	out := make([]byte, MaxReplyLen)
	s.Handle(&d, netip.MustParseAddrPort("203.0.113.5:4000"), pkt, vecTS+secs-1, &peer, out)
	if d.Action != ActReply {
		t.Fatalf("a host in another network: %v", d.Drop)
	}
}

// TestServerPlayersBehindOneNAT: 256 players behind one address starting at
// once, each resending its Initial every second until it has a Challenge,
// all get one within a few seconds.
func TestServerPlayersBehindOneNAT(t *testing.T) {
	s, _ := testServer(t, nil)
	pkt := clientPacket(t, wire.Magic{}, nil)
	nat := netip.MustParseAddr("100.64.0.1")
	waiting := make(map[uint16]bool)
	for p := range 256 {
		waiting[uint16(20000+p)] = true
	}
	out := make([]byte, MaxReplyLen)
	var d Decision
	var peer Peer
	sec := 0
	for ; len(waiting) > 0 && sec < 10; sec++ {
		for port := range waiting {
			s.Handle(&d, netip.AddrPortFrom(nat, port), pkt, vecTS+float64(sec), &peer, out)
			if d.Action == ActReply {
				delete(waiting, port)
			}
		}
	}
	if len(waiting) > 0 || sec > 4 {
		t.Fatalf("%d players still without a Challenge after %d s", len(waiting), sec)
	}
	t.Logf("256 players behind one address: all challenged within %d s", sec)
}

// TestServerChallengeBudgetsSpendTogether: a Challenge refused by one budget
// spends none of the others.
func TestServerChallengeBudgetsSpendTogether(t *testing.T) {
	s, _ := testServer(t, func(c *ServerConfig) {
		c.ChallengeLimit = ratelimit.Limit{Rate: 0.001, Burst: 1} // one per source, for good
		c.ChallengeIPLimit = ratelimit.Limit{Rate: 1, Burst: 1}
		c.ChallengePrefixLimit = ratelimit.Limit{Rate: -1}
	})
	pkt := clientPacket(t, wire.Magic{}, nil)
	a, b := netip.MustParseAddrPort("192.0.2.1:1000"), netip.MustParseAddrPort("192.0.2.1:1001")
	for _, st := range []struct {
		src  netip.AddrPort
		now  float64
		want Action
	}{
		{a, vecTS, ActReply},
		{b, vecTS, ActDrop},      // the IP's budget is spent
		{b, vecTS + 1, ActReply}, // b's own token was not
		{a, vecTS + 2, ActDrop},  // a's is
	} {
		if d, _ := handle(s, st.src, pkt, st.now, Peer{}); d.Action != st.want {
			t.Fatalf("%v at +%v: %v %v, want %v", st.src, st.now-vecTS, d.Action, d.Drop, st.want)
		}
	}
}

// TestServerVersionUpgradeShared: several loops' Servers share one
// VersionUpgrade budget: at most 512 in total at once and 512 more per
// 300 s, however many loops answer.
func TestServerVersionUpgradeShared(t *testing.T) {
	cfg := ServerConfig{NetworkVersion: vecNetV}
	cfg.ShareVersionUpgradeTotal(vecTS)
	var loops []*Server
	for range 4 {
		loops = append(loops, NewServer(cfg, vecSecrets(), 42, vecTS))
	}
	bad := clientPacket(t, wire.Magic{}, func(h *protocol.Handshake) { h.NetworkVersion = 99 })
	count := func(now float64, n int) int {
		sent := 0
		for i := range n {
			src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 9000)
			if d, _ := handle(loops[i%len(loops)], src, bad, now, Peer{}); d.Action == ActReply {
				sent++
			}
		}
		return sent
	}
	if got := count(vecTS, 4000); got != 512 {
		t.Fatalf("at once across 4 loops: %d VersionUpgrades, want 512", got)
	}
	total := 512
	for sec := 1; sec <= 300; sec++ {
		total += count(vecTS+float64(sec), 20)
	}
	if total > 1024 || total < 1020 {
		t.Fatalf("in 300 s across 4 loops: %d VersionUpgrades, want 512 + 512", total)
	}
	t.Logf("VersionUpgrades in 300 s across 4 loops: %d", total)

	// Without the shared bucket each loop has its own: the bug.
	var own int
	for range 4 {
		s, _ := testServer(t, nil)
		for i := range 1000 {
			src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 9000)
			if d, _ := handle(s, src, bad, vecTS, Peer{}); d.Action == ActReply {
				own++
			}
		}
	}
	if own != 4*512 {
		t.Fatalf("per-loop buckets: %d, want %d", own, 4*512)
	}
}

func TestLimiterHostAllocs(t *testing.T) {
	s, _ := testServer(t, func(c *ServerConfig) { c.upgradeShared = ratelimit.NewSharedBucket(c.VersionUpgradeTotal, vecTS) })
	initial := clientPacket(t, wire.Magic{}, nil)
	bad := clientPacket(t, wire.Magic{}, func(h *protocol.Handshake) { h.NetworkVersion = 99 })
	out := make([]byte, MaxReplyLen)
	var d Decision
	var peer Peer
	port := uint16(0)
	for name, f := range map[string]func(){
		"initial (limited)": func() {
			port++
			s.Handle(&d, netip.AddrPortFrom(vecAddr.Addr(), port), initial, vecTS, &peer, out)
		},
		"version upgrade (shared)": func() {
			port++
			s.Handle(&d, netip.AddrPortFrom(vecAddr.Addr(), port), bad, vecTS, &peer, out)
		},
	} {
		if raceEnabled && name == "initial (limited)" {
			continue // cookies: the race runtime makes crypto/sha1 allocate
		}
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocs", name, n)
		}
	}
}

// TestShareVersionUpgradeTotalDefault: a zero config shares the default
// budget, 512 at once.
func TestShareVersionUpgradeTotalDefault(t *testing.T) {
	const now = 1795000000.0
	var c ServerConfig
	c.ShareVersionUpgradeTotal(now)
	for i := range 512 {
		if !c.upgradeShared.Allow(now) {
			t.Fatalf("ShareVersionUpgradeTotal of a zero config: refused reply %d of the default 512", i)
		}
	}
	if c.upgradeShared.Allow(now) {
		t.Fatal("ShareVersionUpgradeTotal of a zero config: more than the default 512")
	}
}
