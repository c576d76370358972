package handshake

import (
	"net/netip"
	"testing"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

// stockLayout is the tools' layout (docs/protocol.md §3.7's example).
var stockLayout = protocol.Layout{Channels: 4, Kinds: 0b01_11_10_01, MaxMessage: 256 << 10, MaxDatagram: 1200}

// An Initial of a new attempt that declares another layout than the
// server's is answered LayoutMismatch carrying the server's, no larger
// than the Initial; one that declares none, or the same, gets a
// Challenge; a network mismatch is answered first; an Initial of the
// connection's own ClientID (a restart) is not checked.
func TestServerLayoutCheck(t *testing.T) {
	three := protocol.Layout{Channels: 3, Kinds: 0b11_10_01, MaxMessage: 256 << 10, MaxDatagram: 1200}
	for _, tc := range []struct {
		name           string
		server, client protocol.Layout
		netV           uint32
		peer           Peer
		want           protocol.PacketType
	}{
		{"same", stockLayout, stockLayout, vecNetV, Peer{}, protocol.TypeChallenge},
		{"none declared", stockLayout, protocol.Layout{}, vecNetV, Peer{}, protocol.TypeChallenge},
		{"other", stockLayout, three, vecNetV, Peer{}, protocol.TypeLayoutMismatch},
		{"server without messages", protocol.Layout{}, three, vecNetV, Peer{}, protocol.TypeLayoutMismatch},
		{"network first", stockLayout, three, 99, Peer{}, protocol.TypeVersionUpgrade},
		{"restart of the connection", stockLayout, three, vecNetV, Peer{Known: true, ClientID: 1}, protocol.TypeChallenge},
		{"new attempt at a held address", stockLayout, three, vecNetV, Peer{Known: true, ClientID: 5}, protocol.TypeLayoutMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := testServer(t, func(c *ServerConfig) { c.Layout = tc.server })
			pkt := clientPacket(t, wire.Magic{}, func(h *protocol.Handshake) { h.Layout, h.NetworkVersion = tc.client, tc.netV })
			d, rep := handle(s, vecAddr, pkt, vecTS, tc.peer)
			if d.Action != ActReply || d.Reply != tc.want {
				t.Fatalf("%+v, want a %v", d, tc.want)
			}
			if tc.want != protocol.TypeLayoutMismatch {
				return
			}
			h := decodeReply(t, wire.Magic{}, rep)
			if h.Layout != tc.server || h.NetworkVersion != vecNetV || h.ClientID != 1 || h.SentCount != 2 || h.Restart {
				t.Fatalf("layout mismatch %+v, want the server's layout %+v", h, tc.server)
			}
			if len(rep) > len(pkt) {
				t.Fatalf("a %d-byte answer to a %d-byte Initial", len(rep), len(pkt))
			}
		})
	}
}

// LayoutMismatch replies spend the VersionUpgrade budgets: a source gets
// the per-source burst of both together.
func TestServerLayoutMismatchRateLimit(t *testing.T) {
	s, _ := testServer(t, func(c *ServerConfig) { c.Layout = stockLayout })
	other := stockLayout
	other.MaxMessage++
	bad := clientPacket(t, wire.Magic{}, func(h *protocol.Handshake) { h.Layout = other })
	old := clientPacket(t, wire.Magic{}, func(h *protocol.Handshake) { h.NetworkVersion = 99 })
	sent := burstReplies(t, s, vecAddr, bad, 5, vecTS) + burstReplies(t, s, vecAddr, old, 20, vecTS)
	if sent != int(s.cfg.VersionUpgradeLimit.Burst) {
		t.Fatalf("one source got %d LayoutMismatch and VersionUpgrade replies, want burst %v together", sent, s.cfg.VersionUpgradeLimit.Burst)
	}
	if d, _ := handle(s, netip.MustParseAddrPort("127.0.0.9:1"), bad, vecTS, Peer{}); d.Action != ActReply {
		t.Fatalf("another source: %+v", d)
	}
}

// A client that declared a layout ends in WrongLayout on LayoutMismatch,
// before or after answering a Challenge, and learns the server's layout;
// one that declared none, or is connected, drops it; the versions window
// applies.
func TestClientLayoutMismatch(t *testing.T) {
	server := protocol.Layout{Channels: 1, Kinds: 0b10, MaxDatagram: 1200}
	mismatch := func(edit func(*protocol.Handshake)) []byte {
		return clientServerPacket(t, wire.Magic{}, protocol.TypeLayoutMismatch, 2, func(h *protocol.Handshake) {
			h.Layout = server
			if edit != nil {
				edit(h)
			}
		})
	}
	for _, answered := range []bool{false, true} {
		c := clientStarted(t, ClientConfig{ClientID: 2, Layout: stockLayout})
		if answered {
			clientMustReply(t, c, 0.25, clientChallenge(t, 2, clientTestCookie(1)), EventNone)
		}
		clientMustDrop(t, c, 0.3, mismatch(func(h *protocol.Handshake) { h.MinVersion, h.CurVersion = 2, 2 }), protocol.DropBadVersion)
		clientMustEvent(t, c, 0.5, mismatch(nil), EventWrongLayout)
		if c.State() != clientWrongLayout || c.State().String() != "wrong_layout" || c.ServerLayout() != server {
			t.Fatalf("state %v, server layout %+v", c.State(), c.ServerLayout())
		}
		clientMustQuiet(t, c, 1)
		clientMustDrop(t, c, 1, clientAck(t, 2, clientTestCookie(1)), protocol.DropUnexpectedType)
	}

	c := clientStarted(t, ClientConfig{ClientID: 2})
	clientMustDrop(t, c, 0.5, mismatch(nil), protocol.DropUnexpectedType)

	c = clientStarted(t, ClientConfig{ClientID: 2, Layout: stockLayout})
	clientMustReply(t, c, 0.25, clientChallenge(t, 2, clientTestCookie(1)), EventNone)
	clientMustEvent(t, c, 0.5, clientAck(t, 2, clientTestCookie(1)), EventConnected)
	clientMustDrop(t, c, 0.75, mismatch(nil), protocol.DropUnexpectedType)

	// The Initials carry the layout.
	c = clientNew(ClientConfig{ClientID: 2, Layout: stockLayout})
	var buf [MaxClientPacketLen]byte
	c.Start(0)
	n, _ := c.Poll(0, buf[:])
	var h protocol.Handshake
	if r := wire.DecodeHandshake(wire.Magic{}, buf[:n], &h); r != protocol.DropNone || h.Type != protocol.TypeInitial || h.Layout != stockLayout {
		t.Fatalf("first Initial %+v (%v), want the declared layout", h, r)
	}
}
