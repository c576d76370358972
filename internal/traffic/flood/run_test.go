package flood

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/udpgate/udpgate/batchio"
	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/internal/wire"
)

type echo = conntest.Echo[*conn.Conn, conn.DisconnectReason]

// runLogged runs cfg, bounded by 30 s, and logs the report printed with
// its top sources; it returns the report and that text.
func runLogged(t *testing.T, cfg Config, top int) (*Report, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := rep.Print(&text, top); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", text.String())
	return rep, text.String()
}

func listen(t *testing.T, cfg conn.Config) *conn.Server {
	t.Helper()
	cfg.Handler = echo{}
	return conntest.Listen(t, conn.Listen, cfg)
}

// TestFloodAgainstServer floods a real server with every kind and checks the
// server's promises from both sides: no source got more bytes than it sent,
// replies were rate-limited per source, nothing became a connection, and
// the server's drop counters show each defence at work.
func TestFloodAgainstServer(t *testing.T) {
	const magic = "10110"
	// Overload control would, under this rate, stop RestartHandshakes
	// altogether; it has its own tests. Here the per-source limits and
	// the protocol's checks are what is measured.
	srv := listen(t, conn.Config{Magic: magic, NetworkVersion: 3, SessionID: 1}) // overload control is off by default

	rep, text := runLogged(t, Config{
		Server:         srv.Addr(),
		Magic:          magic,
		NetworkVersion: 3,
		Count:          50_000,
		MaxDuration:    15 * time.Second,
		Seed:           7,
	}, 5)

	if rep.Stopped != StopCount || rep.Sent.Datagrams != 50_000 || rep.SendErrors != 0 {
		t.Errorf("stopped %v after %d datagrams (%d errors); want all 50000 sent", rep.Stopped, rep.Sent.Datagrams, rep.SendErrors)
	}
	if len(rep.Sources) != DefaultSources {
		t.Errorf("%d sources; want %d", len(rep.Sources), DefaultSources)
	}
	seen := map[netip.AddrPort]bool{}
	for _, s := range rep.Sources {
		seen[s.Addr] = true
	}
	if len(seen) != DefaultSources {
		t.Errorf("%d distinct source addresses; want %d", len(seen), DefaultSources)
	}

	// No amplification, for every source and overall.
	for _, s := range rep.Amplified() {
		t.Errorf("source %v received %d bytes for %d sent", s.Addr, s.Received.Bytes, s.Sent.Bytes)
	}
	if a := rep.Amplification(); a > 1 || a <= 0 {
		t.Errorf("overall amplification %.4f; want in (0, 1]", a)
	}

	// Replies: Challenges for Initials, RestartHandshakes for connection
	// packets from unknown addresses, and nothing a connection would get.
	if rep.Replies[protocol.TypeChallenge].Datagrams == 0 || rep.Replies[protocol.TypeRestartHandshake].Datagrams == 0 {
		t.Errorf("replies %v; want Challenges and RestartHandshakes", rep.Replies)
	}
	for _, bad := range []ReplyType{ReplyType(protocol.TypeAck), ReplyType(protocol.TypeDenied), ReplyConn, ReplyInvalid} {
		if n := rep.Replies[bad].Datagrams; n != 0 {
			t.Errorf("%d %v replies to flood sources", n, bad)
		}
	}

	// Per-source rate limits seen from outside: a source may get a burst
	// and then the rate, over the run (plus a second of slack). The
	// server's limiter is a fixed table with one source per slot, so two
	// sources that hash to one slot evict each other and each eviction
	// grants a fresh burst (fastpath/ratelimit.go): a few sources may
	// exceed their limit, but never many, and never the total.
	secs := (rep.SendTime + rep.Drain).Seconds() + 1
	limits := []struct {
		t            protocol.PacketType
		burst, rate  float64
		over, total  int
		totalReplies uint64
	}{
		{t: protocol.TypeChallenge, burst: 64, rate: 32},
		{t: protocol.TypeRestartHandshake, burst: 8, rate: 4},
		{t: protocol.TypeVersionUpgrade, burst: 8, rate: 4},
	}
	for i := range limits {
		l := &limits[i]
		for _, s := range rep.Sources {
			n := s.Replies[l.t].Datagrams
			l.totalReplies += n
			if float64(n) > l.burst+l.rate*secs {
				l.over++
				t.Logf("source %v got %d %v replies in %.1f s (limit %v + %v/s): its limiter slot is shared", s.Addr, n, l.t, secs, l.burst, l.rate)
			}
		}
		if l.over > len(rep.Sources)/20 {
			t.Errorf("%d of %d sources got more %v replies than %v + %v/s", l.over, len(rep.Sources), l.t, l.burst, l.rate)
		}
		if max := float64(len(rep.Sources)) * (l.burst + l.rate*secs); float64(l.totalReplies) > max {
			t.Errorf("%d %v replies to %d sources in %.1f s; the limits allow %.0f", l.totalReplies, l.t, len(rep.Sources), secs, max)
		}
	}

	// The server's side: nothing connected, and each defence fired. Close
	// returns once the receive loops have stopped, each having published
	// the counters of its last batch (the flood's last replies may have
	// arrived before their batch's counters were published).
	live := srv.Len()
	srv.Close()
	st := srv.Stats()
	if live != 0 || st.Accepted != 0 || st.HandshakeOut[protocol.TypeAck] != 0 || st.PromotionAcks != 0 {
		t.Errorf("the flood made connections: len %d, accepted %d, acks %d+%d", live, st.Accepted,
			st.HandshakeOut[protocol.TypeAck], st.PromotionAcks)
	}
	for _, r := range []protocol.DropReason{protocol.DropBadCookie, protocol.DropMalformed, protocol.DropBadSize,
		protocol.DropBadMagic, protocol.DropTooLarge, protocol.DropRateLimited, protocol.DropExpiredCookie,
		protocol.DropWrongSecret, protocol.DropUnknownType, protocol.DropUnexpectedType, protocol.DropBadVersion,
		protocol.DropBadBody, protocol.DropSessionMismatch} {
		if st.Drops[r] == 0 {
			t.Errorf("server drop counter %v did not move: %v", r, st.Drops)
		}
	}
	// What the server counts as sent to the flood, the flood received,
	// unless the kernel dropped some on the way (small receive buffers).
	sent := st.HandshakeOut[protocol.TypeChallenge] + st.HandshakeOut[protocol.TypeRestartHandshake] +
		st.HandshakeOut[protocol.TypeVersionUpgrade] - 1 // the probe's Challenge
	if rep.Received.Datagrams > sent {
		t.Errorf("the flood received %d replies, the server sent %d", rep.Received.Datagrams, sent)
	}
	if !strings.Contains(strings.Join(strings.Fields(text), " "), "sources that received more than they sent none") {
		t.Errorf("report does not say that no source was amplified")
	}
}

