package handshake

import (
	"net/netip"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/ratelimit"
	"github.com/udpgate/udpgate/internal/wire"
)

// ServerConfig is what a server enforces on the wire. It is immutable once a
// server starts, so the promotion workers read it from other goroutines
// without locks.
type ServerConfig struct {
	Magic           wire.Magic
	SessionID       uint8 // 0..3
	NetworkVersion  uint32
	NetworkFeatures uint16
	// IgnoreNetworkVersion turns off the NetworkVersion equality check on
	// Initial (docs/protocol.md §3: "unless that check is turned off");
	// NetworkFeatures are always compared.
	IgnoreNetworkVersion bool
	// Layout is the server's message layout (docs/protocol.md §3.7): an
	// Initial that declares another is answered LayoutMismatch; the zero
	// Layout is a server without messages.
	Layout protocol.Layout
	// MaxDatagram: longer datagrams are dropped (DropTooLarge). 0 means
	// DefaultMaxDatagram.
	MaxDatagram int

	// Reply budgets (docs/protocol.md §5), each a Limit. In a
	// ServerConfig a zero Rate takes the default (params.go), a zero Burst
	// is twice the Rate, and Unlimited turns the budget off.
	//
	// ChallengeLimit, RestartLimit and VersionUpgradeLimit are per source
	// (address and port).
	ChallengeLimit      ratelimit.Limit
	RestartLimit        ratelimit.Limit
	VersionUpgradeLimit ratelimit.Limit
	// ChallengeIPLimit and ChallengePrefixLimit cap Challenge replies per
	// IP address (all ports) and per /24 or /64 network, on top of the
	// per-source ChallengeLimit: a Challenge needs a token from all three.
	// They are totals for Loops receive loops; the default is
	// DefaultChallengeIPRate and DefaultChallengePrefixRate, or unlimited
	// when ChallengeLimit is unlimited (a benchmark setting: load from few
	// addresses).
	ChallengeIPLimit     ratelimit.Limit
	ChallengePrefixLimit ratelimit.Limit
	// Loops is how many Servers made with this configuration receive
	// handshakes (0 is 1). Each keeps its own tables, and the kernel
	// spreads one host's source ports over them, so each Server enforces
	// a Loops-th of ChallengeIPLimit and ChallengePrefixLimit.
	Loops int
	// VersionUpgradeTotal caps VersionUpgrade replies whatever their
	// source: per Server, or for all of them after
	// ShareVersionUpgradeTotal. The default is DefaultVersionUpgradeTotal
	// per 300 s.
	VersionUpgradeTotal ratelimit.Limit

	// upgradeShared, when set, is the VersionUpgradeTotal budget that
	// every Server made with this configuration spends from (see
	// ShareVersionUpgradeTotal). When nil, each Server keeps its own
	// bucket of VersionUpgradeTotal.
	upgradeShared *ratelimit.SharedBucket
	// Sealed: connection packets are sealed (docs/protocol.md §11), and a
	// RestartResponse moves nothing.
	Sealed bool
	// Closed, if not nil, remembers the addresses whose connection closed
	// recently: their stray connection packets are dropped, not answered.
	Closed ClosedAddrs
}

