package handshake

import (
	"encoding/hex"
	"math"
	"testing"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

const clientTestNetVersion = 16909060 // 0x01020304, as in vectors.json

// clientTestCookie is a distinct, recognisable cookie per tag.
func clientTestCookie(tag byte) cookie.Cookie {
	var c cookie.Cookie
	for i := range c {
		c[i] = tag ^ byte(i*7)
	}
	return c
}

// clientServerPacket encodes a server packet for a client with clientID, with the
// fields a real server would set (SessionID 2, versions 3/4, our network
// version, 8 random bytes, the RestartBit the type needs, Timestamp +5000.5
// on a Challenge and -1 on an Ack); edit adjusts it before encoding.
func clientServerPacket(t *testing.T, m wire.Magic, typ protocol.PacketType, clientID uint8, edit func(h *protocol.Handshake)) []byte {
	t.Helper()
	h := protocol.Handshake{
		SessionID:      2,
		ClientID:       clientID,
		Restart:        typ == protocol.TypeRestartHandshake,
		MinVersion:     3,
		CurVersion:     4,
		Type:           typ,
		NetworkVersion: clientTestNetVersion,
		RandomLen:      8,
	}
	for i := range h.Random {
		h.Random[i] = 0xA0 + byte(i)
	}
	switch typ {
	case protocol.TypeChallenge:
		h.Timestamp = 5000.5
	case protocol.TypeAck:
		h.SecretID = 1
		h.Timestamp = -1
	}
	if edit != nil {
		edit(&h)
	}
	buf := make([]byte, MaxClientPacketLen)
	n := wire.EncodeHandshake(buf, m, &h)
	if n == 0 {
		t.Fatalf("EncodeHandshake(%+v) failed", h)
	}
	return buf[:n]
}

// clientSessionChallenge is a Challenge of session sessionID under secret 1,
// made at ts, carrying ck.
func clientSessionChallenge(t *testing.T, clientID, sessionID uint8, ts float64, ck cookie.Cookie) []byte {
	t.Helper()
	return clientServerPacket(t, wire.Magic{}, protocol.TypeChallenge, clientID, func(h *protocol.Handshake) {
		h.SessionID, h.SecretID, h.Timestamp, h.Cookie = sessionID, 1, ts, ck
	})
}

func clientChallenge(t *testing.T, clientID uint8, ck cookie.Cookie) []byte {
	t.Helper()
	return clientServerPacket(t, wire.Magic{}, protocol.TypeChallenge, clientID, func(h *protocol.Handshake) { h.Cookie = ck })
}

func clientAck(t *testing.T, clientID uint8, ck cookie.Cookie) []byte {
	t.Helper()
	return clientServerPacket(t, wire.Magic{}, protocol.TypeAck, clientID, func(h *protocol.Handshake) { h.Cookie = ck })
}

// clientDecodeSent checks what every client packet must be (docs/protocol.md
// §3, §6) and returns it decoded.
func clientDecodeSent(t *testing.T, c *ClientHandshake, b []byte) protocol.Handshake {
	t.Helper()
	var h protocol.Handshake
	if r := wire.DecodeHandshake(c.cfg.Magic, b, &h); r != protocol.DropNone {
		t.Fatalf("client packet %x does not decode: %v", b, r)
	}
	if h.RandomLen < protocol.MinRandomBytes || h.RandomLen > protocol.MaxRandomBytes {
		t.Fatalf("RandomLen %d outside 8..16", h.RandomLen)
	}
	if h.MinVersion != 3 || h.CurVersion != 4 {
		t.Fatalf("versions %d/%d, want 3/4", h.MinVersion, h.CurVersion)
	}
	if h.ClientID != c.cfg.ClientID {
		t.Fatalf("ClientID %d, want %d", h.ClientID, c.cfg.ClientID)
	}
	if h.NetworkVersion != c.cfg.NetworkVersion || h.NetworkFeatures != c.cfg.NetworkFeatures {
		t.Fatalf("network %d/%d, want %d/%d", h.NetworkVersion, h.NetworkFeatures,
			c.cfg.NetworkVersion, c.cfg.NetworkFeatures)
	}
	if h.SessionID != c.SessionID() {
		t.Fatalf("SessionID %d, want the adopted %d", h.SessionID, c.SessionID())
	}
	if h.Restart != c.Restarting() {
		t.Fatalf("RestartBit %v while Restarting() = %v", h.Restart, c.Restarting())
	}
	switch h.Type {
	case protocol.TypeInitial, protocol.TypeResponse, protocol.TypeRestartResponse:
	default:
		t.Fatalf("client sent type %v", h.Type)
	}
	return h
}

// clientMustPoll expects Poll to send a packet and no event.
func clientMustPoll(t *testing.T, c *ClientHandshake, now float64) protocol.Handshake {
	t.Helper()
	var buf [MaxClientPacketLen]byte
	n, ev := c.Poll(now, buf[:])
	if n == 0 || ev != EventNone {
		t.Fatalf("Poll(%v) = %d, %v; want a packet (state %v, deadline %v)", now, n, ev, c.State(), c.NextDeadline())
	}
	return clientDecodeSent(t, c, buf[:n])
}

// clientMustQuiet expects Poll to do nothing.
func clientMustQuiet(t *testing.T, c *ClientHandshake, now float64) {
	t.Helper()
	var buf [MaxClientPacketLen]byte
	if n, ev := c.Poll(now, buf[:]); n != 0 || ev != EventNone {
		t.Fatalf("Poll(%v) = %d, %v; want nothing", now, n, ev)
	}
}

// clientMustReply expects Receive to accept pkt and answer it.
func clientMustReply(t *testing.T, c *ClientHandshake, now float64, pkt []byte, wantEv ClientEvent) protocol.Handshake {
	t.Helper()
	var buf [MaxClientPacketLen]byte
	n, ev, drop := c.Receive(now, pkt, buf[:])
	if n == 0 || ev != wantEv || drop != protocol.DropNone {
		t.Fatalf("Receive(%v) = %d, %v, %v; want a reply, %v, none", now, n, ev, drop, wantEv)
	}
	return clientDecodeSent(t, c, buf[:n])
}

// clientMustEvent expects Receive to accept pkt without a reply and report ev.
func clientMustEvent(t *testing.T, c *ClientHandshake, now float64, pkt []byte, want ClientEvent) {
	t.Helper()
	var buf [MaxClientPacketLen]byte
	n, ev, drop := c.Receive(now, pkt, buf[:])
	if n != 0 || ev != want || drop != protocol.DropNone {
		t.Fatalf("Receive(%v) = %d, %v, %v; want 0, %v, none", now, n, ev, drop, want)
	}
}

// clientMustDrop expects Receive to drop pkt for reason want, with no reply or event.
func clientMustDrop(t *testing.T, c *ClientHandshake, now float64, pkt []byte, want protocol.DropReason) {
	t.Helper()
	var buf [MaxClientPacketLen]byte
	before := c.State()
	n, ev, drop := c.Receive(now, pkt, buf[:])
	if n != 0 || ev != EventNone || drop != want {
		t.Fatalf("Receive(%v) = %d, %v, %v; want 0, none, %v", now, n, ev, drop, want)
	}
	if c.State() != before {
		t.Fatalf("dropped packet moved state %v → %v", before, c.State())
	}
}

// clientStarted is clientNew started at time 0, its first Initial sent.
func clientStarted(t *testing.T, cfg ClientConfig) *ClientHandshake {
	t.Helper()
	c := clientNew(cfg)
	c.Start(0)
	clientMustPoll(t, c, 0)
	return c
}

func clientNew(cfg ClientConfig) *ClientHandshake {
	if cfg.NetworkVersion == 0 {
		cfg.NetworkVersion = clientTestNetVersion
	}
	c := NewClientHandshake(cfg, 42)
	return &c
}

// connectedClient runs a handshake to Connected, Acked at time 0.25 with
// cookie ck and SessionID 1.
func connectedClient(t *testing.T, cfg ClientConfig, ck cookie.Cookie) *ClientHandshake {
	t.Helper()
	c := clientStarted(t, cfg)
	clientMustReply(t, c, 0.125, clientServerPacket(t, cfg.Magic, protocol.TypeChallenge, c.cfg.ClientID, func(h *protocol.Handshake) {
		h.SessionID = 1
		h.Cookie = ck
	}), EventNone)
	clientMustEvent(t, c, 0.25, clientAck(t, c.cfg.ClientID, ck), EventConnected)
	return c
}

func TestClientDefaults(t *testing.T) {
	c := NewClientHandshake(ClientConfig{ClientID: 9, ResendInterval: -1, ConnectTimeout: math.NaN(),
		ChallengeLifetime: 20}, 0)
	want := ClientConfig{ClientID: 1, ResendInterval: 1, ChallengeLifetime: 20, ConnectTimeout: 10,
		RestartMinInterval: 1.1, RestartSilence: 1.5}
	if c.cfg != want {
		t.Fatalf("cfg = %+v, want %+v", c.cfg, want)
	}
	if c.State() != clientDisconnected || !math.IsInf(c.NextDeadline(), 1) {
		t.Fatalf("new client: %v, deadline %v", c.State(), c.NextDeadline())
	}
}

func TestClientHappyPath(t *testing.T) {
	c := clientNew(ClientConfig{NetworkFeatures: 3, ClientID: 5})
	clientMustQuiet(t, c, 100) // not started
	c.Start(100)
	if c.State() != ClientSendingInitial || c.NextDeadline() != 100 {
		t.Fatalf("after Start: %v, deadline %v", c.State(), c.NextDeadline())
	}
	c.Start(100.5) // no effect once started

	in := clientMustPoll(t, c, 100)
	if in.Type != protocol.TypeInitial || in.SentCount != 0 || in.SessionID != 0 || in.Restart {
		t.Fatalf("first Initial: %+v", in)
	}
	// The first resend comes after 100 ms (no round trip measured yet).
	if c.NextDeadline() != 100+clientDefaultResendFirst {
		t.Fatalf("deadline %v, want 100.1", c.NextDeadline())
	}
	clientMustQuiet(t, c, 100.0625)

	ck := clientTestCookie(1)
	ch := clientSessionChallenge(t, 5, 2, 5000.5, ck)
	resp := clientMustReply(t, c, 100.25, ch, EventNone)
	if resp.Type != protocol.TypeResponse || resp.SessionID != 2 || resp.SecretID != 1 || resp.Timestamp != 5000.5 ||
		resp.Cookie != ck || resp.SentCount != 1 || resp.Restart {
		t.Fatalf("Response: %+v", resp)
	}
	// The Challenge echoes the Initial's SentCount 0: a 0.25 s round trip,
	// so the Response's first resend waits 3 × 0.25 s.
	if c.State() != clientSendingResponse || c.SessionID() != 2 || c.NextDeadline() != 101 {
		t.Fatalf("after Challenge: %v, session %d, deadline %v", c.State(), c.SessionID(), c.NextDeadline())
	}
	if c.Cookie() != (cookie.Cookie{}) {
		t.Fatal("cookie authorised before the Ack")
	}

	clientMustEvent(t, c, 100.5, clientAck(t, 5, ck), EventConnected)
	if c.State() != clientConnected || c.Cookie() != ck || c.Restarting() {
		t.Fatalf("after Ack: %v, cookie %x", c.State(), c.Cookie())
	}
	if !math.IsInf(c.NextDeadline(), 1) {
		t.Fatalf("connected deadline %v, want +Inf", c.NextDeadline())
	}
	clientMustQuiet(t, c, 200)
	// Stragglers after connecting are harmless drops.
	clientMustDrop(t, c, 101, clientAck(t, 5, ck), protocol.DropUnexpectedType)
	clientMustDrop(t, c, 101, ch, protocol.DropUnexpectedType)
	clientMustDrop(t, c, 101, clientServerPacket(t, wire.Magic{}, protocol.TypeDenied, 5, func(h *protocol.Handshake) { h.Cookie = ck }),
		protocol.DropUnexpectedType)
	clientMustDrop(t, c, 101, clientServerPacket(t, wire.Magic{}, protocol.TypeVersionUpgrade, 5, nil), protocol.DropUnexpectedType)
	if c.State() != clientConnected || c.Cookie() != ck {
		t.Fatal("stragglers changed the connection")
	}
}

// TestClientResends: with ResendFirst ≥ ResendInterval, the fixed schedule
// of one packet per ResendInterval (the backoff: client_backoff_test.go).
func TestClientResends(t *testing.T) {
	c := clientNew(ClientConfig{ClientID: 3, ResendFirst: 1})
	c.Start(50)
	for i := range 6 {
		now := 50 + float64(i)
		h := clientMustPoll(t, c, now)
		if h.Type != protocol.TypeInitial || h.SentCount != uint8(i) {
			t.Fatalf("poll %d: %v SentCount %d", i, h.Type, h.SentCount)
		}
		clientMustQuiet(t, c, now+0.5)
	}
	// A late Poll sends once and counts the interval from then, no burst.
	if h := clientMustPoll(t, c, 57.25); h.SentCount != 6 {
		t.Fatalf("late Initial SentCount %d", h.SentCount)
	}
	clientMustQuiet(t, c, 57.5)
	if c.NextDeadline() != 58.25 {
		t.Fatalf("deadline %v, want 58.25", c.NextDeadline())
	}

	ck := clientTestCookie(2)
	first := clientMustReply(t, c, 57.5, clientChallenge(t, 3, ck), EventNone)
	if first.SentCount != 7 {
		t.Fatalf("Response SentCount %d, want 7", first.SentCount)
	}
	for i := 1; i <= 5; i++ {
		now := 57.5 + float64(i)
		clientMustQuiet(t, c, now-0.25)
		h := clientMustPoll(t, c, now)
		if h.Type != protocol.TypeResponse || h.SentCount != uint8(7+i) || h.Cookie != ck ||
			h.Timestamp != first.Timestamp || h.SecretID != first.SecretID || h.SessionID != first.SessionID {
			t.Fatalf("resend %d: %+v", i, h)
		}
	}
}

func TestClientChallengeFallback(t *testing.T) {
	c := clientStarted(t, ClientConfig{ClientID: 2, ConnectTimeout: 30})
	ckA := clientTestCookie(0xA)
	clientMustReply(t, c, 0.5, clientChallenge(t, 2, ckA), EventNone)
	for i := 1; i <= 14; i++ {
		if h := clientMustPoll(t, c, 0.5+float64(i)); h.Type != protocol.TypeResponse {
			t.Fatalf("resend %d is %v", i, h.Type)
		}
	}
	if c.NextDeadline() != 15.5 {
		t.Fatalf("deadline %v, want 15.5", c.NextDeadline())
	}
	clientMustQuiet(t, c, 15.375)
	h := clientMustPoll(t, c, 15.5) // 15 s after the Challenge: back to Initials
	if h.Type != protocol.TypeInitial || c.State() != ClientSendingInitial {
		t.Fatalf("at 15.5: sent %v, state %v", h.Type, c.State())
	}
	if c.NextDeadline() != 16.5 {
		t.Fatalf("deadline %v, want 16.5", c.NextDeadline())
	}
	// A fresh Challenge is answered; an Ack for the earlier Response (the
	// server did accept it) still connects.
	ckB := clientTestCookie(0xB)
	if r := clientMustReply(t, c, 16, clientChallenge(t, 2, ckB), EventNone); r.Cookie != ckB {
		t.Fatalf("answered %x, want %x", r.Cookie, ckB)
	}
	clientMustEvent(t, c, 16.25, clientAck(t, 2, ckA), EventConnected)
	if c.Cookie() != ckA {
		t.Fatalf("authorised %x, want the Acked %x", c.Cookie(), ckA)
	}
}

func TestClientFallbackAckInSendingInitial(t *testing.T) {
	c := clientStarted(t, ClientConfig{ClientID: 2, ConnectTimeout: 30})
	ck := clientTestCookie(0xC)
	clientMustReply(t, c, 0.5, clientChallenge(t, 2, ck), EventNone)
	clientMustPoll(t, c, 15.5)
	if c.State() != ClientSendingInitial {
		t.Fatalf("state %v", c.State())
	}
	clientMustEvent(t, c, 16, clientAck(t, 2, ck), EventConnected)
}

func TestClientTimeout(t *testing.T) {
	challengeAt := func(ts ...float64) []float64 { return ts }
	tests := []struct {
		name       string
		challenges []float64 // times of Challenges received
		timeout    float64   // when TimedOut is due
	}{
		{"silent server", nil, 10},
		{"challenge resets", challengeAt(4), 14},
		{"later challenges do not extend", challengeAt(4, 8, 13), 14},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clientNew(ClientConfig{ClientID: 4})
			c.Start(0)
			next := 0
			var buf [MaxClientPacketLen]byte
			for now := 0.0; now < tt.timeout; now += 0.25 {
				for next < len(tt.challenges) && tt.challenges[next] <= now {
					clientMustReply(t, c, now, clientChallenge(t, 4, clientTestCookie(byte(next))), EventNone)
					next++
				}
				if n, ev := c.Poll(now, buf[:]); ev != EventNone {
					t.Fatalf("Poll(%v) = %d, %v before the timeout", now, n, ev)
				}
			}
			if c.NextDeadline() != tt.timeout {
				t.Fatalf("deadline %v, want %v", c.NextDeadline(), tt.timeout)
			}
			if n, ev := c.Poll(tt.timeout, buf[:]); n != 0 || ev != EventTimedOut {
				t.Fatalf("Poll(%v) = %d, %v; want EventTimedOut", tt.timeout, n, ev)
			}
			if c.State() != clientTimedOut || !math.IsInf(c.NextDeadline(), 1) {
				t.Fatalf("state %v, deadline %v", c.State(), c.NextDeadline())
			}
			clientMustQuiet(t, c, tt.timeout+1)
			clientMustDrop(t, c, tt.timeout+1, clientChallenge(t, 4, clientTestCookie(9)), protocol.DropUnexpectedType)
		})
	}
}

