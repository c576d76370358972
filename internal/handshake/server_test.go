package handshake

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"testing"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/ratelimit"
	"github.com/udpgate/udpgate/internal/wire"
)

const (
	vecTS    = 1795000000.25
	vecNetV  = 16909060
	vecStart = 1795000000.0
)

var (
	vecAddr   = netip.MustParseAddrPort("127.0.0.1:7777")
	vecCookie = mustCookie("30e4dfdfbcabc556b51fc2c41933b4237531c81b")
)

func mustCookie(s string) (c cookie.Cookie) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != cookie.Size {
		panic("bad cookie hex " + s)
	}
	copy(c[:], b)
	return c
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// vecSecrets are the secrets of vectors.json, Active 0, updated just before
// the vector timestamp.
func vecSecrets() *cookie.Secrets {
	var snap cookie.Snapshot
	for i := range cookie.SecretSize {
		snap.Secrets[0][i] = byte(i)
		snap.Secrets[1][i] = byte(0x40 + i)
	}
	snap.LastUpdate = vecStart
	snap.NextRotate = vecStart + 1e9
	return cookie.NewSecretsFrom(snap)
}

// signWith returns the cookie for ts and addr under secret id of sec,
// active or not.
func signWith(sec *cookie.Secrets, id uint8, ts float64, addr netip.AddrPort) cookie.Cookie {
	snap := *sec.Load()
	snap.Active = id
	var c cookie.Cookie
	cookie.NewSigner(cookie.NewSecretsFrom(snap)).GenerateTo(&c, ts, addr)
	return c
}

func testServer(t testing.TB, mut func(*ServerConfig)) (*Server, *cookie.Secrets) {
	cfg := ServerConfig{NetworkVersion: vecNetV}
	if mut != nil {
		mut(&cfg)
	}
	sec := vecSecrets()
	return NewServer(cfg, sec, 42, vecTS), sec
}

// clientPacket builds a client handshake packet with the vector's defaults.
func clientPacket(t testing.TB, m wire.Magic, mut func(*protocol.Handshake)) []byte {
	h := protocol.Handshake{ClientID: 1, MinVersion: 3, CurVersion: 4, SentCount: 2,
		NetworkVersion: vecNetV, RandomLen: 8}
	copy(h.Random[:], mustHex("a0a1a2a3a4a5a6a7a8a9aaabacadaeaf"))
	if mut != nil {
		mut(&h)
	}
	buf := make([]byte, 128)
	n := wire.EncodeHandshake(buf, m, &h)
	if n == 0 {
		t.Fatalf("encode %+v failed", h)
	}
	return buf[:n]
}

func response(t testing.TB, ts float64, ck cookie.Cookie, mut func(*protocol.Handshake)) []byte {
	return clientPacket(t, wire.Magic{}, func(h *protocol.Handshake) {
		h.Type = protocol.TypeResponse
		h.Timestamp = ts
		h.Cookie = ck
		if mut != nil {
			mut(h)
		}
	})
}

func decodeReply(t testing.TB, m wire.Magic, b []byte) protocol.Handshake {
	t.Helper()
	var h protocol.Handshake
	if r := wire.DecodeHandshake(m, b, &h); r != protocol.DropNone {
		t.Fatalf("reply %x does not decode: %v", b, r)
	}
	return h
}

func handle(s *Server, src netip.AddrPort, pkt []byte, now float64, peer Peer) (Decision, []byte) {
	out := make([]byte, MaxReplyLen)
	var d Decision
	s.Handle(&d, src, pkt, now, &peer, out)
	return d, out[:d.ReplyLen]
}

// burstReplies hands pkt from src to s n times at now and counts the
// replies; every other decision must be a rate-limit drop.
func burstReplies(t *testing.T, s *Server, src netip.AddrPort, pkt []byte, n int, now float64) int {
	t.Helper()
	sent := 0
	for range n {
		if d, _ := handle(s, src, pkt, now, Peer{}); d.Action == ActReply {
			sent++
		} else if d.Drop != protocol.DropRateLimited {
			t.Fatalf("drop %+v", d)
		}
	}
	return sent
}

