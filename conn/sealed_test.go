package conn

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/batchio"
	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seal"
	"github.com/udpgate/udpgate/internal/traffic/loadgen"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/netsim"
	"github.com/udpgate/udpgate/token"
)

const testProtocolID = 0x1122334455667788

var testKey = [token.KeyBytes]byte{1, 2, 3, 4, 5, 6, 7, 8}

// sealedListen starts a sealed server with testKey.
func sealedListen(t *testing.T, cfg Config) *Server {
	t.Helper()
	cfg.PrivateKey, cfg.ProtocolID = &testKey, testProtocolID
	return listen(t, cfg)
}

// sealed starts a sealed server with testKey on n.
func (n *testNet) sealed(cfg Config) *Server {
	n.t.Helper()
	cfg.PrivateKey, cfg.ProtocolID = &testKey, testProtocolID
	return n.listen(cfg)
}

// makeToken makes a token for servers with testKey (or key) and p's
// fields over the defaults.
func makeToken(t testing.TB, key *[token.KeyBytes]byte, p token.Params) *token.ConnectToken {
	t.Helper()
	if key == nil {
		key = &testKey
	}
	if p.ProtocolID == 0 {
		p.ProtocolID = testProtocolID
	}
	if p.Expire == 0 {
		p.Expire = 30 * time.Second
	}
	if p.Timeout == 0 {
		p.Timeout = 5 * time.Second
	}
	tok, err := token.Generate(key, &p)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func dialToken(t *testing.T, addr netip.AddrPort, tok *token.ConnectToken, cfg Config) (*Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg.Token = tok
	c, err := Dial(ctx, addr.String(), cfg)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// identityApp echoes and records each connection's Identity.
type identityApp struct {
	NopHandler
	mu       sync.Mutex
	ids      []Identity
	payloads int
	discs    int
	reasons  []string
}

func (a *identityApp) OnConnect(c *Conn) {
	id, ok := c.Identity()
	if !ok {
		panic("sealed connection without an identity")
	}
	a.mu.Lock()
	a.ids = append(a.ids, id)
	a.mu.Unlock()
}

func (a *identityApp) OnPacket(c *Conn, p []byte) {
	a.mu.Lock()
	a.payloads++
	a.mu.Unlock()
	_, _ = c.Send(p)
}

func (a *identityApp) OnDisconnect(_ *Conn, r DisconnectReason, remote bool) {
	a.mu.Lock()
	a.discs++
	a.reasons = append(a.reasons, fmt.Sprintf("%v (remote %v)", r, remote))
	a.mu.Unlock()
}

// TestSealedEcho: a client proves its token over a lossy network (10 %
// loss, duplicates, reordering) that an observer taps; Data flows both
// ways sealed (the payload never appears in clear), and the server's
// Handler learns the client id and user data.
func TestSealedEcho(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		n.nw.SetLink(netsim.Link{Loss: 0.10, Duplicate: 0.05, Reorder: 0.05,
			Latency: time.Millisecond, Jitter: time.Millisecond, Seed: 7})
		app := &identityApp{}
		s := n.sealed(Config{Handler: app})
		secret := []byte("the secret payload 0123456789")
		var mu sync.Mutex
		var seen, leaked int
		n.nw.Drop = func(_, _ netip.AddrPort, b []byte) bool {
			mu.Lock()
			seen++
			if bytes.Contains(b, secret[:12]) {
				leaked++
			}
			mu.Unlock()
			return false
		}
		tok := makeToken(t, nil, token.Params{ClientID: 0xfeedface, UserData: []byte("player:alice"),
			ServerAddresses: []netip.AddrPort{s.Addr()}})
		// Room for every echo and duplicate of the at most 100 sends: the
		// recorder blocks when full.
		got := &clientRecorder{ch: make(chan []byte, 256)}
		c := n.dial(s, Config{Handler: got, Token: tok})
		// Until 5 echoes are back, at most 100 sends: loss takes some.
		echoes := 0
		for i := 0; echoes < 5; i++ {
			if i == 100 {
				t.Fatalf("%d echoes for 100 sends", echoes)
			}
			if _, err := c.Send(secret); err != nil {
				t.Fatal(err)
			}
			select {
			case p := <-got.ch:
				if !bytes.Equal(p, secret) {
					t.Fatalf("echo %d: %q", i, p)
				}
				echoes++
			case <-time.After(100 * time.Millisecond):
			}
		}
		app.mu.Lock()
		ids := app.ids
		app.mu.Unlock()
		if len(ids) != 1 || ids[0].ClientID != 0xfeedface || string(ids[0].UserData[:12]) != "player:alice" {
			t.Fatalf("identities %+v", ids)
		}
		mu.Lock()
		defer mu.Unlock()
		if seen < 15 || leaked != 0 {
			t.Fatalf("%d datagrams seen, %d with the payload in clear", seen, leaked)
		}
		if st := s.Stats(); st.Proofs != 1 || st.Accepted != 1 || st.Connections != 1 {
			t.Fatalf("stats: proofs %d, accepted %d, connections %d", st.Proofs, st.Accepted, st.Connections)
		}
	})
}

