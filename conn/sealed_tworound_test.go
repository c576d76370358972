package conn

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seal"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/netsim"
	"github.com/udpgate/udpgate/token"
)

// TestSealedLoginTwoRoundTrips: a udpgate client that holds a token sends
// its proof right after the Challenge (docs/protocol.md §11.3): the server
// sees an Initial and a proof, no Response, and asks Config.Accept once.
func TestSealedLoginTwoRoundTrips(t *testing.T) {
	nw := netsim.New()
	var asked atomic.Int32
	srv := simListen(t, nw, Config{Handler: simEcho{}, PrivateKey: &testKey, ProtocolID: testProtocolID,
		Accept: func(netip.AddrPort) error { asked.Add(1); return nil }})
	tok := makeToken(t, nil, token.Params{ServerAddresses: []netip.AddrPort{simServerAddr}, Expire: time.Hour})
	cli, err := Dial(context.Background(), simServerAddr.String(), Config{Network: nw, Logger: quiet(), Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	st := srv.Stats()
	// (A busy machine may delay the Challenge past an Initial's resend.)
	if r, i := st.HandshakeIn[protocol.TypeResponse], st.HandshakeIn[protocol.TypeInitial]; r != 0 || i < 1 {
		t.Errorf("the server got %d Initials and %d Responses; want some and 0", i, r)
	}
	if st.Proofs != 1 || st.Accepted != 1 || asked.Load() != 1 {
		t.Errorf("%d proofs, %d accepted, Accept asked %d times; want 1 each", st.Proofs, st.Accepted, asked.Load())
	}
}

// loopLogin drives a sealed server's receive loop directly, as
// BenchmarkLoopLogin does, for one client at addr.
type loopLogin struct {
	t    *testing.T
	s    *Server
	l    *loop
	pb   *promoBatch
	now  time.Time
	addr netip.AddrPort
	tok  *token.ConnectToken
	ch   protocol.Handshake
}

func newLoopLogin(t *testing.T, accept func(netip.AddrPort) error) *loopLogin {
	s, err := Listen(simServerAddr.String(), Config{Network: netsim.New(), Logger: quiet(), Sockets: 1, ChallengeRate: -1,
		PrivateKey: &testKey, ProtocolID: testProtocolID, Accept: accept})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	now := time.Now()
	ll := &loopLogin{t: t, s: s, l: newLoop(s, 0, s.socks[0], 1, seconds(now)), pb: newPromoBatch(), now: now,
		addr: netip.MustParseAddrPort("10.9.0.1:1000")}
	ll.pb.sock = s.socks[0]
	ll.tok = makeToken(t, nil, token.Params{ClientID: 7, ServerAddresses: []netip.AddrPort{simServerAddr}, Expire: time.Hour})
	return ll
}

// in hands datagram b to the loop and returns the first reply, if any.
func (ll *loopLogin) in(b []byte) []byte {
	m := &ll.l.rb.Msgs[0]
	m.N, m.Addr = copy(m.Buf, b), ll.addr
	out := &ll.l.sb.Msgs[0]
	out.N = 0
	loginServerSide(ll.l, ll.pb, ll.now)
	return out.Buf[:out.N]
}

func (ll *loopLogin) handshake(h *protocol.Handshake, want protocol.PacketType) {
	buf := make([]byte, 256)
	reply := ll.in(buf[:wire.EncodeHandshake(buf, ll.s.st.magic, h)])
	var got protocol.Handshake
	if r := wire.DecodeHandshake(ll.s.st.magic, reply, &got); r != protocol.DropNone || got.Type != want {
		ll.t.Fatalf("reply to %v: %v %v, want %v", h.Type, r, got.Type, want)
	}
	if want == protocol.TypeChallenge {
		ll.ch = got
	}
}

func (ll *loopLogin) initial() {
	ll.handshake(&protocol.Handshake{Type: protocol.TypeInitial, ClientID: 1, MinVersion: 3, CurVersion: 4,
		NetworkVersion: ll.s.st.NetworkVersion, RandomLen: 16}, protocol.TypeChallenge)
}

func (ll *loopLogin) response() {
	ch := &ll.ch
	ll.handshake(&protocol.Handshake{Type: protocol.TypeResponse, SessionID: ch.SessionID, ClientID: 1, MinVersion: 3, CurVersion: 4,
		NetworkVersion: ll.s.st.NetworkVersion, RandomLen: 16, SecretID: ch.SecretID, Timestamp: ch.Timestamp, Cookie: ch.Cookie},
		protocol.TypeAck)
}

// proof sends the first proof for the Challenge and returns the server's
// reply opened under the token's server-to-client key: its header, payload
// and length.
func (ll *loopLogin) proof() (protocol.ConnHeader, []byte, int) {
	ch := &ll.ch
	pc := wire.ProofCookie{SecretID: ch.SecretID, Timestamp: ch.Timestamp, Cookie: ch.Cookie}
	salt := (*[seal.SaltBytes]byte)(ch.Cookie[:seal.SaltBytes])
	var tx seal.Sealer
	tx.Init(&ll.tok.ClientToServerKey, salt)
	serverSeq, clientSeq := cookie.Sequences(&ch.Cookie)
	h := protocol.ConnHeader{SessionID: ch.SessionID, ClientID: 1, Tag: cookie.SessionTag(&ch.Cookie), Seq: clientSeq,
		Ack: (serverSeq + protocol.SeqModulus - 1) % protocol.SeqModulus, Kind: protocol.KindKeepAlive}
	req := ll.tok.Request()
	body, _ := req.AppendBinary(nil)
	buf := make([]byte, 2048)
	n := wire.SealProof(buf, ll.s.st.magic, &h, &pc, body, &tx)
	reply := ll.in(buf[:n])
	if len(reply) > n {
		ll.t.Fatalf("a %d-byte reply to a %d-byte proof", len(reply), n)
	}
	var rx seal.Opener
	rx.Init(&ll.tok.ServerToClientKey, salt)
	var rh protocol.ConnHeader
	if _, r := wire.DecodeSealed(ll.s.st.magic, reply, &rh); r != protocol.DropNone {
		ll.t.Fatalf("reply to the proof (%d bytes): %v", len(reply), r)
	}
	payload, _, r := wire.OpenConn(ll.s.st.magic, reply, &rh, &rx)
	if r != protocol.DropNone {
		ll.t.Fatalf("reply to the proof does not open: %v", r)
	}
	return rh, payload, len(reply)
}

// TestSealedProofAfterChallenge: the server creates the connection from a
// proof that follows the Challenge with no Response (the udpgate client),
// and from one that follows a Response and its Ack (an older client);
// either way it answers the 1149-byte proof with a 43-byte sealed
// KeepAlive and asks Config.Accept exactly once, at the proof.
func TestSealedProofAfterChallenge(t *testing.T) {
	for _, withResponse := range []bool{false, true} {
		t.Run(map[bool]string{false: "no Response", true: "Response then proof"}[withResponse], func(t *testing.T) {
			var asked atomic.Int32
			ll := newLoopLogin(t, func(netip.AddrPort) error { asked.Add(1); return nil })
			ll.initial()
			if withResponse {
				ll.response()
				if n := asked.Load(); n != 0 {
					t.Fatalf("Accept asked %d times at the Response; want at the proof", n)
				}
			}
			h, _, n := ll.proof()
			if h.Kind != protocol.KindKeepAlive || n != 43 {
				t.Fatalf("reply to the proof: %v of %d bytes, want a 43-byte KeepAlive", h.Kind, n)
			}
			if c := ll.s.tab.count.Load(); c != 1 || asked.Load() != 1 {
				t.Fatalf("%d connections, Accept asked %d times; want 1 and 1", c, asked.Load())
			}
		})
	}
}

// TestSealedAcceptAtProof: an application that refuses the client is told
// at the proof, once the token checks out, with a sealed Disconnect reason
// 13 (docs/protocol.md §11.3), counted as the handshake's Denied(2); no
// connection is made, and Dial fails as after a Denied(2).
func TestSealedAcceptAtProof(t *testing.T) {
	var asked atomic.Int32
	ll := newLoopLogin(t, func(netip.AddrPort) error { asked.Add(1); return errors.New("banned") })
	ll.initial()
	h, payload, n := ll.proof()
	if h.Kind != protocol.KindDisconnect || len(payload) != 1 || payload[0] != protocol.DisconnectRefused || n != 44 {
		t.Fatalf("reply to the proof: %v %x of %d bytes, want a 44-byte Disconnect reason %d", h.Kind, payload, n, protocol.DisconnectRefused)
	}
	st := ll.s.Stats()
	if c := ll.s.tab.count.Load(); c != 0 || asked.Load() != 1 || st.DeniedRefused != 1 {
		t.Fatalf("%d connections, Accept asked %d times, %d Denied(2); want 0, 1, 1", c, asked.Load(), st.DeniedRefused)
	}
}

// TestSimSealedLoginRoundTrips: in virtual time, a sealed Dial returns two
// round trips after it starts (Initial → Challenge, proof → sealed
// KeepAlive), as an unsealed Dial does; with a Response and Ack between
// them it took three.
func TestSimSealedLoginRoundTrips(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const oneWay = 20 * time.Millisecond
		nw, _ := simSealed(t, oneWay, Config{Handler: simEcho{}})
		tok := makeToken(t, nil, token.Params{ServerAddresses: []netip.AddrPort{simServerAddr}, Expire: time.Hour})
		start := time.Now()
		cli, err := simDial(t, nw, Config{Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		if d := time.Since(start); d != 4*oneWay {
			t.Errorf("Dial returned after %v, want two round trips (%v)", d, 4*oneWay)
		}
	})
}
