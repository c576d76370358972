package conn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
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

// Sealed mode (docs/protocol.md §11). The handshake is unchanged; a client
// with a token proves right after the Challenge, and a server with a
// PrivateKey keeps nothing before the proof (a Response, which such a
// client skips, gets a stateless Ack): the proof carries the Challenge's
// cookie again, and the connection is created, already proven, only when
// cookie, token, inner seal and Config.Accept all agree. Every connection
// packet after is sealed.
//
// Ownership: a connection's sealState is created with it and never
// replaced; tx and rx are guarded by Conn.mu like seq; state moves once
// to closed (a client's, from unproven to proven first). The Server's
// sealedServer owns the tables that span connections: the used tokens, and
// the indexes by client id and by Tag.

// Identity is what a sealed connection's connect token says about its
// client, for the Handler: the backend's client id and user data.
type Identity struct {
	ClientID uint64
	UserData [token.UserDataBytes]byte
}

// Errors of a sealed Dial the server refused (errors.Is).
var (
	ErrTokenExpired       = errors.New("conn: the server refused the connect token: token expired (get a new one from the backend)")
	ErrTokenInvalid       = errors.New("conn: the server refused the connect token: token invalid (made with another private key or protocol id than the server's)")
	ErrTokenForeignServer = errors.New("conn: the server refused the connect token: this server is not in the token (the backend sent the client to another server)")
	ErrTokenInUse         = errors.New("conn: the server refused the connect token: token already in use from another address")
	// ErrTokenRequired: the server is sealed and this client has no
	// connect token. Dial returns it when the server's Ack says it is
	// sealed (its Timestamp −2, docs/protocol.md §11.3), before any
	// connection packet. A sealed server older than that Ack tells the
	// client only by refusing its first connection packet (reason 11):
	// then Dial has returned, and the Client's Err matches it (errors.Is)
	// one round trip later.
	ErrTokenRequired = errors.New("conn: the server is in sealed mode and needs a connect token, and this client has none: get a connect token from the game's backend and connect with DialToken (Config.Token; cmd/client connect: -token FILE)")
)

const (
	sealUnproven uint32 = iota
	sealProven
	sealClosed
)

// sealState is a sealed connection's part (nil on an unsealed one).
type sealState struct {
	state atomic.Uint32
	// proofBy (client, Unix ns): the dial fails if no proof was answered
	// by then.
	proofBy int64
	tx      seal.Sealer
	rx      seal.Opener
	id      Identity
	// mac names the proven token in the used-token table, which keeps it
	// until expire (Unix seconds).
	mac    [token.MACBytes]byte
	expire uint64
	// timeout (ns) is the connection's timeout from its token's timeout
	// seconds (tokenTimeout); set before the connection is proven, read
	// after.
	timeout int64
	// Client side: the cookie and request body proofs carry, and when the
	// next proof is due (Unix ns).
	proofCookie wire.ProofCookie
	request     []byte
	nextProof   int64
}

func (ss *sealState) proven() bool { return ss.state.Load() == sealProven }

// timeoutNs is c's connection timeout in ns: its token's on a proven
// sealed connection, else the Config's.
func (c *Conn) timeoutNs() int64 {
	if c.sec != nil && c.sec.timeout > 0 {
		return c.sec.timeout
	}
	return c.st.Timeout.Nanoseconds()
}

// tokenTimeout is the connection timeout a token's timeout seconds set
// (docs/protocol.md §11.3): those seconds, but at least two KeepAlive
// intervals (shorter, a quiet connection would time out between
// KeepAlives); none (negative, netcode's development setting) or zero
// leaves the Config's Timeout, so that a vanished client's connection is
// still reclaimed.
func tokenTimeout(seconds int32, keepAlive time.Duration) int64 {
	if seconds <= 0 {
		return 0
	}
	return max(int64(seconds)*int64(time.Second), 2*keepAlive.Nanoseconds())
}

// heldSealed reports whether c (nil: none) is a sealed connection that has
// proven its token: nothing in clear may replace or close it, only a proof
// of the same client id or a sealed packet under its keys.
func (c *Conn) heldSealed() bool {
	return c != nil && c.sec != nil && c.sec.state.Load() == sealProven
}

