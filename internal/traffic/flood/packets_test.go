package flood

import (
	"net/netip"
	"testing"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

// outcome is one template's fate at a server: the reply it earned, or the
// drop reason.
type outcome struct {
	act   handshake.Action
	reply protocol.PacketType
	drop  protocol.DropReason
}

// judge runs every template of every kind through a handshake.Server, each
// from its own fresh source and network (so the per-source, per-IP and
// per-network rate limits stay out of the way), and tallies the outcomes by
// kind. It also returns the challenge the
// templates were built from and the address it was made for.
func judge(t *testing.T, magic string) (map[Kind]map[outcome]int, *handshake.Server, *templates, netip.AddrPort) {
	t.Helper()
	const now = 1_700_000_000.0
	st, err := Config{Server: testServer, Magic: magic, NetworkVersion: 7, SessionID: 2}.settings()
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := cookie.NewSecrets(now-1, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := handshake.NewServer(handshake.ServerConfig{Magic: st.magic, SessionID: 2, NetworkVersion: 7}, secrets, 1, now)
	out := make([]byte, handshake.MaxReplyLen)

	// The probe, by hand: an Initial from probeAddr, its Challenge decoded.
	probeAddr := netip.MustParseAddrPort("127.0.9.9:5000")
	rnd := wire.NewRand(42)
	b := &builder{st: &st, m: st.magic, rnd: rnd}
	var buf [256]byte
	n := b.initial(buf[:], 7)
	var d handshake.Decision
	srv.Handle(&d, probeAddr, buf[:n], now, &handshake.Peer{}, out)
	var h protocol.Handshake
	if d.Action != handshake.ActReply || wire.DecodeHandshake(st.magic, out[:d.ReplyLen], &h) != protocol.DropNone {
		t.Fatalf("probe Initial: %+v", d)
	}
	ch := challenge{ok: true, sessionID: h.SessionID, clientID: h.ClientID, sentCount: h.SentCount,
		secretID: h.SecretID, timestamp: h.Timestamp, cookie: h.Cookie}
	tmpl := buildTemplates(&st, ch, now, rnd)

	got := map[Kind]map[outcome]int{}
	for k, vs := range tmpl.kinds {
		if st.Mix[k] == 0 {
			continue
		}
		if len(vs) != variantsPerKind {
			t.Fatalf("%v: %d variants; want %d", Kind(k), len(vs), variantsPerKind)
		}
		got[Kind(k)] = map[outcome]int{}
		for i, p := range vs {
			// An address in a /24 of its own: the server budgets
			// Challenges per source, per IP and per network.
			from := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, byte(16 + k), byte(i), 1}), uint16(10000+i))
			srv.Handle(&d, from, p, now+1, &handshake.Peer{}, out)
			o := outcome{act: d.Action, drop: d.Drop}
			if d.Action == handshake.ActReply {
				o.reply = d.Reply
				if d.ReplyLen > len(p) {
					t.Errorf("%v variant %d: a %d-byte reply to %d bytes", Kind(k), i, d.ReplyLen, len(p))
				}
			}
			got[Kind(k)][o]++
		}
	}
	return got, srv, tmpl, probeAddr
}

// TestTemplatesReachTheirChecks checks that each kind is what it claims to
// be at a real decision function: Initials earn Challenges, connection
// packets RestartHandshakes, forged and replayed Responses fail the cookie
// check, and the garbage kinds are dropped for the reasons they were made to
// exercise. None of them may make a connection.
func TestTemplatesReachTheirChecks(t *testing.T) {
	for _, magic := range []string{"", "1011"} {
		t.Run("magic="+magic, func(t *testing.T) {
			got, srv, tmpl, probeAddr := judge(t, magic)
			for k, outs := range got {
				for o, n := range outs {
					if o.act == handshake.ActPromote || o.act == handshake.ActMigrate || o.act == handshake.ActConn {
						t.Errorf("%v: %d templates got action %d: a flood must never make or touch a connection", k, n, o.act)
					}
				}
			}
			all := func(k Kind, o outcome) {
				t.Helper()
				if got[k][o] != variantsPerKind {
					t.Errorf("%v: outcomes %v; want all %+v", k, got[k], o)
				}
			}
			all(KindInitial, outcome{act: handshake.ActReply, reply: protocol.TypeChallenge})
			all(KindVersion, outcome{act: handshake.ActReply, reply: protocol.TypeVersionUpgrade})
			all(KindConn, outcome{act: handshake.ActReply, reply: protocol.TypeRestartHandshake})
			all(KindReplay, outcome{drop: protocol.DropBadCookie})
			all(KindOversize, outcome{drop: protocol.DropTooLarge})

			forged := got[KindForged]
			if forged[outcome{drop: protocol.DropBadCookie}] < variantsPerKind/2 ||
				forged[outcome{drop: protocol.DropWrongSecret}] == 0 ||
				forged[outcome{drop: protocol.DropExpiredCookie}] == 0 {
				t.Errorf("forged: %v; want mostly bad_cookie, some wrong_secret and expired_cookie", forged)
			}

			want := []protocol.DropReason{protocol.DropMalformed, protocol.DropBadSize, protocol.DropUnknownType,
				protocol.DropUnexpectedType, protocol.DropBadVersion, protocol.DropBadBody, protocol.DropSessionMismatch}
			if magic != "" {
				want = append(want, protocol.DropBadMagic)
			}
			for _, r := range want {
				if got[KindGarbage][outcome{drop: r}] == 0 {
					t.Errorf("garbage: no %v drop in %v", r, got[KindGarbage])
				}
			}
			dropped := 0
			for o, n := range got[KindTruncated] {
				if o.act == handshake.ActDrop {
					dropped += n
				}
			}
			if dropped < variantsPerKind*9/10 {
				t.Errorf("truncated: only %d of %d dropped: %v", dropped, variantsPerKind, got[KindTruncated])
			}

			// The replayed Response is real: from the address its
			// Challenge was made for, it would connect.
			var d handshake.Decision
			out := make([]byte, handshake.MaxReplyLen)
			srv.Handle(&d, probeAddr, tmpl.kinds[KindReplay][0], 1_700_000_001, &handshake.Peer{}, out)
			if d.Action != handshake.ActPromote {
				t.Errorf("replay template from its own address: %+v; want a promotion", d)
			}
		})
	}
}

// TestTemplatesHaveZeroLengthDatagrams: a 0-byte datagram is legal UDP and
// must be part of the garbage, pointing into the arena (sendmmsg needs a
// base address even for no bytes).
func TestTemplatesHaveZeroLengthDatagrams(t *testing.T) {
	st, err := Config{Server: testServer}.settings()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := buildTemplates(&st, challenge{}, 1e9, wire.NewRand(1))
	empty := 0
	for _, p := range tmpl.kinds[KindGarbage] {
		if len(p) == 0 {
			empty++
			if cap(p) != 0 || p == nil {
				t.Fatalf("empty template: cap %d, nil %v", cap(p), p == nil)
			}
		}
	}
	if empty == 0 {
		t.Error("no 0-byte datagram among the garbage")
	}
	for _, p := range tmpl.kinds[KindOversize] {
		if len(p) <= st.MaxDatagram {
			t.Fatalf("oversize template of %d bytes", len(p))
		}
	}
}