// TestSealedRefusals: each refused token ends the dial with its reason,
// counted once, and no refused client reaches the Handler or holds a slot.
func TestSealedRefusals(t *testing.T) {
	otherKey := [token.KeyBytes]byte{9, 9, 9}
	for _, tc := range []struct {
		name string
		tok  func(here []netip.AddrPort) *token.ConnectToken
		want error
		drop protocol.DropReason
	}{
		{"wrong key", func(here []netip.AddrPort) *token.ConnectToken {
			return makeToken(t, &otherKey, token.Params{ServerAddresses: here})
		}, ErrTokenInvalid, protocol.DropTokenInvalid},
		{"wrong protocol", func(here []netip.AddrPort) *token.ConnectToken {
			return makeToken(t, nil, token.Params{ProtocolID: 77, ServerAddresses: here})
		}, ErrTokenInvalid, protocol.DropTokenProtocol},
		{"foreign server", func([]netip.AddrPort) *token.ConnectToken {
			return makeToken(t, nil, token.Params{ServerAddresses: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}})
		}, ErrTokenForeignServer, protocol.DropTokenForeignServer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onSim(t, func(t *testing.T, n *testNet) {
				app := &identityApp{}
				s := n.sealed(Config{Handler: app})
				_, err := n.tryDial(s, Config{Token: tc.tok([]netip.AddrPort{s.Addr()})})
				if !errors.Is(err, tc.want) {
					t.Fatalf("dial: %v, want %v", err, tc.want)
				}
				synctest.Wait() // the server is idle: every proof is counted
				st := s.Stats()
				if st.Drops[tc.drop] != 1 {
					t.Fatalf("%v counted %d times, want once", tc.drop, st.Drops[tc.drop])
				}
				if st.Accepted != 0 || st.Connections != 0 {
					t.Fatalf("a refused token made a connection: accepted %d, connections %d", st.Accepted, st.Connections)
				}
				if len(app.ids) != 0 || app.discs != 0 {
					t.Fatalf("the Handler heard of a refused client: %d connects, %d disconnects", len(app.ids), app.discs)
				}
			})
		})
	}
}

// TestSealedExpired: a token past its expire time is refused as such.
func TestSealedExpired(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		// The server's clock is an hour ahead: every token is expired there.
		s := n.sealed(Config{Now: func() time.Time { return time.Now().Add(time.Hour) }})
		tok := makeToken(t, nil, token.Params{ServerAddresses: []netip.AddrPort{s.Addr()}})
		if _, err := n.tryDial(s, Config{Token: tok}); !errors.Is(err, ErrTokenExpired) {
			t.Fatalf("dial: %v, want %v", err, ErrTokenExpired)
		}
		synctest.Wait()
		if d := s.Stats().Drops[protocol.DropTokenExpired]; d != 1 {
			t.Fatalf("token_expired counted %d times, want once", d)
		}
	})
}

// TestSealedTokenInUse: a token proven from one address is refused from
// another while it has not expired; the first connection is untouched.
func TestSealedTokenInUse(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		s := n.sealed(Config{})
		tok := makeToken(t, nil, token.Params{ClientID: 5, ServerAddresses: []netip.AddrPort{s.Addr()}})
		first := n.dial(s, Config{Token: tok, LocalAddr: "127.0.0.2:0"})
		if _, err := n.tryDial(s, Config{Token: tok, LocalAddr: "127.0.0.3:0"}); !errors.Is(err, ErrTokenInUse) {
			t.Fatalf("second dial: %v, want %v", err, ErrTokenInUse)
		}
		synctest.Wait()
		if d := s.Stats().Drops[protocol.DropTokenInUse]; d != 1 {
			t.Fatalf("token_in_use counted %d times, want once", d)
		}
		if n := s.Len(); n != 1 || first.Err() != nil {
			t.Fatalf("%d connections (want 1), first client: %v", n, first.Err())
		}
	})
}