// salt is the connection's salt: the first 16 bytes of its authorised
// cookie, which a server never grants twice, so no two connections share
// a nonce even when a token is proven twice.
func (c *Conn) salt() *[seal.SaltBytes]byte {
	return (*[seal.SaltBytes]byte)(c.cookie[:seal.SaltBytes])
}

// Identity returns the connect token's client id and user data on a sealed
// server connection; ok is false on an unsealed one.
func (c *Conn) Identity() (id Identity, ok bool) {
	if c.sec == nil || c.srv == nil || !c.sec.proven() {
		return id, false
	}
	return c.sec.id, true
}

// sealedSettings checks the sealed-mode fields of a Config.
func (s *settings) sealedSettings() error {
	if need := wire.ProofLen(s.magic); s.Token != nil && s.MaxDatagram < need {
		return fmt.Errorf("config: MaxDatagram %d is too small for a sealed connection: a proof packet is %d bytes with this Magic; raise MaxDatagram to at least %d", s.MaxDatagram, need, need)
	}
	if s.PrivateKey == nil {
		if s.ProtocolID != 0 || s.PublicAddresses != nil {
			return fmt.Errorf("config: ProtocolID and PublicAddresses are sealed-mode settings: set PrivateKey too, or leave them zero")
		}
		return nil
	}
	if need := wire.ProofLen(s.magic); s.MaxDatagram < need {
		return fmt.Errorf("config: MaxDatagram %d is too small for sealed mode: a proof packet is %d bytes with this Magic; raise MaxDatagram to at least %d", s.MaxDatagram, need, need)
	}
	for _, a := range s.PublicAddresses {
		if !a.IsValid() || a.Addr().IsUnspecified() || a.Port() == 0 || a.Addr().Zone() != "" {
			return fmt.Errorf("config: public address %v cannot be in a token: give a specific IP address and port, without zone", a)
		}
	}
	return nil
}

// sealedServer is a sealed server's state across connections.
type sealedServer struct {
	public []netip.AddrPort

	mu sync.Mutex
	// used: tokens proven, by MAC, until they expire (netcode's rule: one
	// token, one address). Bounded by usedCap.
	used    map[[token.MACBytes]byte]usedToken
	usedCap int
	// byID: the connection of each client id; byTag: proven connections
	// by Tag, for sealed packets from a new address.
	byID  map[uint64]*Conn
	byTag map[uint32][]*Conn
	// lastPurge is housekeeping's own.
	lastPurge time.Time
}

// usedEvictSample: how many used-token entries a full table compares to
// pick the one to drop.
const usedEvictSample = 8

type usedToken struct {
	addr   netip.AddrPort
	expire uint64
}

// newSealedServer makes a sealed server's state; listen is the bound
// address, the default public address.
func newSealedServer(st *settings, listen netip.AddrPort) (*sealedServer, error) {
	public := st.PublicAddresses
	if public == nil {
		if listen.Addr().IsUnspecified() {
			return nil, fmt.Errorf("conn: sealed mode needs the server's public address when listening on %v: set PublicAddresses (cmd/server: -public-addresses host:port) to the address clients are sent to", listen)
		}
		public = []netip.AddrPort{listen}
	}
	return &sealedServer{
		public: public,
		used:   make(map[[token.MACBytes]byte]usedToken),
		// Connections hold at most MaxClients tokens; as many again of
		// closed connections are remembered until they expire.
		usedCap: 2 * st.MaxClients,
		byID:    make(map[uint64]*Conn),
		byTag:   make(map[uint32][]*Conn),
	}, nil
}

// hasServer reports whether token p lists one of the public addresses.
func (ss *sealedServer) hasServer(p *token.Private) bool {
	for _, a := range ss.public {
		if p.HasServerAddress(a) {
			return true
		}
	}
	return false
}

// closed updates the tables for a closing connection.
func (ss *sealedServer) closed(c *Conn) {
	if c.sec.state.Swap(sealClosed) != sealProven {
		return
	}
	ss.mu.Lock()
	if ss.byID[c.sec.id.ClientID] == c {
		delete(ss.byID, c.sec.id.ClientID)
	}
	list := ss.byTag[c.tag]
	for i, o := range list {
		if o == c {
			list[i] = list[len(list)-1]
			list[len(list)-1] = nil
			list = list[:len(list)-1]
			break
		}
	}
	if len(list) == 0 {
		delete(ss.byTag, c.tag)
	} else {
		ss.byTag[c.tag] = list
	}
	ss.mu.Unlock()
}

