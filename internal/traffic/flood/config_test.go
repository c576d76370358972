package flood

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

var testServer = netip.MustParseAddrPort("127.0.0.1:7777")

func TestParseMix(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mix
		err  string
	}{
		{in: "", want: DefaultMix},
		{in: "initial=2, garbage=1", want: Mix{KindInitial: 2, KindGarbage: 1}},
		{in: "replay=3,version=0,conn=1", want: Mix{KindReplay: 3, KindConn: 1}},
		{in: "initial", err: "no weight"},
		{in: "bogus=1", err: `unknown kind "bogus"`},
		{in: "initial=-1", err: "not a whole number"},
		{in: "initial=0", err: "weight 0"},
	} {
		got, err := ParseMix(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseMix(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseMix(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := ParseMix(got.String()); err != nil || back != got {
			t.Errorf("ParseMix(%q.String() = %q) = %v, %v", tc.in, got.String(), back, err)
		}
	}
}

func TestConfigRefusesNonLoopback(t *testing.T) {
	for _, cfg := range []Config{
		{Server: netip.MustParseAddrPort("10.1.2.3:7777")},
		{Server: netip.MustParseAddrPort("[2001:db8::1]:7777")},
		{Server: netip.MustParseAddrPort("[::ffff:192.0.2.1]:7777")},
		{Server: testServer, Sources: []netip.Addr{netip.MustParseAddr("192.0.2.7")}},
	} {
		if _, err := cfg.settings(); !errors.Is(err, ErrNotLoopback) {
			t.Errorf("settings(%v, sources %v) = %v; want ErrNotLoopback", cfg.Server, cfg.Sources, err)
		}
	}
	// Run refuses before it opens a socket.
	if _, err := Run(t.Context(), Config{Server: netip.MustParseAddrPort("192.0.2.1:7777")}); !errors.Is(err, ErrNotLoopback) {
		t.Errorf("Run to 192.0.2.1 = %v; want ErrNotLoopback", err)
	}
}

func TestConfigDefaultsAndLimits(t *testing.T) {
	st, err := Config{Server: netip.MustParseAddrPort("[::ffff:127.0.0.1]:7777")}.settings()
	if err != nil {
		t.Fatal(err)
	}
	if st.Server != testServer || st.Count != DefaultCount || st.MaxDuration != DefaultMaxDuration ||
		st.Mix != DefaultMix || st.Batch != DefaultBatch || st.Grace != DefaultGrace || st.Senders != 1 ||
		len(st.sources) != DefaultSources || st.MaxDatagram != 1200 {
		t.Errorf("defaults: %+v", st)
	}
	seen := map[netip.Addr]bool{}
	for _, a := range st.sources {
		b := a.As4()
		if !a.IsLoopback() || seen[a] || b[3] == 0 || b[3] == 255 {
			t.Fatalf("default source %v: repeated, not loopback or a .0/.255", a)
		}
		seen[a] = true
	}
	if st.sources[0] != netip.MustParseAddr("127.0.2.1") {
		t.Errorf("first default source %v; want 127.0.2.1", st.sources[0])
	}

	st6, err := Config{Server: netip.MustParseAddrPort("[::1]:7777"), NumSources: 3}.settings()
	if err != nil || len(st6.sources) != 3 || st6.sources[2] != netip.IPv6Loopback() {
		t.Errorf("IPv6 sources: %v, %v", st6.sources, err)
	}

	for _, tc := range []struct {
		cfg Config
		err string
	}{
		{Config{}, "not an address with a port"},
		{Config{Server: testServer, Count: MaxCount + 1}, "Count"},
		{Config{Server: testServer, MaxDuration: MaxDurationLimit + time.Second}, "MaxDuration"},
		{Config{Server: testServer, Rate: -1}, "Rate"},
		{Config{Server: testServer, NumSources: MaxSources + 1}, "NumSources"},
		{Config{Server: testServer, Batch: MaxBatch + 1}, "Batch"},
		{Config{Server: testServer, Grace: MaxGrace + 1}, "Grace"},
		{Config{Server: testServer, Magic: "102"}, "Magic"},
		{Config{Server: testServer, MaxDatagram: 5000}, "MaxDatagram"},
		{Config{Server: testServer, SessionID: 4}, "SessionID"},
		{Config{Server: testServer, Sources: []netip.Addr{netip.IPv6Loopback()}}, "families"},
	} {
		if _, err := tc.cfg.settings(); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("settings(%+v) = %v; want an error about %s", tc.cfg, err, tc.err)
		}
	}
}