// TestSealedSameClientID: a second token for the same client id, proven
// from another address, replaces the first connection (reason 4): a
// client that crashed reconnects at once.
func TestSealedSameClientID(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		s := n.sealed(Config{})
		here := []netip.AddrPort{s.Addr()}
		first := n.dial(s, Config{Token: makeToken(t, nil, token.Params{ClientID: 7, ServerAddresses: here}), LocalAddr: "127.0.0.2:0"})
		second := n.dial(s, Config{Token: makeToken(t, nil, token.Params{ClientID: 7, ServerAddresses: here}), LocalAddr: "127.0.0.3:0"})
		// The network has no latency: the replacement reaches the first
		// client at the instant of the second's proof.
		if de := ended(t, first, "replacement of the first connection", time.Nanosecond); de.Reason != ReasonReplaced {
			t.Fatalf("first ended with %v, want replaced", first.Err())
		}
		synctest.Wait()
		if s.Len() != 1 || second.Err() != nil {
			t.Fatalf("%d connections (want 1), second client: %v", s.Len(), second.Err())
		}
		if _, ok := s.Conn(second.LocalAddr()); !ok {
			t.Fatal("the server's connection is not the second client's")
		}
	})
}

// clientProof is the clear header and cookie part of client c's proofs:
// its handshake's.
func clientProof(c *Client) (protocol.ConnHeader, wire.ProofCookie) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var pc wire.ProofCookie
	pc.SecretID, pc.Timestamp = c.hs.CookieOrigin()
	pc.Cookie = c.conn.cookie
	return protocol.ConnHeader{SessionID: c.conn.session, ClientID: c.conn.clientID, Tag: c.conn.tag, Kind: protocol.KindKeepAlive}, pc
}

// rawProof is a proof of tok on the handshake pc of ClientID clientID,
// sealed by a fresh sealer salted with pc's cookie (counter 0), and the
// opener for the server's answers.
func rawProof(t *testing.T, clientID uint8, pc *wire.ProofCookie, tok *token.ConnectToken) ([]byte, *seal.Opener) {
	t.Helper()
	next, rx := rawProofs(t, clientID, pc, tok)
	return next(), rx
}

// rawProofs is rawProof's sealer: each call of next is the client's next
// proof (next Seq, next counter), as its resends are.
func rawProofs(t *testing.T, clientID uint8, pc *wire.ProofCookie, tok *token.ConnectToken) (next func() []byte, rx *seal.Opener) {
	t.Helper()
	salt := (*[seal.SaltBytes]byte)(pc.Cookie[:seal.SaltBytes])
	var tx seal.Sealer
	rx = new(seal.Opener)
	tx.Init(&tok.ClientToServerKey, salt)
	rx.Init(&tok.ServerToClientKey, salt)
	serverSeq, clientSeq := cookie.Sequences(&pc.Cookie)
	h := protocol.ConnHeader{ClientID: clientID, Tag: cookie.SessionTag(&pc.Cookie), Seq: clientSeq,
		Ack: (serverSeq + protocol.SeqModulus - 1) % protocol.SeqModulus, Kind: protocol.KindKeepAlive}
	req := tok.Request()
	body, _ := req.AppendBinary(nil)
	return func() []byte {
		buf := make([]byte, 1500)
		n := wire.SealProof(buf, wire.Magic{}, &h, pc, body, &tx)
		if n == 0 {
			t.Fatal("SealProof refused")
		}
		h.Seq = (h.Seq + 1) % protocol.SeqModulus
		return buf[:n]
	}, rx
}

// TestSealedNoStateBeforeProof: a valid Response gets its Ack and creates
// nothing; the server holds no connection, no map entry and no place for
// a client that proves no token, and the Handler never hears of it.
func TestSealedNoStateBeforeProof(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		app := &identityApp{}
		s := n.sealed(Config{Handler: app})
		for range 3 {
			p := n.peer(s, "127.0.0.1:0")
			p.handshake()
			synctest.Wait()
			if _, ok := s.Conn(p.addr()); ok {
				t.Fatal("a connection exists before its proof")
			}
		}
		if st := s.Stats(); s.Len() != 0 || st.Accepted != 0 || s.tab.count.Load() != 0 {
			t.Fatalf("after three tokenless handshakes: Len %d, accepted %d, entries %d", s.Len(), st.Accepted, s.tab.count.Load())
		}
		if len(app.ids) != 0 || app.discs != 0 {
			t.Fatalf("the Handler heard of a client without a proof")
		}
	})
}

