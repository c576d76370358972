package loadgen

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seal"
	"github.com/udpgate/udpgate/internal/seqwin"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/token"
)

var (
	testPrivateKey = [token.KeyBytes]byte{1, 2, 3, 4, 5, 6, 7, 8}
	testProtocolID = uint64(0x1122334455667788)
)

// mirror is the server's side of one sealed connection, as the sealed-mode
// rules of docs/protocol.md §11 have it, built from the codec alone.
type mirror struct {
	seq  seqwin.SeqState
	tx   seal.Sealer
	rx   seal.Opener
	tag  uint32
	priv token.Private
}

// sealedWorker makes a socket-less sealed-mode worker with clients whose
// handshakes are done (cookies made up per client) and returns it with the
// server's mirror of each connection; prove says whether the clients
// proved their tokens already.
func sealedWorker(tb testing.TB, clients int, prove bool) (*worker, []mirror) {
	tb.Helper()
	cfg, err := Config{Server: netip.MustParseAddrPort("127.0.0.1:7777"), Mode: ModeData, Clients: clients, Sockets: 1,
		PrivateKey: &testPrivateKey, ProtocolID: testProtocolID}.withDefaults()
	if err != nil {
		tb.Fatal(err)
	}
	g := &Generator{cfg: cfg}
	g.src = newSourceRange(cfg.FirstSource, cfg.SourcesUsed())
	if g.tokens, err = newTokenSource(&cfg); err != nil {
		tb.Fatal(err)
	}
	w := newWorker(g, 0, nil)
	ms := make([]mirror, clients)
	op := token.NewOpener(&testPrivateKey, testProtocolID)
	var h protocol.ConnHeader
	reply := make([]byte, 256)
	for j := range clients {
		ck := testCookie(j)
		s, c := cookie.Sequences(&ck)
		w.ids[j] = connID{tag: cookie.SessionTag(&ck), clientID: 1}
		w.seqs[j].Init(c, s, 0)
		m := &ms[j]
		m.seq.Init(s, c, 0)
		m.tag = w.ids[j].tag
		if w.startProof(j, &ck, 1, nil) != 0 || w.state[j] != stProving || w.tx.n != 1 {
			tb.Fatalf("client %d: no proof sent (state %d)", j, w.state[j])
		}
		w.tx.n = 0
		if !prove {
			continue
		}
		// The server's checks of the proof, in the order of §11.3.
		p := w.tx.slot(0)[:wire.ProofLen(cfg.Magic)]
		proof, r := wire.DecodeSealed(cfg.Magic, p, &h)
		if r != protocol.DropNone || !proof || h.Tag != m.tag {
			tb.Fatalf("client %d: proof decodes as proof=%v %v, tag %x", j, proof, r, h.Tag)
		}
		if err := op.OpenRequest(&m.priv, wire.ProofRequest(cfg.Magic, p), time.Now()); err != nil {
			tb.Fatalf("client %d: token: %v", j, err)
		}
		if m.priv.ClientID != g.tokens.clientID(j) || !m.priv.HasServerAddress(cfg.Server) {
			tb.Fatalf("client %d: token for client %d, servers %v", j, m.priv.ClientID, m.priv.ServerAddresses())
		}
		salt := (*[seal.SaltBytes]byte)(ck[:seal.SaltBytes])
		m.rx.Init(&m.priv.ClientToServerKey, salt)
		m.tx.Init(&m.priv.ServerToClientKey, salt)
		if _, r := wire.OpenProof(cfg.Magic, p, &h, &m.rx); r != protocol.DropNone || h.Kind != protocol.KindKeepAlive {
			tb.Fatalf("client %d: proof's seal: %v", j, r)
		}
		var rep seqwin.AckReport
		if m.seq.Receive(h.Seq, h.Ack, h.AckBits, 0, &rep) != protocol.DropNone {
			tb.Fatalf("client %d: proof's sequence numbers refused", j)
		}
		// The server's answer: a sealed KeepAlive, which proves the client.
		deliver(w, j, reply[:m.seal(reply, cfg.Magic, protocol.KindKeepAlive, nil, 2)])
		_, jj, _ := w.client(0)
		if jj != j || w.proofIn(j, w.rx.slots[:w.rx.hdrs[0].Len], 0, 2, nil) != 1 || w.state[j] != stConnected {
			tb.Fatalf("client %d: not proven by the server's sealed KeepAlive (state %d)", j, w.state[j])
		}
	}
	return w, ms
}