// inUse reports whether the token named mac was proven from another
// address and has not expired.
func (ss *sealedServer) inUse(mac *[token.MACBytes]byte, addr netip.AddrPort, now time.Time) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	u, ok := ss.used[*mac]
	return ok && u.addr != addr && u.expire > uint64(now.Unix())
}

// proved records c's token and indexes c, returning the connection it
// replaces (the same client id proven earlier), if any.
func (ss *sealedServer) proved(c *Conn, addr netip.AddrPort) (prev *Conn) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.used) >= ss.usedCap {
		ss.evictUsed()
	}
	ss.used[c.sec.mac] = usedToken{addr: addr, expire: c.sec.expire}
	prev = ss.byID[c.sec.id.ClientID]
	ss.byID[c.sec.id.ClientID] = c
	ss.byTag[c.tag] = append(ss.byTag[c.tag], c)
	return prev
}

// evictUsed makes room in the full used-token table (housekeeping purges
// the expired entries): among a sample of a few entries (map order is
// random) the one that expires first goes. ss.mu is held.
func (ss *sealedServer) evictUsed() {
	var victim [token.MACBytes]byte
	soonest, i := ^uint64(0), 0
	for k, u := range ss.used {
		if u.expire < soonest {
			victim, soonest = k, u.expire
		}
		if i++; i == usedEvictSample {
			break
		}
	}
	delete(ss.used, victim)
}

// purge drops expired used tokens, at most once a second; housekeeping
// calls it.
func (ss *sealedServer) purge(now time.Time) {
	if now.Sub(ss.lastPurge) < time.Second {
		return
	}
	ss.lastPurge = now
	t := uint64(now.Unix())
	ss.mu.Lock()
	for k, u := range ss.used {
		if u.expire <= t {
			delete(ss.used, k)
		}
	}
	ss.mu.Unlock()
}

// moved updates the used-token entry of a connection that moved.
func (ss *sealedServer) moved(c *Conn, addr netip.AddrPort) {
	ss.mu.Lock()
	if u, ok := ss.used[c.sec.mac]; ok {
		u.addr = addr
		ss.used[c.sec.mac] = u
	}
	ss.mu.Unlock()
}

// candidates appends the proven connections with tag to dst.
func (ss *sealedServer) candidates(tag uint32, dst []*Conn) []*Conn {
	ss.mu.Lock()
	dst = append(dst, ss.byTag[tag]...)
	ss.mu.Unlock()
	return dst
}

// ---- Receive loop ----

// loopSealed is a receive loop's sealed-mode scratch.
type loopSealed struct {
	opener *token.Opener
	priv   token.Private
	rx     seal.Opener
	// tx seals a refusal under the token just opened.
	tx    seal.Sealer
	cands []*Conn
	// scratch holds a copy of a datagram tried against several connections
	// (a failed open clears the ciphertext in place).
	scratch []byte
	// proofs remembers the inner Poly1305 tags of the proofs this loop
	// looked at lately, in a direct-mapped table: the same proof seen
	// again is dropped before its token is opened a second time.
	proofs [recentProofs][seal.TagBytes]byte
}

// recentProofs sizes a loop's table of recent proof tags (16 KiB): far
// more than the proofs a loop sees in the time a duplicate takes.
const recentProofs = 1024

// seenProof reports whether tag, a proof's inner Poly1305 tag, is in the
// table, and puts it there.
func (ls *loopSealed) seenProof(tag []byte) bool {
	e := &ls.proofs[binary.LittleEndian.Uint64(tag)&(recentProofs-1)]
	if [seal.TagBytes]byte(tag) == *e {
		return true
	}
	copy(e[:], tag)
	return false
}

func newLoopSealed(st *settings) *loopSealed {
	return &loopSealed{
		opener:  token.NewOpener(st.PrivateKey, st.ProtocolID),
		scratch: make([]byte, st.MaxDatagram+1),
	}
}