func TestServerInitialGetsVectorChallenge(t *testing.T) {
	s, _ := testServer(t, nil)
	pkt := mustHex("a40102000182018100000000000000000000000000000000000000000000000000000000000000a0a1a2a3a4a5a6a701")
	d, rep := handle(s, vecAddr, pkt, vecTS, Peer{})
	if d.Action != ActReply || d.Reply != protocol.TypeChallenge {
		t.Fatalf("decision %+v", d)
	}
	want := mustHex("a401820001820181000000000010b061bfda4130e4dfdfbcabc556b51fc2c41933b4237531c81ba0a1a2a3a4a5a6a701")
	// The request carried 8 random bytes, so the reply carries exactly 8:
	// everything but the random bytes must equal the vector.
	if len(rep) != len(want) {
		t.Fatalf("challenge len %d, want %d", len(rep), len(want))
	}
	h := decodeReply(t, wire.Magic{}, rep)
	if h.RandomLen != 8 {
		t.Fatalf("random len %d", h.RandomLen)
	}
	copy(h.Random[:8], mustHex("a0a1a2a3a4a5a6a7"))
	again := make([]byte, 64)
	n := wire.EncodeHandshake(again, wire.Magic{}, &h)
	if !bytes.Equal(again[:n], want) {
		t.Fatalf("challenge\n got %x\nwant %x", again[:n], want)
	}
}

func TestServerChallengeFields(t *testing.T) {
	s, _ := testServer(t, func(c *ServerConfig) { c.SessionID = 2; c.NetworkFeatures = 5 })
	// A SessionID mismatch is allowed on Initial; the reply carries the
	// server's SessionID and the request's ClientID and SentCount.
	pkt := clientPacket(t, wire.Magic{}, func(h *protocol.Handshake) {
		h.SessionID = 1
		h.ClientID = 6
		h.SentCount = 200
		h.NetworkFeatures = 5
		h.RandomLen = 16
	})
	d, rep := handle(s, vecAddr, pkt, vecTS, Peer{})
	if d.Action != ActReply {
		t.Fatalf("decision %+v", d)
	}
	h := decodeReply(t, wire.Magic{}, rep)
	if h.Type != protocol.TypeChallenge || h.SessionID != 2 || h.ClientID != 6 || h.SentCount != 200 ||
		h.Restart || h.MinVersion != 3 || h.CurVersion != 4 || h.NetworkVersion != vecNetV ||
		h.NetworkFeatures != 5 || h.Timestamp != vecTS || h.SecretID != 0 {
		t.Fatalf("challenge fields %+v", h)
	}
	if len(rep) > len(pkt) {
		t.Fatalf("reply %d bytes > request %d", len(rep), len(pkt))
	}
}

func TestServerVersionWindows(t *testing.T) {
	for _, tc := range []struct {
		min, cur uint8
		ok       bool
		replyCur uint8
	}{
		{3, 4, true, 4}, {3, 3, true, 3}, {4, 4, true, 4}, {3, 9, true, 4}, {4, 200, true, 4},
		{2, 4, false, 0}, {5, 6, false, 0}, {4, 3, false, 0}, {0, 0, false, 0},
	} {
		s, _ := testServer(t, nil)
		pkt := clientPacket(t, wire.Magic{}, func(h *protocol.Handshake) { h.MinVersion, h.CurVersion = tc.min, tc.cur })
		d, rep := handle(s, vecAddr, pkt, vecTS, Peer{})
		if !tc.ok {
			if d.Action != ActDrop || d.Drop != protocol.DropBadVersion {
				t.Errorf("min %d cur %d: %+v, want DropBadVersion", tc.min, tc.cur, d)
			}
			continue
		}
		if d.Action != ActReply {
			t.Errorf("min %d cur %d: %+v", tc.min, tc.cur, d)
			continue
		}
		if h := decodeReply(t, wire.Magic{}, rep); h.MinVersion != 3 || h.CurVersion != tc.replyCur {
			t.Errorf("min %d cur %d: reply versions %d/%d", tc.min, tc.cur, h.MinVersion, h.CurVersion)
		}
	}
}