// withDefaults fills zero fields. The result is a Server's effective,
// per-loop configuration: applying it again changes nothing.
func (c ServerConfig) withDefaults() ServerConfig {
	if c.MaxDatagram <= 0 {
		c.MaxDatagram = protocol.DefaultMaxDatagram
	}
	c.ChallengeLimit = c.ChallengeLimit.Or(ratelimit.Limit{Rate: DefaultChallengeRate})
	c.RestartLimit = c.RestartLimit.Or(ratelimit.Limit{Rate: defaultRestartRate})
	c.VersionUpgradeLimit = c.VersionUpgradeLimit.Or(ratelimit.Limit{Rate: defaultVersionUpgradeRate})
	ipDef, prefixDef := ratelimit.Limit{Rate: DefaultChallengeIPRate}, ratelimit.Limit{Rate: DefaultChallengePrefixRate}
	if c.ChallengeLimit.Rate < 0 {
		// Unlimited per source (benchmarks: load from few addresses):
		// unlimited per host too, unless set.
		ipDef, prefixDef = ratelimit.Limit{Rate: ratelimit.Unlimited}, ratelimit.Limit{Rate: ratelimit.Unlimited}
	}
	c.ChallengeIPLimit = c.ChallengeIPLimit.Or(ipDef).Divide(c.Loops)
	c.ChallengePrefixLimit = c.ChallengePrefixLimit.Or(prefixDef).Divide(c.Loops)
	c.Loops = 1 // the shares above are this loop's
	c.VersionUpgradeTotal = c.VersionUpgradeTotal.Or(
		ratelimit.Limit{Rate: DefaultVersionUpgradeTotal / versionUpgradeWindow, Burst: DefaultVersionUpgradeTotal})
	return c
}

// ShareVersionUpgradeTotal makes every Server made from c, or from a copy of
// it, afterwards spend from one VersionUpgradeTotal budget (the default
// when zero, unlimited when Unlimited), starting full at now. Call it once
// per server, before making its loops' Servers, and keep the configuration
// it set when the configuration is rebuilt live.
func (c *ServerConfig) ShareVersionUpgradeTotal(now float64) {
	c.upgradeShared = ratelimit.NewSharedBucket(c.withDefaults().VersionUpgradeTotal, now)
}

// Peer is what the caller knows about a datagram's source address before the
// decision: one lookup in the connection map.
type Peer struct {
	// Known: a connection holds this address.
	Known    bool
	ClientID uint8
	Tag      uint32
	Cookie   cookie.Cookie // the connection's authorised cookie
}

// ClosedAddrs is the caller's memory of addresses whose connection closed:
// RecentlyClosed reports whether no connection holds addr but one closed
// there within the last 120 s (docs/protocol.md §5.6). A Server asks it only
// for connection packets from addresses no connection holds. It must be
// safe for concurrent use.
type ClosedAddrs interface {
	RecentlyClosed(addr netip.AddrPort, now float64) bool
}

// Action is what the caller must do with a datagram.
type Action uint8

const (
	// ActDrop: count Decision.Drop and forget the datagram.
	ActDrop Action = iota
	// ActReply: send out[:Decision.ReplyLen] back to the source.
	ActReply
	// ActPromote: a valid Response. The caller checks the cookie index
	// (a Response whose cookie is already a connection's authorised cookie
	// creates none), capacity and the application, then answers with
	// BuildAck or BuildDenied.
	ActPromote
	// ActMigrate: a valid RestartResponse. The caller moves the connection
	// whose authorised cookie is Decision.OrigCookie and whose ClientID is
	// Decision.To.ClientID to the source address and answers BuildAck with
	// OrigCookie. If there is none (the server restarted, or closed the
	// connection), it answers BuildDenied with DeniedUnknownConnection and
	// Decision.Cookie, so the client gives up at once instead of resending
	// until its timeout; the source proved its address, and the Denied is
	// smaller than the RestartResponse.
	ActMigrate
	// ActConn: a connection packet for the connection at this address, with
	// SessionID, ClientID and tag already checked. Decision.Conn and
	// Decision.Payload (borrowed from the datagram) carry it.
	ActConn
	// ActSealed (sealed mode): a sealed packet for the connection at this
	// address, SessionID, ClientID and Tag checked, the rest of
	// Decision.Conn under the seal, which the caller opens with the
	// connection's keys (OpenConn); or a proof packet (Decision.Proof)
	// from any address, within its source's proof budget, whose cookie
	// (ProofCookie), token (ProofRequest) and inner seal (OpenProof) the
	// caller checks.
	ActSealed
	// ActSealedMove (sealed mode): a sealed packet from an address no
	// connection holds, within the source's restart budget. The caller
	// looks for a connection with Decision.Conn's Tag and ClientID whose
	// keys open it; if one does, and its counter is the newest that
	// connection has seen, the connection moves to this address (the
	// client's NAT rebound). Nothing is ever sent in reply.
	ActSealedMove
	// ActNotice (sealed mode): a connection packet in clear from an
	// address no connection holds, from a client without a connect token.
	// The reply, a Disconnect in clear with reason 11, is written
	// (Decision.ReplyLen); the packet counts as the drop Decision.Drop
	// (DropTokenRequired).
	ActNotice
)