// A packet that arrives after the deadline, before any Poll noticed it,
// finds the attempt over: the outcome does not depend on call order.
func TestClientTimeoutSeenByReceive(t *testing.T) {
	c := clientNew(ClientConfig{ClientID: 4})
	c.Start(0)
	var buf [MaxClientPacketLen]byte
	n, ev, drop := c.Receive(10, clientChallenge(t, 4, clientTestCookie(1)), buf[:])
	if n != 0 || ev != EventTimedOut || drop != protocol.DropUnexpectedType {
		t.Fatalf("Receive after deadline = %d, %v, %v", n, ev, drop)
	}
	if c.State() != clientTimedOut {
		t.Fatalf("state %v", c.State())
	}
}

func TestClientDenied(t *testing.T) {
	ck := clientTestCookie(7)
	tests := []struct {
		name     string
		answered bool
		cookie   cookie.Cookie
		reason   uint8
		drop     protocol.DropReason
	}{
		{"server full", true, ck, protocol.DeniedServerFull, protocol.DropNone},
		{"refused", true, ck, protocol.DeniedRefused, protocol.DropNone},
		{"wrong cookie", true, clientTestCookie(8), protocol.DeniedServerFull, protocol.DropWrongCookie},
		{"before any challenge", false, cookie.Cookie{}, protocol.DeniedServerFull, protocol.DropWrongCookie},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clientStarted(t, ClientConfig{ClientID: 6})
			if tt.answered {
				clientMustReply(t, c, 0.25, clientChallenge(t, 6, ck), EventNone)
			}
			pkt := clientServerPacket(t, wire.Magic{}, protocol.TypeDenied, 6, func(h *protocol.Handshake) {
				h.Reason = tt.reason
				h.Cookie = tt.cookie
			})
			if tt.drop != protocol.DropNone {
				clientMustDrop(t, c, 0.5, pkt, tt.drop)
				return
			}
			clientMustEvent(t, c, 0.5, pkt, EventDenied)
			if c.State() != clientDenied || c.DeniedReason() != tt.reason {
				t.Fatalf("state %v reason %d", c.State(), c.DeniedReason())
			}
			clientMustQuiet(t, c, 5)
			clientMustDrop(t, c, 1, clientAck(t, 6, ck), protocol.DropUnexpectedType)
		})
	}
}