func TestServerNetworkCompatibility(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ignore bool
		netV   uint32
		feat   uint16
		cur    uint8
		want   protocol.PacketType
		drop   protocol.DropReason
	}{
		{"match", false, vecNetV, 0, 4, protocol.TypeChallenge, protocol.DropNone},
		{"version mismatch", false, 7, 0, 4, protocol.TypeVersionUpgrade, protocol.DropNone},
		{"features mismatch", false, vecNetV, 1, 4, protocol.TypeVersionUpgrade, protocol.DropNone},
		{"old client mismatch", false, 7, 0, 3, 0, protocol.DropNetworkVersion},
		{"version check off", true, 7, 0, 4, protocol.TypeChallenge, protocol.DropNone},
		{"check off features", true, 7, 1, 4, protocol.TypeVersionUpgrade, protocol.DropNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := testServer(t, func(c *ServerConfig) { c.IgnoreNetworkVersion = tc.ignore })
			pkt := clientPacket(t, wire.Magic{}, func(h *protocol.Handshake) {
				h.NetworkVersion, h.NetworkFeatures, h.CurVersion = tc.netV, tc.feat, tc.cur
			})
			d, rep := handle(s, vecAddr, pkt, vecTS, Peer{})
			if tc.drop != protocol.DropNone {
				if d.Action != ActDrop || d.Drop != tc.drop {
					t.Fatalf("%+v, want drop %v", d, tc.drop)
				}
				return
			}
			if d.Action != ActReply || d.Reply != tc.want {
				t.Fatalf("%+v, want %v", d, tc.want)
			}
			h := decodeReply(t, wire.Magic{}, rep)
			if tc.want == protocol.TypeVersionUpgrade {
				// The VersionUpgrade carries the server's own network version.
				if h.Restart || h.NetworkVersion != vecNetV || h.NetworkFeatures != 0 || h.ClientID != 1 || h.SentCount != 2 {
					t.Fatalf("version upgrade %+v", h)
				}
				if len(rep) > len(pkt) || len(rep) < 19 {
					t.Fatalf("version upgrade size %d", len(rep))
				}
			}
		})
	}
}

func TestServerVersionUpgradeRateLimits(t *testing.T) {
	s, _ := testServer(t, nil)
	bad := clientPacket(t, wire.Magic{}, func(h *protocol.Handshake) { h.NetworkVersion = 99 })
	sent := burstReplies(t, s, vecAddr, bad, 20, vecTS)
	if sent != int(s.cfg.VersionUpgradeLimit.Burst) {
		t.Fatalf("one source got %d VersionUpgrades at once, want burst %v", sent, s.cfg.VersionUpgradeLimit.Burst)
	}
	// The total budget: 512 per 300 s across all sources.
	s, _ = testServer(t, nil)
	sent = 0
	for i := range 2000 {
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)}), 9000)
		if d, _ := handle(s, src, bad, vecTS, Peer{}); d.Action == ActReply {
			sent++
		}
	}
	if sent != 512 {
		t.Fatalf("total VersionUpgrades %d, want 512", sent)
	}
}

func TestServerChallengeRateLimit(t *testing.T) {
	s, _ := testServer(t, nil)
	pkt := clientPacket(t, wire.Magic{}, nil)
	sent := burstReplies(t, s, vecAddr, pkt, 200, vecTS)
	if sent != int(s.cfg.ChallengeLimit.Burst) {
		t.Fatalf("burst %d, want %v", sent, s.cfg.ChallengeLimit.Burst)
	}
	// Another port of the same host is another source (players behind NAT).
	other := netip.AddrPortFrom(vecAddr.Addr(), 7778)
	if d, _ := handle(s, other, pkt, vecTS, Peer{}); d.Action != ActReply {
		t.Fatalf("other source limited: %+v", d)
	}
	// One second later the bucket has refilled by the rate.
	sent = burstReplies(t, s, vecAddr, pkt, 200, vecTS+1)
	if sent != int(s.cfg.ChallengeLimit.Rate) {
		t.Fatalf("after 1 s: %d, want %v", sent, s.cfg.ChallengeLimit.Rate)
	}
	// Unlimited (benchmarks).
	s, _ = testServer(t, func(c *ServerConfig) { c.ChallengeLimit = ratelimit.Limit{Rate: -1} })
	for i := range 1000 {
		if d, _ := handle(s, vecAddr, pkt, vecTS, Peer{}); d.Action != ActReply {
			t.Fatalf("unlimited: packet %d %+v", i, d)
		}
	}
}

