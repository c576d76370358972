package handshake

import (
	"math"
	"testing"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

// Issue 12 item 1: an off-path attacker who knows the client's and the
// server's addresses spoofed RestartHandshakes from the server's address, and
// the client abandoned a healthy connection (its restart Initials were rate
// limited by the attacker's Initial flood). Item 7: after a server restart
// with the same SessionID, a restart that cannot succeed took the client
// 10 s to give up.

// TestClientRestartNeedsSilence: while valid connection packets arrive,
// spoofed RestartHandshakes never start a restart, however many and however
// timed; an idle connection hears the server's KeepAlive every second. Once
// the server falls silent (it lost the connection, or the client moved), a
// RestartHandshake is honoured RestartSilence after the last packet.
func TestClientRestartNeedsSilence(t *testing.T) {
	for _, tc := range []struct {
		name  string
		every float64 // seconds between valid packets from the server
	}{
		{"60 Hz traffic", 1.0 / 60},
		{"idle: KeepAlives, late by a sweep", 1.1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := connectedClient(t, ClientConfig{ClientID: 3}, clientTestCookie(0x31)) // at 0.25
			rh := clientServerPacket(t, wire.Magic{}, protocol.TypeRestartHandshake, 3, nil)
			var buf [MaxClientPacketLen]byte
			last := 0.25
			for now := 0.25; now < 60; now += 0.01 {
				if now-last >= tc.every {
					last = now
					if ev := c.Heard(now); ev != EventNone {
						t.Fatalf("Heard(%v) = %v", now, ev)
					}
				}
				n, ev, drop := c.Receive(now, rh, buf[:])
				if n != 0 || ev != EventNone || drop != protocol.DropRestartUnneeded {
					t.Fatalf("spoofed RestartHandshake at %.2f (last packet %.2f): %d, %v, %v", now, last, n, ev, drop)
				}
				if _, ev := c.Poll(now, buf[:]); ev != EventNone {
					t.Fatalf("Poll(%v) = %v", now, ev)
				}
			}
			if c.Restarting() || c.State() != clientConnected {
				t.Fatalf("restarting %v, state %v", c.Restarting(), c.State())
			}
			// The server goes silent.
			clientMustDrop(t, c, last+1.49, rh, protocol.DropRestartUnneeded)
			if in := clientMustReply(t, c, last+1.5, rh, EventRestarting); in.Type != protocol.TypeInitial || !in.Restart {
				t.Fatalf("restart Initial %+v", in)
			}
		})
	}
}

// TestClientRestartCanceled: a restart under way ends as soon as a valid
// connection packet arrives after it began: the server still reaches us, so
// the RestartHandshake was a forgery (or answered a stray packet), and the
// connection goes on untouched. A stale report (a packet from before the
// restart) cancels nothing.
func TestClientRestartCanceled(t *testing.T) {
	orig := clientTestCookie(0x41)
	c := connectedClient(t, ClientConfig{ClientID: 4}, orig) // at 0.25
	rh := clientServerPacket(t, wire.Magic{}, protocol.TypeRestartHandshake, 4, nil)
	clientMustReply(t, c, 5, rh, EventRestarting)
	if ev := c.Heard(4.9); ev != EventNone || !c.Restarting() {
		t.Fatalf("a packet from before the restart: %v, restarting %v", ev, c.Restarting())
	}
	clientMustReply(t, c, 5.5, clientChallenge(t, 4, clientTestCookie(0x42)), EventNone)
	if ev := c.Heard(5.6); ev != EventRestartCanceled {
		t.Fatalf("Heard during the restart: %v, want %v", ev, EventRestartCanceled)
	}
	if c.Restarting() || c.State() != clientConnected || c.Cookie() != orig || !math.IsInf(c.NextDeadline(), 1) {
		t.Fatalf("after cancel: restarting %v state %v deadline %v", c.Restarting(), c.State(), c.NextDeadline())
	}
	clientMustQuiet(t, c, 7)
	// The server's late answers to the abandoned restart change nothing.
	clientMustDrop(t, c, 5.7, clientAck(t, 4, orig), protocol.DropUnexpectedType)
	clientMustDrop(t, c, 5.7, clientChallenge(t, 4, clientTestCookie(0x43)), protocol.DropUnexpectedType)
	// Nor does a repeated report.
	if ev := c.Heard(5.6); ev != EventNone {
		t.Fatalf("repeated Heard: %v", ev)
	}
	// Silence again, then a restart that completes.
	clientMustReply(t, c, 7.2, rh, EventRestarting)
	clientMustReply(t, c, 7.3, clientChallenge(t, 4, clientTestCookie(0x44)), EventNone)
	clientMustEvent(t, c, 7.4, clientAck(t, 4, orig), EventReconnected)
	// Reconnecting counts as hearing the server.
	clientMustDrop(t, c, 8.8, rh, protocol.DropRestartUnneeded)
}

