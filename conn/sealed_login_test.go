package conn

import (
	"bytes"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seal"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/netsim"
	"github.com/udpgate/udpgate/token"
)

// pathTap records every datagram a netsim network carries to one address,
// as an on-path observer would see them.
type pathTap struct {
	mu  sync.Mutex
	to  netip.AddrPort
	got [][]byte
}

func (p *pathTap) drop(_, to netip.AddrPort, b []byte) bool {
	if to == p.to {
		p.mu.Lock()
		p.got = append(p.got, bytes.Clone(b))
		p.mu.Unlock()
	}
	return false
}

// lastHandshake returns the newest handshake packet of type typ seen.
func (p *pathTap) lastHandshake(typ protocol.PacketType) (protocol.Handshake, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.got) - 1; i >= 0; i-- {
		var h protocol.Handshake
		if wire.DecodeHandshake(wire.Magic{}, p.got[i], &h) == protocol.DropNone && h.Type == typ {
			return h, true
		}
	}
	return protocol.Handshake{}, false
}

// echoes sends n Data packets and counts the echoes that come back within
// a virtual second each.
func echoes(t *testing.T, cli *Client, got chan string, n int) int {
	t.Helper()
	ok := 0
	for i := range n {
		if _, err := cli.Send([]byte{'e', byte(i)}); err != nil {
			t.Fatalf("send %d: %v (%v)", i, err, cli.Err())
		}
		select {
		case <-got:
			ok++
		case <-time.After(time.Second):
		}
	}
	return ok
}

// TestSealedObserverCannotReplace is issue 19's observer attack: from the
// player's address, an Initial with another ClientID, then (having read
// the Challenge on the path) the matching Response. Unsealed, that new
// handshake replaces the connection (§5.2); sealed, it must leave the
// proven connection and its echoes untouched, as must any other packet in
// clear (a Disconnect with the connection's Tag, a RestartResponse).
func TestSealedObserverCannotReplace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 16 * time.Millisecond})
		app := &identityApp{}
		srv := simListen(t, nw, Config{Handler: app, PrivateKey: &testKey, ProtocolID: testProtocolID})
		tok := makeToken(t, nil, token.Params{ServerAddresses: []netip.AddrPort{simServerAddr}})
		got := make(chan string, 64)
		cli, err := simDial(t, nw, Config{Handler: simRecorder{got: got}, Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		player := cli.LocalAddr()
		tap := &pathTap{to: player}
		nw.Drop = tap.drop
		if n := echoes(t, cli, got, 3); n != 3 {
			t.Fatalf("%d of 3 echoes before the attack", n)
		}
		sc, ok := srv.Conn(player)
		if !ok {
			t.Fatal("no server connection")
		}
		other := (cli.Conn().ClientID() + 1) % 8
		buf := make([]byte, 256)
		// 1. An Initial with another ClientID, spoofed from the player.
		ini := protocol.Handshake{Type: protocol.TypeInitial, ClientID: other, MinVersion: 3, CurVersion: 4, RandomLen: 16}
		n := wire.EncodeHandshake(buf, wire.Magic{}, &ini)
		nw.Deliver(player, simServerAddr, bytes.Clone(buf[:n]))
		time.Sleep(40 * time.Millisecond)
		ch, ok := tap.lastHandshake(protocol.TypeChallenge)
		if !ok {
			t.Fatal("the observer saw no Challenge on the path")
		}
		// 2. The matching Response, as read on the path.
		rsp := protocol.Handshake{Type: protocol.TypeResponse, ClientID: other, MinVersion: 3, CurVersion: 4, RandomLen: 16,
			SessionID: ch.SessionID, SecretID: ch.SecretID, Timestamp: ch.Timestamp, Cookie: ch.Cookie}
		n = wire.EncodeHandshake(buf, wire.Magic{}, &rsp)
		nw.Deliver(player, simServerAddr, bytes.Clone(buf[:n]))
		// 3. A Disconnect in clear with the connection's Tag and ClientID.
		hd := protocol.ConnHeader{ClientID: sc.ClientID(), Tag: sc.tag, Seq: 1, Kind: protocol.KindDisconnect}
		n = wire.EncodeConn(buf, wire.Magic{}, &hd, []byte{byte(ReasonClosed)})
		nw.Deliver(player, simServerAddr, bytes.Clone(buf[:n]))
		// 4. A RestartResponse with the connection's cookie.
		rr := rsp
		rr.Type, rr.Restart, rr.ClientID, rr.OrigCookie = protocol.TypeRestartResponse, true, sc.ClientID(), sc.cookie
		n = wire.EncodeHandshake(buf, wire.Magic{}, &rr)
		nw.Deliver(player, simServerAddr, bytes.Clone(buf[:n]))
		time.Sleep(100 * time.Millisecond)

		st := srv.Stats()
		if st.Drops[protocol.DropSealedHeld] != 1 || st.Connections != 1 || st.Accepted != 1 {
			t.Fatalf("sealed_held %d, connections %d, accepted %d; want 1, 1, 1",
				st.Drops[protocol.DropSealedHeld], st.Connections, st.Accepted)
		}
		if now, ok := srv.Conn(player); !ok || now != sc || sc.closed.Load() {
			t.Fatal("the proven connection was replaced or closed")
		}
		if n := echoes(t, cli, got, 10); n != 10 {
			t.Fatalf("the player got %d of 10 echoes after the attack", n)
		}
		if err := cli.Err(); err != nil {
			t.Fatalf("the client's connection ended: %v", err)
		}
		app.mu.Lock()
		discs := app.discs
		app.mu.Unlock()
		if discs != 0 {
			t.Fatalf("the application saw %d disconnects", discs)
		}
	})
}