// TestFloodStopsByTime: MaxDuration ends a flood that Count would not, and
// Rate paces it.
func TestFloodStopsByTime(t *testing.T) {
	srv := listen(t, conn.Config{})
	start := time.Now()
	rep, err := Run(t.Context(), Config{Server: srv.Addr(), Count: MaxCount, MaxDuration: 1500 * time.Millisecond,
		Rate: 2000, NumSources: 4, Batch: 16})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 1500*time.Millisecond+MaxGrace+time.Second {
		t.Errorf("Run took %v", el)
	}
	if rep.Stopped != StopDuration {
		t.Errorf("stopped: %v; want %v", rep.Stopped, StopDuration)
	}
	// The pacing caps what 1.5 s at 2000/s can send; how much of that a
	// loaded machine lets the generator send is not this test's business,
	// only that it sent at all.
	if n := rep.Sent.Datagrams; n == 0 || n > 4000 {
		t.Errorf("sent %d datagrams at 2000/s in ~1.5 s, want 1 to 4000", n)
	}
}

// TestFloodIPv6: against [::1] every source is ::1 with its own port, and
// the server still sees distinct sources.
func TestFloodIPv6(t *testing.T) {
	srv, err := conn.Listen("[::1]:0", conn.Config{Handler: echo{}})
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	defer srv.Close()
	rep, err := Run(t.Context(), Config{Server: srv.Addr(), Count: 5000, NumSources: 20})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[netip.AddrPort]bool{}
	for _, s := range rep.Sources {
		seen[s.Addr] = true
		if s.Addr.Addr() != netip.IPv6Loopback() {
			t.Errorf("source %v; want ::1", s.Addr)
		}
	}
	if len(seen) != 20 || rep.Sent.Datagrams != 5000 || len(rep.Amplified()) != 0 ||
		rep.Replies[protocol.TypeChallenge].Datagrams == 0 {
		t.Errorf("%d distinct sources, sent %d, amplified %d, challenges %d", len(seen), rep.Sent.Datagrams,
			len(rep.Amplified()), rep.Replies[protocol.TypeChallenge].Datagrams)
	}
	if srv.Len() != 0 {
		t.Errorf("%d connections", srv.Len())
	}
}