// sealed handles a sealed packet for c, the connection at its address, or
// a proof packet (from any address; c is then nil or the connection at the
// proof's address).
func (l *loop) sealed(m *batchio.Message, c *Conn, now time.Time) {
	d := &l.d
	if d.Proof {
		l.prove(m, c, now)
		return
	}
	switch {
	case c == nil || c.sec == nil:
		l.cnt.add(cDrop+int(protocol.DropSealedForged), 1)
		return
	case d.Clear:
		// A packet in clear on a sealed connection: never accepted, never
		// answered.
		l.cnt.add(cDrop+int(protocol.DropBadSize), 1)
		return
	case c.sec.state.Load() != sealProven:
		// Closed since the batch looked it up (a replacement earlier in
		// this batch, say).
		l.cnt.add(cDrop+int(protocol.DropUnknownConnection), 1)
		return
	}
	pkt := m.Buf[:m.N]
	// One critical section opens the packet and runs the sequence window
	// (receiveLocked releases it): one lock per packet, not two.
	c.mu.Lock()
	payload, _, r := wire.OpenConn(l.s.st.magic, pkt, &d.Conn, &c.sec.rx)
	switch {
	case r != protocol.DropNone:
		c.mu.Unlock()
	case c.closed.Load():
		c.mu.Unlock()
		r = protocol.DropUnknownConnection
	default:
		r = c.receiveLocked(&d.Conn, payload, now, &l.rep, l)
	}
	l.connIn(r, c)
}