// TestSealedProofReplay: a proof is bound to its handshake's cookie and
// address. Replayed from another address it fails the cookie's address
// check (bad_cookie); moved onto a new handshake (another cookie) it fails
// the inner seal; replayed at its own address after the connection closed
// it does not recreate it (replayed_cookie); a proof whose KeepAlive was
// lost is answered again (late_proof) and creates nothing more.
func TestSealedProofReplay(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		app := &identityApp{}
		clk := &clock{}
		s := n.sealed(Config{Handler: app, Now: clk.Now})
		tok := makeToken(t, nil, token.Params{ClientID: 42, ServerAddresses: []netip.AddrPort{s.Addr()}})
		p := n.peer(s, "127.0.0.1:0")
		pc := p.handshake()
		next, rx := rawProofs(t, p.clientID, &pc, tok)
		// counted fails unless the server, idle again, counted drop once
		// since drops.
		counted := func(drops [protocol.NumDropReasons]uint64, drop protocol.DropReason) {
			t.Helper()
			synctest.Wait()
			if d := s.Stats().Drops[drop] - drops[drop]; d != 1 {
				t.Fatalf("%v counted %d times, want once", drop, d)
			}
		}

		// From another address: the cookie is not that address's.
		other := n.peer(s, "127.0.0.1:0")
		drops := s.Stats().Drops
		other.send(next())
		counted(drops, protocol.DropBadCookie)

		// The proof's request body and seal on a new handshake of the same
		// address: the inner seal was salted with the old cookie. (A
		// handshake at the same instant would get the same cookie.)
		advance(time.Millisecond)
		pc2 := p.handshake()
		if pc2.Cookie == pc.Cookie {
			t.Fatal("the second handshake got the first one's cookie")
		}
		moved := next()
		o := wire.ConnHeaderOffset(wire.Magic{}) + 4
		moved[o] = pc2.SecretID
		binary.LittleEndian.PutUint64(moved[o+1:], math.Float64bits(pc2.Timestamp))
		copy(moved[o+9:], pc2.Cookie[:])
		binary.LittleEndian.PutUint32(moved[o-4:], cookie.SessionTag(&pc2.Cookie))
		drops = s.Stats().Drops
		p.send(moved)
		counted(drops, protocol.DropProofForged)
		if s.Len() != 0 {
			t.Fatal("a moved proof made a connection")
		}

		// The genuine proof: in, answered at once with a sealed KeepAlive.
		// Its answer must come before any time passes: a KeepAlive the
		// connection's timer sends later would prove nothing.
		answer := func(what string) {
			t.Helper()
			reply, ok := p.recv(time.Nanosecond)
			if !ok {
				t.Fatalf("no answer to the %s", what)
			}
			var g protocol.ConnHeader
			if _, r := wire.DecodeSealed(wire.Magic{}, reply, &g); r != protocol.DropNone {
				t.Fatalf("answer to the %s: %v", what, r)
			}
			if _, _, r := wire.OpenConn(wire.Magic{}, reply, &g, rx); r != protocol.DropNone || g.Kind != protocol.KindKeepAlive {
				t.Fatalf("answer to the %s: %v %v", what, r, g.Kind)
			}
		}
		p.send(next())
		answer("proof")
		synctest.Wait()
		if s.Len() != 1 {
			t.Fatalf("%d connections after the proof, want 1", s.Len())
		}
		sc, ok := s.Conn(p.addr())
		if !ok {
			t.Fatal("no connection at the proof's address")
		}
		// A second proof on the same handshake (the KeepAlive was lost): the
		// KeepAlive again, nothing more.
		drops = s.Stats().Drops
		clk.Advance(proofResendInterval) // the client's resend interval, on the server's clock only
		p.send(next())
		answer("late proof: a lost first KeepAlive would not recover")
		counted(drops, protocol.DropLateProof)
		if s.Len() != 1 || s.Stats().Accepted != 1 {
			t.Fatalf("a late proof made another connection: Len %d", s.Len())
		}

		// Closed: the same proof replayed while its cookie is still valid
		// recreates nothing.
		sc.Close()
		synctest.Wait()
		if s.Len() != 0 {
			t.Fatalf("%d connections after Close", s.Len())
		}
		for {
			if _, ok := p.recv(time.Nanosecond); !ok { // the Disconnects, sent at once
				break
			}
		}
		// An observed proof the dedupe table no longer holds.
		drops = s.Stats().Drops
		p.send(next())
		p.silent("a proof replayed after its connection closed")
		counted(drops, protocol.DropReplayedCookie)
		if s.Len() != 0 || s.Stats().Accepted != 1 {
			t.Fatalf("a replayed proof recreated the connection: Len %d, accepted %d", s.Len(), s.Stats().Accepted)
		}
	})
}

