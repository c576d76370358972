package seal_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seal"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/token"
)

// This file builds the worked example of the proposed sealed packet layout
// (docs/protocol.md §11.2) and checks it against
// testdata/sealed_example.txt; -update rewrites that file.
//
// The layout, with o = wire.ConnHeaderOffset(M):
//
//	sealed packet: prefix (o) ‖ Tag (4) ‖ Counter (8) ‖ seal(Seq Ack AckBits Kind payload) ‖ MAC (16) ‖ 0x01
//	proof packet:  prefix (o) ‖ Tag (4) ‖ SecretId (1) ‖ Timestamp (8) ‖ Cookie (20) ‖ token.Request (1077) ‖ Counter (8) ‖ seal(Seq Ack AckBits Kind=KeepAlive) ‖ MAC (16) ‖ 0x01
//
// The associated data is everything before the ciphertext.

var update = flag.Bool("update", false, "rewrite testdata/sealed_example.txt")

// proofLen is the size of a proof packet.
func proofLen(m wire.Magic) int { return wire.ProofLen(m) }

// appendSealed appends a sealed connection packet (or, with a request
// body, a proof packet) made by fastpath's encoder, sealed by s: the golden
// file pins the implementation, not a copy of it.
func appendSealed(dst []byte, m wire.Magic, h *protocol.ConnHeader, payload []byte, proof []byte, pc *wire.ProofCookie, s *seal.Sealer) []byte {
	var buf [protocol.MaxDatagramLimit]byte
	var n int
	if proof != nil {
		n = wire.SealProof(buf[:], m, h, pc, proof, s)
	} else {
		n = wire.SealConn(buf[:], m, h, payload, s)
	}
	if n == 0 {
		panic("fastpath refused the packet")
	}
	return append(dst, buf[:n]...)
}

// openSealed is the receiver's side: it checks the terminator, opens, and
// decodes the body as a connection header and payload.
func openSealed(t *testing.T, b []byte, m wire.Magic, proof bool, o *seal.Opener) (h protocol.ConnHeader, payload, plain []byte) {
	t.Helper()
	if b[len(b)-1] != 0x01 {
		t.Fatal("terminator")
	}
	b = bytes.Clone(b[:len(b)-1])
	hdr := wire.ConnHeaderOffset(m) + 4 + seal.CounterBytes
	if proof {
		hdr += 1 + 8 + cookie.Size + token.RequestBytes
	}
	plain, _, err := o.Open(b, hdr)
	if err != nil {
		t.Fatal(err)
	}
	// Rebuild the unsealed form to read it with the real decoder.
	u := append(append(bytes.Clone(b[:wire.ConnHeaderOffset(m)+4]), plain...), 0x01)
	payload, r := wire.DecodeConn(m, u, &h)
	if r != protocol.DropNone {
		t.Fatalf("decoded body dropped: %v", r)
	}
	return h, payload, plain
}