func TestServerResponse(t *testing.T) {
	s, sec := testServer(t, nil)
	other := netip.MustParseAddrPort("127.0.0.2:7777")
	otherPort := netip.MustParseAddrPort("127.0.0.1:7778")
	for _, tc := range []struct {
		name string
		src  netip.AddrPort
		pkt  []byte
		now  float64
		drop protocol.DropReason
	}{
		{"valid", vecAddr, response(t, vecTS, vecCookie, nil), vecTS + 1, protocol.DropNone},
		{"valid at 39.9 s", vecAddr, response(t, vecTS, vecCookie, nil), vecTS + 39.9, protocol.DropNone},
		{"expired at 40 s", vecAddr, response(t, vecTS, vecCookie, nil), vecTS + 40, protocol.DropExpiredCookie},
		{"from the future", vecAddr, response(t, vecTS, vecCookie, nil), vecTS - 1, protocol.DropExpiredCookie},
		{"other address", other, response(t, vecTS, vecCookie, nil), vecTS + 1, protocol.DropBadCookie},
		{"other port", otherPort, response(t, vecTS, vecCookie, nil), vecTS + 1, protocol.DropBadCookie},
		{"forged", vecAddr, response(t, vecTS, cookie.Cookie{1, 2, 3}, nil), vecTS + 1, protocol.DropBadCookie},
		{"other secret id", vecAddr, response(t, vecTS, vecCookie, func(h *protocol.Handshake) { h.SecretID = 1 }), vecTS + 1, protocol.DropWrongSecret},
		{"timestamp changed", vecAddr, response(t, vecTS+0.5, vecCookie, nil), vecTS + 1, protocol.DropBadCookie},
		{"session mismatch", vecAddr, response(t, vecTS, vecCookie, func(h *protocol.Handshake) { h.SessionID = 1 }), vecTS + 1, protocol.DropSessionMismatch},
		{"secret 1 valid", vecAddr, response(t, vecTS-10, signWith(sec, 1, vecTS-10, vecAddr), func(h *protocol.Handshake) { h.SecretID = 1 }), vecTS, protocol.DropNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := handle(s, tc.src, tc.pkt, tc.now, Peer{})
			if tc.drop != protocol.DropNone {
				if d.Action != ActDrop || d.Drop != tc.drop {
					t.Fatalf("%+v, want %v", d, tc.drop)
				}
				return
			}
			if d.Action != ActPromote || d.To.ClientID != 1 || d.To.sentCount != 2 || d.To.curVersion != 4 {
				t.Fatalf("%+v, want promote", d)
			}
			var h protocol.Handshake
			wire.DecodeHandshake(wire.Magic{}, tc.pkt, &h)
			if d.Cookie != h.Cookie {
				t.Fatalf("promoted cookie %x", d.Cookie)
			}
		})
	}
}

