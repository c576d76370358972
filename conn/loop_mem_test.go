package conn

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/udpgate/udpgate/internal/defaults"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

// The receive loop driven over an in-memory network (mem_test.go): every
// datagram is followed by hand, on the test's clock, without sleeping.

// A full handshake: Initial → Challenge → Response → promotion → Ack, and
// then a Data packet echoed from the handler inside the loop's batch.
func TestMemHandshake(t *testing.T) {
	rec, m, c := newMemPair(t, true, 3)

	c.start()
	m.step()
	if st := m.Stats(); st.HandshakeIn[protocol.TypeInitial] != 1 || st.HandshakeOut[protocol.TypeChallenge] != 1 {
		t.Fatalf("after the Initial: in %v, out %v", st.HandshakeIn, st.HandshakeOut)
	}
	c.pump() // the Challenge: the client answers Response
	if !slices.Equal(c.handshakes, []protocol.PacketType{protocol.TypeChallenge}) {
		t.Fatalf("client received %v, want a Challenge", c.handshakes)
	}
	if m.Len() != 0 {
		t.Fatal("a connection before the Response")
	}
	m.step() // the Response: promoted, Ack sent by the pool
	st := m.Stats()
	if m.Len() != 1 || st.Accepted != 1 || st.PromotionAcks != 1 || st.HandshakeIn[protocol.TypeResponse] != 1 {
		t.Fatalf("after the Response: %d connections, stats %+v", m.Len(), st)
	}
	if rec.connects() != 1 {
		t.Fatalf("OnConnect ran %d times, want 1", rec.connects())
	}
	c.pump() // the Ack
	if !slices.Equal(c.events, []handshake.ClientEvent{handshake.EventConnected}) ||
		!slices.Equal(c.handshakes, []protocol.PacketType{protocol.TypeChallenge, protocol.TypeAck}) {
		t.Fatalf("client events %v, handshake packets %v", c.events, c.handshakes)
	}
	sc, ok := m.Conn(c.addr())
	if !ok || sc.ClientID() != 3 || sc != rec.conn[0] {
		t.Fatalf("no connection with ClientID 3 at %v", c.addr())
	}

	c.sendConn(protocol.KindData, []byte("hello"))
	m.step()
	c.pump()
	if len(c.data) != 1 || string(c.data[0]) != "hello" {
		t.Fatalf("echoes %q, want [hello]", c.data)
	}
	if cs := sc.Stats(); cs.PacketsIn != 1 || cs.PacketsOut != 1 || cs.BytesIn != 5 {
		t.Fatalf("connection stats %+v", cs)
	}
}

// Five copies of one Response, in one batch: one connection, five Acks
// with its cookie. The same Response from another address is a replay:
// no answer, no connection.
func TestMemDuplicateResponses(t *testing.T) {
	rec, m, c := newMemPair(t, false, 2)
	c.start()
	m.step()
	c.pump() // Challenge: the client sends its Response
	resp := c.last
	for range 4 {
		c.send(resp)
	}
	m.step()
	c.pump()
	acks := 0
	for _, typ := range c.handshakes {
		if typ == protocol.TypeAck {
			acks++
		}
	}
	if acks != 5 || !c.connected {
		t.Fatalf("client got %v, want a Challenge and 5 Acks", c.handshakes)
	}
	if m.Len() != 1 || rec.connects() != 1 {
		t.Fatalf("%d connections, %d connects: want 1", m.Len(), rec.connects())
	}
	if sc, _ := m.Conn(c.addr()); sc.cookie != c.ck {
		t.Fatal("the Acks' cookie is not the connection's")
	}
	q := m.nw.Bind(netip.MustParseAddrPort("10.0.0.9:5000"))
	if err := q.WriteTo(resp, memServerAddr); err != nil {
		t.Fatal(err)
	}
	m.step()
	if q.Pending() != 0 || m.Len() != 1 {
		t.Fatalf("replayed Response from another address: %d replies, %d connections", q.Pending(), m.Len())
	}
}

// A client whose address changes: its next packet, from the new address,
// gets RestartHandshake; the restart (Initial, Challenge, RestartResponse)
// moves the connection, sequence state and all, and Ack comes back at the
// new address.
func TestMemMigration(t *testing.T) {
	rec, m, c := newMemPair(t, true, 5)
	c.connect()
	old := c.addr()
	sc, _ := m.Conn(old)

	c.rebind("10.0.0.3:6000")
	// The client restarts only after hearing nothing for RestartSilence.
	m.clk.Advance(2 * time.Second)
	c.sendConn(protocol.KindData, []byte("lost in the move"))
	m.step()
	if st := m.Stats(); st.HandshakeOut[protocol.TypeRestartHandshake] != 1 {
		t.Fatalf("no RestartHandshake to the unknown address: out %v", st.HandshakeOut)
	}
	c.pump() // RestartHandshake: the client sends a restart Initial
	m.step()
	c.pump() // Challenge: the client sends RestartResponse
	m.step()
	if st := m.Stats(); st.HandshakeIn[protocol.TypeRestartResponse] != 1 || st.Migrations != 1 {
		t.Fatalf("after the RestartResponse: in %v, migrations %d", st.HandshakeIn, st.Migrations)
	}
	c.pump() // Ack
	want := []handshake.ClientEvent{handshake.EventConnected, handshake.EventRestarting, handshake.EventReconnected}
	if !slices.Equal(c.events, want) {
		t.Fatalf("client events %v, want %v", c.events, want)
	}
	wantHS := []protocol.PacketType{protocol.TypeChallenge, protocol.TypeAck,
		protocol.TypeRestartHandshake, protocol.TypeChallenge, protocol.TypeAck}
	if !slices.Equal(c.handshakes, wantHS) {
		t.Fatalf("client handshake packets %v, want %v", c.handshakes, wantHS)
	}
	if at, ok := m.Conn(c.addr()); !ok || at != sc || sc.RemoteAddr() != c.addr() {
		t.Fatalf("the connection did not move to %v", c.addr())
	}
	if _, ok := m.Conn(old); ok || m.Len() != 1 {
		t.Fatalf("%d connections, old address still held: %v", m.Len(), ok)
	}
	// The connection carries on from where it was.
	c.sendConn(protocol.KindData, []byte("moved"))
	m.step()
	c.pump()
	if len(c.data) != 1 || string(c.data[0]) != "moved" {
		t.Fatalf("echoes after the move %q, want [moved]", c.data)
	}
	if _, _, ok := rec.disconnect(sc); ok {
		t.Fatal("the connection was closed by the move")
	}
}

