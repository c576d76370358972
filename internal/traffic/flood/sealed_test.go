package flood

import (
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seal"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/token"
)

// TestProofTemplates checks each hostile proof variant of a connected
// source against the server's checks in their order (docs/protocol.md
// §11.3): the clear part (is it a proof of this connection?), the token
// (token.Opener), the server list, the inner seal. None may pass them all.
func TestProofTemplates(t *testing.T) {
	for _, magic := range []string{"", "10110"} {
		t.Run("magic="+magic, func(t *testing.T) {
			key := [token.KeyBytes]byte{7, 7, 7}
			const pid = 0xfeedface
			st, err := Config{Server: testServer, Magic: magic, Mix: Mix{KindProof: 1, KindSealed: 1}, ProtocolID: pid, PrivateKey: &key}.settings()
			if err != nil {
				t.Fatal(err)
			}
			var ck cookie.Cookie
			for i := range ck {
				ck[i] = byte(3*i + 1)
			}
			c := &sourceConn{ok: true, cookie: ck, id: protocol.ConnHeader{SessionID: 1, ClientID: 5, Tag: cookie.SessionTag(&ck)}}
			srv, cli := cookie.Sequences(&ck)
			c.seqs.Init(cli, srv, 0)
			b := &builder{st: &st, m: st.magic, rnd: wire.NewRand(3)}
			s := &source{conn: c}
			// Four sources' worth, so every variant appears.
			got := map[string]int{}
			for seq := range 4 {
				b.sourceTemplates(s, seq)
				if len(s.kinds[KindProof]) != perSourceVariants || len(s.kinds[KindSealed]) != perSourceVariants {
					t.Fatalf("%d proofs, %d sealed", len(s.kinds[KindProof]), len(s.kinds[KindSealed]))
				}
				for _, p := range s.kinds[KindProof] {
					got[judgeProof(t, &st, c, &key, pid, p)]++
				}
				for _, p := range s.kinds[KindSealed] {
					var h protocol.ConnHeader
					proof, r := wire.DecodeSealed(st.magic, p, &h)
					if r != protocol.DropNone || proof || h.Tag != c.id.Tag {
						t.Errorf("sealed template: proof %v, %v, tag %x", proof, r, h.Tag)
					}
				}
			}
			t.Logf("outcomes: %v", got)
			for _, want := range []string{"not_proof", "too_large", token.ErrProtocolID.Error(), token.ErrExpired.Error(),
				token.ErrInvalid.Error(), "foreign_server", "proof_forged"} {
				if got[want] == 0 {
					t.Errorf("no proof template ends in %q: %v", want, got)
				}
			}
			if got["accepted"] != 0 {
				t.Errorf("%d proof templates pass every check", got["accepted"])
			}
		})
	}
}

// judgeProof runs proof p of connection c through the server's checks and
// names where it stops.
func judgeProof(t *testing.T, st *settings, c *sourceConn, key *[token.KeyBytes]byte, pid uint64, p []byte) string {
	t.Helper()
	if len(p) > st.MaxDatagram {
		return "too_large"
	}
	var h protocol.ConnHeader
	proof, r := wire.DecodeSealed(st.magic, p, &h)
	if r != protocol.DropNone || !proof {
		return "not_proof"
	}
	var pc wire.ProofCookie
	if !wire.ProofCookieOf(st.magic, p, &pc) {
		return "not_proof"
	}
	if h.Tag != c.id.Tag || h.ClientID != c.id.ClientID || h.SessionID != c.id.SessionID {
		t.Fatalf("proof for another connection: %+v", h)
	}
	var priv token.Private
	if err := token.NewOpener(key, pid).OpenRequest(&priv, wire.ProofRequest(st.magic, p), time.Now()); err != nil {
		if !errors.Is(err, token.ErrProtocolID) && !errors.Is(err, token.ErrExpired) && !errors.Is(err, token.ErrInvalid) &&
			!errors.Is(err, token.ErrMalformed) {
			t.Errorf("token error %v", err)
		}
		return err.Error()
	}
	if !priv.HasServerAddress(st.Server) {
		return "foreign_server"
	}
	var o seal.Opener
	o.Init(&priv.ClientToServerKey, (*[seal.SaltBytes]byte)(c.cookie[:seal.SaltBytes]))
	if _, r := wire.OpenProof(st.magic, p, &h, &o); r != protocol.DropNone {
		return "proof_forged"
	}
	return "accepted"
}