// TestFloodTokenlessHandshakes: 10,000 valid handshakes without tokens (no
// per-address limits) do not stop a client with a token from connecting. It is a race between the
// player's proof and a thousand newer handshakes, which the race detector
// distorts (it slows the player's goroutines more than the generator's
// batches), so it runs in the test command's pass without it, with the
// other floods.
func TestFloodTokenlessHandshakes(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 handshakes")
	}
	if raceEnabled {
		t.Skip("timing under the race detector is not the server's; scripts/test.sh runs it without")
	}
	s := sealedListen(t, Config{MaxClientsPerIP: -1, MaxClientsPerPrefix: -1, ChallengeRate: -1})
	g, err := loadgen.New(loadgen.Config{Server: s.Addr(), Mode: loadgen.ModeData, Clients: 10_000, Sockets: 4, Window: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = g.Connect(ctx)
	}()
	// Connect while the flood is under way: once its clients have heard
	// 2,000 Acks (sealed Acks: each ends its client, token required).
	actx, acancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer acancel()
	if !g.Await(actx, func(c *loadgen.Counters) bool { return c.TokenRequired >= 2000 }) {
		t.Fatalf("the flood's clients heard %d sealed Acks, want 2,000", g.Counters().TokenRequired)
	}
	tok := makeToken(t, nil, token.Params{ClientID: 1, ServerAddresses: []netip.AddrPort{s.Addr()}})
	c, err := dialToken(t, s.Addr(), tok, Config{LocalAddr: "127.0.0.9:0"})
	if err != nil {
		t.Fatalf("a client with a token could not connect during the flood: %v", err)
	}
	<-done
	if _, err := c.Send([]byte("still here")); err != nil {
		t.Fatal(err)
	}
	// The connections before Close, which ends them; the counters after
	// it: Close returns once the receive loops have stopped, each having
	// published the counters of its last batch (an Ack can reach the
	// generator before its loop publishes it).
	conns := s.Stats().Connections
	s.Close()
	st := s.Stats()
	t.Logf("acks %d, accepted %d, connections %d", st.HandshakeOut[protocol.TypeAck], st.Accepted, conns)
	if st.HandshakeOut[protocol.TypeAck] < 10_000 || st.Accepted != 1 || conns != 1 {
		t.Fatalf("acks %d, accepted %d, connections %d: want every handshake Acked and only the player's connection", st.HandshakeOut[protocol.TypeAck], st.Accepted, conns)
	}
}

// observer is an on-path attacker: it sees every datagram between one
// client and the server (Challenges included) and sends from its own
// socket.
type observer struct {
	mu                 sync.Mutex
	server             netip.AddrPort
	toServer, toClient [][]byte // the datagrams each way, in order
	pc                 net.PacketConn
}

// drop is the network's Drop: it records p and loses nothing.
func (o *observer) drop(from, to netip.AddrPort, p []byte) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case to == o.server:
		o.toServer = append(o.toServer, bytes.Clone(p))
	case from == o.server:
		o.toClient = append(o.toClient, bytes.Clone(p))
	}
	return false
}

func (o *observer) last(pred func([]byte) bool) []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return lastOf(o.toServer, pred)
}

func (o *observer) lastToClient(pred func([]byte) bool) []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return lastOf(o.toClient, pred)
}

func lastOf(list [][]byte, pred func([]byte) bool) []byte {
	for i := len(list) - 1; i >= 0; i-- {
		if pred(list[i]) {
			return bytes.Clone(list[i])
		}
	}
	return nil
}