// TestSimTokenRequired: a client without a token that dials a sealed
// server learns why one round trip after its Ack: its first packet (sent
// at once, padded to a Disconnect's size) is answered with a Disconnect in
// clear, reason 11, and the client's Err matches ErrTokenRequired.
func TestSimTokenRequired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		const oneWay = 20 * time.Millisecond
		nw.SetLink(netsim.Link{Latency: oneWay})
		srv := simListen(t, nw, Config{Handler: simEcho{}, PrivateKey: &testKey, ProtocolID: testProtocolID})
		start := time.Now()
		cli, err := simDial(t, nw, Config{})
		if err != nil {
			t.Fatal(err)
		}
		dialed := time.Since(start)
		<-cli.Done()
		learned := time.Since(start)
		if err := cli.Err(); !errors.Is(err, ErrTokenRequired) {
			t.Fatalf("Err %v, want ErrTokenRequired", err)
		}
		if dialed != 4*oneWay || learned != 6*oneWay {
			t.Fatalf("Dial returned after %v and the refusal came after %v; want %v and %v", dialed, learned, 4*oneWay, 6*oneWay)
		}
		st := srv.Stats()
		if st.Drops[protocol.DropTokenRequired] != 1 || st.Connections != 0 {
			t.Fatalf("token_required %d, connections %d", st.Drops[protocol.DropTokenRequired], st.Connections)
		}
	})
}

// TestSimTokenRequiredNoAmplification: a connection packet in clear
// shorter than the Disconnect that would answer it gets no answer, and a
// flood of larger ones gets at most one answer per ProofResendInterval.
func TestSimTokenRequiredNoAmplification(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 5 * time.Millisecond})
		srv := simListen(t, nw, Config{Handler: simEcho{}, PrivateKey: &testKey, ProtocolID: testProtocolID})
		var toClient, fromClient, bytesTo, bytesFrom int
		var mu sync.Mutex
		// The client's own first packet is lost: the test sends the
		// packets in clear itself.
		var cliAddr netip.AddrPort
		nw.Drop = func(from, to netip.AddrPort, p []byte) bool {
			mu.Lock()
			defer mu.Unlock()
			if to == simServerAddr && from == cliAddr {
				fromClient++
				bytesFrom += len(p)
			}
			if from == simServerAddr && to == cliAddr {
				toClient++
				bytesTo += len(p)
			}
			return false
		}
		cli, err := simDial(t, nw, Config{})
		if err != nil {
			t.Fatal(err)
		}
		<-cli.Done()
		mu.Lock()
		cliAddr = cli.LocalAddr()
		mu.Unlock()
		sc, ok := srv.Conn(cliAddr)
		if !ok {
			t.Fatal("the unproven connection is gone")
		}
		buf := make([]byte, 64)
		send := func(seq uint16, pad int) {
			h := protocol.ConnHeader{ClientID: sc.ClientID(), Tag: sc.tag, Seq: seq, Kind: protocol.KindKeepAlive}
			n := wire.EncodeConn(buf, wire.Magic{}, &h, make([]byte, pad))
			nw.Deliver(cliAddr, simServerAddr, bytes.Clone(buf[:n]))
		}
		// 100 unpadded KeepAlives (one byte shorter than the notice):
		// nothing back.
		for i := range 100 {
			send(uint16(100+i), 0)
		}
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		if toClient != 0 {
			t.Fatalf("%d replies to KeepAlives shorter than the notice", toClient)
		}
		mu.Unlock()
		// 1000 padded ones over one second: at most one notice per
		// ProofResendInterval.
		for i := range 1000 {
			send(uint16(200+i), 1)
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		if max := int(time.Second/ProofResendInterval) + 1; toClient > max || toClient == 0 || bytesTo > bytesFrom {
			t.Fatalf("%d notices (%d bytes) for %d packets (%d bytes); want 1..%d", toClient, bytesTo, fromClient, bytesFrom, max)
		}
	})
}