// testCookie is client j's made-up authorised cookie.
func testCookie(j int) (ck cookie.Cookie) {
	for i := range ck {
		ck[i] = byte(j*31 + i*7 + 1)
	}
	return ck
}

// seal writes the server's next sealed packet of kind into dst.
func (m *mirror) seal(dst []byte, mg wire.Magic, kind protocol.Kind, payload []byte, now int64) int {
	seq, ack, bits, _, _ := m.seq.Send(seconds(now))
	h := protocol.ConnHeader{ClientID: 1, Tag: m.tag, Seq: seq, Ack: ack, AckBits: bits, Kind: kind}
	return wire.SealConn(dst, mg, &h, payload, &m.tx)
}

// echo opens client packet p as the server does and seals the echo of its
// payload into dst.
func (m *mirror) echo(tb testing.TB, dst, p []byte, mg wire.Magic, now int64) int {
	var h protocol.ConnHeader
	if proof, r := wire.DecodeSealed(mg, p, &h); r != protocol.DropNone || proof {
		tb.Fatalf("client packet: %v", r)
	}
	payload, _, r := wire.OpenConn(mg, p, &h, &m.rx)
	if r != protocol.DropNone || h.Kind != protocol.KindData {
		tb.Fatalf("client packet does not open: %v kind %v", r, h.Kind)
	}
	var rep seqwin.AckReport
	m.seq.Receive(h.Seq, h.Ack, h.AckBits, seconds(now), &rep)
	return m.seal(dst, mg, protocol.KindData, payload, now)
}

// TestSealedClient: each client proves its token (the proof opens with the
// server's key, names the client and this server, and its inner seal opens
// with the token's key), then Data goes both ways sealed, with the payload
// never in clear, and what does not open is counted, not answered.
func TestSealedClient(t *testing.T) {
	w, ms := sealedWorker(t, 5, true)
	if w.ctr.loc[cHandshakes] != 5 || w.ctr.loc[cProofs] != 5 || w.ctr.loc[cKeepAlivesIn] != 5 {
		t.Fatalf("handshakes %d, proofs %d, keepalives in %d", w.ctr.loc[cHandshakes], w.ctr.loc[cProofs], w.ctr.loc[cKeepAlivesIn])
	}
	mg := w.cfg.Magic
	reply := make([]byte, 256)
	now := int64(10)
	for j := range ms {
		now += 1000
		p := w.buildConn(j, now, protocol.KindData)
		w.inflight[j]++
		w.out++
		w.tx.n = 0
		if len(p) != wire.SealedConnLen(mg, w.cfg.PayloadSize) {
			t.Fatalf("sealed Data of %d bytes", len(p))
		}
		var clear [8]byte
		copy(clear[:], []byte{byte(now), byte(now >> 8), byte(now >> 16), byte(now >> 24)})
		if bytes.Contains(p, clear[:4]) {
			t.Errorf("client %d: the send time is in clear", j)
		}
		n := ms[j].echo(t, reply, p, mg, now)
		deliver(w, j, reply[:n])
		w.answer(0, now+500, true)
		// The same packet again: a replay.
		deliver(w, j, reply[:n])
		w.answer(0, now+600, true)
		// A bit flipped in the ciphertext: a forgery.
		n = ms[j].echo(t, reply, w.buildConn(j, now+700, protocol.KindData), mg, now+700)
		w.tx.n = 0
		reply[n-5] ^= 0x10
		deliver(w, j, reply[:n])
		w.answer(0, now+800, true)
	}
	c := &w.ctr.loc
	if c[cReplies] != 5 || c[cSealedReplay] != 5 || c[cSealedForged] != 5 || c[cUnexpected] != 0 {
		t.Errorf("replies %d, replays %d, forged %d, unexpected %d", c[cReplies], c[cSealedReplay], c[cSealedForged], c[cUnexpected])
	}
	// An unsealed Data packet with the right Tag is not an answer any more.
	var h protocol.ConnHeader
	h.Tag, h.ClientID, h.Kind = ms[0].tag, 1, protocol.KindData
	deliver(w, 0, reply[:wire.EncodeConn(reply, mg, &h, []byte("12345678"))])
	w.answer(0, now, true)
	if c[cUnexpected] != 1 || c[cReplies] != 5 {
		t.Errorf("an unsealed Data packet was taken: unexpected %d, replies %d", c[cUnexpected], c[cReplies])
	}
}