func TestClientBadAckAndChallenge(t *testing.T) {
	ck := clientTestCookie(3)
	tests := []struct {
		name string
		pkt  func(t *testing.T) []byte
		drop protocol.DropReason
	}{
		{"ack wrong cookie", func(t *testing.T) []byte { return clientAck(t, 1, clientTestCookie(4)) }, protocol.DropWrongCookie},
		{"ack timestamp 0", func(t *testing.T) []byte {
			return clientServerPacket(t, wire.Magic{}, protocol.TypeAck, 1, func(h *protocol.Handshake) { h.Cookie = ck; h.Timestamp = 0 })
		}, protocol.DropBadBody},
		{"ack timestamp positive", func(t *testing.T) []byte {
			return clientServerPacket(t, wire.Magic{}, protocol.TypeAck, 1, func(h *protocol.Handshake) { h.Cookie = ck; h.Timestamp = 1 })
		}, protocol.DropBadBody},
		{"ack timestamp NaN", func(t *testing.T) []byte {
			return clientServerPacket(t, wire.Magic{}, protocol.TypeAck, 1, func(h *protocol.Handshake) { h.Cookie = ck; h.Timestamp = math.NaN() })
		}, protocol.DropBadBody},
		{"challenge timestamp 0", func(t *testing.T) []byte {
			return clientServerPacket(t, wire.Magic{}, protocol.TypeChallenge, 1, func(h *protocol.Handshake) { h.Timestamp = 0 })
		}, protocol.DropBadBody},
		{"challenge timestamp negative", func(t *testing.T) []byte {
			return clientServerPacket(t, wire.Magic{}, protocol.TypeChallenge, 1, func(h *protocol.Handshake) { h.Timestamp = -1 })
		}, protocol.DropBadBody},
		{"challenge timestamp NaN", func(t *testing.T) []byte {
			return clientServerPacket(t, wire.Magic{}, protocol.TypeChallenge, 1, func(h *protocol.Handshake) { h.Timestamp = math.NaN() })
		}, protocol.DropBadBody},
		{"restart handshake while handshaking", func(t *testing.T) []byte {
			return clientServerPacket(t, wire.Magic{}, protocol.TypeRestartHandshake, 1, nil)
		}, protocol.DropUnexpectedType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clientStarted(t, ClientConfig{ClientID: 1})
			clientMustReply(t, c, 0.25, clientChallenge(t, 1, ck), EventNone)
			clientMustDrop(t, c, 0.5, tt.pkt(t), tt.drop)
			// The genuine Ack still connects.
			clientMustEvent(t, c, 0.75, clientAck(t, 1, ck), EventConnected)
		})
	}
}