// ReplyTo is what a later reply to a proven handshake packet needs from the
// request, so promotion workers never keep the (reused) receive buffer.
// Handle fills it in Decision.To; pass it to BuildAck or BuildDenied as is.
type ReplyTo struct {
	ClientID   uint8
	sentCount  uint8
	curVersion uint8 // min(protocol.CurHandshakeVersion, RemoteCur)
	randomLen  uint8 // the request's RandomData length: replies use no more
	reqLen     int   // the request's size in bytes: replies are no larger
}

// Decision is the outcome of Server.Handle. Only the fields its Action names
// are meaningful.
type Decision struct {
	Action Action
	Drop   protocol.DropReason
	// Handshake: a handshake packet decoded; Request is its type.
	Handshake bool
	Request   protocol.PacketType
	ReplyLen  int
	Reply     protocol.PacketType // the reply written, for ActReply

	// ActPromote, ActMigrate.
	Cookie     cookie.Cookie
	OrigCookie cookie.Cookie
	// Timestamp is the proven cookie's Timestamp: cookies of one address
	// are ordered by it, so an older one is a replay (conn keeps the newest
	// per address).
	Timestamp float64
	To        ReplyTo

	// ActConn, ActSealed, ActSealedMove.
	Conn    protocol.ConnHeader
	Payload []byte
	// Proof (ActSealed): the packet is a proof packet.
	Proof bool
	// Clear (ActSealed): the packet is too short to be sealed but is a
	// well-formed connection packet in clear with the connection's
	// SessionID, ClientID and Tag (Decision.Conn, Decision.Payload): a
	// client without a token, or a forgery. The caller answers it only
	// on a connection that has not proven a token (docs/protocol.md
	// §11.3), and drops it (DropBadSize) on a proven one.
	Clear bool
}

// Shed is overload control's say over the next decisions (set per batch by
// the receive loop): which optional replies to skip and how many Challenges
// may be sent. Established connections are never shed here.
type Shed struct {
	NoRestart        bool
	NoVersionUpgrade bool
	// Challenges, when set, is one more budget every Challenge spends a
	// token from, together with its rate limits; an Initial that finds it
	// empty is dropped as DropOverload before any other check. The caller
	// owns it, so it outlives the Server across configuration changes.
	Challenges *ratelimit.Bucket
}

// Server decides, for one receive loop, what to do with each datagram. It
// owns the loop's cookie signer, rate-limiter tables and random source, so
// it is not safe for concurrent use: make one per loop.
type Server struct {
	cfg         ServerConfig
	signer      *cookie.Signer
	challengeRL *ratelimit.Limiter
	// challengeIPRL and challengePrefixRL: the per-IP and per-prefix
	// Challenge budgets.
	challengeIPRL     *ratelimit.Limiter
	challengePrefixRL *ratelimit.Limiter
	restartRL         *ratelimit.Limiter
	// proofRL: proofs looked at per source (sealed mode).
	proofRL   *ratelimit.Limiter
	upgradeRL *ratelimit.Limiter
	// upgradeTotal is the loop's own total when cfg.upgradeShared
	// is nil.
	upgradeTotal ratelimit.Bucket
	rnd          wire.Rand
	// Shed is read on every decision; the loop may change it between calls.
	Shed Shed
}