// prove checks the proof packet in m (§11.3) in the protocol's order and
// either creates its connection, already proven, or refuses it (a notice
// no larger than the proof, and nothing kept), or drops it. Nothing is
// kept for a proof until it checks out. at is the connection at the
// proof's address, or nil.
func (l *loop) prove(m *batchio.Message, at *Conn, now time.Time) {
	s, ls, ss := l.s, l.sealedScratch, l.s.sealed
	d := &l.d
	magic := s.st.magic
	pkt := m.Buf[:m.N]
	if ls.seenProof(pkt[len(pkt)-1-seal.TagBytes : len(pkt)-1]) {
		// The same proof again (a duplicate, or a replay flood):
		// whatever it got the first time, it gets no second look.
		l.cnt.add(cDrop+int(protocol.DropProofLimited), 1)
		return
	}
	if r := l.fp.ProofCookie(d, m.Addr, pkt, seconds(now)); r != protocol.DropNone {
		l.cnt.add(cDrop+int(r), 1)
		return
	}
	// No cookie makes two connections: one that is already a
	// connection's authorised cookie is that client's late proof (its
	// KeepAlive was lost) at the connection's address, else a replay.
	if c, addr, ok := s.tab.conns.GetByCookie((*[20]byte)(&d.Cookie)); ok {
		if addr != m.Addr {
			l.cnt.add(cDrop+int(protocol.DropUnknownConnection), 1)
			return
		}
		l.lateProof(m, c, now)
		return
	}
	p := promotion{addr: m.Addr, cookie: d.Cookie, ts: d.Timestamp, to: handshake.ReplyTo{ClientID: d.Conn.ClientID}, proof: true}
	if s.tab.spent(&p) {
		s.ev.replays.Add(1)
		return
	}
	body := wire.ProofRequest(magic, pkt)
	tp := &ls.priv
	switch err := ls.opener.OpenRequest(tp, body, now); err {
	case nil:
	case token.ErrExpired:
		l.refuse(m.Addr, protocol.DropTokenExpired, protocol.DisconnectTokenExpired, false)
		return
	case token.ErrProtocolID:
		l.refuse(m.Addr, protocol.DropTokenProtocol, protocol.DisconnectTokenInvalid, false)
		return
	case token.ErrInvalid:
		l.refuse(m.Addr, protocol.DropTokenInvalid, protocol.DisconnectTokenInvalid, false)
		return
	default:
		l.cnt.add(cDrop+int(protocol.DropTokenMalformed), 1)
		return
	}
	// The inner seal, salted with this cookie, proves the sender holds the
	// token's keys and made this proof for this handshake: a request body
	// copied into a proof of another's, or a proof moved onto another
	// cookie, fails here, refused nothing.
	salt := (*[seal.SaltBytes]byte)(d.Cookie[:seal.SaltBytes])
	ls.rx.Init(&tp.ClientToServerKey, salt)
	h := d.Conn
	if _, r := wire.OpenProof(magic, pkt, &h, &ls.rx); r != protocol.DropNone {
		l.cnt.add(cDrop+int(r), 1)
		return
	}
	mac := token.RequestMAC(body)
	ls.tx.Init(&tp.ServerToClientKey, salt)
	switch {
	case !ss.hasServer(tp):
		l.refuse(m.Addr, protocol.DropTokenForeignServer, protocol.DisconnectForeignServer, true)
		return
	case ss.inUse(&mac, m.Addr, now):
		l.refuse(m.Addr, protocol.DropTokenInUse, protocol.DisconnectTokenInUse, true)
		return
	case s.closing.Load():
		l.cnt.add(cDrop+int(protocol.DropOverload), 1)
		return
	case s.draining.Load() && at == nil:
		s.ev.denied[protocol.DeniedServerFull].Add(1)
		l.refuse(m.Addr, protocol.DropOverload, protocol.DisconnectServerFull, true)
		return
	case s.st.Accept != nil:
		// Asked once per login, here, now that the token is proven
		// (a Response no longer precedes every proof).
		if err := s.st.Accept(m.Addr); err != nil {
			s.st.Logger.Debug("client refused by the application", "addr", m.Addr, "err", err)
			s.ev.denied[protocol.DeniedRefused].Add(1)
			l.refuse(m.Addr, protocol.DropNone, protocol.DisconnectRefused, true)
			return
		}
	}
	p.tokenClient = tp.ClientID
	v := s.tab.admit(&p, func() *Conn {
		c := s.newConn(&p, l.sock, now)
		sec := c.sec
		sec.id = Identity{ClientID: tp.ClientID, UserData: tp.UserData}
		sec.mac = mac
		sec.expire = binary.LittleEndian.Uint64(body[token.VersionInfoBytes+8:])
		sec.timeout = tokenTimeout(tp.TimeoutSeconds, s.st.KeepAlive)
		sec.tx = ls.tx
		sec.rx = ls.rx
		// The proof is the client's first packet: its Seq and Ack
		// through the window, as any packet's.
		_ = c.seq.Receive(h.Seq, h.Ack, h.AckBits, seconds(now), &l.rep)
		return c
	})
	switch {
	case v.replay:
		s.ev.replays.Add(1)
		return
	case v.held:
		// Another client id's proven connection holds the address.
		s.ev.held.Add(1)
		return
	case v.denied == protocol.DeniedAddressLimit:
		s.ev.denied[v.denied].Add(1)
		l.refuse(m.Addr, protocol.DropOverload, protocol.DisconnectAddressLimit, true)
		return
	case v.denied != 0:
		s.ev.denied[v.denied].Add(1)
		l.refuse(m.Addr, protocol.DropOverload, protocol.DisconnectServerFull, true)
		return
	case v.made == nil:
		// A proof of the same cookie raced through first.
		l.cnt.add(cDrop+int(protocol.DropLateProof), 1)
		return
	}
	c := v.made
	s.timers.add(c)
	if v.prev != nil {
		// The newest proof of the same client id at this address wins:
		// prev's close removes nothing, c took its place.
		v.prev.shutdown(ReasonReplaced, false)
	}
	if prev := ss.proved(c, m.Addr); prev != nil && prev != c && prev != v.prev {
		prev.shutdown(ReasonReplaced, false)
	}
	s.ev.accepted.Add(1)
	s.ev.proofs.Add(1)
	l.proofs++
	l.cnt.add(cConnIn, 1)
	// The first sealed packet tells the client it is in; OnConnect's
	// greetings follow it in the same batch.
	c.mu.Lock()
	c.inLoop = l
	c.mu.Unlock()
	_, _ = c.sendKind(protocol.KindKeepAlive, nil)
	s.st.Handler.OnConnect(c)
	c.announce()
	c.leaveLoop()
}

