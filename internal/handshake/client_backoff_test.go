package handshake

import (
	"math"
	"testing"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

// The resend backoff (docs/protocol.md §6.2): in each phase the first resend
// waits ResendFirst (100 ms by default, or 3 × the last measured round trip,
// at least 50 ms), each later gap twice the one before, up to
// ResendInterval (1 s).

// clientNear reports a and b equal to within float error: virtual times
// are sums of binary fractions like 0.1.
func clientNear(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// clientSendTimes drives c by its deadlines alone (no server) from its
// current state and returns the times of its next n sends, checking that
// each carries the next SentCount and that nothing goes out between
// deadlines.
func clientSendTimes(t *testing.T, c *ClientHandshake, n int) []float64 {
	t.Helper()
	var got []float64
	for len(got) < n {
		d := c.NextDeadline()
		if math.IsInf(d, 1) {
			t.Fatalf("no deadline after %v", got)
		}
		want := c.sentCount
		clientMustQuiet(t, c, math.Nextafter(d, math.Inf(-1)))
		h := clientMustPoll(t, c, d)
		if h.SentCount != want {
			t.Fatalf("send at %v: SentCount %d, want %d", d, h.SentCount, want)
		}
		got = append(got, d)
	}
	return got
}

func clientCheckTimes(t *testing.T, what string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: sends at %v, want %v", what, got, want)
	}
	for i := range want {
		if !clientNear(got[i], want[i]) {
			t.Fatalf("%s: sends at %v, want %v", what, got, want)
		}
	}
}

// TestClientResendScheduleInitials: the exact times of the Initials of a
// first connect that nobody answers.
func TestClientResendScheduleInitials(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  ClientConfig
		want []float64 // send times after Start(10)
	}{
		{"default: 100 ms doubling to 1 s", ClientConfig{},
			[]float64{10, 10.1, 10.3, 10.7, 11.5, 12.5, 13.5, 14.5}},
		{"ResendFirst 125 ms", ClientConfig{ResendFirst: 0.125},
			[]float64{10, 10.125, 10.375, 10.875, 11.875, 12.875}},
		{"ResendInterval 0.5 s caps the gaps", ClientConfig{ResendInterval: 0.5},
			[]float64{10, 10.1, 10.3, 10.7, 11.2, 11.7, 12.2}},
		{"ResendInterval below the first gap: fixed", ClientConfig{ResendInterval: 0.05},
			[]float64{10, 10.05, 10.1, 10.15, 10.2}},
		{"ResendFirst = ResendInterval: fixed 1 s (the old schedule)", ClientConfig{ResendFirst: 1},
			[]float64{10, 11, 12, 13, 14}},
		{"ResendFirst +Inf: fixed", ClientConfig{ResendFirst: math.Inf(1), ResendInterval: 2},
			[]float64{10, 12, 14, 16, 18}},
		{"ResendFirst NaN: default", ClientConfig{ResendFirst: math.NaN()},
			[]float64{10, 10.1, 10.3, 10.7, 11.5}},
		{"ResendFirst negative: default", ClientConfig{ResendFirst: -1},
			[]float64{10, 10.1, 10.3, 10.7, 11.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.ClientID = 1
			tc.cfg.ConnectTimeout = 100
			c := clientNew(tc.cfg)
			c.Start(10)
			clientCheckTimes(t, "Initials", clientSendTimes(t, c, len(tc.want)), tc.want)
		})
	}
	// ResendInterval +Inf: one Initial, no resends, as before the backoff.
	c := clientNew(ClientConfig{ClientID: 1, ResendInterval: math.Inf(1), ConnectTimeout: 100})
	c.Start(10)
	clientMustPoll(t, c, 10)
	if c.NextDeadline() != 110 {
		t.Fatalf("deadline %v, want only the timeout at 110", c.NextDeadline())
	}
}

