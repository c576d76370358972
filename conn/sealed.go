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
	"github.com/udpgate/udpgate/fastpath"
	"github.com/udpgate/udpgate/internal/seal"
	"github.com/udpgate/udpgate/token"
)

// Sealed mode (docs/protocol.md §11). The handshake is unchanged; a server
// with a PrivateKey then holds each new connection unproven until its
// client proves a connect token, and seals every connection packet after.
//
// Ownership: a connection's sealState is created with it and never
// replaced; tx and rx are guarded by Conn.mu like seq; state moves once
// from unproven to proven or closed. The Server's sealedServer owns the
// tables that span connections: the unproven FIFO, the used tokens, and the
// indexes by client id and by Tag.

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
	// connect token. A Client's Err matches it (errors.Is) one round trip
	// after Dial returned: the server cannot tell a client without a
	// token from one whose proof is on its way until the client's first
	// connection packet, which a client without a token sends as soon as
	// its Ack arrives.
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
	// proofBy (Unix ns): an unproven connection closes after it.
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
	// Client side: the request body proofs carry, and when the next proof
	// is due (Unix ns).
	request   []byte
	nextProof int64
	// noticeAt (server, Unix ns): a client without a token is told so
	// again only after it.
	noticeAt atomic.Int64
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
	if need := fastpath.ProofLen(s.magic); s.Token != nil && s.MaxDatagram < need {
		return fmt.Errorf("config: MaxDatagram %d is too small for a sealed connection: a proof packet is %d bytes with this Magic; raise MaxDatagram to at least %d", s.MaxDatagram, need, need)
	}
	if s.PrivateKey == nil {
		if s.ProtocolID != 0 || s.PublicAddresses != nil || s.ProofTimeout != 0 || s.MaxUnproven != 0 {
			return fmt.Errorf("config: ProtocolID, PublicAddresses, ProofTimeout and MaxUnproven are sealed-mode settings: set PrivateKey too, or leave them zero")
		}
		return nil
	}
	if s.ProofTimeout < 0 || s.ProofTimeout > MaxProofTimeout {
		return fmt.Errorf("config: ProofTimeout %v is out of range: use up to %v, or 0 for the default %v", s.ProofTimeout, MaxProofTimeout, DefaultProofTimeout)
	}
	if s.ProofTimeout == 0 {
		s.ProofTimeout = DefaultProofTimeout
	}
	if s.MaxUnproven < 0 {
		return fmt.Errorf("config: MaxUnproven %d is negative: use a positive bound, or 0 for the default %d", s.MaxUnproven, DefaultMaxUnproven)
	}
	if s.MaxUnproven == 0 {
		s.MaxUnproven = DefaultMaxUnproven
	}
	if need := fastpath.ProofLen(s.magic); s.MaxDatagram < need {
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
	public  []netip.AddrPort
	timeout time.Duration
	max     int
	// unproven counts connections waiting for a proof; they hold map
	// entries (so their proofs find them) but not MaxClients places.
	unproven atomic.Int64

	// fifo holds the unproven connections oldest first, with stale entries
	// (proven or closed since) skipped when met; the table's sealedMu
	// guards it.
	fifo []*Conn
	head int

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
		public:  public,
		timeout: st.ProofTimeout,
		max:     st.MaxUnproven,
		used:    make(map[[token.MACBytes]byte]usedToken),
		usedCap: st.MaxClients + st.MaxUnproven,
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

// admitted registers new connection c as unproven and returns the oldest
// unproven connection when the cap is reached, for the caller to close.
// The caller (table.insert) holds the table's sealedMu.
func (ss *sealedServer) admitted(c *Conn) (evict *Conn) {
	if ss.unproven.Add(1) > int64(ss.max) {
		for ss.head < len(ss.fifo) && evict == nil {
			o := ss.fifo[ss.head]
			ss.fifo[ss.head] = nil
			ss.head++
			// Closed here, at once: a proof that arrives before the
			// caller shuts it down finds it closed, never proves it.
			if o.sec.state.CompareAndSwap(sealUnproven, sealClosed) {
				ss.unproven.Add(-1)
				evict = o
			}
		}
	}
	if ss.head > len(ss.fifo)/2 {
		// Compact: the live entries move to the front, so the slice holds
		// at most about twice the unproven connections.
		n := copy(ss.fifo, ss.fifo[ss.head:])
		clear(ss.fifo[n:])
		ss.fifo, ss.head = ss.fifo[:n], 0
	}
	if len(ss.fifo) > 4*ss.max {
		live := ss.fifo[:0]
		for _, o := range ss.fifo {
			if o.sec.state.Load() == sealUnproven {
				live = append(live, o)
			}
		}
		clear(ss.fifo[len(live):])
		ss.fifo = live
	}
	ss.fifo = append(ss.fifo, c)
	return evict
}

// closed updates the tables for a closing connection.
func (ss *sealedServer) closed(c *Conn) {
	if c.sec.state.CompareAndSwap(sealUnproven, sealClosed) {
		ss.unproven.Add(-1)
		return
	}
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
	cands  []*Conn
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

// sealed handles a sealed or proof packet for c, the connection at its
// address.
func (l *loop) sealed(m *batchio.Message, c *Conn, now time.Time) {
	d := &l.d
	sec := c.sec
	if sec == nil {
		l.cnt.add(cDrop+int(fastpath.DropSealedForged), 1)
		return
	}
	pkt := m.Buf[:m.N]
	st := sec.state.Load()
	if d.Clear || (st == sealUnproven && !d.Proof) {
		l.clearOnSealed(m, c, st, now)
		return
	}
	switch {
	case st == sealClosed:
		// Closed since the batch looked it up (a refusal earlier in
		// this batch, say).
		l.cnt.add(cDrop+int(fastpath.DropUnknownConnection), 1)
		return
	case d.Proof && st == sealUnproven:
		l.prove(m, c, now)
		return
	case d.Proof:
		// The client proves again: the sealed KeepAlive that told it it
		// is in was lost. Tell it again (43 bytes for a proof of over a
		// thousand), at most once per proof resend interval, so replayed
		// proofs cost one seal each and reach the player seldom.
		l.cnt.add(cDrop+int(fastpath.DropLateProof), 1)
		if now.UnixNano()-c.lastSend.Load() >= int64(ProofResendInterval)/2 {
			c.mu.Lock()
			c.inLoop = l
			c.mu.Unlock()
			_, _ = c.sendKind(fastpath.KindKeepAlive, nil)
			c.leaveLoop()
		}
		return
	case st != sealProven:
		l.cnt.add(cDrop+int(fastpath.DropNotProof), 1)
		return
	}
	c.mu.Lock()
	payload, _, r := fastpath.OpenConn(l.s.st.magic, pkt, &d.Conn, &sec.rx)
	c.mu.Unlock()
	if r == fastpath.DropNone {
		r = c.receive(&d.Conn, payload, now, &l.rep, l)
	}
	l.connIn(r)
}

// clearOnSealed handles a packet on sealed connection c that is not a
// proof and, if c is proven, was not sealed (fastpath flagged it Clear).
// On a connection still to prove its token, a connection packet in clear
// with its Tag comes from a client without a token (or a forger who could
// as well drop the proofs): it is told, in clear, that the server needs a
// token (reason 11), at most once per ProofResendInterval and only in
// reply to a packet at least as large as the notice.
func (l *loop) clearOnSealed(m *batchio.Message, c *Conn, st uint32, now time.Time) {
	d := &l.d
	if st != sealUnproven {
		if d.Clear {
			l.cnt.add(cDrop+int(fastpath.DropBadSize), 1)
		} else {
			l.cnt.add(cDrop+int(fastpath.DropNotProof), 1)
		}
		return
	}
	magic := l.s.st.magic
	pkt := m.Buf[:m.N]
	h := &d.Conn
	if !d.Clear {
		// Sealed-sized: is it a connection packet in clear all the same?
		var hc fastpath.ConnHeader
		if _, r := fastpath.DecodeConn(magic, pkt, &hc); r != fastpath.DropNone ||
			hc.SessionID != c.session || hc.ClientID != c.clientID || hc.Tag != c.tag {
			l.cnt.add(cDrop+int(fastpath.DropNotProof), 1)
			return
		}
		h = &hc
	}
	l.cnt.add(cDrop+int(fastpath.DropTokenRequired), 1)
	ns := now.UnixNano()
	sec := c.sec
	if h.Kind == fastpath.KindDisconnect || len(pkt) < fastpath.ConnLen(magic, fastpath.KindDisconnect, 1) {
		return
	}
	if at := sec.noticeAt.Load(); ns < at || !sec.noticeAt.CompareAndSwap(at, ns+int64(ProofResendInterval)) {
		return
	}
	c.mu.Lock()
	c.inLoop = l
	c.mu.Unlock()
	_, _ = c.sendNotice(ReasonTokenRequired, false)
	c.leaveLoop()
}

func (l *loop) connIn(r fastpath.DropReason) {
	if r != fastpath.DropNone {
		l.cnt.add(cDrop+int(r), 1)
	} else {
		l.cnt.add(cConnIn, 1)
	}
}

// prove checks the proof packet in m for unproven connection c (§11.3) and
// either proves c, or refuses it (a notice no larger than the proof, then
// a silent close), or drops the packet.
func (l *loop) prove(m *batchio.Message, c *Conn, now time.Time) {
	s, ls, ss := l.s, l.sealedScratch, l.s.sealed
	magic := s.st.magic
	pkt := m.Buf[:m.N]
	if ls.seenProof(pkt[len(pkt)-1-seal.TagBytes : len(pkt)-1]) {
		// The same proof again (a duplicate, or a replay flood):
		// whatever it got the first time, it gets no second open.
		l.cnt.add(cDrop+int(fastpath.DropProofLimited), 1)
		return
	}
	body := fastpath.ProofRequest(magic, pkt)
	p := &ls.priv
	switch err := ls.opener.OpenRequest(p, body, now); err {
	case nil:
	case token.ErrExpired:
		l.refuse(c, fastpath.DropTokenExpired, ReasonTokenExpired, false)
		return
	case token.ErrProtocolID:
		l.refuse(c, fastpath.DropTokenProtocol, ReasonTokenInvalid, false)
		return
	case token.ErrInvalid:
		l.refuse(c, fastpath.DropTokenInvalid, ReasonTokenInvalid, false)
		return
	default:
		l.cnt.add(cDrop+int(fastpath.DropTokenMalformed), 1)
		return
	}
	// The inner seal proves the sender holds the token's keys: a request
	// body copied from someone else's proof fails here, refused nothing.
	ls.rx.Init(&p.ClientToServerKey, c.salt())
	h := l.d.Conn
	if _, r := fastpath.OpenProof(magic, pkt, &h, &ls.rx); r != fastpath.DropNone {
		l.cnt.add(cDrop+int(r), 1)
		return
	}
	mac := token.RequestMAC(body)
	c.mu.Lock()
	c.sec.tx.Init(&p.ServerToClientKey, c.salt())
	c.mu.Unlock()
	switch {
	case !ss.hasServer(p):
		l.refuse(c, fastpath.DropTokenForeignServer, ReasonForeignServer, true)
		return
	case ss.inUse(&mac, m.Addr, now):
		l.refuse(c, fastpath.DropTokenInUse, ReasonTokenInUse, true)
		return
	case s.tab.full():
		// Counted as a Denied for a full server, as a handshake would be.
		s.ev.denied[fastpath.DeniedServerFull].Add(1)
		l.refuse(c, fastpath.DropOverload, ReasonServerFull, true)
		return
	}
	c.mu.Lock()
	c.sec.rx = ls.rx
	r := c.seq.Receive(h.Seq, h.Ack, h.AckBits, seconds(now), &l.rep)
	c.mu.Unlock()
	if r != fastpath.DropNone {
		l.cnt.add(cDrop+int(r), 1)
		return
	}
	if !s.tab.limits.admit(m.Addr.Addr(), false, &c.limit) {
		// Only now does the connection count under the per-address
		// limits (table.insert), refused as the handshake's Denied(3).
		s.ev.denied[fastpath.DeniedAddressLimit].Add(1)
		l.refuse(c, fastpath.DropOverload, ReasonAddressLimit, true)
		return
	}
	sec := c.sec
	sec.id = Identity{ClientID: p.ClientID, UserData: p.UserData}
	sec.mac = mac
	sec.expire = binary.LittleEndian.Uint64(body[token.VersionInfoBytes+8:])
	sec.timeout = tokenTimeout(p.TimeoutSeconds, s.st.KeepAlive)
	if !sec.state.CompareAndSwap(sealUnproven, sealProven) {
		// Closed meanwhile: its close may have released its place
		// before it was counted.
		s.tab.limits.release(&c.limit)
		return
	}
	ss.unproven.Add(-1)
	c.lastRecv.Store(now.UnixNano())
	// Its timers were set for the proof deadline: KeepAlives and the
	// timeout run from now.
	s.timers.reschedule(c)
	prev := ss.proved(c, m.Addr)
	if prev != nil && prev != c {
		prev.shutdown(ReasonReplaced, false)
	}
	s.ev.proofs.Add(1)
	l.cnt.add(cConnIn, 1)
	// The first sealed packet tells the client it is in; OnConnect's
	// greetings follow it in the same batch.
	c.mu.Lock()
	c.inLoop = l
	c.mu.Unlock()
	_, _ = c.sendKind(fastpath.KindKeepAlive, nil)
	s.st.Handler.OnConnect(c)
	c.announce()
	c.leaveLoop()
}

// refuse tells unproven connection c's client why its proof failed, in a
// Disconnect sealed under the token's key when the token opened (sealed),
// else in clear, and closes c without a word to the Handler.
func (l *loop) refuse(c *Conn, drop fastpath.DropReason, reason DisconnectReason, sealed bool) {
	l.cnt.add(cDrop+int(drop), 1)
	c.mu.Lock()
	c.inLoop = l
	c.mu.Unlock()
	_, _ = c.sendNotice(reason, sealed)
	c.leaveLoop()
	c.shutdown(reason, true)
	if s := l.s; s.st.Logger.Enabled(context.Background(), slog.LevelDebug) {
		s.st.Logger.Debug("connect token refused", "addr", c.RemoteAddr(), "reason", reason.String())
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
	r := fastpath.DropUnknownConnection
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
		payload, ctr, rr := fastpath.OpenConn(s.st.magic, b, &h, &c.sec.rx)
		newest := ctr == c.sec.rx.Newest()
		c.mu.Unlock()
		if rr != fastpath.DropNone {
			r = rr
			continue
		}
		if newest {
			l.move(c, m.Addr)
		}
		r = c.receive(&h, payload, now, &l.rep, l)
		break
	}
	clear(ls.cands)
	l.connIn(r)
}

// ---- Sending ----

// sendNotice sends a refusal Disconnect carrying reason: sealed with the
// connection's tx (a key the token gave), or in clear.
func (c *Conn) sendNotice(reason DisconnectReason, sealed bool) (uint16, error) {
	p := [1]byte{byte(reason)}
	return c.send(fastpath.KindDisconnect, p[:], sealed)
}

// encode writes connection packet h into dst, sealed when sealed, and
// returns its length (0: it does not fit, or the counter is exhausted).
// c.mu is held.
func (c *Conn) encode(dst []byte, h *fastpath.ConnHeader, payload []byte, sealed bool) int {
	if !sealed {
		return fastpath.EncodeConn(dst, c.st.magic, h, payload)
	}
	return fastpath.SealConn(dst, c.st.magic, h, payload, &c.sec.tx)
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
	conn.sec = &sealState{request: body, proofBy: now.Add(c.st.ConnectTimeout).UnixNano(),
		timeout: tokenTimeout(tok.TimeoutSeconds, c.st.KeepAlive)}
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
	conn.sec.nextProof = ns + int64(ProofResendInterval)
	var buf [fastpath.MaxDatagramLimit]byte
	conn.mu.Lock()
	seq, ack, bits, _, _ := conn.seq.Send(seconds(now))
	h := fastpath.ConnHeader{SessionID: conn.session, ClientID: conn.clientID, Tag: conn.tag,
		Seq: seq, Ack: ack, AckBits: bits, Kind: fastpath.KindKeepAlive}
	n := fastpath.SealProof(buf[:], c.st.magic, &h, conn.sec.request, &conn.sec.tx)
	conn.mu.Unlock()
	conn.lastSend.Store(ns)
	if n > 0 {
		if _, err := c.udp.WriteToUDPAddrPort(buf[:n], c.server); err != nil {
			c.refusedLocked(err)
		}
	}
}

// handleSealed handles a connection packet on a sealed client.
func (c *Client) handleSealed(conn *Conn, pkt []byte, now time.Time, rep *fastpath.AckReport) fastpath.DropReason {
	var h fastpath.ConnHeader
	_, r := fastpath.DecodeSealed(c.st.magic, pkt, &h)
	if r == fastpath.DropBadSize && conn.sec.state.Load() == sealUnproven {
		// A refusal in clear (reasons 5, 6): the server could not open
		// the token, so it has no key this client could check.
		if payload, r := fastpath.DecodeConn(c.st.magic, pkt, &h); r == fastpath.DropNone &&
			h.Kind == fastpath.KindDisconnect && h.Tag == conn.tag && h.ClientID == conn.clientID &&
			(payload[0] == fastpath.DisconnectTokenExpired || payload[0] == fastpath.DisconnectTokenInvalid) {
			c.refused(DisconnectReason(payload[0]))
			return fastpath.DropNone
		}
	}
	switch {
	case r != fastpath.DropNone:
		return r
	case h.SessionID != conn.session:
		return fastpath.DropSessionMismatch
	case h.ClientID != conn.clientID:
		return fastpath.DropClientIDMismatch
	case h.Tag != conn.tag:
		return fastpath.DropBadTag
	}
	conn.mu.Lock()
	payload, _, r := fastpath.OpenConn(c.st.magic, pkt, &h, &conn.sec.rx)
	conn.mu.Unlock()
	if r != fastpath.DropNone {
		return r
	}
	if conn.sec.state.Load() == sealUnproven {
		if h.Kind == fastpath.KindDisconnect && payload[0] >= fastpath.DisconnectForeignServer {
			c.refused(DisconnectReason(payload[0]))
			return fastpath.DropNone
		}
		if !conn.sec.state.CompareAndSwap(sealUnproven, sealProven) {
			return fastpath.DropLateProof
		}
		c.mu.Lock()
		late := c.dialed
		c.dialDoneLocked(nil)
		c.mu.Unlock()
		if late {
			return fastpath.DropLateProof
		}
		c.st.Handler.OnConnect(conn)
	}
	return conn.receive(&h, payload, now, rep, nil)
}

// refused fails a sealed dial the server refused.
func (c *Client) refused(reason DisconnectReason) {
	var err error
	switch reason {
	case ReasonTokenExpired:
		err = ErrTokenExpired
	case ReasonTokenInvalid:
		err = ErrTokenInvalid
	case ReasonForeignServer:
		err = ErrTokenForeignServer
	case ReasonTokenInUse:
		err = ErrTokenInUse
	case ReasonAddressLimit:
		err = &DeniedError{Reason: fastpath.DeniedAddressLimit}
	default:
		err = &DeniedError{Reason: fastpath.DeniedServerFull}
	}
	c.mu.Lock()
	c.dialDoneLocked(err)
	c.mu.Unlock()
}
