package flood

import (
	"crypto/rand"
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/udpgate/udpgate/batchio"
	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seal"
	"github.com/udpgate/udpgate/internal/seqwin"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/token"
)

// Sealed-mode kinds (docs/protocol.md §11). A proof carries its
// handshake's cookie, which the server checks against the proof's source
// before any token check, so to reach those checks each source first
// completes the handshake as a sealed client does (Initial, Challenge: the
// proof takes the Response's place), as an attacker would, and then sends
// hostile proofs (carrying its own cookie)
// and sealed packets; the server keeps nothing for it. A source that did
// not connect sends proofs with a made-up cookie, which the cookie check
// drops.

// perSourceVariants is how many datagrams of each sealed-mode kind a
// connected source has (its own Tag is in each): with the default 200
// sources, about 2 MiB of proofs.
const perSourceVariants = 8

// Setup bounds: handshake resends and how long every source may take.
const (
	setupResend  = 200 * time.Millisecond
	setupTimeout = 3 * time.Second
)

// sourceConn is a source's connection for the sealed-mode kinds. While
// active, its receiver hands handshake replies to hs under mu.
type sourceConn struct {
	mu     sync.Mutex
	active atomic.Bool
	hs     handshake.ClientHandshake
	out    *batchio.Batch
	id8    uint8 // the handshake's ClientID
	ok     bool  // connected: the fields below are set
	id     protocol.ConnHeader
	seqs   seqwin.SeqState
	cookie cookie.Cookie
	// pc: the Challenge's cookie part, which its proofs carry.
	pc wire.ProofCookie
}

// connectSources runs every source's handshake at once (the receivers must
// be running) and returns how many connected. A source that does not
// connect sends the sealed-mode kinds with random Tags instead.
func (e *engine) connectSources(deadline time.Time, rnd *wire.Rand) int {
	st := e.st
	end := time.Now().Add(setupTimeout)
	if deadline.Before(end) {
		end = deadline
	}
	for _, s := range e.srcs {
		c := &sourceConn{out: batchio.NewBatch(1, handshake.MaxClientPacketLen), id8: uint8(rnd.Intn(8))}
		c.hs = handshake.NewClientHandshake(handshake.ClientConfig{
			Magic: st.magic, NetworkVersion: st.NetworkVersion, NetworkFeatures: st.NetworkFeatures,
			ClientID: c.id8, ResendInterval: setupResend.Seconds(), ConnectTimeout: setupTimeout.Seconds(),
			ProofAfterChallenge: true,
		}, rnd.Uint64()|1)
		s.conn = c
		c.mu.Lock()
		c.active.Store(true)
		c.hs.Start(seconds(time.Now()))
		c.poll(s, st.Server)
		c.mu.Unlock()
	}
	for time.Now().Before(end) && !e.stop.Load() {
		time.Sleep(20 * time.Millisecond)
		busy := false
		for _, s := range e.srcs {
			c := s.conn
			c.mu.Lock()
			if c.active.Load() {
				c.poll(s, st.Server)
				busy = busy || c.active.Load()
			}
			c.mu.Unlock()
		}
		if !busy {
			break
		}
	}
	n := 0
	for _, s := range e.srcs {
		c := s.conn
		c.mu.Lock()
		c.active.Store(false)
		if c.ok {
			n++
		}
		c.mu.Unlock()
	}
	return n
}

// poll sends what the handshake has due. c.mu is held.
func (c *sourceConn) poll(s *source, server netip.AddrPort) {
	m := &c.out.Msgs[0]
	n, ev := c.hs.Poll(seconds(time.Now()), m.Buf[:cap(m.Buf)])
	c.sendOut(s, server, n)
	c.event(ev)
}

// handshakeIn is the receiver's part: a reply to the handshake.
func (c *sourceConn) handshakeIn(s *source, server netip.AddrPort, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.active.Load() {
		return
	}
	m := &c.out.Msgs[0]
	n, ev, _ := c.hs.Receive(seconds(time.Now()), p, m.Buf[:cap(m.Buf)])
	c.sendOut(s, server, n)
	c.event(ev)
}