// lateProof handles a proof whose cookie is proven connection c's, from
// c's address: the client proves again because the sealed KeepAlive that
// told it it is in was lost. Once the inner seal opens under c's own key
// (no token open), c tells it again (43 bytes for a proof of over a
// thousand), at most once per proof resend interval, so replayed proofs
// cost one open each and reach the player seldom.
func (l *loop) lateProof(m *batchio.Message, c *Conn, now time.Time) {
	l.cnt.add(cDrop+int(protocol.DropLateProof), 1)
	if c.sec == nil || !c.sec.proven() {
		return
	}
	h := l.d.Conn
	c.mu.Lock()
	_, r := wire.OpenProof(l.s.st.magic, m.Buf[:m.N], &h, &c.sec.rx)
	c.mu.Unlock()
	if r != protocol.DropNone || now.UnixNano()-c.lastSend.Load() < int64(proofResendInterval)/2 {
		return
	}
	c.mu.Lock()
	c.inLoop = l
	c.mu.Unlock()
	_, _ = c.sendKind(protocol.KindKeepAlive, nil)
	c.leaveLoop()
}

// refuse tells the sender of the proof in l.d why it failed, in a
// Disconnect sealed under the token's server-to-client key and the proof's
// cookie (ls.tx) at the refusal's reserved counter when the token opened
// (sealed), else in clear with the proof's Tag; both are smaller than the
// proof, and nothing is kept. drop is counted, unless DropNone (a refusal
// counted only as a Denied).
func (l *loop) refuse(addr netip.AddrPort, drop protocol.DropReason, reason DisconnectReason, sealed bool) {
	s, d := l.s, &l.d
	if drop != protocol.DropNone {
		l.cnt.add(cDrop+int(drop), 1)
	}
	dst := l.slot()
	out := dst.Buf[:cap(dst.Buf)]
	var n int
	if sealed {
		n = wire.SealRefusal(out, s.st.magic, d.Conn.SessionID, d.Conn.ClientID, &d.Cookie, uint8(reason), &l.sealedScratch.tx)
	} else {
		serverSeq, clientSeq := cookie.Sequences(&d.Cookie)
		h := protocol.ConnHeader{SessionID: d.Conn.SessionID, ClientID: d.Conn.ClientID, Tag: d.Conn.Tag,
			Seq: serverSeq, Ack: (clientSeq + protocol.SeqModulus - 1) % protocol.SeqModulus, Kind: protocol.KindDisconnect}
		p := [1]byte{byte(reason)}
		n = wire.EncodeConn(out, s.st.magic, &h, p[:])
	}
	if n > 0 {
		l.notice(n, addr)
	}
	if s.st.Logger.Enabled(context.Background(), slog.LevelDebug) {
		s.st.Logger.Debug("connect token refused", "addr", addr, "reason", reason.String())
	}
}

// notice commits the message slot() returned, now holding a Disconnect
// of n bytes to addr that no connection sends (a refusal).
func (l *loop) notice(n int, addr netip.AddrPort) {
	m := &l.sb.Msgs[l.out]
	m.N, m.Addr = n, addr
	l.out++
}

// sealedAck answers a valid Response (l.d) from an address no connection
// holds in sealed mode, statelessly: Ack with the Response's own cookie,
// which the client's proof will carry back, or Denied when the server is
// full or draining (reason 1). Config.Accept is asked at the proof, not
// here: a sealed client may skip the Response (docs/protocol.md §11.3).
// An Ack is the size of a Response.
func (l *loop) sealedAck(addr netip.AddrPort) {
	s, d := l.s, &l.d
	m := l.slot()
	out := m.Buf[:cap(m.Buf)]
	if s.draining.Load() || s.tab.full() {
		if n := s.fc.BuildDenied(out, &d.To, protocol.DeniedServerFull, &d.Cookie, &l.rnd); n > 0 {
			l.reply(n, protocol.TypeDenied, addr)
		}
		return
	}
	if n := s.fc.BuildAck(out, &d.To, &d.Cookie, &l.rnd); n > 0 {
		l.reply(n, protocol.TypeAck, addr)
	}
}