// TestSealedRefusalForms: while proving, an unsealed Disconnect with the
// connection's Tag refuses for reasons 5 and 6 only, a sealed one for 7, 8
// and 9; each ends the client and is counted by reason. An unsealed
// Disconnect with another Tag, or with reason 7, is ignored.
func TestSealedRefusalForms(t *testing.T) {
	w, ms := sealedWorker(t, 8, false)
	mg := w.cfg.Magic
	buf := make([]byte, 256)
	unsealed := func(tag uint32, reason uint8) []byte {
		h := protocol.ConnHeader{ClientID: 1, Tag: tag, Kind: protocol.KindDisconnect}
		return buf[:wire.EncodeConn(buf, mg, &h, []byte{reason})]
	}
	sealed := func(j int, reason uint8) []byte {
		// The mirror never saw the proof: key it from the token.
		tok, err := w.g.tokens.token(w.global(j))
		if err != nil {
			t.Fatal(err)
		}
		c := testCookie(j)
		ms[j].tx.Init(&tok.ServerToClientKey, (*[seal.SaltBytes]byte)(c[:seal.SaltBytes]))
		return buf[:ms[j].seal(buf, mg, protocol.KindDisconnect, []byte{reason}, 5)]
	}
	in := func(j int, p []byte) int {
		deliver(w, j, p)
		return w.proofIn(j, w.rx.slots[:w.rx.hdrs[0].Len], 0, 5, nil)
	}
	// Ignored: a stranger's Tag, and reason 7 unsealed.
	if in(0, unsealed(ms[0].tag+1, protocol.DisconnectTokenExpired)) != 0 || in(0, unsealed(ms[0].tag, protocol.DisconnectForeignServer)) != 0 ||
		w.state[0] != stProving {
		t.Fatalf("client 0 ended by a Disconnect it must ignore (state %d)", w.state[0])
	}
	cases := []struct {
		p    func() []byte
		want int
	}{
		{func() []byte { return unsealed(ms[1].tag, protocol.DisconnectTokenExpired) }, cRefusedExpired},
		{func() []byte { return unsealed(ms[2].tag, protocol.DisconnectTokenInvalid) }, cRefusedInvalid},
		{func() []byte { return sealed(3, protocol.DisconnectForeignServer) }, cRefusedForeign},
		{func() []byte { return sealed(4, protocol.DisconnectTokenInUse) }, cRefusedInUse},
		{func() []byte { return sealed(5, protocol.DisconnectServerFull) }, cRefusedFull},
	}
	for i, c := range cases {
		j := i + 1
		if in(j, c.p()) != 1 || w.state[j] != stFailed || w.ctr.loc[c.want] != 1 {
			t.Errorf("client %d: state %d, counter %d = %d", j, w.state[j], c.want, w.ctr.loc[c.want])
		}
	}
	if w.ctr.loc[cHandshakeFailures] != 5 || w.ctr.loc[cUnexpected] != 2 {
		t.Errorf("failures %d, unexpected %d", w.ctr.loc[cHandshakeFailures], w.ctr.loc[cUnexpected])
	}
	// A proof is resent after ResendInterval with a fresh counter and the
	// same token, and the client gives up after ConnectTimeout.
	iv := int64(w.cfg.ResendInterval)
	if w.pollProof(6, 1+iv/2, nil) != 0 || w.tx.n != 0 {
		t.Fatal("a proof resent before the interval")
	}
	if w.pollProof(6, 1+iv, nil) != 0 || w.tx.n != 1 || w.sealers[6].Next() != 2 {
		t.Fatalf("no resend after the interval (%d queued, counter %d)", w.tx.n, w.sealers[6].Next())
	}
	w.tx.n = 0
	if w.pollProof(6, 2+int64(w.cfg.ConnectTimeout), nil) != 1 || w.state[6] != stFailed || w.ctr.loc[cTimedOut] != 1 {
		t.Errorf("proving client not timed out: state %d", w.state[6])
	}
}