func TestServerRotation(t *testing.T) {
	sec, err := cookie.NewSecrets(1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(ServerConfig{NetworkVersion: vecNetV, ChallengeLimit: ratelimit.Limit{Rate: -1}}, sec, 1, 1000)
	// Get a real Challenge at t=1001 and answer it later.
	d, rep := handle(s, vecAddr, clientPacket(t, wire.Magic{}, nil), 1001, Peer{})
	if d.Action != ActReply {
		t.Fatalf("%+v", d)
	}
	ch := decodeReply(t, wire.Magic{}, rep)
	resp := response(t, ch.Timestamp, ch.Cookie, func(h *protocol.Handshake) { h.SecretID = ch.SecretID })
	if d, _ := handle(s, vecAddr, resp, 1002, Peer{}); d.Action != ActPromote {
		t.Fatalf("before rotation: %+v", d)
	}
	// One rotation keeps the previous secret valid.
	if err := sec.Rotate(1010); err != nil {
		t.Fatal(err)
	}
	if d, _ := handle(s, vecAddr, resp, 1011, Peer{}); d.Action != ActPromote {
		t.Fatalf("after one rotation: %+v", d)
	}
	// The second rotation replaces the secret the cookie was made under.
	if err := sec.Rotate(1025); err != nil {
		t.Fatal(err)
	}
	if d, _ := handle(s, vecAddr, resp, 1026, Peer{}); d.Action != ActDrop || d.Drop != protocol.DropWrongSecret {
		t.Fatalf("after two rotations: %+v, want DropWrongSecret", d)
	}
}

func TestServerKnownPeer(t *testing.T) {
	s, _ := testServer(t, nil)
	connCookie := cookie.Cookie{9, 9, 9}
	peer := Peer{Known: true, ClientID: 1, Cookie: connCookie, Tag: cookie.SessionTag(&connCookie)}

	// A repeated valid Response from the connection's address and ClientID:
	// the Ack again, with the connection's authorised cookie, nothing new.
	resp := response(t, vecTS, vecCookie, nil)
	d, rep := handle(s, vecAddr, resp, vecTS+1, peer)
	if d.Action != ActReply || d.Reply != protocol.TypeAck {
		t.Fatalf("%+v", d)
	}
	h := decodeReply(t, wire.Magic{}, rep)
	if h.Cookie != connCookie || h.Timestamp != -1 || h.SecretID != 1 || h.ClientID != 1 || h.SentCount != 2 {
		t.Fatalf("ack %+v", h)
	}
	if len(rep) > len(resp) {
		t.Fatalf("ack larger than response")
	}
	// An invalid Response still gets nothing.
	if d, _ := handle(s, vecAddr, response(t, vecTS, cookie.Cookie{}, nil), vecTS+1, peer); d.Drop != protocol.DropBadCookie {
		t.Fatalf("%+v", d)
	}
	// Initial with the same ClientID: a Challenge.
	if d, _ := handle(s, vecAddr, clientPacket(t, wire.Magic{}, nil), vecTS, peer); d.Reply != protocol.TypeChallenge {
		t.Fatalf("%+v", d)
	}
	// Another ClientID: a restarted client; a valid Response replaces.
	resp2 := response(t, vecTS, vecCookie, nil)
	peer.ClientID = 3
	if d, _ := handle(s, vecAddr, resp2, vecTS+1, peer); d.Action != ActPromote {
		t.Fatalf("%+v, want promote replacing", d)
	}
}

func TestServerRestartResponse(t *testing.T) {
	s, _ := testServer(t, nil)
	orig := cookie.Cookie{7, 7, 7}
	rr := func(mut func(*protocol.Handshake)) []byte {
		return clientPacket(t, wire.Magic{}, func(h *protocol.Handshake) {
			h.Type = protocol.TypeRestartResponse
			h.Restart = true
			h.Timestamp = vecTS
			h.Cookie = vecCookie
			h.OrigCookie = orig
			if mut != nil {
				mut(h)
			}
		})
	}
	for _, peer := range []Peer{{}, {Known: true, ClientID: 1}} {
		d, _ := handle(s, vecAddr, rr(nil), vecTS+1, peer)
		if d.Action != ActMigrate || d.OrigCookie != orig || d.Cookie != vecCookie || d.To.ClientID != 1 {
			t.Fatalf("peer %+v: %+v", peer, d)
		}
	}
	if d, _ := handle(s, vecAddr, rr(func(h *protocol.Handshake) { h.SessionID = 3 }), vecTS+1, Peer{}); d.Drop != protocol.DropSessionMismatch {
		t.Fatalf("%+v", d)
	}
	if d, _ := handle(s, netip.MustParseAddrPort("127.0.0.9:1"), rr(nil), vecTS+1, Peer{}); d.Drop != protocol.DropBadCookie {
		t.Fatalf("%+v", d)
	}
	// The migration Ack carries OrigCookie and is smaller than the request.
	var d Decision
	d, _ = handle(s, vecAddr, rr(nil), vecTS+1, Peer{})
	out := make([]byte, MaxReplyLen)
	rnd := wire.NewRand(3)
	n := s.Config().BuildAck(out, &d.To, &d.OrigCookie, &rnd)
	if h := decodeReply(t, wire.Magic{}, out[:n]); h.Type != protocol.TypeAck || h.Cookie != orig || n > d.To.reqLen {
		t.Fatalf("migration ack %+v (%d bytes)", h, n)
	}
}

func TestServerUnexpectedAndMalformed(t *testing.T) {
	s, _ := testServer(t, nil)
	for _, typ := range []protocol.PacketType{protocol.TypeChallenge, protocol.TypeAck, protocol.TypeRestartHandshake, protocol.TypeVersionUpgrade, protocol.TypeDenied} {
		pkt := clientPacket(t, wire.Magic{}, func(h *protocol.Handshake) {
			h.Type = typ
			h.Restart = typ == protocol.TypeRestartHandshake
			h.Timestamp = 1
		})
		if d, _ := handle(s, vecAddr, pkt, vecTS, Peer{}); d.Action != ActDrop || d.Drop != protocol.DropUnexpectedType {
			t.Errorf("type %v: %+v", typ, d)
		}
	}
	for name, pkt := range map[string][]byte{
		"empty":     {},
		"zero last": {0xa4, 0x00},
		"short":     {0xa4, 0x01},
		"too large": append(make([]byte, protocol.DefaultMaxDatagram), 1),
	} {
		if d, _ := handle(s, vecAddr, pkt, vecTS, Peer{}); d.Action != ActDrop || d.Drop == protocol.DropNone {
			t.Errorf("%s: %+v", name, d)
		}
	}
	// A server with a magic header drops packets without it.
	m, _ := wire.ParseMagic("1011")
	sm, _ := testServer(t, func(c *ServerConfig) { c.Magic = m })
	if d, _ := handle(sm, vecAddr, clientPacket(t, wire.Magic{}, nil), vecTS, Peer{}); d.Drop != protocol.DropBadMagic {
		t.Errorf("no magic: %+v", d)
	}
	if d, _ := handle(sm, vecAddr, clientPacket(t, m, nil), vecTS, Peer{}); d.Reply != protocol.TypeChallenge {
		t.Errorf("magic 1011: %+v", d)
	}
}

func connPacket(t testing.TB, m wire.Magic, h protocol.ConnHeader, payload []byte) []byte {
	buf := make([]byte, 1500)
	n := wire.EncodeConn(buf, m, &h, payload)
	if n == 0 {
		t.Fatalf("encode conn %+v", h)
	}
	return buf[:n]
}

func TestServerConnectionPackets(t *testing.T) {
	s, _ := testServer(t, nil)
	tag := cookie.SessionTag(&vecCookie)
	hdr := protocol.ConnHeader{ClientID: 1, Tag: tag, Seq: 8159, Ack: 9263, Kind: protocol.KindData}
	data := connPacket(t, wire.Magic{}, hdr, []byte("hello"))
	peer := Peer{Known: true, ClientID: 1, Tag: tag, Cookie: vecCookie}

	d, _ := handle(s, vecAddr, data, vecTS, peer)
	if d.Action != ActConn || string(d.Payload) != "hello" || d.Conn.Seq != 8159 {
		t.Fatalf("%+v", d)
	}
	bad := peer
	bad.ClientID = 2
	if d, _ := handle(s, vecAddr, data, vecTS, bad); d.Drop != protocol.DropClientIDMismatch {
		t.Fatalf("%+v", d)
	}
	bad = peer
	bad.Tag++
	if d, _ := handle(s, vecAddr, data, vecTS, bad); d.Drop != protocol.DropBadTag {
		t.Fatalf("%+v", d)
	}
	h2 := hdr
	h2.SessionID = 1
	if d, _ := handle(s, vecAddr, connPacket(t, wire.Magic{}, h2, []byte("x")), vecTS, peer); d.Drop != protocol.DropSessionMismatch {
		t.Fatalf("%+v", d)
	}

	// Unknown address: RestartHandshake, ClientID echoed, SentCount 0,
	// CurVersion 4, RestartBit 1, no larger than the packet.
	ka := hdr
	ka.Kind = protocol.KindKeepAlive
	keepalive := connPacket(t, wire.Magic{}, ka, nil)
	if len(keepalive) != 19 {
		t.Fatalf("keepalive %d bytes", len(keepalive))
	}
	d, rep := handle(s, vecAddr, keepalive, vecTS, Peer{})
	if d.Action != ActReply || d.Reply != protocol.TypeRestartHandshake {
		t.Fatalf("%+v", d)
	}
	h := decodeReply(t, wire.Magic{}, rep)
	if !h.Restart || h.ClientID != 1 || h.SentCount != 0 || h.CurVersion != 4 || h.MinVersion != 3 || len(rep) != 19 {
		t.Fatalf("restart %+v, %d bytes", h, len(rep))
	}
	s.cfg.Closed = closedSet{vecAddr: true}
	if d, _ := handle(s, vecAddr, keepalive, vecTS, Peer{}); d.Drop != protocol.DropRecentlyDisconnected {
		t.Fatalf("%+v", d)
	}
	s.cfg.Closed = nil
	if d, _ := handle(s, vecAddr, connPacket(t, wire.Magic{}, h2, []byte("x")), vecTS, Peer{}); d.Drop != protocol.DropSessionMismatch {
		t.Fatalf("%+v", d)
	}
	// Rate limit: burst then drops, per source.
	s, _ = testServer(t, nil)
	if sent := burstReplies(t, s, vecAddr, keepalive, 50, vecTS); sent != int(s.cfg.RestartLimit.Burst) {
		t.Fatalf("restart burst %d", sent)
	}
}

// With a 1-bit magic header a RestartHandshake is 20 bytes; a KeepAlive is
// padded to 20 so a moved client can still be told to restart, and a 19-byte
// one is dropped rather than answered with more bytes.
func TestServerRestartAmplification(t *testing.T) {
	m, _ := wire.ParseMagic("1")
	s, _ := testServer(t, func(c *ServerConfig) { c.Magic = m })
	ka := protocol.ConnHeader{ClientID: 1, Tag: 5, Seq: 1, Kind: protocol.KindKeepAlive}
	padded := connPacket(t, m, ka, nil)
	if len(padded) != 20 {
		t.Fatalf("padded keepalive %d bytes, want 20", len(padded))
	}
	d, rep := handle(s, vecAddr, padded, vecTS, Peer{})
	if d.Action != ActReply || len(rep) != 20 {
		t.Fatalf("%+v len %d", d, len(rep))
	}
	short := append(append([]byte{}, padded[:18]...), 0x01) // drop one padding byte
	if d, _ := handle(s, vecAddr, short, vecTS, Peer{}); d.Action != ActDrop || d.Drop != protocol.DropAmplification {
		t.Fatalf("19-byte keepalive: %+v", d)
	}
}

// No reply to an unknown address is ever larger than its request, whatever
// the request's type, size and RandomData length.
func TestServerNoAmplification(t *testing.T) {
	rnd := wire.NewRand(7)
	for _, ms := range []string{"", "1", "10", "1011", "1010101", "11111111111111111111111111111111"} {
		m, _ := wire.ParseMagic(ms)
		s, sec := testServer(t, func(c *ServerConfig) {
			c.Magic = m
			c.ChallengeLimit = ratelimit.Limit{Rate: -1}
			c.RestartLimit = ratelimit.Limit{Rate: -1}
			c.VersionUpgradeLimit = ratelimit.Limit{Rate: -1}
		})
		for i := range 2000 {
			var pkt []byte
			switch i % 4 {
			case 0, 1:
				pkt = clientPacket(t, m, func(h *protocol.Handshake) {
					h.RandomLen = uint8(8 + rnd.Intn(9))
					if i%4 == 1 {
						h.NetworkVersion = 3
					}
				})
			case 2:
				ck := signWith(sec, 0, vecTS, vecAddr)
				pkt = clientPacket(t, m, func(h *protocol.Handshake) {
					h.Type = protocol.TypeResponse
					h.Timestamp = vecTS
					h.Cookie = ck
					h.RandomLen = uint8(8 + rnd.Intn(9))
				})
			case 3:
				kinds := []protocol.Kind{protocol.KindData, protocol.KindKeepAlive, protocol.KindDisconnect}
				k := kinds[rnd.Intn(3)]
				var payload []byte
				switch k {
				case protocol.KindData:
					payload = make([]byte, 1+rnd.Intn(40))
				case protocol.KindDisconnect:
					payload = []byte{1}
				}
				pkt = connPacket(t, m, protocol.ConnHeader{ClientID: 1, Kind: k}, payload)
			}
			d, rep := handle(s, vecAddr, pkt, vecTS+1, Peer{})
			if len(rep) > len(pkt) {
				t.Fatalf("magic %q: reply %v of %d bytes to a %d-byte %v", ms, d.Reply, len(rep), len(pkt), d.Request)
			}
			if d.Action == ActPromote {
				out := make([]byte, MaxReplyLen)
				for _, n := range []int{
					s.Config().BuildAck(out, &d.To, &d.Cookie, &rnd),
					s.Config().BuildDenied(out, &d.To, protocol.DeniedServerFull, &d.Cookie, &rnd),
				} {
					if n == 0 || n > len(pkt) {
						t.Fatalf("magic %q: promotion reply %d bytes to %d", ms, n, len(pkt))
					}
				}
			}
		}
	}
}

func TestServerShed(t *testing.T) {
	s, _ := testServer(t, nil)
	// One token, and the next one an hour away.
	budget := ratelimit.NewBucket(ratelimit.Limit{Rate: 1.0 / 3600, Burst: 1}, vecTS)
	s.Shed = Shed{NoRestart: true, NoVersionUpgrade: true, Challenges: &budget}
	if d, _ := handle(s, vecAddr, clientPacket(t, wire.Magic{}, nil), vecTS, Peer{}); d.Action != ActReply {
		t.Fatalf("first challenge %+v", d)
	}
	if d, _ := handle(s, vecAddr, clientPacket(t, wire.Magic{}, nil), vecTS, Peer{}); d.Drop != protocol.DropOverload {
		t.Fatalf("over budget %+v", d)
	}
	bad := clientPacket(t, wire.Magic{}, func(h *protocol.Handshake) { h.NetworkVersion = 1 })
	if d, _ := handle(s, vecAddr, bad, vecTS, Peer{}); d.Drop != protocol.DropOverload {
		t.Fatalf("version upgrade %+v", d)
	}
	ka := connPacket(t, wire.Magic{}, protocol.ConnHeader{ClientID: 1, Kind: protocol.KindKeepAlive}, nil)
	if d, _ := handle(s, vecAddr, ka, vecTS, Peer{}); d.Drop != protocol.DropOverload {
		t.Fatalf("restart %+v", d)
	}
}

func TestServerAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race runtime makes crypto/sha1 allocate; run without -race")
	}
	s, _ := testServer(t, func(c *ServerConfig) { c.ChallengeLimit = ratelimit.Limit{Rate: -1} })
	initial := clientPacket(t, wire.Magic{}, nil)
	resp := response(t, vecTS, vecCookie, nil)
	data := connPacket(t, wire.Magic{}, protocol.ConnHeader{ClientID: 1, Tag: 3, Kind: protocol.KindData}, []byte("x"))
	out := make([]byte, MaxReplyLen)
	var d Decision
	peer := Peer{}
	known := Peer{Known: true, ClientID: 1, Tag: 3}
	connected := Peer{Known: true, ClientID: 1, Cookie: vecCookie}
	to := ReplyTo{ClientID: 1, curVersion: 4, randomLen: 16, reqLen: 100}
	rnd := wire.NewRand(1)
	for name, f := range map[string]func(){
		"initial->challenge": func() { s.Handle(&d, vecAddr, initial, vecTS, &peer, out) },
		"response->promote":  func() { s.Handle(&d, vecAddr, resp, vecTS+1, &peer, out) },
		"response->ack":      func() { s.Handle(&d, vecAddr, resp, vecTS+1, &connected, out) },
		"data":               func() { s.Handle(&d, vecAddr, data, vecTS, &known, out) },
		"BuildAck":           func() { s.Config().BuildAck(out, &to, &vecCookie, &rnd) },
		"BuildDenied":        func() { s.Config().BuildDenied(out, &to, protocol.DeniedServerFull, &vecCookie, &rnd) },
	} {
		if n := testing.AllocsPerRun(200, f); n != 0 {
			t.Errorf("%s: %v allocs", name, n)
		}
	}
}