func (c *sourceConn) sendOut(s *source, server netip.AddrPort, n int) {
	if n == 0 {
		return
	}
	m := &c.out.Msgs[0]
	m.N, m.Addr = n, server
	_ = s.sock.Send(c.out, 1) // a lost handshake packet is resent
}

func (c *sourceConn) event(ev handshake.ClientEvent) {
	switch ev {
	case handshake.EventNone:
		return
	case handshake.EventConnected:
		c.ok = true
		c.cookie = c.hs.Cookie()
		c.pc.SecretID, c.pc.Timestamp = c.hs.CookieOrigin()
		c.pc.Cookie = c.cookie
		c.id = protocol.ConnHeader{SessionID: c.hs.SessionID(), ClientID: c.id8, Tag: cookie.SessionTag(&c.cookie)}
		srv, cli := cookie.Sequences(&c.cookie)
		c.seqs.Init(cli, srv, 0)
	}
	c.active.Store(false)
}

// Proof variants, drawn in turn; the last two need Config.PrivateKey.
const (
	pWrongProtocol = iota // a token for another protocol id: token_wrong_protocol
	pExpired              // expired an hour ago: token_expired
	pWrongKey             // sealed under another private key: token_invalid
	pBitFlip              // one bit of the nonce or sealed part flipped: token_invalid
	pBadVersion           // a version info that is not netcode 1.02's: not a proof
	pTruncated            // a proof cut short
	pOversize             // a proof with bytes after it, within or past MaxDatagram
	pRandomBody           // the right version info, then random bytes
	pBadCookie            // a cookie part that is no Response's (SecretId 2): not_proof
	pForeign              // opens, but lists another server: token_foreign_server
	pForgedSeal           // opens, lists this server, inner seal forged: proof_forged
	numProof
)

// foreignServer is the address pForeign tokens admit to: not a server.
var foreignServer = netip.MustParseAddrPort("127.0.0.2:9")

// proof writes proof variant v for connection c (zero: a random Tag) into
// dst and returns its length.
func (b *builder) proof(dst []byte, v int, c *sourceConn) int {
	st := b.st
	if st.PrivateKey == nil && v >= pForeign {
		v %= pForeign
	}
	h, salt := b.connHeader(c)
	h.Kind = protocol.KindKeepAlive
	h.AckBits = 0
	key := b.randomKey()
	p := token.Params{ProtocolID: st.ProtocolID, ServerAddresses: []netip.AddrPort{st.Server}, Expire: time.Minute, Timeout: 5 * time.Second}
	switch v {
	case pWrongProtocol:
		p.ProtocolID ^= 1 + b.rnd.Uint64()%(1<<32)
	case pExpired:
		ago := time.Now().Add(-time.Hour)
		p.Now = func() time.Time { return ago }
	case pForeign:
		key = st.PrivateKey
		p.ServerAddresses = []netip.AddrPort{foreignServer}
	case pForgedSeal:
		key = st.PrivateKey
	}
	tok, err := token.Generate(key, &p)
	if err != nil {
		panic("flood: a template token does not generate: " + err.Error())
	}
	r := tok.Request()
	req, _ := r.AppendBinary(nil)
	var s seal.Sealer
	sealKey := &tok.ClientToServerKey
	if v == pForgedSeal {
		sealKey = b.randomKey()
	}
	// The cookie part: the source's own Response cookie, else a random
	// cookie with the packet's Tag (it fails the server's cookie check).
	var pc wire.ProofCookie
	if c != nil && c.ok {
		pc = c.pc
		pc.Cookie = c.cookie
	} else {
		b.rnd.Fill(pc.Cookie[:])
		binary.LittleEndian.PutUint32(pc.Cookie[4:], h.Tag)
		pc.Timestamp = float64(time.Now().Unix())
		copy(salt[:], pc.Cookie[:])
	}
	s.Init(sealKey, salt)
	n := wire.SealProof(dst, b.m, &h, &pc, req, &s)
	if n == 0 {
		panic("flood: a template proof does not seal; the builder is wrong")
	}
	at := wire.ProofVersionOffset(b.m)
	switch v {
	case pBitFlip:
		// Anywhere in the nonce or the sealed private part.
		i := at + token.VersionInfoBytes + 16 + b.rnd.Intn(token.NonceBytes+token.PrivateBytes)
		dst[i] ^= 1 << b.rnd.Intn(8)
	case pBadVersion:
		dst[at+b.rnd.Intn(token.VersionInfoBytes)] ^= 1 << b.rnd.Intn(8)
	case pTruncated:
		return 1 + b.rnd.Intn(n-1)
	case pOversize:
		// In turn within MaxDatagram (not a proof by its size) and past
		// it (too large for the server to read).
		b.oversized++
		extra := 1 + b.rnd.Intn(max(1, st.MaxDatagram-n))
		if b.oversized%2 == 0 {
			extra = st.MaxDatagram - n + 1 + b.rnd.Intn(64)
		}
		b.rnd.Fill(dst[n : n+extra])
		dst[n+extra-1] = 0x01
		return n + extra
	case pRandomBody:
		b.rnd.Fill(dst[at+token.VersionInfoBytes : n-1])
	case pBadCookie:
		dst[wire.ConnHeaderOffset(b.m)+4] = 2
	}
	return n
}

