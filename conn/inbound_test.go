package conn

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/ratelimit"
	"github.com/udpgate/udpgate/internal/seal"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/netsim"
	"github.com/udpgate/udpgate/token"
)

// The inbound budget (§7.8) is checked right after the address lookup: a
// datagram beyond it is counted as inbound_limited and nothing else, a
// datagram within it goes on to be parsed (here, dropped as malformed or
// accepted). Each bucket holds 100 ms of its rate; the clock is the test's.
func TestInboundBudgetCheck(t *testing.T) {
	drops := func(m *memServer) [protocol.NumDropReasons]uint64 { return m.Stats().Drops }
	t.Run("packets", func(t *testing.T) {
		rec := newRecorder(false)
		m := newMemServer(t, Config{Handler: rec, InboundPacketRate: 1000, InboundByteRate: -1})
		cl := m.client("10.0.0.2:5000", 1)
		cl.connect()
		// 150 malformed datagrams (last byte zero) at one instant: the
		// first 100, the burst, are parsed and dropped as malformed; the
		// other 50 are not parsed.
		for range 150 {
			cl.send([]byte{0x55, 0x00})
		}
		m.step()
		d := drops(m)
		if d[protocol.DropMalformed] != 100 || d[protocol.DropInboundLimited] != 50 {
			t.Fatalf("malformed %d, inbound_limited %d: want 100 and 50", d[protocol.DropMalformed], d[protocol.DropInboundLimited])
		}
		// 20 ms later, 20 tokens: of 30 Data packets, 20 reach the
		// Handler.
		m.clk.Advance(20 * time.Millisecond)
		for i := range 30 {
			cl.sendConn(protocol.KindData, []byte{byte(i)})
		}
		m.step()
		if d := drops(m); d[protocol.DropInboundLimited] != 60 {
			t.Fatalf("inbound_limited %d after the Data, want 60", d[protocol.DropInboundLimited])
		}
		if n := packets(rec); n != 20 {
			t.Fatalf("%d packets reached the Handler, want 20", n)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		rec := newRecorder(false)
		// 100 kB/s: a 10 kB burst, ten datagrams of 1000 bytes.
		m := newMemServer(t, Config{Handler: rec, InboundPacketRate: -1, InboundByteRate: 100_000})
		cl := m.client("10.0.0.2:5000", 1)
		cl.connect()
		pad := make([]byte, 1000-wire.ConnLen(m.st.magic, protocol.KindData, 0))
		for range 25 {
			cl.sendConn(protocol.KindData, pad)
		}
		m.step()
		if d := drops(m); d[protocol.DropInboundLimited] != 15 {
			t.Fatalf("inbound_limited %d, want 15", d[protocol.DropInboundLimited])
		}
		if n := packets(rec); n != 10 {
			t.Fatalf("%d packets reached the Handler, want 10", n)
		}
	})
	t.Run("unlimited", func(t *testing.T) {
		rec := newRecorder(false)
		m := newMemServer(t, Config{Handler: rec, InboundPacketRate: -1, InboundByteRate: -1})
		cl := m.client("10.0.0.2:5000", 1)
		cl.connect()
		for range 3000 {
			cl.send([]byte{0x55, 0x00})
		}
		m.step()
		if d := drops(m); d[protocol.DropMalformed] != 3000 || d[protocol.DropInboundLimited] != 0 {
			t.Fatalf("malformed %d, inbound_limited %d: want 3000 and 0", d[protocol.DropMalformed], d[protocol.DropInboundLimited])
		}
	})
}

// packets is how many Data payloads rec's Handler received.
func packets(rec *recorder) int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.pkts)
}

// TestInboundBudgetConfig: a rate below one per second, NaN or infinite is
// refused with the fix.
func TestInboundBudgetConfig(t *testing.T) {
	for _, c := range []Config{{InboundPacketRate: 0.5}, {InboundByteRate: 0.25}} {
		if _, err := c.settings(); err == nil || !strings.Contains(err.Error(), "at least 1 per second") {
			t.Errorf("%+v: %v", c, err)
		}
	}
	st, err := Config{}.settings()
	if err != nil || st.InboundPacketRate != ratelimit.DefaultInboundPacketRate || st.InboundByteRate != ratelimit.DefaultInboundByteRate {
		t.Fatalf("defaults %v %v, %v", st.InboundPacketRate, st.InboundByteRate, err)
	}
}