func TestSealedExample(t *testing.T) {
	privateKey := [token.KeyBytes]byte{
		0x60, 0x6a, 0xbe, 0x6e, 0xc9, 0x19, 0x10, 0xea, 0x9a, 0x65, 0x62, 0xf6, 0x6f, 0x2b, 0x30, 0xe4,
		0x43, 0x71, 0xd6, 0x2c, 0xd1, 0x99, 0x27, 0x26, 0x6b, 0x3c, 0x60, 0xf4, 0xb7, 0x15, 0xab, 0xa1,
	}
	server := netip.MustParseAddrPort("127.0.0.1:40000")
	var rnd []byte
	for _, start := range []byte{0x00, 0x40, 0x80} { // nonce, c2s key, s2c key
		for i := range 32 {
			rnd = append(rnd, start+byte(i))
		}
	}
	tok, err := token.Generate(&privateKey, &token.Params{
		ProtocolID: 0x1122334455667788, ClientID: 0x8877665544332211,
		ServerAddresses: []netip.AddrPort{server},
		Expire:          30 * time.Second, Timeout: 10 * time.Second,
		UserData: []byte("example user data"),
		Rand:     bytes.NewReader(append(rnd[:24], rnd[32:]...)),
		Now:      func() time.Time { return time.Unix(1700000000, 0) },
	})
	if err != nil {
		t.Fatal(err)
	}
	req := tok.Request()
	body, _ := req.AppendBinary(nil)

	var m wire.Magic // no magic header: o = 1
	// The connection's authorised cookie (from the Ack): it gives the
	// sequences and the tag (docs/protocol.md §4), and its first 16 bytes salt
	// the keys.
	ck := cookie.Cookie{0x21, 0x03, 0x34, 0x12, 0xd4, 0xc3, 0xb2, 0xa1,
		0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb}
	serverSeq, clientSeq := cookie.Sequences(&ck)
	tag := cookie.SessionTag(&ck)
	if serverSeq != 0x0321 || clientSeq != 0x1234 || tag != 0xa1b2c3d4 {
		t.Fatal("cookie")
	}
	salt := (*[seal.SaltBytes]byte)(ck[:seal.SaltBytes])
	// The Response's SecretId and Timestamp, which the proof carries
	// with the cookie (the server checks them again, §4).
	pc := &wire.ProofCookie{SecretID: 1, Timestamp: 1700000001.5, Cookie: ck}
	const sessionID, clientID = 1, 5
	var c2s, s2c seal.Sealer
	c2s.Init(&tok.ClientToServerKey, salt)
	s2c.Init(&tok.ServerToClientKey, salt)
	hdr := func(seq, ack uint16, bits uint64, kind protocol.Kind) *protocol.ConnHeader {
		return &protocol.ConnHeader{SessionID: sessionID, ClientID: clientID, Tag: tag, Seq: seq, Ack: ack, AckBits: bits, Kind: kind}
	}
	type pkt struct {
		name    string
		b       []byte
		proof   bool
		toSrv   bool
		kind    protocol.Kind
		payload []byte
	}
	pkts := []pkt{
		{"proof, client → server (counter 0)", appendSealed(nil, m, hdr(clientSeq, serverSeq-1, 0, protocol.KindKeepAlive), nil, body, pc, &c2s), true, true, protocol.KindKeepAlive, nil},
		{"KeepAlive, server → client (counter 0)", appendSealed(nil, m, hdr(serverSeq, clientSeq, 0, protocol.KindKeepAlive), nil, nil, nil, &s2c), false, false, protocol.KindKeepAlive, nil},
		{"Data \"hello, sealed world\", client → server (counter 1)", appendSealed(nil, m, hdr(clientSeq+1, serverSeq, 0, protocol.KindData), []byte("hello, sealed world"), nil, nil, &c2s), false, true, protocol.KindData, []byte("hello, sealed world")},
		{"Data \"echo\", server → client (counter 1)", appendSealed(nil, m, hdr(serverSeq+1, clientSeq+1, 1, protocol.KindData), []byte("echo"), nil, nil, &s2c), false, false, protocol.KindData, []byte("echo")},
		{"Disconnect reason 1, client → server (counter 2)", appendSealed(nil, m, hdr(clientSeq+2, serverSeq+1, 0, protocol.KindDisconnect), []byte{1}, nil, nil, &c2s), false, true, protocol.KindDisconnect, []byte{1}},
	}
	// Had the server refused the proof (§11.3): a sealed Disconnect at
	// the reserved counter 2^64 − 257 + reason, with Seq and Ack from the
	// cookie alone, in place of the KeepAlive.
	var refusal seal.Sealer
	refusal.Init(&tok.ServerToClientKey, salt)
	rb := make([]byte, 64)
	const reason = uint8(protocol.DisconnectForeignServer)
	rb = rb[:wire.SealRefusal(rb, m, sessionID, clientID, &ck, reason, &refusal)]
	if ctr := binary.LittleEndian.Uint64(rb[wire.ConnHeaderOffset(m)+4:]); ctr != 1<<64-1-256+uint64(reason) || len(rb) != wire.SealedConnLen(m, 1) {
		t.Fatalf("refusal: counter %#x, %d bytes", ctr, len(rb))
	}
	pkts = append(pkts, pkt{"Refusal reason 7 (this server is not in the token), server → client, in place of the KeepAlive (counter 2^64 − 250)",
		rb, false, false, protocol.KindDisconnect, []byte{reason}})

	// The receivers: the server learns the keys from the proof's token.
	opener := token.NewOpener(&privateKey, 0x1122334455667788)
	var priv token.Private
	proof := pkts[0].b
	if len(proof) != proofLen(m) || len(proof) != 1149 {
		t.Fatalf("proof is %d bytes", len(proof))
	}
	o := wire.ConnHeaderOffset(m)
	if err := opener.OpenRequest(&priv, wire.ProofRequest(m, proof), time.Unix(1700000001, 0)); err != nil {
		t.Fatal(err)
	}
	if !priv.HasServerAddress(server) {
		t.Fatal("server not in token")
	}
	var atServer, atClient seal.Opener
	atServer.Init(&priv.ClientToServerKey, salt)
	atClient.Init(&tok.ServerToClientKey, salt)
	plains := make([][]byte, len(pkts))
	for i, p := range pkts {
		rx := &atClient
		if p.toSrv {
			rx = &atServer
		}
		h, payload, plain := openSealed(t, p.b, m, p.proof, rx)
		plains[i] = plain
		if h.Tag != tag || h.Kind != p.kind || !bytes.Equal(payload, p.payload) {
			t.Errorf("%s: opened as %+v %q", p.name, h, payload)
		}
		if len(p.payload) > 3 && bytes.Contains(p.b, p.payload) {
			t.Errorf("%s: payload in clear", p.name)
		}
	}

	// The golden file: one annotated hex dump per packet.
	var out strings.Builder
	fmt.Fprintf(&out, "# Generated by TestSealedExample (go test ./internal/seal -run SealedExample -update).\n")
	fmt.Fprintf(&out, "# No magic header (o = 1), SessionID %d, ClientID %d. Authorised cookie %x:\n", sessionID, clientID, ck[:])
	fmt.Fprintf(&out, "# Tag %#08x, ServerSeq %#04x, ClientSeq %#04x, salt = cookie[0:16].\n", tag, serverSeq, clientSeq)
	fmt.Fprintf(&out, "# The Response (and so the proof) had SecretId %d, Timestamp %.1f (f64 LE).\n", pc.SecretID, pc.Timestamp)
	fmt.Fprintf(&out, "# Token: private key 606abe6e…b715aba1, protocol id 0x1122334455667788, client id 0x8877665544332211,\n")
	fmt.Fprintf(&out, "# server 127.0.0.1:40000, created 1700000000, expires 1700000030, timeout 10, nonce 00..17,\n")
	fmt.Fprintf(&out, "# client→server key 40..5f, server→client key 80..9f, user data \"example user data\".\n")
	for i, p := range pkts {
		fmt.Fprintf(&out, "\n## %s, %d bytes\n", p.name, len(p.b))
		b := p.b
		field := func(name string, n int) {
			fmt.Fprintf(&out, "%-28s %s\n", name, wrap(hex.EncodeToString(b[:n])))
			b = b[n:]
		}
		field("prefix", o)
		field("tag", 4)
		if p.proof {
			field("cookie.secret_id", 1)
			field("cookie.timestamp", 8)
			field("cookie.cookie", cookie.Size)
			field("request.version", token.VersionInfoBytes)
			field("request.protocol_id", 8)
			field("request.expire", 8)
			field("request.nonce", token.NonceBytes)
			field("request.sealed_private", token.PrivateBytes)
		}
		ctr := binary.LittleEndian.Uint64(b)
		label := fmt.Sprintf("counter (%d)", ctr)
		if ctr >= 1<<63 {
			label = fmt.Sprintf("counter (2^64 − %d)", -ctr)
		}
		field(label, 8)
		field("ciphertext", len(b)-seal.TagBytes-1)
		pl := plains[i]
		fmt.Fprintf(&out, "%-28s %s\n", "  plaintext", wrap(strings.TrimSpace(hex.EncodeToString(pl[:2])+" "+hex.EncodeToString(pl[2:4])+" "+
			hex.EncodeToString(pl[4:12])+" "+hex.EncodeToString(pl[12:13])+" "+hex.EncodeToString(pl[13:]))))
		field("mac", seal.TagBytes)
		field("terminator", 1)
	}
	const golden = "testdata/sealed_example.txt"
	if *update {
		if err := os.WriteFile(golden, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != out.String() {
		t.Errorf("the example differs from %s (run with -update after an intended change)", golden)
	}
}

// wrap breaks long hex into lines of 64 digits, indented under the field.
func wrap(s string) string {
	var b strings.Builder
	for len(s) > 64 {
		b.WriteString(s[:64])
		b.WriteString("\n" + strings.Repeat(" ", 29))
		s = s[64:]
	}
	b.WriteString(s)
	return b.String()
}