// TestSealedOnPathObserver: an attacker who sees every packet, Challenges
// included, cannot replay, modify or inject Data, disconnect the client, or
// move its connection with the Challenge's cookie; each attempt is a step.
func TestSealedOnPathObserver(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		app := &identityApp{}
		s := n.sealed(Config{Handler: app})
		o := &observer{server: s.Addr()}
		n.nw.Drop = o.drop
		ep, err := n.nw.Bind(netip.MustParseAddrPort("127.0.0.7:0"))
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close()
		o.pc = ep.PacketConn()
		to := net.UDPAddrFromAddrPort(s.Addr())
		tok := makeToken(t, nil, token.Params{ServerAddresses: []netip.AddrPort{s.Addr()}})
		got := &clientRecorder{ch: make(chan []byte, 64)}
		c := n.dial(s, Config{Handler: got, Token: tok})
		if _, err := c.Send([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		within(t, "echo", time.Nanosecond, got.ch)
		at := c.Conn().RemoteAddr()
		var conn *Conn
		s.Range(func(x *Conn) bool { conn = x; return false })
		home := conn.RemoteAddr()
		data := o.last(func(b []byte) bool { return len(b) == wire.SealedConnLen(wire.Magic{}, 5) })
		if data == nil {
			t.Fatal("the observer saw no sealed Data packet")
		}
		// Each attack comes from the observer's own address (it cannot
		// spoof the client's); each must be dropped want times by its
		// reason, move nothing and get nothing back.
		attack := func(what string, drop protocol.DropReason, want uint64, pkts ...[]byte) {
			t.Helper()
			before := s.Stats().Drops[drop]
			for _, p := range pkts {
				o.pc.WriteTo(p, to)
			}
			synctest.Wait()
			if d := s.Stats().Drops[drop] - before; d != want {
				t.Fatalf("%s: %v counted %d times, want %d", what, drop, d, want)
			}
			if conn.RemoteAddr() != home || s.Stats().Migrations != 0 {
				t.Fatalf("%s: the connection moved from %v to %v", what, home, conn.RemoteAddr())
			}
			o.pc.SetReadDeadline(time.Now().Add(time.Nanosecond))
			if n, _, err := o.pc.ReadFrom(make([]byte, 2048)); err == nil {
				t.Fatalf("%s: the server answered the observer with %d bytes", what, n)
			}
		}
		var h protocol.ConnHeader
		wire.DecodeSealed(wire.Magic{}, data, &h)
		buf := make([]byte, 1500)

		// Replay: its counter is not new; it neither moves the connection
		// nor reaches the application.
		attack("replay", protocol.DropSealedReplay, 5, data, data, data, data, data)

		// Modify: a new counter (else it is a replay), and a flipped
		// payload bit.
		forged := bytes.Clone(data)
		off := wire.ConnHeaderOffset(wire.Magic{})
		forged[off+4+6] ^= 1
		forged[len(forged)-20] ^= 1
		attack("modify", protocol.DropSealedForged, 1, forged)

		// Inject: the connection's Tag and ClientID, any key but its own,
		// a counter it has not seen.
		var wrong sealStateForTest
		wrong.init()
		hd := h
		hd.Kind = protocol.KindData
		for range 1000 {
			wire.SealConn(buf, wire.Magic{}, &hd, []byte("evil"), &wrong.s.tx)
		}
		size := wire.SealConn(buf, wire.Magic{}, &hd, []byte("evil"), &wrong.s.tx)
		attack("inject", protocol.DropSealedForged, 1, bytes.Clone(buf[:size]))

		// Disconnect in clear, from an address no connection holds: a
		// Disconnect is never answered, and touches no connection.
		hd = h
		hd.Kind = protocol.KindDisconnect
		size = wire.EncodeConn(buf, wire.Magic{}, &hd, []byte{1})
		attack("disconnect in clear", protocol.DropTokenRequired, 1, bytes.Clone(buf[:size]))

		// Restart with the authorised cookie: the observer saw the
		// Challenge whose cookie the client's proof carries (a sealed
		// client sends no Response, so there is no Ack), so it knows the
		// authorised cookie, and it can get a Challenge for its own
		// address; the RestartResponse it then makes would move an
		// unsealed connection.
		ack := o.lastToClient(func(b []byte) bool {
			var hs protocol.Handshake
			return wire.DecodeHandshake(wire.Magic{}, b, &hs) == protocol.DropNone && hs.Type == protocol.TypeChallenge
		})
		if ack == nil {
			t.Fatal("the observer saw no Challenge")
		}
		var ackH protocol.Handshake
		wire.DecodeHandshake(wire.Magic{}, ack, &ackH)
		ini := protocol.Handshake{Type: protocol.TypeInitial, Restart: true, ClientID: h.ClientID, MinVersion: 3, CurVersion: 4, RandomLen: 16}
		size = wire.EncodeHandshake(buf, wire.Magic{}, &ini)
		o.pc.WriteTo(buf[:size], to)
		o.pc.SetReadDeadline(time.Now().Add(time.Nanosecond))
		rn, _, err := o.pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("no Challenge for the observer: %v", err)
		}
		var ch protocol.Handshake
		if r := wire.DecodeHandshake(wire.Magic{}, buf[:rn], &ch); r != protocol.DropNone || ch.Type != protocol.TypeChallenge {
			t.Fatalf("reply %v %v", r, ch.Type)
		}
		rr := protocol.Handshake{Type: protocol.TypeRestartResponse, Restart: true, ClientID: h.ClientID, MinVersion: 3, CurVersion: 4,
			RandomLen: 16, SessionID: ch.SessionID, SecretID: ch.SecretID, Timestamp: ch.Timestamp, Cookie: ch.Cookie, OrigCookie: ackH.Cookie}
		size = wire.EncodeHandshake(buf, wire.Magic{}, &rr)
		attack("restart with the authorised cookie", protocol.DropUnexpectedType, 1, bytes.Clone(buf[:size]))

		app.mu.Lock()
		payloads, discs := app.payloads, app.discs
		app.mu.Unlock()
		if payloads != 1 || discs != 0 {
			t.Fatalf("the application saw %d payloads and %d disconnects (%v); want 1 and 0", payloads, discs, app.reasons)
		}
		// The client still works, from where it was.
		if _, err := c.Send([]byte("still")); err != nil {
			t.Fatal(err)
		}
		within(t, "echo after the attacks", time.Nanosecond, got.ch)
		if c.Conn().RemoteAddr() != at {
			t.Fatal("client side moved")
		}
	})
}