func BenchmarkServerInitialChallenge(b *testing.B) {
	s, _ := testServer(b, func(c *ServerConfig) { c.ChallengeLimit = ratelimit.Limit{Rate: -1} })
	pkt := clientPacket(b, wire.Magic{}, nil)
	out := make([]byte, MaxReplyLen)
	var d Decision
	var peer Peer
	b.ReportAllocs()
	for b.Loop() {
		s.Handle(&d, vecAddr, pkt, vecTS, &peer, out)
	}
	if d.Action != ActReply {
		b.Fatal(d)
	}
}

func BenchmarkServerResponsePromote(b *testing.B) {
	s, _ := testServer(b, nil)
	pkt := response(b, vecTS, vecCookie, nil)
	out := make([]byte, MaxReplyLen)
	var d Decision
	var peer Peer
	b.ReportAllocs()
	for b.Loop() {
		s.Handle(&d, vecAddr, pkt, vecTS+1, &peer, out)
	}
	if d.Action != ActPromote {
		b.Fatal(d)
	}
}

func BenchmarkServerConnData(b *testing.B) {
	s, _ := testServer(b, nil)
	pkt := connPacket(b, wire.Magic{}, protocol.ConnHeader{ClientID: 1, Tag: 3, Kind: protocol.KindData}, make([]byte, 32))
	out := make([]byte, MaxReplyLen)
	var d Decision
	peer := Peer{Known: true, ClientID: 1, Tag: 3}
	b.ReportAllocs()
	for b.Loop() {
		s.Handle(&d, vecAddr, pkt, vecTS, &peer, out)
	}
	if d.Action != ActConn {
		b.Fatal(d)
	}
}

