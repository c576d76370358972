package handshake

import (
	"testing"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

// TestClientProofAfterChallenge: a sealed client's handshake ends at the
// Challenge (docs/protocol.md §11.3): no Response, the Challenge's cookie,
// SecretId and Timestamp authorised at once; lost Challenges are covered
// by the Initials' resends, and later Challenges change nothing.
func TestClientProofAfterChallenge(t *testing.T) {
	c := clientNew(ClientConfig{ClientID: 5, ProofAfterChallenge: true})
	c.Start(100)
	if in := clientMustPoll(t, c, 100); in.Type != protocol.TypeInitial {
		t.Fatalf("first packet: %+v", in)
	}
	// The Challenge is lost: the Initial goes again.
	if in := clientMustPoll(t, c, 100+clientDefaultResendFirst); in.Type != protocol.TypeInitial || in.SentCount != 1 {
		t.Fatalf("resend: %+v", in)
	}
	ck := clientTestCookie(3)
	ch := clientServerPacket(t, wire.Magic{}, protocol.TypeChallenge, 5, func(h *protocol.Handshake) {
		h.SessionID, h.SecretID, h.Timestamp, h.Cookie = 2, 1, 5000.5, ck
	})
	clientMustEvent(t, c, 100.25, ch, EventConnected)
	id, ts := c.CookieOrigin()
	if c.State() != clientConnected || c.Cookie() != ck || c.SessionID() != 2 || id != 1 || ts != 5000.5 {
		t.Fatalf("after the Challenge: %v, cookie %x, session %d, origin %d %v", c.State(), c.Cookie(), c.SessionID(), id, ts)
	}
	clientMustQuiet(t, c, 200)
	// A second Challenge (the answer to the resent Initial) is a straggler.
	other := clientServerPacket(t, wire.Magic{}, protocol.TypeChallenge, 5, func(h *protocol.Handshake) { h.Cookie = clientTestCookie(4) })
	clientMustDrop(t, c, 100.3, other, protocol.DropUnexpectedType)
	if c.Cookie() != ck {
		t.Fatal("a later Challenge changed the authorised cookie")
	}
}