// TestSimProofFlood is issue 19's proof flood from one valid token: four
// unproven connections (tokenless handshakes from four sources) resend
// proofs carrying one stolen token's request body with a broken inner seal,
// about 10,000 a second in all for two seconds of virtual time, each a new
// proof, except that one source repeats a single proof. The server opens
// tokens only within each source's proof budget (twice a client's rate)
// and never twice for the same proof; players connected meanwhile lose no
// echo, their round trips stay the link's, and a new login succeeds
// during the flood.
func TestSimProofFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		const oneWay = 10 * time.Millisecond
		nw.SetLink(netsim.Link{Latency: oneWay})
		srv := simListen(t, nw, Config{Handler: simEcho{}, PrivateKey: &testKey, ProtocolID: testProtocolID})
		mk := func(id uint64) *token.ConnectToken {
			return makeToken(t, nil, token.Params{ClientID: id, ServerAddresses: []netip.AddrPort{simServerAddr}})
		}
		type player struct {
			cli *Client
			got chan string
		}
		var players []player
		for i := range 4 {
			got := make(chan string, 64)
			cli, err := simDial(t, nw, Config{Handler: simRecorder{got: got}, Token: mk(uint64(100 + i))})
			if err != nil {
				t.Fatal(err)
			}
			players = append(players, player{cli, got})
		}
		// The attackers: four tokenless handshakes, whose unproven
		// connections wait for a proof until the proof timeout.
		stolen := mk(7)
		body, _ := func() ([]byte, error) { r := stolen.Request(); return r.AppendBinary(nil) }()
		var tx seal.Sealer
		var wrong [token.KeyBytes]byte
		var salt [seal.SaltBytes]byte
		tx.Init(&wrong, &salt)
		type attacker struct {
			addr netip.AddrPort
			h    protocol.ConnHeader
		}
		var atk []attacker
		for range 4 {
			cli, err := simDial(t, nw, Config{})
			if err != nil {
				t.Fatal(err)
			}
			a := cli.LocalAddr()
			<-cli.Done() // told: token required
			sc, ok := srv.Conn(a)
			if !ok {
				t.Fatal("no unproven connection for the attacker")
			}
			atk = append(atk, attacker{a, protocol.ConnHeader{ClientID: sc.ClientID(), Tag: sc.tag, Kind: protocol.KindKeepAlive}})
		}
		buf := make([]byte, 2048)
		n := wire.SealProof(buf, wire.Magic{}, &atk[0].h, body, &tx)
		same := bytes.Clone(buf[:n])
		before := srv.Stats().Drops
		const perMs, dur = 5, 2 * time.Second
		var rtts []time.Duration
		lost, sent, floodSent := 0, 0, 0
		var newcomer *Client
		var newErr error
		loginDone := make(chan struct{})
		start := time.Now()
		for tick := 0; time.Since(start) < dur; tick++ {
			for i := range atk {
				for range perMs {
					floodSent++
					if i == 0 {
						nw.Deliver(atk[i].addr, simServerAddr, same)
						continue
					}
					n := wire.SealProof(buf, wire.Magic{}, &atk[i].h, body, &tx)
					nw.Deliver(atk[i].addr, simServerAddr, bytes.Clone(buf[:n]))
				}
			}
			if tick == 500 {
				go func() {
					defer close(loginDone)
					newcomer, newErr = simDial(t, nw, Config{Token: mk(200)})
				}()
			}
			if tick%20 == 0 {
				for _, p := range players {
					sent++
					p.cli.Send([]byte("ping"))
				}
				t0 := time.Now()
				for _, p := range players {
					select {
					case <-p.got:
						rtts = append(rtts, time.Since(t0))
					case <-time.After(10 * oneWay):
						lost++
					}
				}
				continue
			}
			time.Sleep(time.Millisecond)
		}
		<-loginDone
		if newErr != nil || newcomer == nil {
			t.Fatalf("a new login failed during the flood: %v", newErr)
		}
		after := srv.Stats().Drops
		opened := after[protocol.DropProofForged] - before[protocol.DropProofForged]
		shed := after[protocol.DropProofLimited] - before[protocol.DropProofLimited]
		// Per source: a burst of 2×ProofRate, then ProofRate a second;
		// the source repeating one proof opens it once.
		maxOpened := uint64(3 * (2*handshake.ProofRate + handshake.ProofRate*int(dur/time.Second) + 1))
		t.Logf("%d proofs sent, %d tokens opened, %d shed; players: %d echoes of %d, max RTT %v; network %+v",
			floodSent, opened, shed, len(rtts), sent, slicesMax(rtts), nw.Stats())
		if opened+shed < uint64(floodSent)*99/100 {
			t.Fatalf("%d proofs sent, but only %d opened or shed", floodSent, opened+shed)
		}
		if opened > maxOpened+1 || opened == 0 {
			t.Fatalf("%d tokens opened, want 1..%d", opened, maxOpened+1)
		}
		if lost > 0 || slicesMax(rtts) > 2*oneWay {
			t.Fatalf("players lost %d of %d echoes, max RTT %v (link RTT %v)", lost, sent, slicesMax(rtts), 2*oneWay)
		}
	})
}