// NewServer makes a loop's decision state. seed 0 draws the random seeds
// (RandomData, rate-limiter hash keys) from crypto/rand.
func NewServer(cfg ServerConfig, secrets *cookie.Secrets, seed uint64, now float64) *Server {
	cfg = cfg.withDefaults()
	var k [6]uint64
	if seed != 0 {
		r := wire.NewRand(seed)
		for i := range k {
			k[i] = r.Uint64() | 1
		}
	}
	return &Server{
		cfg:               cfg,
		signer:            cookie.NewSigner(secrets),
		challengeRL:       ratelimit.NewLimiter(ratelimit.PerSource, 0, cfg.ChallengeLimit, k[0]),
		restartRL:         ratelimit.NewLimiter(ratelimit.PerSource, 0, cfg.RestartLimit, k[1]),
		proofRL:           newProofLimiter(cfg.Sealed, k[5]),
		upgradeRL:         ratelimit.NewLimiter(ratelimit.PerSource, 0, cfg.VersionUpgradeLimit, k[2]),
		challengeIPRL:     ratelimit.NewLimiter(ratelimit.PerIP, 0, cfg.ChallengeIPLimit, k[3]),
		challengePrefixRL: ratelimit.NewLimiter(ratelimit.PerPrefix, 0, cfg.ChallengePrefixLimit, k[4]),
		upgradeTotal:      ratelimit.NewBucket(cfg.VersionUpgradeTotal, now),
		rnd:               wire.NewRand(seed),
	}
}

// Config returns the effective configuration (defaults filled).
func (s *Server) Config() *ServerConfig { return &s.cfg }

// Handle decides what to do with datagram pkt from src at time now, given
// what the connection map says about src. Any reply is written into out,
// which must hold at least MaxReplyLen bytes. It never allocates.
func (s *Server) Handle(d *Decision, src netip.AddrPort, pkt []byte, now float64, peer *Peer, out []byte) {
	*d = Decision{}
	if len(pkt) > s.cfg.MaxDatagram {
		d.Drop = protocol.DropTooLarge
		return
	}
	// One prefix decode serves both packet decoders.
	pw, pb, r := wire.DecodePrefixWord(s.cfg.Magic, pkt)
	if r != protocol.DropNone {
		d.Drop = r
		return
	}
	if !wire.PrefixHandshake(pw) {
		s.handleConn(d, src, pkt, pw, now, peer, out)
		return
	}

	var h request
	if r := decodeRequest(s.cfg.Magic, pkt, pw, pb, &h); r != protocol.DropNone {
		d.Drop = r
		return
	}
	d.Handshake = true
	d.Request = h.Type
	switch h.Type {
	case protocol.TypeInitial, protocol.TypeResponse, protocol.TypeRestartResponse:
	default:
		d.Drop = protocol.DropUnexpectedType
		return
	}
	if !versionsOK(h.MinVersion, h.CurVersion) {
		d.Drop = protocol.DropBadVersion
		return
	}
	// Field by field into the zeroed Decision: a composite literal would
	// be built with byte stores and copied with a 16-byte load that the
	// CPU cannot forward from them.
	d.To.ClientID = h.ClientID
	d.To.sentCount = h.SentCount
	d.To.curVersion = min(protocol.CurHandshakeVersion, h.CurVersion)
	d.To.randomLen = h.RandomLen
	d.To.reqLen = len(pkt)

	switch h.Type {
	case protocol.TypeInitial:
		s.handleInitial(d, src, &h, now, peer, out)
	case protocol.TypeResponse:
		if !s.proven(d, &h, src, now) {
			return
		}
		if peer.Known && peer.ClientID == h.ClientID {
			// The client missed its Ack: answer again with the
			// connection's own cookie, create nothing.
			d.ReplyLen = s.cfg.BuildAck(out, &d.To, &peer.Cookie, &s.rnd)
			s.replied(d, protocol.TypeAck)
			return
		}
		d.Action = ActPromote
		d.Timestamp = h.Timestamp
		copyCookie(&d.Cookie, &h.Cookie)
	case protocol.TypeRestartResponse:
		if s.cfg.Sealed {
			// The cookie travels in clear: in sealed mode only a packet
			// sealed with the connection's key moves it (ActSealedMove).
			d.Drop = protocol.DropUnexpectedType
			return
		}
		if !s.proven(d, &h, src, now) {
			return
		}
		d.Action = ActMigrate
		d.Timestamp = h.Timestamp
		copyCookie(&d.Cookie, &h.Cookie)
		copyCookie(&d.OrigCookie, &h.OrigCookie)
	}
}

