package handshake

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/ratelimit"
	"github.com/udpgate/udpgate/internal/seal"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/token"
)

// sealedPair is one connection's keys, both directions, as a client and a
// server each hold them.
type sealedPair struct {
	cTx, sTx seal.Sealer
	cRx, sRx seal.Opener
}

func newSealedPair(salt byte) *sealedPair {
	var c2s, s2c [seal.KeyBytes]byte
	var sl [seal.SaltBytes]byte
	for i := range c2s {
		c2s[i], s2c[i] = byte(i), byte(0x80+i)
	}
	sl[0] = salt
	p := &sealedPair{}
	p.cTx.Init(&c2s, &sl)
	p.sRx.Init(&c2s, &sl)
	p.sTx.Init(&s2c, &sl)
	p.cRx.Init(&s2c, &sl)
	return p
}

func testRequest(t testing.TB) []byte {
	var key [token.KeyBytes]byte
	tok, err := token.Generate(&key, &token.Params{ProtocolID: 7, ClientID: 9,
		ServerAddresses: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:4000")},
		Expire:          30 * time.Second, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	req := tok.Request()
	b, _ := req.AppendBinary(nil)
	return b
}

func TestSealedRoundTrip(t *testing.T) {
	for _, magic := range []string{"", "10100101101001011010010110100101"} {
		m, err := wire.ParseMagic(magic)
		if err != nil {
			t.Fatal(err)
		}
		p := newSealedPair(1)
		for _, tc := range []struct {
			kind    protocol.Kind
			payload []byte
		}{{protocol.KindData, []byte("secret payload bytes")}, {protocol.KindKeepAlive, nil}, {protocol.KindDisconnect, []byte{2}}} {
			h := protocol.ConnHeader{SessionID: 2, ClientID: 5, Tag: 0xa1b2c3d4, Seq: 100, Ack: 99, AckBits: 0xf0f0, Kind: tc.kind}
			buf := make([]byte, 1500)
			n := wire.SealConn(buf, m, &h, tc.payload, &p.cTx)
			if n != wire.SealedConnLen(m, len(tc.payload)) || tc.kind == protocol.KindData && n != wire.ConnLen(m, protocol.KindData, len(tc.payload))+wire.SealedOverhead {
				t.Fatalf("%v: length %d", tc.kind, n)
			}
			pkt := buf[:n]
			if len(tc.payload) > 2 && bytes.Contains(pkt, tc.payload) {
				t.Fatalf("payload in clear: %x", pkt)
			}
			var got protocol.ConnHeader
			proof, r := wire.DecodeSealed(m, pkt, &got)
			if r != protocol.DropNone || proof || got.Tag != h.Tag || got.ClientID != 5 || got.SessionID != 2 {
				t.Fatalf("DecodeSealed: %v %v %+v", proof, r, got)
			}
			payload, ctr, r := wire.OpenConn(m, pkt, &got, &p.sRx)
			if r != protocol.DropNone || got != h || !bytes.Equal(payload, tc.payload) && len(tc.payload) > 0 {
				t.Fatalf("OpenConn: %v %+v %q", r, got, payload)
			}
			if ctr != p.cTx.Next()-1 {
				t.Fatalf("counter %d", ctr)
			}
		}
	}
}

// TestSealedDrops: replayed, modified, wrong-key and unsealed packets are
// dropped by reason.
func TestSealedDrops(t *testing.T) {
	var m wire.Magic
	p := newSealedPair(1)
	other := newSealedPair(2) // same keys, another connection's salt
	h := protocol.ConnHeader{ClientID: 1, Tag: 7, Seq: 1, Kind: protocol.KindData}
	mk := func(s *seal.Sealer) []byte {
		b := make([]byte, 200)
		return b[:wire.SealConn(b, m, &h, []byte("hello"), s)]
	}
	openWith := func(o *seal.Opener, pkt []byte) protocol.DropReason {
		var g protocol.ConnHeader
		if _, r := wire.DecodeSealed(m, pkt, &g); r != protocol.DropNone {
			return r
		}
		_, _, r := wire.OpenConn(m, pkt, &g, o)
		return r
	}
	open := func(pkt []byte) protocol.DropReason { return openWith(&p.sRx, pkt) }
	pkt := mk(&p.cTx)
	keep := bytes.Clone(pkt)
	if r := open(pkt); r != protocol.DropNone {
		t.Fatal(r)
	}
	if r := open(keep); r != protocol.DropSealedReplay {
		t.Errorf("replay: %v", r)
	}
	for i := 0; i < len(keep)-1; i += 3 {
		b := mk(&p.cTx)
		b[i] ^= 0x10
		r := open(b)
		if r == protocol.DropNone {
			t.Errorf("bit flipped at %d accepted", i)
		}
	}
	if r := openWith(&newSealedPair(1).sRx, mk(&other.cTx)); r != protocol.DropSealedForged {
		t.Errorf("another connection's packet: %v", r)
	}
	plain := make([]byte, 200)
	n := wire.EncodeConn(plain, m, &h, []byte("an unsealed packet, long enough to pass the size check"))
	if r := openWith(&newSealedPair(1).sRx, plain[:n]); r != protocol.DropSealedForged {
		t.Errorf("unsealed packet: %v", r)
	}
	if r := open([]byte{0x00, 0x01}); r != protocol.DropBadSize {
		t.Errorf("short: %v", r)
	}
}

// testProofCookie is a proof's cookie part whose Tag is tag.
func testProofCookie(tag uint32) *wire.ProofCookie {
	pc := &wire.ProofCookie{SecretID: 1, Timestamp: 1795000000.25}
	for i := range pc.Cookie {
		pc.Cookie[i] = byte(0xc0 + i)
	}
	binary.LittleEndian.PutUint32(pc.Cookie[4:], tag)
	return pc
}

func TestProofRoundTrip(t *testing.T) {
	var m wire.Magic
	req := testRequest(t)
	p := newSealedPair(1)
	h := protocol.ConnHeader{ClientID: 3, Tag: 0x01020304, Seq: 5, Ack: 16383, Kind: protocol.KindKeepAlive}
	pc := testProofCookie(h.Tag)
	buf := make([]byte, 1500)
	n := wire.SealProof(buf, m, &h, pc, req, &p.cTx)
	if n != wire.ProofLen(m) || n != 1149 {
		t.Fatalf("proof length %d", n)
	}
	pkt := buf[:n]
	var g protocol.ConnHeader
	proof, r := wire.DecodeSealed(m, pkt, &g)
	if r != protocol.DropNone || !proof || g.Tag != h.Tag {
		t.Fatalf("%v %v", proof, r)
	}
	if !bytes.Equal(wire.ProofRequest(m, pkt), req) {
		t.Fatal("request body differs")
	}
	var got wire.ProofCookie
	if !wire.ProofCookieOf(m, pkt, &got) || got != *pc {
		t.Fatalf("cookie part %+v, want %+v", got, *pc)
	}
	// A cookie of another Tag, or a SecretId past 1, is refused both ways.
	if wire.SealProof(buf, m, &h, testProofCookie(h.Tag+1), req, &p.cTx) != 0 {
		t.Fatal("SealProof wrote a proof whose cookie is not its Tag's")
	}
	bad := bytes.Clone(pkt)
	bad[wire.ConnHeaderOffset(m)+4] = 2
	if wire.ProofCookieOf(m, bad, &got) {
		t.Fatal("SecretId 2 accepted")
	}
	bad = bytes.Clone(pkt)
	bad[wire.ConnHeaderOffset(m)+4+1+8+5]++
	if wire.ProofCookieOf(m, bad, &got) {
		t.Fatal("a cookie of another Tag accepted")
	}
	if _, r := wire.OpenProof(m, pkt, &g, &p.sRx); r != protocol.DropNone || g != h {
		t.Fatalf("OpenProof %v %+v", r, g)
	}
	// The same request under keys the sender does not hold.
	q := newSealedPair(9)
	var wrong [seal.KeyBytes]byte
	q.cTx.Init(&wrong, nil)
	n = wire.SealProof(buf, m, &h, pc, req, &q.cTx)
	if _, r := wire.OpenProof(m, buf[:n], &g, &newSealedPair(1).sRx); r != protocol.DropProofForged {
		t.Fatalf("forged proof: %v", r)
	}
	// A Data packet cannot be a proof.
	if wire.SealProof(buf, m, &protocol.ConnHeader{Kind: protocol.KindData}, testProofCookie(0), req, &p.cTx) != 0 {
		t.Fatal("SealProof wrote a Data proof")
	}
}

// TestSealedAlloc: sealing and opening allocate nothing.
func TestSealedAlloc(t *testing.T) {
	echo := sealedEcho()
	allocs := testing.AllocsPerRun(1000, func() {
		if r := echo(); r != protocol.DropNone {
			t.Fatal(r)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per sealed packet", allocs)
	}
}

// sealedEcho returns one sealed packet's trip: seal a 64-byte Data packet,
// decode its sealed header and open it, reporting the first drop.
func sealedEcho() func() protocol.DropReason {
	var m wire.Magic
	p := newSealedPair(1)
	h := protocol.ConnHeader{Tag: 1, Kind: protocol.KindData}
	buf := make([]byte, 1500)
	payload := make([]byte, 64)
	var g protocol.ConnHeader
	return func() protocol.DropReason {
		n := wire.SealConn(buf, m, &h, payload, &p.cTx)
		if _, r := wire.DecodeSealed(m, buf[:n], &g); r != protocol.DropNone {
			return r
		}
		_, _, r := wire.OpenConn(m, buf[:n], &g, &p.sRx)
		return r
	}
}

func FuzzOpenSealed(f *testing.F) {
	var m wire.Magic
	p := newSealedPair(1)
	h := protocol.ConnHeader{Tag: 1, Kind: protocol.KindData}
	buf := make([]byte, 1500)
	f.Add(buf[:wire.SealConn(buf, m, &h, []byte("x"), &p.cTx)])
	f.Add(buf[:wire.SealProof(buf, m, &protocol.ConnHeader{Kind: protocol.KindKeepAlive}, testProofCookie(0), testRequest(f), &p.cTx)])
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		var g protocol.ConnHeader
		proof, r := wire.DecodeSealed(m, b, &g)
		if r != protocol.DropNone {
			return
		}
		q := newSealedPair(1)
		if proof {
			var pc wire.ProofCookie
			if wire.ProofCookieOf(m, b, &pc) && (pc.SecretID > 1 || binary.LittleEndian.Uint32(b[wire.ConnHeaderOffset(m):]) != binary.LittleEndian.Uint32(pc.Cookie[4:])) {
				t.Fatalf("accepted a cookie part that breaks §11.3: %+v", pc)
			}
			if len(wire.ProofRequest(m, b)) != token.RequestBytes {
				t.Fatal("request body size")
			}
			_, _ = wire.OpenProof(m, b, &g, &q.sRx)
			return
		}
		payload, _, r := wire.OpenConn(m, b, &g, &q.sRx)
		if r == protocol.DropNone && (g.Kind > protocol.KindDisconnect || wire.EncodeConn(make([]byte, len(b)), m, &g, payload) == 0) {
			t.Fatalf("accepted a body breaking §7: %+v %d", g, len(payload))
		}
	})
}

func BenchmarkSealedEcho(b *testing.B) {
	echo := sealedEcho()
	b.ReportAllocs()
	for b.Loop() {
		if r := echo(); r != protocol.DropNone {
			b.Fatal(r)
		}
	}
}

// TestSealedDecisions: what a sealed Server decides for each kind of
// connection packet, from a known and an unknown address.
func TestSealedDecisions(t *testing.T) {
	sec, err := cookie.NewSecrets(1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(ServerConfig{Sealed: true, RestartLimit: ratelimit.Limit{Rate: 1, Burst: 2}}, sec, 1, 1000)
	var m wire.Magic
	p := newSealedPair(1)
	h := protocol.ConnHeader{ClientID: 3, Tag: 77, Kind: protocol.KindData}
	buf := make([]byte, 1500)
	data := bytes.Clone(buf[:wire.SealConn(buf, m, &h, []byte("x"), &p.cTx)])
	proof := bytes.Clone(buf[:wire.SealProof(buf, m, &protocol.ConnHeader{ClientID: 3, Tag: 77, Kind: protocol.KindKeepAlive}, testProofCookie(77), testRequest(t), &p.cTx)])
	plain := bytes.Clone(buf[:wire.EncodeConn(buf, m, &h, []byte("x"))])
	src := netip.MustParseAddrPort("192.0.2.1:5000")
	known := &Peer{Known: true, ClientID: 3, Tag: 77}
	out := make([]byte, MaxReplyLen)
	var d Decision
	for _, tc := range []struct {
		name   string
		pkt    []byte
		peer   *Peer
		action Action
		drop   protocol.DropReason
		proof  bool
	}{
		{"sealed, known", data, known, ActSealed, protocol.DropNone, false},
		{"proof, known", proof, known, ActSealed, protocol.DropNone, true},
		{"sealed, wrong tag", data, &Peer{Known: true, ClientID: 3, Tag: 78}, ActDrop, protocol.DropBadTag, false},
		{"sealed, wrong client id", data, &Peer{Known: true, ClientID: 4, Tag: 77}, ActDrop, protocol.DropClientIDMismatch, false},
		{"unsealed, known (too short to be sealed): in clear, for the caller", plain, known, ActSealed, protocol.DropNone, false},
		{"unsealed, known, wrong tag", plain, &Peer{Known: true, ClientID: 3, Tag: 78}, ActDrop, protocol.DropBadSize, false},
		{"proof, unknown address: its cookie is the caller's to check", proof, &Peer{}, ActSealed, protocol.DropNone, true},

		{"sealed, unknown: try to move", data, &Peer{}, ActSealedMove, protocol.DropNone, false},
		{"sealed, unknown again", data, &Peer{}, ActSealedMove, protocol.DropNone, false},
		{"sealed, unknown over budget", data, &Peer{}, ActDrop, protocol.DropRateLimited, false},
	} {
		s.Handle(&d, src, tc.pkt, 1000, tc.peer, out)
		clear := tc.pkt[len(tc.pkt)-1] == 1 && len(tc.pkt) == len(plain) && d.Action == ActSealed
		if d.Action != tc.action || d.Drop != tc.drop || d.Proof != tc.proof || d.ReplyLen != 0 || d.Clear != clear {
			t.Errorf("%s: action %v drop %v proof %v reply %d", tc.name, d.Action, d.Drop, d.Proof, d.ReplyLen)
		}
	}
	s.cfg.Closed = closedSet{src: true}
	s.Handle(&d, src, data, 1000, &Peer{}, out)
	if d.Drop != protocol.DropRecentlyDisconnected {
		t.Errorf("sealed, recently closed: action %v drop %v", d.Action, d.Drop)
	}
	s.cfg.Closed = nil
	// A connection packet in clear from an unknown address: a client
	// without a token, told so statelessly (reason 11, its own Tag, no
	// larger than the packet), under the restart budget.
	s2 := NewServer(ServerConfig{Sealed: true, SessionID: 0, RestartLimit: ratelimit.Limit{Rate: 1, Burst: 1}}, sec, 1, 1000)
	s2.Handle(&d, src, plain, 1000, &Peer{}, out)
	if d.Action != ActNotice || d.Drop != protocol.DropTokenRequired || d.ReplyLen != wire.ConnLen(m, protocol.KindDisconnect, 1) || d.ReplyLen > len(plain) {
		t.Fatalf("tokenless: action %v drop %v reply %d", d.Action, d.Drop, d.ReplyLen)
	}
	var nh protocol.ConnHeader
	if payload, r := wire.DecodeConn(m, out[:d.ReplyLen], &nh); r != protocol.DropNone || nh.Kind != protocol.KindDisconnect || nh.Tag != 77 ||
		nh.ClientID != 3 || payload[0] != protocol.DisconnectTokenRequired {
		t.Fatalf("tokenless notice: %v %+v %v", r, nh, payload)
	}
	s2.Handle(&d, src, plain, 1000, &Peer{}, out)
	if d.Action != ActDrop || d.Drop != protocol.DropRateLimited {
		t.Errorf("tokenless over budget: action %v drop %v", d.Action, d.Drop)
	}
	disc := bytes.Clone(buf[:wire.EncodeConn(buf, m, &protocol.ConnHeader{ClientID: 3, Tag: 77, Kind: protocol.KindDisconnect}, []byte{1})])
	s2.Handle(&d, netip.MustParseAddrPort("192.0.2.9:1"), disc, 1000, &Peer{}, out)
	if d.Action != ActDrop || d.Drop != protocol.DropTokenRequired {
		t.Errorf("tokenless Disconnect answered: action %v drop %v", d.Action, d.Drop)
	}
	// The cookie of a RestartResponse travels in clear: a sealed server
	// moves nothing for it.
	var ck cookie.Cookie
	rr := protocol.Handshake{Type: protocol.TypeRestartResponse, Restart: true, ClientID: 3, MinVersion: 3, CurVersion: 4, RandomLen: 8, Timestamp: 999, Cookie: ck, OrigCookie: ck}
	n := wire.EncodeHandshake(buf, m, &rr)
	s.Handle(&d, src, buf[:n], 1000, known, out)
	if d.Action != ActDrop || d.Drop != protocol.DropUnexpectedType {
		t.Errorf("RestartResponse: action %v drop %v", d.Action, d.Drop)
	}
}