// sealedMove handles a sealed packet from an address no connection holds:
// the proven connection whose key opens it, if its counter is the newest
// that connection has seen, moves here (the client's NAT rebound), and
// the packet is delivered.
func (l *loop) sealedMove(m *batchio.Message, now time.Time) {
	s, ls := l.s, l.sealedScratch
	d := &l.d
	ls.cands = s.sealed.candidates(d.Conn.Tag, ls.cands[:0])
	pkt := m.Buf[:m.N]
	r := protocol.DropUnknownConnection
	var from *Conn
	for i, c := range ls.cands {
		if c.clientID != d.Conn.ClientID || c.closed.Load() || !c.sec.proven() {
			continue
		}
		b := pkt
		if i < len(ls.cands)-1 {
			b = ls.scratch[:copy(ls.scratch, pkt)]
		}
		h := d.Conn
		c.mu.Lock()
		payload, ctr, rr := wire.OpenConn(s.st.magic, b, &h, &c.sec.rx)
		newest := ctr == c.sec.rx.Newest()
		c.mu.Unlock()
		if rr != protocol.DropNone {
			r = rr
			continue
		}
		if newest {
			l.move(c, m.Addr)
		}
		r, from = c.receive(&h, payload, now, &l.rep, l), c
		break
	}
	clear(ls.cands)
	l.connIn(r, from)
}

// ---- Sending ----

// sendNotice sends a refusal Disconnect carrying reason: sealed with the
// connection's tx (a key the token gave), or in clear.
func (c *Conn) sendNotice(reason DisconnectReason, sealed bool) (uint16, error) {
	p := [1]byte{byte(reason)}
	return c.send(protocol.KindDisconnect, p[:], sealed)
}

// encode writes connection packet h into dst, sealed when sealed, and
// returns its length (0: it does not fit, or the counter is exhausted).
// c.mu is held.
func (c *Conn) encode(dst []byte, h *protocol.ConnHeader, payload []byte, sealed bool) int {
	if !sealed {
		return wire.EncodeConn(dst, c.st.magic, h, payload)
	}
	return wire.SealConn(dst, c.st.magic, h, payload, &c.sec.tx)
}

// ---- Client ----

// DialToken connects with connect token tok (made by the game's backend,
// package token) to the first of its servers that admits the client, and
// returns when the token is proven and the connection sealed. A server
// that refuses the token ends it with ErrTokenExpired, ErrTokenInvalid,
// ErrTokenForeignServer or ErrTokenInUse; one that does not answer is
// skipped after ConnectTimeout, and the last error is returned.
func DialToken(ctx context.Context, tok *token.ConnectToken, cfg Config) (*Client, error) {
	if tok == nil {
		return nil, errors.New("conn: DialToken needs a connect token")
	}
	cfg.Token = tok
	var err error
	for _, a := range tok.ServerAddresses {
		var c *Client
		c, err = Dial(ctx, a.String(), cfg)
		if err == nil {
			return c, nil
		}
		var ue *UnreachableError
		if ctx.Err() != nil || !(errors.Is(err, ErrTimedOut) || errors.As(err, &ue)) {
			return nil, err
		}
	}
	return nil, err
}

// startProof makes a client's new connection conn sealed and unproven:
// proofs go out until the server's first sealed packet. c.mu is held.
func (c *Client) startProof(conn *Conn, now time.Time) {
	tok := c.st.Token
	req := tok.Request()
	body, _ := req.AppendBinary(make([]byte, 0, token.RequestBytes))
	conn.sec = &sealState{request: body, proofBy: now.Add(min(c.st.ConnectTimeout, proofWindow)).UnixNano(),
		timeout: tokenTimeout(tok.TimeoutSeconds, c.st.KeepAlive)}
	pc := &conn.sec.proofCookie
	pc.SecretID, pc.Timestamp = c.hs.CookieOrigin()
	pc.Cookie = conn.cookie
	conn.sec.tx.Init(&tok.ClientToServerKey, conn.salt())
	conn.sec.rx.Init(&tok.ServerToClientKey, conn.salt())
}

