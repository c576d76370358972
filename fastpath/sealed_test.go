package fastpath

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/seal"
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
		m, err := ParseMagic(magic)
		if err != nil {
			t.Fatal(err)
		}
		p := newSealedPair(1)
		for _, tc := range []struct {
			kind    Kind
			payload []byte
		}{{KindData, []byte("secret payload bytes")}, {KindKeepAlive, nil}, {KindDisconnect, []byte{2}}} {
			h := ConnHeader{SessionID: 2, ClientID: 5, Tag: 0xa1b2c3d4, Seq: 100, Ack: 99, AckBits: 0xf0f0, Kind: tc.kind}
			buf := make([]byte, 1500)
			n := SealConn(buf, m, &h, tc.payload, &p.cTx)
			if n != SealedConnLen(m, len(tc.payload)) || tc.kind == KindData && n != ConnLen(m, KindData, len(tc.payload))+SealedOverhead {
				t.Fatalf("%v: length %d", tc.kind, n)
			}
			pkt := buf[:n]
			if len(tc.payload) > 2 && bytes.Contains(pkt, tc.payload) {
				t.Fatalf("payload in clear: %x", pkt)
			}
			var got ConnHeader
			proof, r := DecodeSealed(m, pkt, &got)
			if r != DropNone || proof || got.Tag != h.Tag || got.ClientID != 5 || got.SessionID != 2 {
				t.Fatalf("DecodeSealed: %v %v %+v", proof, r, got)
			}
			payload, ctr, r := OpenConn(m, pkt, &got, &p.sRx)
			if r != DropNone || got != h || !bytes.Equal(payload, tc.payload) && len(tc.payload) > 0 {
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
	var m Magic
	p := newSealedPair(1)
	other := newSealedPair(2) // same keys, another connection's salt
	h := ConnHeader{ClientID: 1, Tag: 7, Seq: 1, Kind: KindData}
	mk := func(s *seal.Sealer) []byte {
		b := make([]byte, 200)
		return b[:SealConn(b, m, &h, []byte("hello"), s)]
	}
	openWith := func(o *seal.Opener, pkt []byte) DropReason {
		var g ConnHeader
		if _, r := DecodeSealed(m, pkt, &g); r != DropNone {
			return r
		}
		_, _, r := OpenConn(m, pkt, &g, o)
		return r
	}
	open := func(pkt []byte) DropReason { return openWith(&p.sRx, pkt) }
	pkt := mk(&p.cTx)
	keep := bytes.Clone(pkt)
	if r := open(pkt); r != DropNone {
		t.Fatal(r)
	}
	if r := open(keep); r != DropSealedReplay {
		t.Errorf("replay: %v", r)
	}
	for i := 0; i < len(keep)-1; i += 3 {
		b := mk(&p.cTx)
		b[i] ^= 0x10
		r := open(b)
		if r == DropNone {
			t.Errorf("bit flipped at %d accepted", i)
		}
	}
	if r := openWith(&newSealedPair(1).sRx, mk(&other.cTx)); r != DropSealedForged {
		t.Errorf("another connection's packet: %v", r)
	}
	plain := make([]byte, 200)
	n := EncodeConn(plain, m, &h, []byte("an unsealed packet, long enough to pass the size check"))
	if r := openWith(&newSealedPair(1).sRx, plain[:n]); r != DropSealedForged {
		t.Errorf("unsealed packet: %v", r)
	}
	if r := open([]byte{0x00, 0x01}); r != DropBadSize {
		t.Errorf("short: %v", r)
	}
}

// testProofCookie is a proof's cookie part whose Tag is tag.
func testProofCookie(tag uint32) *ProofCookie {
	pc := &ProofCookie{SecretID: 1, Timestamp: 1795000000.25}
	for i := range pc.Cookie {
		pc.Cookie[i] = byte(0xc0 + i)
	}
	binary.LittleEndian.PutUint32(pc.Cookie[4:], tag)
	return pc
}

func TestProofRoundTrip(t *testing.T) {
	var m Magic
	req := testRequest(t)
	p := newSealedPair(1)
	h := ConnHeader{ClientID: 3, Tag: 0x01020304, Seq: 5, Ack: 16383, Kind: KindKeepAlive}
	pc := testProofCookie(h.Tag)
	buf := make([]byte, 1500)
	n := SealProof(buf, m, &h, pc, req, &p.cTx)
	if n != ProofLen(m) || n != 1149 {
		t.Fatalf("proof length %d", n)
	}
	pkt := buf[:n]
	var g ConnHeader
	proof, r := DecodeSealed(m, pkt, &g)
	if r != DropNone || !proof || g.Tag != h.Tag {
		t.Fatalf("%v %v", proof, r)
	}
	if !bytes.Equal(ProofRequest(m, pkt), req) {
		t.Fatal("request body differs")
	}
	var got ProofCookie
	if !ProofCookieOf(m, pkt, &got) || got != *pc {
		t.Fatalf("cookie part %+v, want %+v", got, *pc)
	}
	// A cookie of another Tag, or a SecretId past 1, is refused both ways.
	if SealProof(buf, m, &h, testProofCookie(h.Tag+1), req, &p.cTx) != 0 {
		t.Fatal("SealProof wrote a proof whose cookie is not its Tag's")
	}
	bad := bytes.Clone(pkt)
	bad[ConnHeaderOffset(m)+4] = 2
	if ProofCookieOf(m, bad, &got) {
		t.Fatal("SecretId 2 accepted")
	}
	bad = bytes.Clone(pkt)
	bad[ConnHeaderOffset(m)+4+1+8+5]++
	if ProofCookieOf(m, bad, &got) {
		t.Fatal("a cookie of another Tag accepted")
	}
	if _, r := OpenProof(m, pkt, &g, &p.sRx); r != DropNone || g != h {
		t.Fatalf("OpenProof %v %+v", r, g)
	}
	// The same request under keys the sender does not hold.
	q := newSealedPair(9)
	var wrong [seal.KeyBytes]byte
	q.cTx.Init(&wrong, nil)
	n = SealProof(buf, m, &h, pc, req, &q.cTx)
	if _, r := OpenProof(m, buf[:n], &g, &newSealedPair(1).sRx); r != DropProofForged {
		t.Fatalf("forged proof: %v", r)
	}
	// A Data packet cannot be a proof.
	if SealProof(buf, m, &ConnHeader{Kind: KindData}, testProofCookie(0), req, &p.cTx) != 0 {
		t.Fatal("SealProof wrote a Data proof")
	}
}

// TestSealedAlloc: sealing and opening allocate nothing.
func TestSealedAlloc(t *testing.T) {
	var m Magic
	p := newSealedPair(1)
	h := ConnHeader{Tag: 1, Kind: KindData}
	buf := make([]byte, 1500)
	payload := make([]byte, 64)
	var g ConnHeader
	allocs := testing.AllocsPerRun(1000, func() {
		n := SealConn(buf, m, &h, payload, &p.cTx)
		if _, r := DecodeSealed(m, buf[:n], &g); r != DropNone {
			t.Fatal(r)
		}
		if _, _, r := OpenConn(m, buf[:n], &g, &p.sRx); r != DropNone {
			t.Fatal(r)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per sealed packet", allocs)
	}
}

func FuzzOpenSealed(f *testing.F) {
	var m Magic
	p := newSealedPair(1)
	h := ConnHeader{Tag: 1, Kind: KindData}
	buf := make([]byte, 1500)
	f.Add(buf[:SealConn(buf, m, &h, []byte("x"), &p.cTx)])
	f.Add(buf[:SealProof(buf, m, &ConnHeader{Kind: KindKeepAlive}, testProofCookie(0), testRequest(f), &p.cTx)])
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		var g ConnHeader
		proof, r := DecodeSealed(m, b, &g)
		if r != DropNone {
			return
		}
		q := newSealedPair(1)
		if proof {
			var pc ProofCookie
			if ProofCookieOf(m, b, &pc) && (pc.SecretID > 1 || binary.LittleEndian.Uint32(b[ConnHeaderOffset(m):]) != binary.LittleEndian.Uint32(pc.Cookie[4:])) {
				t.Fatalf("accepted a cookie part that breaks §11.3: %+v", pc)
			}
			if len(ProofRequest(m, b)) != token.RequestBytes {
				t.Fatal("request body size")
			}
			_, _ = OpenProof(m, b, &g, &q.sRx)
			return
		}
		payload, _, r := OpenConn(m, b, &g, &q.sRx)
		if r == DropNone && (g.Kind > KindDisconnect || !connPayloadOK(g.Kind, len(payload))) {
			t.Fatalf("accepted a body breaking §7: %+v %d", g, len(payload))
		}
	})
}

func BenchmarkSealedEcho(b *testing.B) {
	var m Magic
	p := newSealedPair(1)
	h := ConnHeader{Tag: 1, Kind: KindData}
	buf := make([]byte, 1500)
	payload := make([]byte, 64)
	var g ConnHeader
	b.ReportAllocs()
	for b.Loop() {
		n := SealConn(buf, m, &h, payload, &p.cTx)
		DecodeSealed(m, buf[:n], &g)
		OpenConn(m, buf[:n], &g, &p.sRx)
	}
}

// TestSealedDecisions: what a sealed Server decides for each kind of
// connection packet, from a known and an unknown address.
func TestSealedDecisions(t *testing.T) {
	sec, err := cookie.NewSecrets(1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(ServerConfig{Sealed: true, RestartLimit: Limit{Rate: 1, Burst: 2}}, sec, 1, 1000)
	var m Magic
	p := newSealedPair(1)
	h := ConnHeader{ClientID: 3, Tag: 77, Kind: KindData}
	buf := make([]byte, 1500)
	data := bytes.Clone(buf[:SealConn(buf, m, &h, []byte("x"), &p.cTx)])
	proof := bytes.Clone(buf[:SealProof(buf, m, &ConnHeader{ClientID: 3, Tag: 77, Kind: KindKeepAlive}, testProofCookie(77), testRequest(t), &p.cTx)])
	plain := bytes.Clone(buf[:EncodeConn(buf, m, &h, []byte("x"))])
	src := netip.MustParseAddrPort("192.0.2.1:5000")
	known := &Peer{Known: true, ClientID: 3, Tag: 77}
	out := make([]byte, MaxReplyLen)
	var d Decision
	for _, tc := range []struct {
		name   string
		pkt    []byte
		peer   *Peer
		action Action
		drop   DropReason
		proof  bool
	}{
		{"sealed, known", data, known, ActSealed, DropNone, false},
		{"proof, known", proof, known, ActSealed, DropNone, true},
		{"sealed, wrong tag", data, &Peer{Known: true, ClientID: 3, Tag: 78}, ActDrop, DropBadTag, false},
		{"sealed, wrong client id", data, &Peer{Known: true, ClientID: 4, Tag: 77}, ActDrop, DropClientIDMismatch, false},
		{"unsealed, known (too short to be sealed): in clear, for the caller", plain, known, ActSealed, DropNone, false},
		{"unsealed, known, wrong tag", plain, &Peer{Known: true, ClientID: 3, Tag: 78}, ActDrop, DropBadSize, false},
		{"proof, unknown address: its cookie is the caller's to check", proof, &Peer{}, ActSealed, DropNone, true},

		{"sealed, unknown: try to move", data, &Peer{}, ActSealedMove, DropNone, false},
		{"sealed, unknown again", data, &Peer{}, ActSealedMove, DropNone, false},
		{"sealed, unknown over budget", data, &Peer{}, ActDrop, DropRateLimited, false},
	} {
		s.Handle(&d, src, tc.pkt, 1000, tc.peer, out)
		clear := tc.pkt[len(tc.pkt)-1] == 1 && len(tc.pkt) == len(plain) && d.Action == ActSealed
		if d.Action != tc.action || d.Drop != tc.drop || d.Proof != tc.proof || d.ReplyLen != 0 || d.Clear != clear {
			t.Errorf("%s: action %v drop %v proof %v reply %d", tc.name, d.Action, d.Drop, d.Proof, d.ReplyLen)
		}
	}
	s.cfg.Closed = closedSet{src: true}
	s.Handle(&d, src, data, 1000, &Peer{}, out)
	if d.Drop != DropRecentlyDisconnected {
		t.Errorf("sealed, recently closed: action %v drop %v", d.Action, d.Drop)
	}
	s.cfg.Closed = nil
	// A connection packet in clear from an unknown address: a client
	// without a token, told so statelessly (reason 11, its own Tag, no
	// larger than the packet), under the restart budget.
	s2 := NewServer(ServerConfig{Sealed: true, SessionID: 0, RestartLimit: Limit{Rate: 1, Burst: 1}}, sec, 1, 1000)
	s2.Handle(&d, src, plain, 1000, &Peer{}, out)
	if d.Action != ActNotice || d.Drop != DropTokenRequired || d.ReplyLen != ConnLen(m, KindDisconnect, 1) || d.ReplyLen > len(plain) {
		t.Fatalf("tokenless: action %v drop %v reply %d", d.Action, d.Drop, d.ReplyLen)
	}
	var nh ConnHeader
	if payload, r := DecodeConn(m, out[:d.ReplyLen], &nh); r != DropNone || nh.Kind != KindDisconnect || nh.Tag != 77 ||
		nh.ClientID != 3 || payload[0] != DisconnectTokenRequired {
		t.Fatalf("tokenless notice: %v %+v %v", r, nh, payload)
	}
	s2.Handle(&d, src, plain, 1000, &Peer{}, out)
	if d.Action != ActDrop || d.Drop != DropRateLimited {
		t.Errorf("tokenless over budget: action %v drop %v", d.Action, d.Drop)
	}
	disc := bytes.Clone(buf[:EncodeConn(buf, m, &ConnHeader{ClientID: 3, Tag: 77, Kind: KindDisconnect}, []byte{1})])
	s2.Handle(&d, netip.MustParseAddrPort("192.0.2.9:1"), disc, 1000, &Peer{}, out)
	if d.Action != ActDrop || d.Drop != DropTokenRequired {
		t.Errorf("tokenless Disconnect answered: action %v drop %v", d.Action, d.Drop)
	}
	// The cookie of a RestartResponse travels in clear: a sealed server
	// moves nothing for it.
	var ck cookie.Cookie
	rr := Handshake{Type: TypeRestartResponse, Restart: true, ClientID: 3, MinVersion: 3, CurVersion: 4, RandomLen: 8, Timestamp: 999, Cookie: ck, OrigCookie: ck}
	n := EncodeHandshake(buf, m, &rr)
	s.Handle(&d, src, buf[:n], 1000, known, out)
	if d.Action != ActDrop || d.Drop != DropUnexpectedType {
		t.Errorf("RestartResponse: action %v drop %v", d.Action, d.Drop)
	}
}