// TestFloodCanceled: the context ends a flood; the partial report comes
// back with the context's error.
func TestFloodCanceled(t *testing.T) {
	srv := listen(t, conn.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(300*time.Millisecond, cancel)
	rep, err := Run(ctx, Config{Server: srv.Addr(), Count: MaxCount, MaxDuration: 20 * time.Second, Rate: 5000, NumSources: 2})
	if !errors.Is(err, context.Canceled) || rep == nil || rep.Stopped != StopCanceled {
		t.Fatalf("Run = %v, %v; want a partial report and context.Canceled", rep, err)
	}
}

// TestProbeErrors: without a server, or with a mismatched version, Run says
// what to fix before sending anything.
func TestProbeErrors(t *testing.T) {
	// A bound socket that never answers.
	quiet, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	_, err = Run(t.Context(), Config{Server: quiet.LocalAddr().(*net.UDPAddr).AddrPort(), NumSources: 1, MaxDuration: 3 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "no Challenge") || !strings.Contains(err.Error(), "Magic") {
		t.Errorf("silent server: %v", err)
	}

	srv := listen(t, conn.Config{NetworkVersion: 9})
	_, err = Run(t.Context(), Config{Server: srv.Addr(), NetworkVersion: 1, NumSources: 1})
	if err == nil || !strings.Contains(err.Error(), "NetworkVersion 9") {
		t.Errorf("version mismatch: %v", err)
	}
}

// TestSendLoopAllocatesNothing: filling a batch from the templates and
// sending it costs no allocation.
func TestSendLoopAllocatesNothing(t *testing.T) {
	st, srcs := sinkSources(t, Config{NumSources: 1, Batch: 32})
	e := &engine{st: &st, tmpl: buildTemplates(&st, challenge{}, 1e9, wire.NewRand(1)), srcs: srcs}
	checkSendAllocs(t, e)
}

// sinkSources opens cfg's sources towards a socket that reads nothing,
// all closed when the test ends.
func sinkSources(t *testing.T, cfg Config) (settings, []*source) {
	t.Helper()
	sink, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	cfg.Server = sink.LocalAddr().(*net.UDPAddr).AddrPort()
	st, err := cfg.settings()
	if err != nil {
		t.Fatal(err)
	}
	srcs, err := openSources(&st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srcs[0].group.Close() })
	return st, srcs
}

// checkSendAllocs checks that filling a batch of e's first source by the
// mix and sending it allocates nothing.
func checkSendAllocs(t *testing.T, e *engine) {
	t.Helper()
	st, s := e.st, e.srcs[0]
	sd := &sender{e: e, rnd: wire.NewRand(2), batch: batchio.NewBatch(st.Batch, 1), size: st.Batch, srcs: e.srcs}
	cum, total := st.Mix.cumulative()
	allocs := testing.AllocsPerRun(200, func() {
		sd.fill(s, st.Batch, &cum, total)
		if err := s.sock.Send(sd.batch, st.Batch); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per batch; want 0", allocs)
	}
}