// TestSealedMigration: a sealed client whose address changes (its NAT
// rebound) is followed by the server on its first sealed packet from the
// new address, with no handshake. On loopback too: Rebind takes a new
// kernel port.
func TestSealedMigration(t *testing.T) {
	onBoth(t, func(t *testing.T, n *testNet) {
		app := &identityApp{}
		s := n.sealed(Config{Handler: app})
		tok := makeToken(t, nil, token.Params{ServerAddresses: []netip.AddrPort{s.Addr()}})
		got := &clientRecorder{ch: make(chan []byte, 16)}
		c := n.dial(s, Config{Handler: got, Token: tok})
		old := c.LocalAddr()
		if err := c.Rebind(); err != nil {
			t.Fatal(err)
		}
		if c.LocalAddr() == old {
			t.Fatal("Rebind kept the address")
		}
		if _, err := c.Send([]byte("from the new address")); err != nil {
			t.Fatal(err)
		}
		if p := within(t, "echo after the address changed", 5*time.Second, got.ch); string(p) != "from the new address" {
			t.Fatalf("echo %q", p)
		}
		if st := s.Stats(); st.Migrations != 1 || st.Connections != 1 {
			t.Fatalf("migrations %d, connections %d", st.Migrations, st.Connections)
		}
	})
}

// sealStateForTest is a sealState under an unrelated key.
type sealStateForTest struct{ s sealState }

func (x *sealStateForTest) init() {
	var k [32]byte
	k[0] = 0xee
	x.s.tx.Init(&k, nil)
}

// TestSealedAlloc: receiving a sealed Data packet (open, sequence state,
// handler echo, seal) allocates nothing.
func TestSealedAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("the race runtime allocates; run without -race")
	}
	// The rounds come as fast as the CPU goes: no inbound budget.
	s := sealedListen(t, Config{Sockets: 1, Handler: &identityApp{}, InboundPacketRate: -1})
	tok := makeToken(t, nil, token.Params{ServerAddresses: []netip.AddrPort{s.Addr()}})
	c, err := dialToken(t, s.Addr(), tok, Config{})
	if err != nil {
		t.Fatal(err)
	}
	cc := c.Conn()
	l := newLoop(s, 0, s.socks[0], 8, seconds(time.Now()))
	payload := []byte("position update 0123456789")
	receive := func() {
		cc.mu.Lock()
		seq, ack, bits, _, _ := cc.seq.Send(seconds(time.Now()))
		h := protocol.ConnHeader{SessionID: cc.session, ClientID: cc.clientID, Tag: cc.tag, Seq: seq, Ack: ack, AckBits: bits, Kind: protocol.KindData}
		m := &l.rb.Msgs[0]
		m.N = wire.SealConn(m.Buf, s.st.magic, &h, payload, &cc.sec.tx)
		cc.mu.Unlock()
		m.Addr = c.LocalAddr()
		l.batch(1, time.Now())
	}
	before := s.Stats().ConnPacketsIn
	if n := testing.AllocsPerRun(1000, receive); n != 0 {
		t.Errorf("receiving sealed Data: %v allocs per packet", n)
	}
	if got := l.cnt.local[cConnIn]; got < 1000 {
		t.Fatalf("only %d packets reached the connection (stats before %d, drops %v)", got, before, l.cnt.local[:protocol.NumDropReasons])
	}
}