// sealed writes a sealed packet with a random counter, ciphertext and MAC
// on connection c (zero: a random Tag) into dst.
func (b *builder) sealed(dst []byte, c *sourceConn) int {
	h, _ := b.connHeader(c)
	var s seal.Sealer
	s.Init(b.randomKey(), nil)
	n := wire.SealConn(dst, b.m, &h, nil, &s)
	if n == 0 {
		panic("flood: a template sealed packet does not seal; the builder is wrong")
	}
	// Random counter, ciphertext and MAC: only the prefix, Tag and
	// terminator are right.
	b.rnd.Fill(dst[wire.ConnHeaderOffset(b.m)+4 : n-1])
	return n
}

// connHeader is the header of a packet on c, or, without a connection,
// with a random Tag and ClientID; salt is c's (zero without).
func (b *builder) connHeader(c *sourceConn) (protocol.ConnHeader, *[seal.SaltBytes]byte) {
	var salt [seal.SaltBytes]byte
	if c == nil || !c.ok {
		return protocol.ConnHeader{SessionID: b.sessionID(), ClientID: uint8(b.rnd.Intn(8)), Tag: uint32(b.rnd.Uint64()),
			Seq: uint16(b.rnd.Intn(protocol.SeqModulus)), Ack: uint16(b.rnd.Intn(protocol.SeqModulus)), Kind: protocol.KindKeepAlive}, &salt
	}
	h := c.id
	h.Seq, h.Ack, h.AckBits, _, _ = c.seqs.Send(0)
	h.Kind = protocol.KindKeepAlive
	copy(salt[:], c.cookie[:])
	return h, &salt
}

func (b *builder) randomKey() *[token.KeyBytes]byte {
	var k [token.KeyBytes]byte
	if _, err := rand.Read(k[:]); err != nil {
		b.rnd.Fill(k[:])
	}
	return &k
}

// sourceTemplates builds source s's own datagrams of the sealed-mode kinds
// once it is connected; seq numbers which variants it gets, so that the
// sources together cover every one.
func (b *builder) sourceTemplates(s *source, seq int) {
	for _, k := range [...]Kind{KindProof, KindSealed} {
		if b.st.Mix[k] == 0 {
			continue
		}
		vs := make([][]byte, perSourceVariants)
		for i := range vs {
			var buf [protocol.MaxDatagramLimit + 512]byte
			var n int
			if k == KindProof {
				n = b.proof(buf[:], (seq*perSourceVariants+i)%numProof, s.conn)
			} else {
				n = b.sealed(buf[:], s.conn)
			}
			vs[i] = b.put(buf[:n])
		}
		s.kinds[k] = vs
	}
}