// proveLocked sends a proof if one is due, and fails the dial once the
// proof has gone unanswered for ConnectTimeout. c.mu is held.
func (c *Client) proveLocked(now time.Time) {
	conn := c.conn
	if conn == nil || conn.sec == nil || conn.sec.state.Load() != sealUnproven || c.dialed {
		return
	}
	ns := now.UnixNano()
	if ns >= conn.sec.proofBy {
		c.dialDoneLocked(ErrTimedOut)
		return
	}
	if ns < conn.sec.nextProof {
		return
	}
	conn.sec.nextProof = ns + int64(proofResendInterval)
	var buf [protocol.MaxDatagramLimit]byte
	conn.mu.Lock()
	seq, ack, bits, _, _ := conn.seq.Send(seconds(now))
	h := protocol.ConnHeader{SessionID: conn.session, ClientID: conn.clientID, Tag: conn.tag,
		Seq: seq, Ack: ack, AckBits: bits, Kind: protocol.KindKeepAlive}
	n := wire.SealProof(buf[:], c.st.magic, &h, &conn.sec.proofCookie, conn.sec.request, &conn.sec.tx)
	conn.mu.Unlock()
	conn.lastSend.Store(ns)
	if n > 0 {
		if _, err := c.udp.WriteToUDPAddrPort(buf[:n], c.server); err != nil {
			c.refusedLocked(err)
		}
	}
}

// handleSealed handles a connection packet on a sealed client.
func (c *Client) handleSealed(conn *Conn, pkt []byte, now time.Time, rep *seqwin.AckReport) protocol.DropReason {
	var h protocol.ConnHeader
	_, r := wire.DecodeSealed(c.st.magic, pkt, &h)
	if r == protocol.DropBadSize && conn.sec.state.Load() == sealUnproven {
		// A refusal in clear (reasons 5, 6): the server could not open
		// the token, so it has no key this client could check.
		if payload, r := wire.DecodeConn(c.st.magic, pkt, &h); r == protocol.DropNone &&
			h.Kind == protocol.KindDisconnect && h.Tag == conn.tag && h.ClientID == conn.clientID &&
			(payload[0] == protocol.DisconnectTokenExpired || payload[0] == protocol.DisconnectTokenInvalid) {
			c.refused(DisconnectReason(payload[0]))
			return protocol.DropNone
		}
	}
	switch {
	case r != protocol.DropNone:
		return r
	case h.SessionID != conn.session:
		return protocol.DropSessionMismatch
	case h.ClientID != conn.clientID:
		return protocol.DropClientIDMismatch
	case h.Tag != conn.tag:
		return protocol.DropBadTag
	}
	conn.mu.Lock()
	payload, _, r := wire.OpenConn(c.st.magic, pkt, &h, &conn.sec.rx)
	conn.mu.Unlock()
	if r != protocol.DropNone {
		return r
	}
	if conn.sec.state.Load() == sealUnproven {
		if h.Kind == protocol.KindDisconnect {
			if payload[0] >= protocol.DisconnectForeignServer {
				c.refused(DisconnectReason(payload[0]))
				return protocol.DropNone
			}
			// The connection's own Disconnect before its KeepAlive came
			// (the server closed or replaced it at once, or is shutting
			// down): the dial fails, it never was connected.
			reason := ReasonClosed
			if r := DisconnectReason(payload[0]); r >= 1 && r < protocol.NumDisconnectReasons {
				reason = r
			}
			c.mu.Lock()
			c.dialDoneLocked(&DisconnectedError{Reason: reason, Remote: true})
			c.mu.Unlock()
			return protocol.DropNone
		}
		if !conn.sec.state.CompareAndSwap(sealUnproven, sealProven) {
			return protocol.DropLateProof
		}
		c.mu.Lock()
		late := c.dialed
		c.dialDoneLocked(nil)
		c.mu.Unlock()
		if late {
			return protocol.DropLateProof
		}
		c.st.Handler.OnConnect(conn)
	}
	return conn.receive(&h, payload, now, rep, nil)
}

// refused fails a sealed dial the server refused.
func (c *Client) refused(reason DisconnectReason) {
	var err error
	switch reason {
	case protocol.DisconnectTokenExpired:
		err = ErrTokenExpired
	case protocol.DisconnectTokenInvalid:
		err = ErrTokenInvalid
	case protocol.DisconnectForeignServer:
		err = ErrTokenForeignServer
	case protocol.DisconnectTokenInUse:
		err = ErrTokenInUse
	case protocol.DisconnectAddressLimit:
		err = &DeniedError{Reason: protocol.DeniedAddressLimit}
	case protocol.DisconnectRefused:
		err = &DeniedError{Reason: protocol.DeniedRefused}
	default:
		err = &DeniedError{Reason: protocol.DeniedServerFull}
	}
	c.mu.Lock()
	c.dialDoneLocked(err)
	c.mu.Unlock()
}