// TestClientRestartDenied: a server that does not know the connection
// answers the RestartResponse with Denied(DeniedUnknownConnection) carrying
// the RestartResponse's cookie; the client ends the connection at once. A
// Denied with any other cookie, or before a RestartResponse went out, or
// outside a restart, is not believed.
func TestClientRestartDenied(t *testing.T) {
	orig := clientTestCookie(0x51)
	c := connectedClient(t, ClientConfig{ClientID: 5}, orig)
	fresh := clientTestCookie(0x52)
	denied := func(ck [20]byte) []byte {
		return clientServerPacket(t, wire.Magic{}, protocol.TypeDenied, 5, func(h *protocol.Handshake) {
			h.Reason = DeniedUnknownConnection
			h.Cookie = ck
		})
	}
	clientMustDrop(t, c, 3, denied(orig), protocol.DropUnexpectedType) // not restarting
	clientMustReply(t, c, 5, clientServerPacket(t, wire.Magic{}, protocol.TypeRestartHandshake, 5, nil), EventRestarting)
	clientMustDrop(t, c, 5.1, denied(fresh), protocol.DropUnexpectedType) // no RestartResponse yet
	rr := clientMustReply(t, c, 5.2, clientChallenge(t, 5, fresh), EventNone)
	if rr.Type != protocol.TypeRestartResponse || rr.Cookie != fresh {
		t.Fatalf("RestartResponse %+v", rr)
	}
	clientMustDrop(t, c, 5.3, denied(orig), protocol.DropWrongCookie)
	clientMustDrop(t, c, 5.3, denied(clientTestCookie(0x53)), protocol.DropWrongCookie)
	clientMustEvent(t, c, 5.3, denied(fresh), EventDenied)
	if c.State() != clientDenied || c.Restarting() || c.DeniedReason() != DeniedUnknownConnection {
		t.Fatalf("state %v restarting %v reason %d", c.State(), c.Restarting(), c.DeniedReason())
	}
	clientMustQuiet(t, c, 20)
}

// TestRestartDeniedByServer runs the fail-fast path through both decisions:
// the server proves the RestartResponse, the caller finds no connection and
// builds the Denied, which is no larger than the request and which the
// client takes.
func TestRestartDeniedByServer(t *testing.T) {
	s, _ := testServer(t, nil)
	c := connectedClient(t, ClientConfig{ClientID: 1, NetworkVersion: vecNetV}, clientTestCookie(0x61))
	var buf [MaxClientPacketLen]byte
	n, ev, _ := c.Receive(5, clientServerPacket(t, wire.Magic{}, protocol.TypeRestartHandshake, 1, nil), buf[:])
	if ev != EventRestarting || n == 0 {
		t.Fatalf("restart: %v", ev)
	}
	// The server's Challenge to the restart Initial.
	var d Decision
	out := make([]byte, MaxReplyLen)
	var peer Peer
	s.Handle(&d, vecAddr, buf[:n], vecTS, &peer, out)
	if d.Action != ActReply || d.Reply != protocol.TypeChallenge {
		t.Fatalf("restart Initial: %+v", d)
	}
	n, _, drop := c.Receive(5.1, out[:d.ReplyLen], buf[:])
	if drop != protocol.DropNone || n == 0 {
		t.Fatalf("Challenge: %v", drop)
	}
	rr := append([]byte(nil), buf[:n]...)
	s.Handle(&d, vecAddr, rr, vecTS+0.1, &peer, out)
	if d.Action != ActMigrate {
		t.Fatalf("RestartResponse: %+v", d)
	}
	// No connection holds OrigCookie: Denied.
	rnd := wire.NewRand(9)
	m := s.Config().BuildDenied(out, &d.To, DeniedUnknownConnection, &d.Cookie, &rnd)
	if m == 0 || m > len(rr) {
		t.Fatalf("Denied of %d bytes to a %d-byte RestartResponse", m, len(rr))
	}
	_, ev, drop = c.Receive(5.2, out[:m], buf[:])
	if ev != EventDenied || drop != protocol.DropNone || c.DeniedReason() != DeniedUnknownConnection {
		t.Fatalf("client: %v %v reason %d", ev, drop, c.DeniedReason())
	}
}