// TestSealedTokensRepeat: a client's token is the same at every proof (a
// resend proves the same token with the same keys), distinct between
// clients, and unreadable without the private key.
func TestSealedTokensRepeat(t *testing.T) {
	w, _ := sealedWorker(t, 2, false)
	a, err := w.g.tokens.token(7)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := w.g.tokens.token(7)
	c, _ := w.g.tokens.token(8)
	ab, _ := a.MarshalBinary()
	bb, _ := b.MarshalBinary()
	cb, _ := c.MarshalBinary()
	if !bytes.Equal(ab, bb) || bytes.Equal(ab, cb) || a.ClientToServerKey == c.ClientToServerKey {
		t.Error("tokens do not repeat per client, or repeat between clients")
	}
	other := [token.KeyBytes]byte{9}
	r := a.Request()
	body, _ := r.AppendBinary(nil)
	var p token.Private
	if err := token.NewOpener(&other, testProtocolID).OpenRequest(&p, body, time.Now()); err != token.ErrInvalid {
		t.Errorf("a token opened under another key: %v", err)
	}
}

// sealedRoundTrips returns a step that runs one sealed Data round trip of
// w's next client in turn, ms sealing the server's echoes.
func sealedRoundTrips(tb testing.TB, w *worker, ms []mirror) func() {
	mg := w.cfg.Magic
	reply := make([]byte, 256)
	echo := func(j int, p []byte, now int64) []byte { return reply[:ms[j].echo(tb, reply, p, mg, now)] }
	j := 0
	now := int64(100)
	return func() {
		now += 1000
		roundTrip(w, j, now, echo)
		if j++; j == len(ms) {
			j = 0
		}
	}
}

// TestSealedAllocs: a sealed Data round trip costs the client no
// allocation (seal the request, open the answer).
func TestSealedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race runtime allocates")
	}
	w, ms := sealedWorker(t, 50, true)
	allocs := testing.AllocsPerRun(1000, sealedRoundTrips(t, w, ms))
	if allocs != 0 {
		t.Errorf("%.2f allocations per sealed round trip", allocs)
	}
	if w.ctr.loc[cReplies] < 1000 || w.ctr.loc[cUnexpected] != 0 {
		t.Errorf("replies %d, unexpected %d", w.ctr.loc[cReplies], w.ctr.loc[cUnexpected])
	}
}

// BenchmarkClientSealedData is BenchmarkClientData in sealed mode: the
// generator's cost for one sealed Data round trip without system calls,
// the server's side (open and seal) included, as there.
func BenchmarkClientSealedData(b *testing.B) {
	w, ms := sealedWorker(b, 1000, true)
	step := sealedRoundTrips(b, w, ms)
	b.ReportAllocs()
	for b.Loop() {
		step()
	}
	if w.ctr.loc[cReplies] == 0 || w.ctr.loc[cUnexpected] != 0 {
		b.Fatalf("answers %d, unexpected %d", w.ctr.loc[cReplies], w.ctr.loc[cUnexpected])
	}
}