// TestClientResendScheduleResponse: a Challenge starts the Response phase
// over from its first gap, derived from the round trip that the Challenge's
// echoed SentCount times; a later Challenge does not reset the backoff.
func TestClientResendScheduleResponse(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   ClientConfig
		at    float64 // the Challenge arrives
		echo  uint8   // its SentCount; Initials #0 at 0, #1 at 0.1, #2 at 0.3 went out before it
		want  []float64
		wantN int // SentCount of the Response sent at once
	}{
		// #1 left at 0.1: round trip 0.25, first gap 0.75, then 1 s.
		{"answers the resend: rtt 0.25 s", ClientConfig{}, 0.35, 1,
			[]float64{1.1, 2.1, 3.1}, 3},
		// #0 left at 0: round trip 0.35, 3 × 0.35 capped at 1 s.
		{"answers the first Initial: rtt 0.35 s, capped", ClientConfig{}, 0.35, 0,
			[]float64{1.35, 2.35, 3.35}, 3},
		// #1 left at 0.1: round trip 10 ms, floor 50 ms.
		{"short rtt: 50 ms floor", ClientConfig{}, 0.11, 1,
			[]float64{0.16, 0.26, 0.46, 0.86, 1.66, 2.66}, 2},
		// #1 left at 0.1: round trip 30 ms, 90 ms.
		{"rtt 30 ms: 90 ms", ClientConfig{}, 0.13, 1,
			[]float64{0.22, 0.4, 0.76, 1.48, 2.48}, 2},
		// SentCount 9 was never sent: no sample, the 100 ms default.
		{"unknown echo: default 100 ms", ClientConfig{}, 0.35, 9,
			[]float64{0.45, 0.65, 1.05, 1.85, 2.85}, 3},
		// A set ResendFirst wins over the measurement.
		{"ResendFirst set: no rtt", ClientConfig{ResendFirst: 0.1}, 0.11, 1,
			[]float64{0.21, 0.41, 0.81, 1.61}, 2},
		{"old schedule", ClientConfig{ResendFirst: 1}, 0.35, 0,
			[]float64{1.35, 2.35, 3.35}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.ClientID = 2
			tc.cfg.ConnectTimeout = 100
			c := clientNew(tc.cfg)
			c.Start(0)
			// Initials up to the Challenge.
			for c.NextDeadline() < tc.at {
				clientMustPoll(t, c, c.NextDeadline())
			}
			ck := clientTestCookie(7)
			ch := clientServerPacket(t, wire.Magic{}, protocol.TypeChallenge, 2, func(h *protocol.Handshake) {
				h.Cookie = ck
				h.SentCount = tc.echo
			})
			r := clientMustReply(t, c, tc.at, ch, EventNone)
			if r.Type != protocol.TypeResponse || r.SentCount != uint8(tc.wantN) {
				t.Fatalf("reply %v SentCount %d, want a Response with %d", r.Type, r.SentCount, tc.wantN)
			}
			clientCheckTimes(t, "Responses", clientSendTimes(t, c, len(tc.want)), tc.want)
		})
	}

	// A later Challenge (answering a resent Initial) is answered at once,
	// but the backoff carries on: no reset, no burst.
	c := clientNew(ClientConfig{ClientID: 2, ConnectTimeout: 100, ResendFirst: 0.125})
	c.Start(0)
	clientSendTimes(t, c, 2) // Initials at 0, 0.125
	clientMustReply(t, c, 0.25, clientChallenge(t, 2, clientTestCookie(1)), EventNone)
	// Response at 0.25, resend due at 0.375.
	clientMustReply(t, c, 0.3125, clientChallenge(t, 2, clientTestCookie(2)), EventNone)
	// That Response counted as the resend; gaps 0.25, 0.5, 1.
	clientCheckTimes(t, "after a second Challenge", clientSendTimes(t, c, 3), []float64{0.5625, 1.0625, 2.0625})
}

// TestClientResendScheduleFallback: going back to Initials after the
// Challenge lifetime starts that phase over from its first gap.
func TestClientResendScheduleFallback(t *testing.T) {
	c := clientStarted(t, ClientConfig{ClientID: 3, ConnectTimeout: 60, ResendFirst: 0.125})
	clientMustReply(t, c, 0.5, clientChallenge(t, 3, clientTestCookie(3)), EventNone)
	for c.NextDeadline() < 15.5 { // Responses, backed off to 1 s
		clientMustPoll(t, c, c.NextDeadline())
	}
	if c.NextDeadline() != 15.5 {
		t.Fatalf("deadline %v, want the fallback at 15.5", c.NextDeadline())
	}
	got := clientSendTimes(t, c, 4)
	clientCheckTimes(t, "Initials after the fallback", got, []float64{15.5, 15.625, 15.875, 16.375})
	if c.State() != ClientSendingInitial {
		t.Fatalf("state %v", c.State())
	}
}