// Two Challenges in flight (round trip longer than the resend interval):
// the server makes the connection from the first Response and answers the
// second with the first cookie. Either Ack must connect.
func TestClientAckForEarlierChallenge(t *testing.T) {
	for _, acked := range []byte{0, 1, 2, 3, 4, 5, 6, 7} {
		c := clientStarted(t, ClientConfig{ClientID: 1})
		for i := range byte(8) {
			clientMustReply(t, c, 1.25+float64(i)/8, clientChallenge(t, 1, clientTestCookie(i)), EventNone)
		}
		clientMustEvent(t, c, 2, clientAck(t, 1, clientTestCookie(acked)), EventConnected)
		if c.Cookie() != clientTestCookie(acked) {
			t.Fatalf("authorised %x, want %x", c.Cookie(), clientTestCookie(acked))
		}
	}
	// Only the last eight answered cookies are remembered.
	c := clientStarted(t, ClientConfig{ClientID: 1})
	for i := range byte(9) {
		clientMustReply(t, c, 1+float64(i)/8, clientChallenge(t, 1, clientTestCookie(i)), EventNone)
	}
	clientMustDrop(t, c, 2, clientAck(t, 1, clientTestCookie(0)), protocol.DropWrongCookie)
	clientMustEvent(t, c, 2, clientAck(t, 1, clientTestCookie(1)), EventConnected)

	// A repeated Challenge takes no second slot.
	c = clientNew(ClientConfig{ClientID: 1})
	c.Start(0)
	clientMustPoll(t, c, 0)
	for _, i := range []byte{0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7} {
		clientMustReply(t, c, 1, clientChallenge(t, 1, clientTestCookie(i)), EventNone)
	}
	clientMustEvent(t, c, 2, clientAck(t, 1, clientTestCookie(0)), EventConnected)
}