// A client that goes silent: one KeepAlive after KeepAlive idle, none once
// it has been silent for two intervals, and after Timeout the server closes
// the connection and tells the client with Disconnect.
func TestMemTimeout(t *testing.T) {
	rec, m, c := newMemPair(t, false, 1)
	c.connect()
	sc, _ := m.Conn(c.addr())

	m.advance(defaults.Timeout - defaultSweepInterval)
	if m.Len() != 1 {
		t.Fatalf("closed before Timeout")
	}
	c.pump()
	if !slices.Equal(c.kinds, []protocol.Kind{protocol.KindKeepAlive}) {
		t.Fatalf("client got %v while silent, want one KeepAlive", c.kinds)
	}
	m.advance(2 * defaultSweepInterval)
	if m.Len() != 0 {
		t.Fatalf("still connected a sweep after Timeout")
	}
	if reason, remote, ok := rec.disconnect(sc); !ok || reason != ReasonTimedOut || remote {
		t.Fatalf("OnDisconnect: %v remote %v (called %v), want a local timeout", reason, remote, ok)
	}
	if st := m.Stats(); st.Disconnects[ReasonTimedOut] != 1 || st.Connections != 0 {
		t.Fatalf("stats: disconnects %v, connections %d", st.Disconnects, st.Connections)
	}
	c.pump()
	disc := 0
	for _, k := range c.kinds {
		if k == protocol.KindDisconnect {
			disc++
		}
	}
	if disc != timeoutDisconnectPackets {
		t.Fatalf("client got %d Disconnects (%v), want %d", disc, c.kinds, timeoutDisconnectPackets)
	}
}

// A flood of Initials from many addresses raises the overload level, which
// then caps Challenges per loop; when the flood stops, the level steps back
// down one level per Cooloff.
func TestMemOverloadLevel(t *testing.T) {
	const cooloff = 2 * time.Second
	m := newMemServer(t, Config{ChallengeRate: -1, Overload: OverloadConfig{Enabled: true,
		Thresholds: [3]float64{100, 1000, 100_000}, ChallengeCaps: [2]float64{50, 10}, Cooloff: cooloff}})
	h := protocol.Handshake{Type: protocol.TypeInitial, ClientID: 1, MinVersion: protocol.MinHandshakeVersion,
		CurVersion: protocol.CurHandshakeVersion, NetworkVersion: m.st.NetworkVersion, RandomLen: 16}
	var initial [handshake.MaxReplyLen + 64]byte
	n := wire.EncodeHandshake(initial[:], m.st.magic, &h)
	if n == 0 {
		t.Fatal("Initial not encoded")
	}
	flood := func(k int) (challenges, shed uint64) {
		before := m.Stats()
		for i := range k {
			from := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 4000)
			m.nw.Deliver(from, memServerAddr, initial[:n])
		}
		m.step()
		after := m.Stats()
		return after.HandshakeOut[protocol.TypeChallenge] - before.HandshakeOut[protocol.TypeChallenge],
			after.Drops[protocol.DropOverload] - before.Drops[protocol.DropOverload]
	}
	level := func() OverloadLevel { return m.Stats().OverloadLevel }

	m.sweepNow() // opens the rate window
	if ch, shed := flood(2000); ch != 2000 || shed != 0 {
		t.Fatalf("LevelNormal: %d Challenges, %d shed; want all 2000 answered", ch, shed)
	}
	m.clk.Advance(time.Second)
	m.sweepNow()
	if level() != LevelFlood {
		t.Fatalf("2000 connectionless datagrams/s: level %v, want flood", level())
	}
	// The level's first batch finds the cap's bucket empty, as under the
	// continuous batches of a real flood (how it refills is
	// TestOverloadCapsChallenges).
	if ch, shed := flood(500); ch != 0 || shed != 500 {
		t.Fatalf("LevelFlood: %d Challenges, %d shed; want 0 and 500", ch, shed)
	}

	// Quiet: down one level per Cooloff.
	type change struct {
		at    time.Duration
		level OverloadLevel
	}
	var changes []change
	start, cur := m.clk.Now(), level()
	for m.clk.Now().Sub(start) < 4*cooloff {
		m.advance(defaultSweepInterval)
		if l := level(); l != cur {
			changes = append(changes, change{m.clk.Now().Sub(start), l})
			cur = l
		}
	}
	if len(changes) != 2 || changes[0].level != LevelBurst || changes[1].level != LevelNormal {
		t.Fatalf("quiet: level changes %v, want burst then normal", changes)
	}
	if changes[0].at < cooloff || changes[1].at-changes[0].at < cooloff {
		t.Fatalf("quiet: level changes %v, want each after a Cooloff of %v", changes, cooloff)
	}
	if got := m.Stats().OverloadChanges; got != 3 {
		t.Fatalf("OverloadChanges %d, want 3", got)
	}
	if ch, _ := flood(1); ch != 1 {
		t.Fatal("no Challenge back at LevelNormal")
	}
}