// TestSealedTemplatesUnconnected: without a connection the sealed-mode
// kinds carry random Tags and made-up cookies; every proof a sealed
// server's decision passes on fails the cookie check, and sealed packets
// may try to move a connection (which their seal cannot open), never more.
func TestSealedTemplatesUnconnected(t *testing.T) {
	st, err := Config{Server: testServer, Mix: Mix{KindProof: 1, KindSealed: 1}, ProtocolID: 1}.settings()
	if err != nil {
		t.Fatal(err)
	}
	const now = 1_700_000_000.0
	secrets, err := cookie.NewSecrets(now-1, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := handshake.NewServer(handshake.ServerConfig{Magic: st.magic, Sealed: true}, secrets, 1, now)
	tmpl := buildTemplates(&st, challenge{}, now, wire.NewRand(5))
	out := make([]byte, handshake.MaxReplyLen)
	var d handshake.Decision
	for k, vs := range tmpl.kinds {
		if st.Mix[k] == 0 {
			continue
		}
		if len(vs) != variantsPerKind {
			t.Fatalf("%v: %d variants", Kind(k), len(vs))
		}
		for i, p := range vs {
			from := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 40, byte(i), 1}), uint16(20000+i))
			srv.Handle(&d, from, p, now+1, &handshake.Peer{}, out)
			switch d.Action {
			case handshake.ActDrop:
			case handshake.ActSealed:
				if !d.Proof || Kind(k) != KindProof {
					t.Errorf("%v variant %d: a sealed packet for a connection", Kind(k), i)
				} else if r := srv.ProofCookie(&d, from, p, now+1); r == protocol.DropNone {
					t.Errorf("proof variant %d: its made-up cookie checks", i)
				}
			case handshake.ActSealedMove:
				if Kind(k) == KindProof {
					var h protocol.ConnHeader
					if proof, _ := wire.DecodeSealed(st.magic, p, &h); proof {
						t.Errorf("proof variant %d may move a connection", i)
					}
				}
			default:
				t.Errorf("%v variant %d: action %v", Kind(k), i, d.Action)
			}
		}
	}
}

type connectCounter struct {
	conn.NopHandler
	n atomic.Int64
}

func (c *connectCounter) OnConnect(*conn.Conn) { c.n.Add(1) }

// TestFloodSealedServer floods a sealed server with hostile proofs and
// sealed packets from sources that completed the handshake first: every
// token check fires and is counted by reason, refusals come back no larger
// than the proofs (no source gets more bytes than it sent), and nothing is
// proven or reaches the application.
func TestFloodSealedServer(t *testing.T) {
	key := [token.KeyBytes]byte{4, 4, 4}
	const pid = 0x5eed
	app := &connectCounter{}
	srv, err := conn.Listen("127.0.0.1:0", conn.Config{Handler: app, PrivateKey: &key, ProtocolID: pid,
		// The sources share one /24 and each connects first.
		ChallengeRate: -1, MaxClientsPerIP: -1, MaxClientsPerPrefix: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rep, _ := runLogged(t, Config{Server: srv.Addr(), Mix: Mix{KindInitial: 1, KindProof: 4, KindSealed: 1},
		ProtocolID: pid, PrivateKey: &key, Count: 20_000, MaxDuration: 15 * time.Second, Seed: 3}, 3)
	if rep.Connected < DefaultSources*3/4 || rep.Sent.Datagrams < 20_000 {
		t.Fatalf("%d of %d sources connected, %d datagrams sent", rep.Connected, DefaultSources, rep.Sent.Datagrams)
	}
	for _, s := range rep.Amplified() {
		t.Errorf("source %v received %d bytes for %d sent", s.Addr, s.Received.Bytes, s.Sent.Bytes)
	}
	if rep.Replies[ReplyRefusal].Datagrams == 0 || rep.Replies[ReplySealed].Datagrams == 0 {
		t.Errorf("replies %v; want token refusals in clear and sealed", rep.Replies)
	}
	for _, bad := range []ReplyType{ReplyConn, ReplyInvalid, ReplyType(protocol.TypeRestartHandshake)} {
		if n := rep.Replies[bad].Datagrams; n != 0 {
			t.Errorf("%d %v replies", n, bad)
		}
	}
	// Close returns once the receive loops have stopped, each having
	// published the counters of its last batch.
	srv.Close()
	st := srv.Stats()
	t.Logf("server drops: %v", st.Drops)
	if st.Proofs != 0 || app.n.Load() != 0 {
		t.Errorf("the flood proved %d tokens, %d reached the application", st.Proofs, app.n.Load())
	}
	for _, r := range []protocol.DropReason{protocol.DropTokenProtocol, protocol.DropTokenExpired, protocol.DropTokenInvalid,
		protocol.DropTokenForeignServer, protocol.DropProofForged, protocol.DropTooLarge} {
		if st.Drops[r] == 0 {
			t.Errorf("server drop counter %v did not move", r)
		}
	}
}

// TestSealedSendLoopAllocs: with a source's own proof and sealed
// templates, filling and sending a batch still costs no allocation.
func TestSealedSendLoopAllocs(t *testing.T) {
	st, srcs := sinkSources(t, Config{NumSources: 1, Batch: 32, Mix: Mix{KindProof: 1, KindSealed: 1}})
	b := &builder{st: &st, m: st.magic, rnd: wire.NewRand(1)}
	var ck cookie.Cookie
	ck[0] = 1
	srcs[0].conn = &sourceConn{ok: true, cookie: ck, id: protocol.ConnHeader{Tag: cookie.SessionTag(&ck)}}
	b.sourceTemplates(srcs[0], 0)
	checkSendAllocs(t, &engine{st: &st, tmpl: b.templates(), srcs: srcs})
	if srcs[0].sentKinds[KindProof] == 0 || srcs[0].sentKinds[KindSealed] == 0 {
		t.Errorf("sent by kind: %v", srcs[0].sentKinds)
	}
}
