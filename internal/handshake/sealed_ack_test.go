package handshake

import (
	"math"
	"testing"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

// TestClientSealedAck: the Ack of a sealed server (Timestamp −2,
// docs/protocol.md §11.3) ends a client that has no token to prove in
// token_required, before any connection exists: the client sends nothing
// more, and later Acks and Challenges are dropped. An Ack with any other
// negative Timestamp connects, as before.
func TestClientSealedAck(t *testing.T) {
	ck := clientTestCookie(7)
	c := clientStarted(t, ClientConfig{ClientID: 3})
	clientMustReply(t, c, 0.125, clientChallenge(t, 3, ck), EventNone)
	sealedAck := clientServerPacket(t, wire.Magic{}, protocol.TypeAck, 3, func(h *protocol.Handshake) {
		h.Cookie, h.Timestamp = ck, SealedAckTimestamp
	})
	clientMustEvent(t, c, 0.25, sealedAck, EventTokenRequired)
	if c.State() != clientTokenRequired || c.State().String() != "token_required" || c.Cookie() != ([20]byte{}) {
		t.Fatalf("after the sealed Ack: %v, cookie %x", c.State(), c.Cookie())
	}
	if !math.IsInf(c.NextDeadline(), 1) {
		t.Fatalf("deadline %v after the sealed Ack, want none", c.NextDeadline())
	}
	clientMustQuiet(t, c, 5)
	clientMustDrop(t, c, 1, sealedAck, protocol.DropUnexpectedType)
	clientMustDrop(t, c, 1, clientAck(t, 3, ck), protocol.DropUnexpectedType)

	// −1 and other negative values: an Ack as §6.3 has always taken it.
	for _, ts := range []float64{AckTimestamp, -3, math.Inf(-1)} {
		c := clientStarted(t, ClientConfig{ClientID: 3})
		clientMustReply(t, c, 0.125, clientChallenge(t, 3, ck), EventNone)
		clientMustEvent(t, c, 0.25, clientServerPacket(t, wire.Magic{}, protocol.TypeAck, 3, func(h *protocol.Handshake) {
			h.Cookie, h.Timestamp = ck, ts
		}), EventConnected)
	}
	if EventTokenRequired.String() != "token_required" {
		t.Fatal(EventTokenRequired.String())
	}
}

// TestBuildSealedAck: a sealed server's Acks carry SealedAckTimestamp, an
// unsealed server's AckTimestamp.
func TestBuildSealedAck(t *testing.T) {
	ck := clientTestCookie(9)
	to := ReplyTo{ClientID: 2, curVersion: 4, randomLen: 16, reqLen: 200}
	for _, sealed := range []bool{false, true} {
		c := ServerConfig{Sealed: sealed}
		out := make([]byte, MaxReplyLen)
		rnd := wire.NewRand(1)
		n := c.BuildAck(out, &to, &ck, &rnd)
		var h protocol.Handshake
		if n == 0 || wire.DecodeHandshake(wire.Magic{}, out[:n], &h) != protocol.DropNone || h.Type != protocol.TypeAck || h.Cookie != ck {
			t.Fatalf("sealed %v: Ack %x does not decode", sealed, out[:n])
		}
		want := AckTimestamp
		if sealed {
			want = SealedAckTimestamp
		}
		if h.Timestamp != want {
			t.Errorf("sealed %v: Ack Timestamp %v, want %v", sealed, h.Timestamp, want)
		}
	}
}