func (s *Server) handleInitial(d *Decision, src netip.AddrPort, h *request, now float64, peer *Peer, out []byte) {
	newAttempt := !peer.Known || peer.ClientID != h.ClientID
	if newAttempt && !s.compatible(h) {
		if h.CurVersion < protocol.CurHandshakeVersion {
			d.Drop = protocol.DropNetworkVersion
			return
		}
		if s.Shed.NoVersionUpgrade {
			d.Drop = protocol.DropOverload
			return
		}
		s.answer(d, src, now, out, &reply{Type: protocol.TypeVersionUpgrade})
		return
	}
	if newAttempt && h.Layout != (protocol.Layout{}) && h.Layout != s.cfg.Layout {
		// A client whose messages this server would misread (§3.7): it
		// declared a layout, so it reads the answer.
		if s.Shed.NoVersionUpgrade {
			d.Drop = protocol.DropOverload
			return
		}
		s.answer(d, src, now, out, &reply{Type: protocol.TypeLayoutMismatch})
		return
	}
	if _, ok := s.Shed.Challenges.Reserve(now); !ok {
		d.Drop = protocol.DropOverload
		return
	}
	var ck cookie.Cookie
	s.answer(d, src, now, out, &reply{Type: protocol.TypeChallenge, Timestamp: now, Cookie: &ck})
}

// handleConn handles a connection packet: checked and handed over for a
// known address, answered with RestartHandshake (the client moved) for an
// unknown one.
func (s *Server) handleConn(d *Decision, src netip.AddrPort, pkt []byte, pw uint64, now float64, peer *Peer, out []byte) {
	if s.cfg.Sealed {
		s.handleSealed(d, src, pkt, pw, now, peer, out)
		return
	}
	payload, r := wire.DecodeConnWord(s.cfg.Magic, pkt, pw, &d.Conn)
	if r != protocol.DropNone {
		d.Drop = r
		return
	}
	if d.Conn.SessionID != s.cfg.SessionID {
		d.Drop = protocol.DropSessionMismatch
		return
	}
	if peer.Known {
		switch {
		case d.Conn.ClientID != peer.ClientID:
			d.Drop = protocol.DropClientIDMismatch
		case d.Conn.Tag != peer.Tag:
			d.Drop = protocol.DropBadTag
		default:
			d.Action = ActConn
			d.Payload = payload
		}
		return
	}
	if s.recentlyClosed(src, now) {
		d.Drop = protocol.DropRecentlyDisconnected
		return
	}
	if s.Shed.NoRestart {
		d.Drop = protocol.DropOverload
		return
	}
	// RestartHandshake answers a packet without versions: it carries
	// CurVersion 4 and SentCount 0 (docs/protocol.md §5), and no more RandomData
	// than keeps it within the connection packet's size.
	d.To = ReplyTo{ClientID: d.Conn.ClientID, curVersion: protocol.CurHandshakeVersion, randomLen: protocol.MaxRandomBytes, reqLen: len(pkt)}
	s.answer(d, src, now, out, &reply{Type: protocol.TypeRestartHandshake, Restart: true})
}

// answer makes the reply rep to d.To's unproven source in the steps every
// such reply takes, in this order: the no-amplification bound
// (DropAmplification), the reply type's budgets (DropRateLimited), then the
// write. A Challenge's cookie is signed only once the reply will go out,
// so a refused flood costs no hashing.
func (s *Server) answer(d *Decision, src netip.AddrPort, now float64, out []byte, rep *reply) {
	hi := s.cfg.maxRandom(rep.Type, &d.To)
	if hi < protocol.MinRandomBytes {
		d.Drop = protocol.DropAmplification
		return
	}
	if !s.allow(rep.Type, src, now) {
		d.Drop = protocol.DropRateLimited
		return
	}
	if rep.Type == protocol.TypeChallenge {
		rep.SecretID = s.signer.GenerateTo(rep.Cookie, now, src)
	}
	d.ReplyLen = s.cfg.writeReply(out, rep, &d.To, hi, &s.rnd)
	s.replied(d, rep.Type)
}