func TestClientWrongClientID(t *testing.T) {
	ck := clientTestCookie(5)
	for _, typ := range []protocol.PacketType{protocol.TypeChallenge, protocol.TypeAck, protocol.TypeRestartHandshake, protocol.TypeVersionUpgrade, protocol.TypeDenied} {
		t.Run(typ.String(), func(t *testing.T) {
			c := clientStarted(t, ClientConfig{ClientID: 3})
			clientMustReply(t, c, 0.25, clientChallenge(t, 3, ck), EventNone)
			for _, other := range []uint8{0, 2, 4, 7} {
				clientMustDrop(t, c, 0.5, clientServerPacket(t, wire.Magic{}, typ, other, func(h *protocol.Handshake) { h.Cookie = ck }),
					protocol.DropWrongClientID)
			}
		})
	}
}

func TestClientUnexpectedPackets(t *testing.T) {
	keepalive, _ := hex.DecodeString("04bcabc5563324e61ff5ffffffffffffff0101") // vectors.json, ClientID 1
	tests := []struct {
		name string
		pkt  func(t *testing.T) []byte
		drop protocol.DropReason
	}{
		{"initial", func(t *testing.T) []byte { return clientServerPacket(t, wire.Magic{}, protocol.TypeInitial, 1, nil) }, protocol.DropUnexpectedType},
		{"response", func(t *testing.T) []byte { return clientServerPacket(t, wire.Magic{}, protocol.TypeResponse, 1, nil) }, protocol.DropUnexpectedType},
		{"restart response", func(t *testing.T) []byte {
			return clientServerPacket(t, wire.Magic{}, protocol.TypeRestartResponse, 1, func(h *protocol.Handshake) { h.Restart = true })
		}, protocol.DropUnexpectedType},
		{"connection packet", func(*testing.T) []byte { return keepalive }, protocol.DropUnexpectedType},
		{"empty", func(*testing.T) []byte { return nil }, protocol.DropMalformed},
		{"last byte zero", func(*testing.T) []byte { return []byte{0xa4, 0x01, 0x00} }, protocol.DropMalformed},
		{"17 random bytes", func(t *testing.T) []byte {
			p := clientServerPacket(t, wire.Magic{}, protocol.TypeChallenge, 1, func(h *protocol.Handshake) { h.RandomLen = 16 })
			return append(p[:len(p)-1:len(p)-1], 0xAA, 0x01) // the terminator has a byte of its own
		}, protocol.DropBadSize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clientStarted(t, ClientConfig{ClientID: 1})
			var buf [MaxClientPacketLen]byte
			n, ev, drop := c.Receive(0.5, tt.pkt(t), buf[:])
			if n != 0 || ev != EventNone {
				t.Fatalf("Receive = %d, %v, %v; want a drop", n, ev, drop)
			}
			if drop != tt.drop {
				t.Fatalf("drop %v, want %v", drop, tt.drop)
			}
			if c.State() != ClientSendingInitial {
				t.Fatalf("state %v", c.State())
			}
		})
	}
	// A magic header the client expects but the packet lacks.
	m, err := wire.ParseMagic("1011")
	if err != nil {
		t.Fatal(err)
	}
	c := clientStarted(t, ClientConfig{ClientID: 1, Magic: m})
	var buf [MaxClientPacketLen]byte
	if _, _, drop := c.Receive(0.5, clientChallenge(t, 1, cookie.Cookie{}), buf[:]); drop == protocol.DropNone {
		t.Fatal("packet without the magic header accepted")
	}
	// And with it, accepted; the Response carries it too (checked by decoding
	// under the client's magic).
	clientMustReply(t, c, 0.5, clientServerPacket(t, m, protocol.TypeChallenge, 1, nil), EventNone)
}

func TestClientVersionUpgrade(t *testing.T) {
	tests := []struct {
		name     string
		answered bool
		min, cur uint8
	}{
		{"sending initial", false, 3, 4},
		{"sending response", true, 3, 4},
		{"any versions", false, 9, 1},
		{"version 2 server", false, 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clientStarted(t, ClientConfig{ClientID: 2})
			if tt.answered {
				clientMustReply(t, c, 0.25, clientChallenge(t, 2, clientTestCookie(1)), EventNone)
			}
			clientMustEvent(t, c, 0.5, clientServerPacket(t, wire.Magic{}, protocol.TypeVersionUpgrade, 2, func(h *protocol.Handshake) {
				h.MinVersion, h.CurVersion = tt.min, tt.cur
				h.NetworkVersion = 0xDEADBEEF
				h.NetworkFeatures = 0x8001
			}), EventWrongVersion)
			if c.State() != clientWrongVersion {
				t.Fatalf("state %v", c.State())
			}
			if v, f := c.ServerVersions(); v != 0xDEADBEEF || f != 0x8001 {
				t.Fatalf("ServerVersions = %#x, %#x", v, f)
			}
			clientMustQuiet(t, c, 1)
			clientMustDrop(t, c, 1, clientAck(t, 2, clientTestCookie(1)), protocol.DropUnexpectedType)
		})
	}
}

func TestClientVersionWindow(t *testing.T) {
	tests := []struct {
		min, cur uint8
		drop     protocol.DropReason
	}{
		{3, 4, protocol.DropNone},
		{3, 3, protocol.DropNone},
		{4, 4, protocol.DropNone},
		{3, 200, protocol.DropNone}, // a newer server speaking down to us
		{2, 4, protocol.DropBadVersion},
		{2, 2, protocol.DropBadVersion},
		{5, 5, protocol.DropBadVersion},
		{4, 3, protocol.DropBadVersion}, // Min > Cur
		{0, 0, protocol.DropBadVersion},
	}
	for _, tt := range tests {
		for _, typ := range []protocol.PacketType{protocol.TypeChallenge, protocol.TypeAck} {
			c := clientStarted(t, ClientConfig{ClientID: 0})
			ck := clientTestCookie(1)
			if typ == protocol.TypeAck {
				clientMustReply(t, c, 0.25, clientChallenge(t, 0, ck), EventNone)
			}
			pkt := clientServerPacket(t, wire.Magic{}, typ, 0, func(h *protocol.Handshake) {
				h.MinVersion, h.CurVersion = tt.min, tt.cur
				h.Cookie = ck
			})
			var buf [MaxClientPacketLen]byte
			_, _, drop := c.Receive(0.5, pkt, buf[:])
			if drop != tt.drop {
				t.Errorf("%v %d/%d: drop %v, want %v", typ, tt.min, tt.cur, drop, tt.drop)
			}
		}
	}
	// RestartHandshake is checked the same way.
	c := connectedClient(t, ClientConfig{ClientID: 0}, clientTestCookie(1))
	clientMustDrop(t, c, 5, clientServerPacket(t, wire.Magic{}, protocol.TypeRestartHandshake, 0, func(h *protocol.Handshake) { h.MinVersion = 2 }),
		protocol.DropBadVersion)
}