// TestClientResendScheduleRestart: a restart's Initials and
// RestartResponses follow the same schedule, from the round trip measured
// by the first connect's Ack; SentCount counts on across the restart's
// phases and goes back to 0 with its Ack.
func TestClientResendScheduleRestart(t *testing.T) {
	ck := clientTestCookie(0x21)
	c := clientNew(ClientConfig{ClientID: 4})
	c.Start(0)
	clientMustPoll(t, c, 0)                                           // Initial #0
	clientMustReply(t, c, 0.02, clientChallenge(t, 4, ck), EventNone) // Response #1: rtt 0.02 s, gap 0.06 s
	// Response #2 at 0.08 (a 0.06 s gap; the next would be 0.12 s, then 0.24 s).
	clientCheckTimes(t, "Response resend", clientSendTimes(t, c, 1), []float64{0.08})
	// The Ack answers #2: rtt 0.04 s, so a restart's first gap is 0.12 s
	// (not the 0.24 s the connect's backoff would use after the next Response).
	ack := clientServerPacket(t, wire.Magic{}, protocol.TypeAck, 4, func(h *protocol.Handshake) { h.Cookie = ck; h.SentCount = 2 })
	clientMustEvent(t, c, 0.12, ack, EventConnected)

	rh := clientServerPacket(t, wire.Magic{}, protocol.TypeRestartHandshake, 4, nil)
	in := clientMustReply(t, c, 5, rh, EventRestarting)
	if in.SentCount != 0 || !in.Restart {
		t.Fatalf("restart Initial %+v", in)
	}
	got := clientSendTimes(t, c, 3)
	clientCheckTimes(t, "restart Initials", got, []float64{5.12, 5.36, 5.84})

	// The Challenge answers #3 (sent at 5.84): rtt 0.06, first gap 0.18.
	ch := clientServerPacket(t, wire.Magic{}, protocol.TypeChallenge, 4, func(h *protocol.Handshake) {
		h.Cookie = clientTestCookie(0x22)
		h.SentCount = 3
	})
	rr := clientMustReply(t, c, 5.9, ch, EventNone)
	if rr.Type != protocol.TypeRestartResponse || rr.SentCount != 4 {
		t.Fatalf("RestartResponse %v #%d", rr.Type, rr.SentCount)
	}
	got = clientSendTimes(t, c, 4)
	clientCheckTimes(t, "RestartResponses", got, []float64{6.08, 6.44, 7.16, 8.16})
	clientMustEvent(t, c, 8.2, clientAck(t, 4, ck), EventReconnected)
	if !math.IsInf(c.NextDeadline(), 1) {
		t.Fatalf("deadline %v after the restart", c.NextDeadline())
	}
}

// TestClientResendBudget: whatever round trip the server's replies claim
// (the 50 ms floor binds), a client never sends more than 5 packets of one
// phase in any second (4 before any round trip is measured), and one a
// second once backed off: far inside the server's per-source Challenge
// budget (32/s, burst 64), which only Initials draw on. Ten seconds without
// an answer cost 13 Initials with the defaults (the old schedule: 10).
func TestClientResendBudget(t *testing.T) {
	maxIn := func(times []float64, window float64) int {
		most := 0
		for i := range times {
			n := 0
			for _, u := range times[i:] {
				if u < times[i]+window {
					n++
				}
			}
			most = max(most, n)
		}
		return most
	}
	// No answer: the defaults.
	c := clientNew(ClientConfig{ClientID: 5})
	c.Start(0)
	var times []float64
	var buf [MaxClientPacketLen]byte
	for now := 0.0; now < 10; now = c.NextDeadline() {
		if n, _ := c.Poll(now, buf[:]); n > 0 {
			times = append(times, now)
		}
	}
	if len(times) != 13 || maxIn(times, 1) != 4 {
		t.Fatalf("unanswered: %d Initials in 10 s (want 13), %d in a second (want 4): %v",
			len(times), maxIn(times, 1), times)
	}

	// A Challenge claiming a 0 s round trip: the 50 ms floor.
	c = clientNew(ClientConfig{ClientID: 5, ConnectTimeout: 100})
	c.Start(0)
	times = times[:0]
	clientMustPoll(t, c, 0)
	times = append(times, 0)
	clientMustReply(t, c, 0, clientChallenge(t, 5, clientTestCookie(5)), EventNone)
	times = append(times, 0)
	for len(times) < 14 { // until 12.55 s, before the Challenge lifetime ends

		now := c.NextDeadline()
		clientMustPoll(t, c, now)
		times = append(times, now)
	}
	if n := maxIn(times, 1); n > 6 {
		t.Fatalf("%d packets in one second: %v", n, times)
	}
	if n := maxIn(times[1:], 1); n != 5 {
		t.Fatalf("%d Responses in the first second, want 5: %v", n, times[1:])
	}
	if n := maxIn(times[10:], 1); n != 1 {
		t.Fatalf("%d packets a second once backed off: %v", n, times)
	}
}