func (s *Server) recentlyClosed(src netip.AddrPort, now float64) bool {
	return s.cfg.Closed != nil && s.cfg.Closed.RecentlyClosed(src, now)
}

// handleSealed is handleConn in sealed mode: the clear part is checked
// here, the sealed part by the caller, which holds the keys. A sealed
// server never sends RestartHandshake: a client whose address changed is
// found by its sealed packets instead.
func (s *Server) handleSealed(d *Decision, src netip.AddrPort, pkt []byte, pw uint64, now float64, peer *Peer, out []byte) {
	proof, r := wire.DecodeSealedWord(s.cfg.Magic, pkt, pw, &d.Conn)
	if r == protocol.DropBadSize {
		// Too short to be sealed: perhaps a client without a token,
		// whose connection packets are in clear.
		if payload, rc := wire.DecodeConnWord(s.cfg.Magic, pkt, pw, &d.Conn); rc == protocol.DropNone && d.Conn.SessionID == s.cfg.SessionID {
			if !peer.Known {
				s.tokenRequired(d, src, pkt, now, out)
				return
			}
			if d.Conn.ClientID == peer.ClientID && d.Conn.Tag == peer.Tag {
				d.Action, d.Clear, d.Payload = ActSealed, true, payload
				return
			}
		}
	}
	switch {
	case r != protocol.DropNone:
		d.Drop = r
	case d.Conn.SessionID != s.cfg.SessionID:
		d.Drop = protocol.DropSessionMismatch
	case proof && !s.proofRL.Allow(src, now):
		// Each proof may cost the caller a cookie check and a token open:
		// a source gets twice what a client sends (DropProofLimited).
		d.Drop = protocol.DropProofLimited
	case proof:
		// From any address: a proof carries its cookie, which the caller
		// checks (ProofCookie) against the source, as a Response's.
		d.Action, d.Proof = ActSealed, true
	case peer.Known && d.Conn.ClientID != peer.ClientID:
		d.Drop = protocol.DropClientIDMismatch
	case peer.Known && d.Conn.Tag != peer.Tag:
		d.Drop = protocol.DropBadTag
	case peer.Known:
		d.Action = ActSealed
	case s.recentlyClosed(src, now):
		d.Drop = protocol.DropRecentlyDisconnected
	case s.Shed.NoRestart:
		d.Drop = protocol.DropOverload
	case !s.restartRL.Allow(src, now):
		// Each try may cost the caller an AEAD open: the same budget as
		// the RestartHandshakes an unsealed server would send.
		d.Drop = protocol.DropRateLimited
	default:
		d.Action = ActSealedMove
	}
}

// ProofCookie checks the cookie a proof packet carries (Decision.Proof)
// against the proof's source, by §4's three rules, as a Response's, and
// fills d.Cookie and d.Timestamp. A cookie whose Tag is not the packet's,
// or with a SecretId other than 0 or 1, is DropNotProof.
func (s *Server) ProofCookie(d *Decision, src netip.AddrPort, pkt []byte, now float64) protocol.DropReason {
	var pc wire.ProofCookie
	if !wire.ProofCookieOf(s.cfg.Magic, pkt, &pc) {
		return protocol.DropNotProof
	}
	if r := s.verify(pc.SecretID, pc.Timestamp, &pc.Cookie, src, now); r != protocol.DropNone {
		return r
	}
	d.Cookie, d.Timestamp = pc.Cookie, pc.Timestamp
	return protocol.DropNone
}