// TestSimInboundBudget: a proven client sending 20k Data packets a second
// for a second beside a player, the budget 2000 a second (bursts of 200).
// Exactly the burst and the rate pass, 200 + 2 × 999 over the 1000
// milliseconds (the first 11 use the burst up, 20 a millisecond; then 2),
// and the other 17,803 are dropped as inbound_limited; the player's 50
// echoes all come back, each after exactly one round trip.
func TestSimInboundBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		const oneWay = 5 * time.Millisecond
		nw.SetLink(netsim.Link{Latency: oneWay})
		srv := simListen(t, nw, Config{Handler: simEcho{}, InboundPacketRate: 2000, InboundByteRate: -1, Sockets: 1})
		got := make(chan string, 64)
		player, err := simDial(t, nw, Config{Handler: simRecorder{got: got}})
		if err != nil {
			t.Fatal(err)
		}
		attacker, err := simDial(t, nw, Config{})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		const ticks, perTick = 1000, 20
		done := make(chan struct{})
		go func() {
			defer close(done)
			p := make([]byte, 100)
			for range ticks {
				for range perTick {
					if _, err := attacker.Send(p); err != nil {
						t.Error(err)
						return
					}
				}
				time.Sleep(time.Millisecond)
			}
		}()
		for i := range 50 {
			sent := time.Now()
			if _, err := player.Send([]byte(strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
			if p := <-got; p != strconv.Itoa(i) {
				t.Fatalf("player's echo %q, want %d", p, i)
			}
			if d := time.Since(sent); d != 2*oneWay {
				t.Fatalf("player's echo %d after %v, want exactly %v", i, d, 2*oneWay)
			}
			time.Sleep(20*time.Millisecond - 2*oneWay)
		}
		<-done
		time.Sleep(oneWay) // the last packets' way to the server
		synctest.Wait()
		st := srv.Stats()
		checkSimStats(t, nw)
		// The attacker's first packet, the KeepAlive a client sends on
		// connecting, arrives with its first millisecond's 20 and spends
		// a token like them.
		const pass, sent = 200 + 2*(ticks-1), ticks*perTick + 1
		if n := st.Drops[protocol.DropInboundLimited]; n != sent-pass {
			t.Fatalf("%d dropped as inbound_limited, want %d", n, sent-pass)
		}
		// Accepted: the player's KeepAlive and 50 packets, and the
		// attacker's passes.
		if st.ConnPacketsIn != 1+50+pass {
			t.Fatalf("%d connection packets accepted, want %d", st.ConnPacketsIn, 1+50+pass)
		}
		if srv.Len() != 2 {
			t.Fatalf("%d connections, want the player's and the attacker's", srv.Len())
		}
	})
}

// TestSimInboundBudgetSealed: on a sealed server the budget comes before
// decryption. 300 packets forged under a wrong key from a proven client's
// address, at one instant with the budget full (100, 1000 a second): 100
// reach the sealed checks and are dropped there (sealed_forged, or
// sealed_replay for a counter the client used), 200 are dropped as
// inbound_limited without being looked at; the client's own echo then
// comes back.
func TestSimInboundBudgetSealed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		srv := simListen(t, nw, Config{Handler: simEcho{}, PrivateKey: &testKey, ProtocolID: testProtocolID,
			InboundPacketRate: 1000, InboundByteRate: -1})
		tok := makeToken(t, nil, token.Params{ServerAddresses: []netip.AddrPort{simServerAddr}})
		got := make(chan string, 4)
		cli, err := simDial(t, nw, Config{Handler: simRecorder{got: got}, Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		sc, ok := srv.Conn(cli.LocalAddr())
		if !ok {
			t.Fatal("the server has no connection")
		}
		// Half a second later the bucket is full again, and the client
		// has not sent its next KeepAlive yet.
		time.Sleep(500 * time.Millisecond)
		before := srv.Stats().Drops
		var key [32]byte
		key[0] = 1
		var fake seal.Sealer
		fake.Init(&key, (*[seal.SaltBytes]byte)(sc.cookie[:seal.SaltBytes]))
		h := protocol.ConnHeader{SessionID: sc.session, ClientID: sc.clientID, Tag: sc.tag, Kind: protocol.KindData}
		var buf [protocol.MaxDatagramLimit]byte
		for i := range 300 {
			h.Seq = uint16(i)
			n := wire.SealConn(buf[:], srv.st.magic, &h, []byte("forged"), &fake)
			if n == 0 {
				t.Fatal("not sealed")
			}
			nw.Deliver(cli.LocalAddr(), simServerAddr, buf[:n])
		}
		synctest.Wait()
		// The first 100 reach the sealed checks: the replay window (the
		// forger's counter 0 was the client's first) or the MAC.
		after := srv.Stats().Drops
		opened := after[protocol.DropSealedForged] + after[protocol.DropSealedReplay] -
			before[protocol.DropSealedForged] - before[protocol.DropSealedReplay]
		limited := after[protocol.DropInboundLimited] - before[protocol.DropInboundLimited]
		if opened != 100 || limited != 200 {
			t.Fatalf("%d sealed_forged or sealed_replay and %d inbound_limited, want 100 and 200 (drops %v)", opened, limited, after)
		}
		time.Sleep(100 * time.Millisecond) // 100 more tokens
		if _, err := cli.Send([]byte("still here")); err != nil {
			t.Fatal(err)
		}
		if p := <-got; p != "still here" {
			t.Fatalf("echo %q", p)
		}
	})
}
