package handshake

import (
	"testing"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/ratelimit"
	"github.com/udpgate/udpgate/internal/wire"
)

// FuzzServerHandle feeds arbitrary datagrams to the server's decision, as an
// unknown source and as a connected one: it must never panic, and never
// answer an unknown source with more bytes than it sent.
func FuzzServerHandle(f *testing.F) {
	for _, v := range codecVectorSeeds() {
		f.Add(v, false)
		f.Add(v, true)
	}
	m, _ := wire.ParseMagic("")
	s, _ := testServer(f, func(c *ServerConfig) {
		c.Magic = m
		c.ChallengeLimit = ratelimit.Limit{Rate: -1}
		c.RestartLimit = ratelimit.Limit{Rate: -1}
		c.VersionUpgradeLimit = ratelimit.Limit{Rate: -1}
	})
	out := make([]byte, MaxReplyLen)
	f.Fuzz(func(t *testing.T, pkt []byte, known bool) {
		peer := Peer{}
		if known {
			peer = Peer{Known: true, ClientID: 1, Tag: cookie.SessionTag(&vecCookie), Cookie: vecCookie}
		}
		var d Decision
		s.Handle(&d, vecAddr, pkt, vecTS+1, &peer, out)
		switch d.Action {
		case ActReply:
			if d.ReplyLen == 0 || (!known && d.ReplyLen > len(pkt)) {
				t.Fatalf("reply of %d bytes to a %d-byte datagram (known %v)", d.ReplyLen, len(pkt), known)
			}
			var h protocol.Handshake
			if r := wire.DecodeHandshake(m, out[:d.ReplyLen], &h); r != protocol.DropNone {
				t.Fatalf("reply does not decode: %v", r)
			}
		case ActDrop:
			if d.Drop == protocol.DropNone {
				t.Fatal("drop without a reason")
			}
		}
	})
}

// FuzzClientReceive feeds arbitrary datagrams to a client in each state.
func FuzzClientReceive(f *testing.F) {
	for _, v := range codecVectorSeeds() {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		c := NewClientHandshake(ClientConfig{ClientID: 1, NetworkVersion: vecNetV}, 1)
		out := make([]byte, MaxClientPacketLen)
		c.Start(vecTS)
		c.Poll(vecTS, out)
		for range 3 { // the same datagram again, in whatever state it led to
			n, _, _ := c.Receive(vecTS+0.5, pkt, out)
			if n > 0 {
				var h protocol.Handshake
				if r := wire.DecodeHandshake(wire.Magic{}, out[:n], &h); r != protocol.DropNone {
					t.Fatalf("client sent a packet that does not decode: %v", r)
				}
			}
		}
	})
}

// codecVectorSeeds are the vector packets, as seeds.
func codecVectorSeeds() [][]byte {
	var seeds [][]byte
	for _, h := range []string{
		"a40102000182018100000000000000000000000000000000000000000000000000000000000000a0a1a2a3a4a5a6a701",
		"a401820001820181000000000010b061bfda4130e4dfdfbcabc556b51fc2c41933b4237531c81ba0a1a2a3a4a5a6a701",
		"a401020101820181000000000010b061bfda4130e4dfdfbcabc556b51fc2c41933b4237531c81ba0a1a2a3a4a5a6a701",
		"a401820101820181000080000000000000f0bf30e4dfdfbcabc556b51fc2c41933b4237531c81ba0a1a2a3a4a5a6a701",
		"e401020201820181000000d050d151d252d3d3",
		"e401820201820181000000000010b061bfda4130e4dfdfbcabc556b51fc2c41933b4237531c81b05c11eb5d4aedbfc757db1a190cdb0a2641fabf9a0a1a2a3a4a5a6a701",
		"a401020301820181000000d050d151d252d3d3",
		"a4018203018201810000800018f2ef6fded562abda0f61e28c19da91ba18e40dd050d151d252d3d3",
		"04bcabc556df1f2f2400000000000000000068656c6c6f01",
		"04bcabc5563324e61ff5ffffffffffffff0101",
	} {
		seeds = append(seeds, mustHex(h))
	}
	return seeds
}