// tokenRequired answers a connection packet in clear from an address no
// connection holds (d.Conn, with the server's SessionID): a client without
// a token. It gets a Disconnect in clear, reason 11, with its own Tag
// (docs/protocol.md §11.3): no larger than the packet, never to a
// Disconnect, never to a recently closed address, under the source's
// RestartHandshake budget. Stateless: the reply is made from the packet.
func (s *Server) tokenRequired(d *Decision, src netip.AddrPort, pkt []byte, now float64, out []byte) {
	m := s.cfg.Magic
	switch {
	case d.Conn.Kind == protocol.KindDisconnect || len(pkt) < wire.ConnLen(m, protocol.KindDisconnect, 1):
		d.Drop = protocol.DropTokenRequired
		return
	case s.recentlyClosed(src, now):
		d.Drop = protocol.DropRecentlyDisconnected
		return
	case s.Shed.NoRestart:
		d.Drop = protocol.DropOverload
		return
	case !s.restartRL.Allow(src, now):
		d.Drop = protocol.DropRateLimited
		return
	}
	h := protocol.ConnHeader{SessionID: d.Conn.SessionID, ClientID: d.Conn.ClientID, Tag: d.Conn.Tag,
		Seq: (d.Conn.Ack + 1) & (protocol.SeqModulus - 1), Ack: d.Conn.Seq, Kind: protocol.KindDisconnect}
	p := [1]byte{protocol.DisconnectTokenRequired}
	if d.ReplyLen = wire.EncodeConn(out, m, &h, p[:]); d.ReplyLen > 0 {
		d.Action = ActNotice
	}
	d.Drop = protocol.DropTokenRequired
}

// newProofLimiter is a sealed server's per-source proof budget (nil when
// unsealed: no proofs are looked at).
func newProofLimiter(sealed bool, key uint64) *ratelimit.Limiter {
	if !sealed {
		return nil
	}
	return ratelimit.NewLimiter(ratelimit.PerSource, 0, ratelimit.Limit{Rate: ProofRate, Burst: 2 * ProofRate}, key)
}

// replied records a reply of type t written into out[:d.ReplyLen].
func (s *Server) replied(d *Decision, t protocol.PacketType) {
	if d.ReplyLen == 0 {
		// Unreachable while maxRandom is checked first; never send
		// garbage.
		d.Drop = protocol.DropAmplification
		return
	}
	d.Action = ActReply
	d.Reply = t
}

// allow spends a token from every budget a reply of type t to src needs,
// or from none.
func (s *Server) allow(t protocol.PacketType, src netip.AddrPort, now float64) bool {
	switch t {
	case protocol.TypeChallenge:
		return s.allowChallenge(src, now)
	case protocol.TypeVersionUpgrade, protocol.TypeLayoutMismatch:
		// One budget for both answers to an incompatible build.
		return s.allowUpgrade(src, now)
	default: // protocol.TypeRestartHandshake
		return s.restartRL.Allow(src, now)
	}
}

// allowChallenge spends a Challenge token of src's source, IP and prefix
// and of the overload budget, or none when any of them is empty: a flood
// from one port of a host must not spend its other ports' share, nor a
// host's refused attempts its network's.
func (s *Server) allowChallenge(src netip.AddrPort, now float64) bool {
	a, ok := s.challengeRL.Reserve(src, now)
	if !ok {
		return false
	}
	b, ok := s.challengeIPRL.Reserve(src, now)
	if !ok {
		return false
	}
	c, ok := s.challengePrefixRL.Reserve(src, now)
	if !ok {
		return false
	}
	o, ok := s.Shed.Challenges.Reserve(now)
	if !ok {
		return false
	}
	a.Spend()
	b.Spend()
	c.Spend()
	o.Spend()
	return true
}

// allowUpgrade spends a VersionUpgrade token of src and of the total, or
// none: a source refused by the total keeps its own budget.
func (s *Server) allowUpgrade(src netip.AddrPort, now float64) bool {
	g, ok := s.upgradeRL.Reserve(src, now)
	if !ok {
		return false
	}
	if sh := s.cfg.upgradeShared; sh != nil {
		ok = sh.Allow(now)
	} else {
		ok = s.upgradeTotal.Allow(now)
	}
	if ok {
		g.Spend()
	}
	return ok
}