func TestClientRestart(t *testing.T) {
	orig := clientTestCookie(0x0A)
	c := connectedClient(t, ClientConfig{ClientID: 6}, orig)
	rh := clientServerPacket(t, wire.Magic{}, protocol.TypeRestartHandshake, 6, func(h *protocol.Handshake) { h.SessionID = 1 })

	in := clientMustReply(t, c, 5, rh, EventRestarting)
	if in.Type != protocol.TypeInitial || !in.Restart || in.SessionID != 1 || in.SentCount != 0 {
		t.Fatalf("restart Initial: %+v", in)
	}
	// The first connect measured a 0.25 s round trip (its Ack echoes
	// SentCount 0, sent at 0): the first resend waits 3 × 0.25 s.
	if c.State() != clientConnected || !c.Restarting() || c.NextDeadline() != 5.75 {
		t.Fatalf("restarting: %v %v deadline %v", c.State(), c.Restarting(), c.NextDeadline())
	}
	if h := clientMustPoll(t, c, 5.75); h.Type != protocol.TypeInitial || !h.Restart || h.SentCount != 1 {
		t.Fatalf("restart Initial resend: %+v", h)
	}
	// Further RestartHandshakes while the restart runs are redundant.
	clientMustDrop(t, c, 6.5, rh, protocol.DropUnexpectedType)
	// An Ack before any RestartResponse went out cannot be the move's.
	clientMustDrop(t, c, 6.5, clientAck(t, 6, orig), protocol.DropUnexpectedType)

	fresh := clientTestCookie(0x0B)
	ch := clientSessionChallenge(t, 6, 3, 7777.25, fresh)
	rr := clientMustReply(t, c, 6.75, ch, EventNone)
	if rr.Type != protocol.TypeRestartResponse || !rr.Restart || rr.SessionID != 3 || rr.SecretID != 1 ||
		rr.Timestamp != 7777.25 || rr.Cookie != fresh || rr.OrigCookie != orig || rr.SentCount != 2 {
		t.Fatalf("RestartResponse: %+v", rr)
	}
	if h := clientMustPoll(t, c, 7.75); h.Type != protocol.TypeRestartResponse || h.SentCount != 3 || h.OrigCookie != orig {
		t.Fatalf("RestartResponse resend: %+v", h)
	}
	// The server Acks a move with the connection's own cookie only.
	clientMustDrop(t, c, 8, clientAck(t, 6, fresh), protocol.DropWrongCookie)
	clientMustEvent(t, c, 8, clientAck(t, 6, orig), EventReconnected)
	if c.Cookie() != orig || c.Restarting() || c.State() != clientConnected || c.SessionID() != 3 {
		t.Fatalf("after restart: cookie %x restarting %v state %v session %d",
			c.Cookie(), c.Restarting(), c.State(), c.SessionID())
	}
	if !math.IsInf(c.NextDeadline(), 1) {
		t.Fatalf("deadline %v", c.NextDeadline())
	}
	clientMustQuiet(t, c, 20)
	// SentCount went back to 0 with the Ack.
	if h := clientMustReply(t, c, 30, rh, EventRestarting); h.SentCount != 0 {
		t.Fatalf("second restart SentCount %d", h.SentCount)
	}
}

func TestClientRestartRateLimit(t *testing.T) {
	orig := clientTestCookie(0x11)
	// With the default RestartSilence (1.5 s) the interval never binds:
	// the silence is counted from the same (re)connect. Shorter here.
	c := connectedClient(t, ClientConfig{ClientID: 2, RestartSilence: 0.5}, orig) // Acked at 0.25
	rh := clientServerPacket(t, wire.Magic{}, protocol.TypeRestartHandshake, 2, nil)

	clientMustDrop(t, c, 0.5, rh, protocol.DropRestartUnneeded) // 0.25 s after connecting
	clientMustDrop(t, c, 1.25, rh, protocol.DropRateLimited)    // 1.0 s after connecting
	clientMustReply(t, c, 1.375, rh, EventRestarting)
	clientMustDrop(t, c, 2, rh, protocol.DropUnexpectedType) // already restarting
	clientMustReply(t, c, 2.5, clientChallenge(t, 2, clientTestCookie(0x12)), EventNone)
	clientMustEvent(t, c, 2.625, clientAck(t, 2, orig), EventReconnected)

	clientMustDrop(t, c, 3.625, rh, protocol.DropRateLimited) // 1.0 s after the restart completed
	clientMustReply(t, c, 3.75, rh, EventRestarting)

	// The interval is configurable.
	c = connectedClient(t, ClientConfig{ClientID: 2, RestartMinInterval: 3, RestartSilence: 0.5}, orig)
	clientMustDrop(t, c, 3.125, rh, protocol.DropRateLimited)
	clientMustReply(t, c, 3.25, rh, EventRestarting)
}

func TestClientRestartTimeout(t *testing.T) {
	tests := []struct {
		name      string
		challenge float64 // 0: none
		timeout   float64
	}{
		{"no answer", 0, 15},
		{"challenge but no ack", 7, 17},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := clientTestCookie(0x21)
			c := connectedClient(t, ClientConfig{ClientID: 1}, orig)
			clientMustReply(t, c, 5, clientServerPacket(t, wire.Magic{}, protocol.TypeRestartHandshake, 1, nil), EventRestarting)
			var buf [MaxClientPacketLen]byte
			for now := 5.0; now < tt.timeout; now += 0.5 {
				if tt.challenge != 0 && now == tt.challenge {
					clientMustReply(t, c, now, clientChallenge(t, 1, clientTestCookie(0x22)), EventNone)
				}
				if _, ev := c.Poll(now, buf[:]); ev != EventNone {
					t.Fatalf("Poll(%v): %v", now, ev)
				}
			}
			if _, ev := c.Poll(tt.timeout, buf[:]); ev != EventTimedOut {
				t.Fatalf("Poll(%v): %v, want EventTimedOut", tt.timeout, ev)
			}
			if c.State() != clientTimedOut || c.Restarting() || c.Cookie() != orig {
				t.Fatalf("state %v restarting %v cookie %x", c.State(), c.Restarting(), c.Cookie())
			}
		})
	}
}