func slicesMax(d []time.Duration) time.Duration {
	var m time.Duration
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

// TestSimTokenTimeout: a proven sealed connection times out after its
// token's timeout seconds, not the server's Timeout; a token without a
// timeout (negative) keeps the server's.
func TestSimTokenTimeout(t *testing.T) {
	for _, tc := range []struct {
		token, want time.Duration
	}{
		{2 * time.Second, 2 * time.Second},
		{-1, 7 * time.Second},
	} {
		t.Run(tc.token.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const sweep = 10 * time.Millisecond
				nw := netsim.New()
				nw.SetLink(netsim.Link{Latency: 10 * time.Millisecond})
				gone := make(chan DisconnectReason, 1)
				srv := simListen(t, nw, Config{Handler: simEcho{gone: gone}, SweepInterval: sweep, Timeout: 7 * time.Second,
					PrivateKey: &testKey, ProtocolID: testProtocolID})
				tok := makeToken(t, nil, token.Params{ServerAddresses: []netip.AddrPort{simServerAddr}, Timeout: tc.token})
				cli, err := simDial(t, nw, Config{Token: tok, Timeout: 20 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				sc, ok := srv.Conn(cli.LocalAddr())
				if !ok {
					t.Fatal("the server has no connection")
				}
				nw.SetPath(cli.LocalAddr(), netip.AddrPort{}, netsim.Link{Loss: 1})
				if r := <-gone; r != ReasonTimedOut {
					t.Fatalf("server ended the connection with %v", r)
				}
				d := time.Since(time.Unix(0, sc.lastRecv.Load()))
				if d < tc.want || d > tc.want+sweep {
					t.Fatalf("server timed out %v after the last packet, want %v", d, tc.want)
				}
			})
		})
	}
}

// TestSimUnprovenTakesNoAddressPlace is issue 19's per-IP attack: waiting
// connections (tokenless handshakes) used to count against the per-IP and
// per-prefix limits, so an attacker in a player's network held its places
// and the player was Denied(3). Now only proven connections count: six
// waiting connections from the players' address leave both places free,
// and the third player with a valid token is refused with reason 12,
// which its Dial reports as the handshake's Denied(3).
func TestSimUnprovenTakesNoAddressPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 5 * time.Millisecond})
		srv := simListen(t, nw, Config{Handler: simEcho{}, PrivateKey: &testKey, ProtocolID: testProtocolID,
			MaxClientsPerIP: 2, MaxClientsPerPrefix: -1})
		for range 6 {
			cli, err := simDial(t, nw, Config{})
			if err != nil {
				t.Fatalf("a tokenless handshake was refused: %v", err)
			}
			<-cli.Done()
		}
		if n := srv.Stats().Unproven; n != 6 {
			t.Fatalf("%d connections wait for a proof, want 6", n)
		}
		for i := range 3 {
			tok := makeToken(t, nil, token.Params{ClientID: uint64(10 + i), ServerAddresses: []netip.AddrPort{simServerAddr}})
			_, err := simDial(t, nw, Config{Token: tok})
			var de *DeniedError
			switch {
			case i < 2 && err != nil:
				t.Fatalf("player %d: %v", i, err)
			case i == 2 && (!errors.As(err, &de) || de.Reason != protocol.DeniedAddressLimit):
				t.Fatalf("player %d: %v, want Denied(%d)", i, err, protocol.DeniedAddressLimit)
			}
		}
		if st := srv.Stats(); st.Connections != 2 {
			t.Fatalf("%d connections, want 2", st.Connections)
		}
	})
}