// compatible is the network compatibility check of an Initial (§3).
func (s *Server) compatible(h *request) bool {
	if !s.cfg.IgnoreNetworkVersion && h.NetworkVersion != s.cfg.NetworkVersion {
		return false
	}
	return h.NetworkFeatures == s.cfg.NetworkFeatures
}

// proven reports whether a Response or RestartResponse carries the server's
// SessionID and a valid cookie for its source, recording the drop reason
// when not.
func (s *Server) proven(d *Decision, h *request, src netip.AddrPort, now float64) bool {
	if h.SessionID != s.cfg.SessionID {
		d.Drop = protocol.DropSessionMismatch
		return false
	}
	d.Drop = s.verify(h.SecretID, h.Timestamp, &h.Cookie, src, now)
	return d.Drop == protocol.DropNone
}

// verify checks the cookie of a Response, a RestartResponse or a proof
// against the source (§4 rules 1–3).
func (s *Server) verify(secretID uint8, ts float64, ck *cookie.Cookie, src netip.AddrPort, now float64) protocol.DropReason {
	switch s.signer.Verify(secretID, ts, src, ck, now) {
	case cookie.Valid:
		return protocol.DropNone
	case cookie.Expired:
		return protocol.DropExpiredCookie
	case cookie.WrongSecret:
		return protocol.DropWrongSecret
	default:
		return protocol.DropBadCookie
	}
}

// versionsOK is the server's CheckVersion for minimum 3, current 4 (§3).
func versionsOK(remoteMin, remoteCur uint8) bool {
	return remoteMin >= protocol.MinHandshakeVersion && remoteMin <= protocol.CurHandshakeVersion && remoteMin <= remoteCur
}

// MaxReplyLen is the largest reply Handle or a Build function writes: an Ack
// with 16 random bytes and a 32-bit magic header.
const MaxReplyLen = (protocol.MaxMagicBits + protocol.IDBits + protocol.BaseBits + 225 + 8*protocol.MaxRandomBytes + 1 + 7) / 8

// The Timestamp of an Ack (docs/protocol.md §3.2): AckTimestamp, or a
// sealed server's SealedAckTimestamp, which tells a client without a
// connect token that the server made no connection and wants a proof
// (§11.3). A client that checks only Timestamp < 0 takes either as an Ack.
const (
	AckTimestamp       = -1.0
	SealedAckTimestamp = -2.0
)

// BuildAck writes the Ack that completes a handshake (or answers a repeated
// Response or a RestartResponse) carrying authorised cookie c; a sealed
// server's carries SealedAckTimestamp. It returns 0 when the reply cannot
// be made no larger than the request.
func (c *ServerConfig) BuildAck(out []byte, to *ReplyTo, ck *cookie.Cookie, rnd *wire.Rand) int {
	ts := AckTimestamp
	if c.Sealed {
		ts = SealedAckTimestamp
	}
	return c.encodeReply(out, &reply{Type: protocol.TypeAck, SecretID: 1, Timestamp: ts, Cookie: ck}, to, rnd)
}

// DeniedUnknownConnection answers a RestartResponse whose OrigCookie and
// ClientID name no connection: the connection the client asks to move does
// not exist here (the server restarted with the same SessionID, or closed
// it). A restarting client that gets it has lost its connection.
const DeniedUnknownConnection uint8 = 4

// BuildDenied writes a Denied with reason, echoing the Response's (or
// RestartResponse's) cookie.
func (c *ServerConfig) BuildDenied(out []byte, to *ReplyTo, reason uint8, ck *cookie.Cookie, rnd *wire.Rand) int {
	return c.encodeReply(out, &reply{Type: protocol.TypeDenied, Reason: reason, Cookie: ck}, to, rnd)
}

// encodeReply is writeReply with its own no-amplification check: it returns
// 0 if no RandomData length fits.
func (c *ServerConfig) encodeReply(out []byte, rep *reply, to *ReplyTo, rnd *wire.Rand) int {
	hi := c.maxRandom(rep.Type, to)
	if hi < protocol.MinRandomBytes {
		return 0
	}
	return c.writeReply(out, rep, to, hi, rnd)
}