// TestSealedFullAtProof: a client whose handshake got in while the server
// had room, but whose proof comes after another client took the last
// place, is refused with a sealed Disconnect, reason 9 (server full),
// that it can open with its token's key.
func TestSealedFullAtProof(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		s := n.sealed(Config{MaxClients: 1})
		tok := makeToken(t, nil, token.Params{ClientID: 1, ServerAddresses: []netip.AddrPort{s.Addr()}})
		// The raw peer's handshake: nothing kept, no place taken.
		p := n.peer(s, "127.0.0.1:0")
		pc := p.handshake()
		// Another client proves and takes the one place.
		other := makeToken(t, nil, token.Params{ClientID: 2, ServerAddresses: []netip.AddrPort{s.Addr()}})
		n.dial(s, Config{Token: other, LocalAddr: "127.0.0.2:0"})
		// Now the raw peer proves; the refusal comes at once.
		proof, rx := rawProof(t, p.clientID, &pc, tok)
		size := len(proof)
		p.send(proof)
		reply, ok := p.recv(time.Nanosecond)
		if !ok {
			t.Fatal("no refusal")
		}
		var g protocol.ConnHeader
		if _, r := wire.DecodeSealed(wire.Magic{}, reply, &g); r != protocol.DropNone {
			t.Fatalf("refusal not sealed: %v (%d bytes)", r, len(reply))
		}
		payload, ctr, r := wire.OpenConn(wire.Magic{}, reply, &g, rx)
		if r != protocol.DropNone || g.Kind != protocol.KindDisconnect || payload[0] != protocol.DisconnectServerFull ||
			ctr != wire.RefusalCounter(protocol.DisconnectServerFull) {
			t.Fatalf("refusal: %v, kind %v, payload %v", r, g.Kind, payload)
		}
		if len(reply) > size {
			t.Fatalf("refusal of %d bytes to a %d-byte proof", len(reply), size)
		}
		synctest.Wait()
		if d := s.Stats().DeniedFull; d != 1 {
			t.Fatalf("the refusal counted %d times, want once", d)
		}
		if s.Len() != 1 {
			t.Fatalf("%d connections, want 1", s.Len())
		}
	})
}

// TestSealedProofSteered: with kernel steering, a proof (a connection
// packet by its bit, but exactly ProofLen bytes with netcode's version
// info at ProofVersionOffset) reaches a handshake socket, so a proof
// flood queues with the handshakes, never ahead of the players' packets.
func TestSealedProofSteered(t *testing.T) {
	s := sealedListen(t, Config{Sockets: 4})
	steered := false
	for _, so := range s.socks {
		steered = steered || so.Class() == batchio.ClassBitSet
	}
	if !steered {
		t.Skip("kernel steering is not available here")
	}
	tok := makeToken(t, nil, token.Params{ClientID: 9, ServerAddresses: []netip.AddrPort{s.Addr()}})
	p := newRawPeer(t, s, "127.0.0.1:0")
	pc := p.handshake()
	before := s.SocketStats()
	proof, _ := rawProof(t, p.clientID, &pc, tok)
	p.send(proof)
	if _, ok := p.recv(5 * time.Second); !ok {
		t.Fatal("no answer to the proof")
	}
	after := s.SocketStats()
	for i, so := range s.socks {
		if after[i].RxBytes-before[i].RxBytes == uint64(len(proof)) {
			if so.Class() != batchio.ClassBitSet {
				t.Fatalf("the proof reached socket %d of class %v, not a handshake socket", i, so.Class())
			}
			return
		}
	}
	t.Fatalf("no socket received the proof alone: before %+v, after %+v", before, after)
}

// TestSealedAcceptHook: a sealed server asks Config.Accept at the proof
// and refuses with the sealed reason 13, which Dial reports as Denied(2),
// keeping nothing.
func TestSealedAcceptHook(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		s := n.sealed(Config{Accept: func(netip.AddrPort) error { return errors.New("banned") }})
		tok := makeToken(t, nil, token.Params{ServerAddresses: []netip.AddrPort{s.Addr()}})
		_, err := n.tryDial(s, Config{Token: tok})
		var de *DeniedError
		if !errors.As(err, &de) || de.Reason != protocol.DeniedRefused {
			t.Fatalf("dial: %v, want Denied(%d)", err, protocol.DeniedRefused)
		}
		synctest.Wait()
		if st := s.Stats(); st.Accepted != 0 || s.Len() != 0 || st.DeniedRefused != 1 {
			t.Fatalf("accepted %d, connections %d, refused %d; want 0, 0, 1", st.Accepted, s.Len(), st.DeniedRefused)
		}
	})
}