func TestClientHeardAllocs(t *testing.T) {
	c := connectedClient(t, ClientConfig{ClientID: 3}, clientTestCookie(0x71))
	rh := clientServerPacket(t, wire.Magic{}, protocol.TypeRestartHandshake, 3, nil)
	var buf [MaxClientPacketLen]byte
	now := 1.0
	if n := testing.AllocsPerRun(1000, func() {
		now += 0.01
		c.Heard(now)
		c.Receive(now, rh, buf[:])
	}); n != 0 {
		t.Errorf("Heard and a refused RestartHandshake: %v allocs", n)
	}
}

// TestClientRestartPending: a RestartHandshake that comes while the
// connection is not yet silent enough (restart_unneeded) or too soon after
// the last restart (rate_limited) is remembered, and Poll honours it once
// both waits are over, at exactly RestartSilence after the server's last
// packet: a client that moved restarts then, not when a later packet of
// its own draws another RestartHandshake (the server ends a silent
// connection as stalled after 2 s). A packet from the server after the
// request forgets it: the server reaches us, so it was a stray or a forgery.
func TestClientRestartPending(t *testing.T) {
	rh := clientServerPacket(t, wire.Magic{}, protocol.TypeRestartHandshake, 5, nil)
	var buf [MaxClientPacketLen]byte
	t.Run("silence outlasts it", func(t *testing.T) {
		c := connectedClient(t, ClientConfig{ClientID: 5}, clientTestCookie(0x51)) // at 0.25
		c.Heard(2)
		clientMustDrop(t, c, 2.2, rh, protocol.DropRestartUnneeded)
		if d := c.NextDeadline(); d != 3.5 {
			t.Fatalf("NextDeadline = %v, want 3.5 (the last packet + RestartSilence)", d)
		}
		if n, ev := c.Poll(3.49, buf[:]); n != 0 || ev != EventNone {
			t.Fatalf("Poll(3.49) = %d, %v: too soon", n, ev)
		}
		n, ev := c.Poll(3.5, buf[:])
		if n == 0 || ev != EventRestarting || !c.Restarting() {
			t.Fatalf("Poll(3.5) = %d, %v, restarting %v; want the restart Initial", n, ev, c.Restarting())
		}
		if in := clientDecodeSent(t, c, buf[:n]); in.Type != protocol.TypeInitial || !in.Restart {
			t.Fatalf("restart Initial %+v", in)
		}
	})
	t.Run("the server is heard after it", func(t *testing.T) {
		c := connectedClient(t, ClientConfig{ClientID: 5}, clientTestCookie(0x52))
		c.Heard(2)
		clientMustDrop(t, c, 2.2, rh, protocol.DropRestartUnneeded)
		c.Heard(2.1) // from before the request: the silence counts from it, the request stays
		if d := c.NextDeadline(); d != 3.6 {
			t.Fatalf("NextDeadline = %v, want 3.6", d)
		}
		c.Heard(2.3)
		if d := c.NextDeadline(); !math.IsInf(d, 1) {
			t.Fatalf("NextDeadline = %v after the server was heard, want +Inf", d)
		}
		clientMustQuiet(t, c, 10)
	})
	t.Run("rate limited", func(t *testing.T) {
		c := connectedClient(t, ClientConfig{ClientID: 5}, clientTestCookie(0x53)) // connected at 0.25: restarts from 1.35
		c.Heard(0.25)
		clientMustDrop(t, c, 1.2, rh, protocol.DropRestartUnneeded)
		if n, ev := c.Poll(1.74, buf[:]); n != 0 || ev != EventNone {
			t.Fatalf("Poll(1.74) = %d, %v: too soon", n, ev)
		}
		if n, ev := c.Poll(1.75, buf[:]); n == 0 || ev != EventRestarting {
			t.Fatalf("Poll(1.75) = %d, %v; want the restart", n, ev)
		}
	})
}