func TestClientRestartFallback(t *testing.T) {
	orig := clientTestCookie(0x31)
	c := connectedClient(t, ClientConfig{ClientID: 1, ConnectTimeout: 60}, orig)
	clientMustReply(t, c, 5, clientServerPacket(t, wire.Magic{}, protocol.TypeRestartHandshake, 1, nil), EventRestarting)
	clientMustReply(t, c, 5.5, clientChallenge(t, 1, clientTestCookie(0x32)), EventNone)
	for now := 6.5; now < 20.5; now++ {
		if h := clientMustPoll(t, c, now); h.Type != protocol.TypeRestartResponse {
			t.Fatalf("at %v: %v", now, h.Type)
		}
	}
	h := clientMustPoll(t, c, 20.5)
	if h.Type != protocol.TypeInitial || !h.Restart || !c.Restarting() || c.State() != clientConnected {
		t.Fatalf("after fallback: %+v, restarting %v, state %v", h, c.Restarting(), c.State())
	}
	clientMustDrop(t, c, 20.75, clientAck(t, 1, orig), protocol.DropUnexpectedType)
}

func TestClientSentCountWraps(t *testing.T) {
	c := clientNew(ClientConfig{ClientID: 7, ConnectTimeout: 1000})
	c.Start(0)
	for i := range 300 {
		if h := clientMustPoll(t, c, float64(i)); h.SentCount != uint8(i) {
			t.Fatalf("packet %d SentCount %d", i, h.SentCount)
		}
	}
	ck := clientTestCookie(0x41)
	if r := clientMustReply(t, c, 299.5, clientChallenge(t, 7, ck), EventNone); r.SentCount != 300%256 {
		t.Fatalf("Response SentCount %d, want %d", r.SentCount, 300%256)
	}
	clientMustEvent(t, c, 299.75, clientAck(t, 7, ck), EventConnected)
	if h := clientMustReply(t, c, 310, clientServerPacket(t, wire.Magic{}, protocol.TypeRestartHandshake, 7, nil), EventRestarting); h.SentCount != 0 {
		t.Fatalf("after Ack SentCount %d, want 0", h.SentCount)
	}
}

func TestClientRandomData(t *testing.T) {
	c := clientNew(ClientConfig{ClientID: 1, ConnectTimeout: math.Inf(1)})
	c.Start(0)
	var seen [protocol.MaxRandomBytes + 1]int
	var prev protocol.Handshake
	for i := range 2000 {
		h := clientMustPoll(t, c, float64(i)) // checks 8..16 and decodability
		seen[h.RandomLen]++
		if i > 0 && h.RandomLen == prev.RandomLen && h.Random == prev.Random {
			t.Fatalf("packet %d repeats the previous RandomData", i)
		}
		prev = h
	}
	for n := protocol.MinRandomBytes; n <= protocol.MaxRandomBytes; n++ {
		if seen[n] == 0 {
			t.Errorf("random length %d never used: %v", n, seen)
		}
	}
	if c.NextDeadline() != 2000 { // no timeout: ConnectTimeout +Inf
		t.Fatalf("deadline %v", c.NextDeadline())
	}
}

func TestClientSmallOutBuffer(t *testing.T) {
	c := clientNew(ClientConfig{ClientID: 1})
	c.Start(0)
	var small [20]byte
	if n, ev := c.Poll(0, small[:]); n != 0 || ev != EventNone {
		t.Fatalf("Poll into 20 bytes = %d, %v", n, ev)
	}
	if c.NextDeadline() != 0 {
		t.Fatalf("packet no longer due: deadline %v", c.NextDeadline())
	}
	if h := clientMustPoll(t, c, 0.125); h.SentCount != 0 {
		t.Fatalf("SentCount %d after a failed send", h.SentCount)
	}
}

func TestClientNotStartedAndTerminal(t *testing.T) {
	c := clientNew(ClientConfig{ClientID: 1})
	clientMustDrop(t, c, 0, clientChallenge(t, 1, clientTestCookie(1)), protocol.DropUnexpectedType)
	clientMustQuiet(t, c, 0)
	if c.State() != clientDisconnected {
		t.Fatalf("state %v", c.State())
	}
	c.Start(0)
	clientMustPoll(t, c, 0)
	clientMustEvent(t, c, 0.5, clientServerPacket(t, wire.Magic{}, protocol.TypeVersionUpgrade, 1, nil), EventWrongVersion)
	c.Start(1) // a terminal attempt is not restarted
	if c.State() != clientWrongVersion {
		t.Fatalf("Start revived a finished attempt: %v", c.State())
	}
	for _, typ := range []protocol.PacketType{protocol.TypeChallenge, protocol.TypeAck, protocol.TypeRestartHandshake, protocol.TypeVersionUpgrade, protocol.TypeDenied} {
		clientMustDrop(t, c, 1, clientServerPacket(t, wire.Magic{}, typ, 1, nil), protocol.DropUnexpectedType)
	}
}

// The vectors of fastpath/testdata/vectors.json (docs/protocol.md §9), hard-coded so the test does not
// depend on the file.
const (
	clientVecChallenge = "a401820001820181000000000010b061bfda4130e4dfdfbcabc556b51fc2c41933b4237531c81ba0a1a2a3a4a5a6a701"
	clientVecResponse  = "a401020101820181000000000010b061bfda4130e4dfdfbcabc556b51fc2c41933b4237531c81ba0a1a2a3a4a5a6a701"
	clientVecAck       = "a401820101820181000080000000000000f0bf30e4dfdfbcabc556b51fc2c41933b4237531c81ba0a1a2a3a4a5a6a701"
	clientVecRestartHS = "e401020201820181000000d050d151d252d3d3"
	clientVecRestartRR = "e401820201820181000000000010b061bfda4130e4dfdfbcabc556b51fc2c41933b4237531c81b05c11eb5d4aedbfc757db1a190cdb0a2641fabf9a0a1a2a3a4a5a6a701"
	clientVecUpgrade   = "a401020301820181000000d050d151d252d3d3"
	clientVecDenied    = "a4018203018201810000800018f2ef6fded562abda0f61e28c19da91ba18e40dd050d151d252d3d3"
	clientVecCookie    = "30e4dfdfbcabc556b51fc2c41933b4237531c81b"
	clientVecOrig      = "05c11eb5d4aedbfc757db1a190cdb0a2641fabf9"
)

func clientHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// clientSameExceptRandom compares a client packet with a vector's, ignoring what
// the client picks itself: RandomData and SentCount.
func clientSameExceptRandom(t *testing.T, got protocol.Handshake, wantHex string) {
	t.Helper()
	var want protocol.Handshake
	if r := wire.DecodeHandshake(wire.Magic{}, clientHex(t, wantHex), &want); r != protocol.DropNone {
		t.Fatalf("vector does not decode: %v", r)
	}
	got.Random, got.RandomLen, got.SentCount = want.Random, want.RandomLen, want.SentCount
	if got != want {
		t.Fatalf("client sent\n%+v\nvector is\n%+v", got, want)
	}
}

func TestClientVectors(t *testing.T) {
	cfg := ClientConfig{ClientID: 1, NetworkVersion: 16909060}
	t.Run("challenge response ack", func(t *testing.T) {
		c := clientNew(cfg)
		c.Start(1795000000)
		clientMustPoll(t, c, 1795000000)
		resp := clientMustReply(t, c, 1795000000.5, clientHex(t, clientVecChallenge), EventNone)
		clientSameExceptRandom(t, resp, clientVecResponse)
		clientMustEvent(t, c, 1795000000.75, clientHex(t, clientVecAck), EventConnected)
		if got := c.Cookie(); hex.EncodeToString(got[:]) != clientVecCookie {
			t.Fatalf("cookie %x", got)
		}
	})
	t.Run("denied", func(t *testing.T) {
		c := clientNew(cfg)
		c.Start(1795000000)
		clientMustPoll(t, c, 1795000000)
		clientMustReply(t, c, 1795000000.5, clientHex(t, clientVecChallenge), EventNone)
		clientMustEvent(t, c, 1795000000.75, clientHex(t, clientVecDenied), EventDenied)
		if c.DeniedReason() != protocol.DeniedServerFull {
			t.Fatalf("reason %d", c.DeniedReason())
		}
	})
	t.Run("version upgrade", func(t *testing.T) {
		c := clientNew(ClientConfig{ClientID: 1, NetworkVersion: 7})
		c.Start(1795000000)
		clientMustPoll(t, c, 1795000000)
		clientMustEvent(t, c, 1795000000.5, clientHex(t, clientVecUpgrade), EventWrongVersion)
		if v, f := c.ServerVersions(); v != 16909060 || f != 0 {
			t.Fatalf("ServerVersions %d %d", v, f)
		}
	})
	t.Run("restart", func(t *testing.T) {
		var orig cookie.Cookie
		copy(orig[:], clientHex(t, clientVecOrig))
		c := clientNew(cfg)
		c.Start(1795000000)
		clientMustPoll(t, c, 1795000000)
		clientMustReply(t, c, 1795000000.5, clientServerPacket(t, wire.Magic{}, protocol.TypeChallenge, 1, func(h *protocol.Handshake) {
			h.SessionID = 0
			h.Cookie = orig
		}), EventNone)
		clientMustEvent(t, c, 1795000000.75, clientAck(t, 1, orig), EventConnected)
		in := clientMustReply(t, c, 1795000010, clientHex(t, clientVecRestartHS), EventRestarting)
		if in.Type != protocol.TypeInitial || !in.Restart {
			t.Fatalf("restart Initial %+v", in)
		}
		rr := clientMustReply(t, c, 1795000010.5, clientHex(t, clientVecChallenge), EventNone)
		clientSameExceptRandom(t, rr, clientVecRestartRR)
	})
}

func TestClientAllocs(t *testing.T) {
	var buf [MaxClientPacketLen]byte
	c := clientNew(ClientConfig{ClientID: 1, ConnectTimeout: math.Inf(1)})
	c.Start(0)
	now := 0.0
	if a := testing.AllocsPerRun(1000, func() {
		now++
		if n, _ := c.Poll(now, buf[:]); n == 0 {
			panic("no packet")
		}
	}); a != 0 {
		t.Errorf("Poll: %v allocs", a)
	}

	orig := clientTestCookie(0x51)
	c = connectedClient(t, ClientConfig{ClientID: 1}, orig)
	rh := clientServerPacket(t, wire.Magic{}, protocol.TypeRestartHandshake, 1, nil)
	ch := clientChallenge(t, 1, clientTestCookie(0x52))
	ack := clientAck(t, 1, orig)
	now = 10
	if a := testing.AllocsPerRun(1000, func() {
		now += 2
		_, ev1, _ := c.Receive(now, rh, buf[:])
		n, _, _ := c.Receive(now, ch, buf[:])
		_, ev2, _ := c.Receive(now, ack, buf[:])
		_, _, d := c.Receive(now, ack, buf[:])
		if ev1 != EventRestarting || n == 0 || ev2 != EventReconnected || d != protocol.DropUnexpectedType {
			panic("restart cycle failed")
		}
	}); a != 0 {
		t.Errorf("Receive: %v allocs", a)
	}
}

func TestClientStrings(t *testing.T) {
	seen := map[string]bool{}
	for s := clientDisconnected; s < numClientStates; s++ {
		name := s.String()
		if name == "unknown" || seen[name] {
			t.Errorf("state %d: %q", s, name)
		}
		seen[name] = true
	}
	seen = map[string]bool{}
	for e := EventNone; e < numClientEvents; e++ {
		name := e.String()
		if name == "unknown" || seen[name] {
			t.Errorf("event %d: %q", e, name)
		}
		seen[name] = true
	}
	if numClientStates.String() != "unknown" || numClientEvents.String() != "unknown" {
		t.Error("out-of-range names")
	}
}