// closedSet is a ClosedAddrs of fixed addresses.
type closedSet map[netip.AddrPort]bool

func (c closedSet) RecentlyClosed(a netip.AddrPort, _ float64) bool { return c[a] }

func TestLimiterDefaults(t *testing.T) {
	c := ServerConfig{}.withDefaults()
	for _, tc := range []struct {
		name      string
		got, want ratelimit.Limit
	}{
		{"restart", c.RestartLimit, ratelimit.Limit{Rate: 4, Burst: 8}},
		{"version upgrade", c.VersionUpgradeLimit, ratelimit.Limit{Rate: 4, Burst: 8}},
		{"challenge", c.ChallengeLimit, ratelimit.Limit{Rate: 32, Burst: 64}},
		{"version upgrade total", c.VersionUpgradeTotal, ratelimit.Limit{Rate: 512.0 / 300, Burst: 512}},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
	// A zero Burst is twice the Rate; a negative Rate stays unlimited.
	c = ServerConfig{RestartLimit: ratelimit.Limit{Rate: 10}, VersionUpgradeLimit: ratelimit.Limit{Rate: -5}}.withDefaults()
	if c.RestartLimit != (ratelimit.Limit{Rate: 10, Burst: 20}) || c.VersionUpgradeLimit.Rate >= 0 {
		t.Errorf("restart %+v, version upgrade %+v", c.RestartLimit, c.VersionUpgradeLimit)
	}
}
