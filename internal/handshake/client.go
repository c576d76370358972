package handshake

import (
	"math"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

// MaxClientPacketLen is the largest handshake packet a client sends: a
// RestartResponse with 16 random bytes and a 32-bit magic header. An out
// buffer of this size always fits what Poll and Receive write.
const MaxClientPacketLen = (protocol.MaxMagicBits + protocol.IDBits + protocol.BaseBits + 385 + 8*protocol.MaxRandomBytes + 1 + 7) / 8

// Client timing defaults (docs/protocol.md §6; UE5's net.HandshakeResendInterval
// and MIN_COOKIE_LIFETIME, docs/protocol.md §12).
const (
	clientDefaultResendInterval     = 1.0
	clientDefaultChallengeLifetime  = 15.0
	clientDefaultConnectTimeout     = 10.0
	clientDefaultRestartMinInterval = 1.1
	clientDefaultRestartSilence     = 1.5
)

// clientAnsweredCookies is how many recently answered Challenge cookies a
// client remembers (see ClientHandshake.answered). Eight cover round trips up
// to 4.5 s with the default resend schedule (Initials at 0, 0.1, 0.3, 0.7,
// 1.5, 2.5, 3.5, 4.5 s all answered before the first Challenge arrives).
const clientAnsweredCookies = 8

// clientSentTimes is how many recent send times a client keeps, indexed by
// SentCount, to time the server's answers (which echo the SentCount).
const clientSentTimes = 4

// ClientConfig is what a client's handshake sends and how patient it is.
// Zero (or negative, or NaN) durations take their defaults; +Inf turns a
// timeout or the Challenge fallback off.
type ClientConfig struct {
	Magic           wire.Magic
	NetworkVersion  uint32
	NetworkFeatures uint16
	// Layout is the message layout the Initials declare (docs/protocol.md
	// §3.7); the zero Layout declares none, and the server checks nothing.
	Layout protocol.Layout
	// ClientID (0..7; higher bits are ignored) tells this connection attempt
	// apart from an earlier one at the same address (docs/protocol.md §2). The
	// caller picks a new one for every attempt.
	ClientID uint8
	// ResendInterval is the longest gap between the Initials, or between
	// the resends of the same Response: the cap of the resend backoff.
	// Default 1 s.
	ResendInterval float64
	// ResendFirst is the gap before the first resend of each phase (the
	// Initials, then the Responses; a restart's alike); each gap after it is
	// twice the one before, up to ResendInterval (docs/protocol.md §6.2).
	// Zero (or negative, or NaN) picks it: 3 times the last round trip the
	// client measured (a Challenge or Ack answering one of its recent
	// packets, matched by the echoed SentCount), at least 50 ms, or 100 ms
	// before any measurement. A value ≥ ResendInterval (or +Inf) resends
	// every ResendInterval, without backoff.
	ResendFirst float64
	// ChallengeLifetime: this long after the Challenge being answered, the
	// client gives up on it and goes back to sending Initials, so a Response
	// that the server keeps rejecting (say, the client's NAT rebound after
	// the Challenge and the cookie no longer matches its address) gets a
	// fresh Challenge. Default 15 s: well inside the server's 40 s cookie
	// lifetime. With the defaults ConnectTimeout (10 s) ends an unanswered
	// attempt first; the fallback acts when ConnectTimeout is set longer.
	ChallengeLifetime float64
	// ConnectTimeout: the handshake (first connect or restart) ends in
	// TimedOut when the server has not advanced it for this long. Progress
	// is the start (Start, or an honoured RestartHandshake) and a Challenge
	// that turns Initials into a Response; repeated Challenges and dropped
	// packets do not count. So an attempt ends at most 2×ConnectTimeout
	// after it starts while ConnectTimeout ≤ ChallengeLifetime. Default 10 s.
	ConnectTimeout float64
	// RestartMinInterval: at most one RestartHandshake is honoured per
	// interval. Default 1.1 s.
	RestartMinInterval float64
	// RestartSilence: a RestartHandshake is honoured only when no valid
	// connection packet from the server has arrived for this long (the
	// caller reports them with Heard). A RestartHandshake carries nothing
	// an off-path attacker cannot forge, while a packet that passed the
	// session tag and the sequence checks did come from the server, which
	// therefore still knows this connection at this address. A client
	// that has really moved hears nothing (the server sends to its old
	// address), so it restarts once it has been silent this long. Default
	// 1.5 s: the server's KeepAlive interval (1 s) plus its timer's
	// lateness and jitter, and well inside the 5 s connection timeout,
	// which the restart must beat.
	RestartSilence float64
	// ProofAfterChallenge (a sealed client, docs/protocol.md §11.3): a
	// Challenge completes the handshake, with no Response and no Ack; its
	// cookie becomes the authorised cookie at once (EventConnected), and
	// the caller's proof, which carries the cookie with the Challenge's
	// SecretId and Timestamp, takes the Response's place. Lost Challenges
	// are covered by the Initials' resends, as without it.
	ProofAfterChallenge bool
}

func (c ClientConfig) withDefaults() ClientConfig {
	def := func(v *float64, d float64) {
		if !(*v > 0) {
			*v = d
		}
	}
	def(&c.ResendInterval, clientDefaultResendInterval)
	def(&c.ChallengeLifetime, clientDefaultChallengeLifetime)
	def(&c.ConnectTimeout, clientDefaultConnectTimeout)
	def(&c.RestartMinInterval, clientDefaultRestartMinInterval)
	def(&c.RestartSilence, clientDefaultRestartSilence)
	if !(c.ResendFirst > 0) {
		c.ResendFirst = 0 // automatic
	}
	c.ClientID &= 7
	return c
}

// ClientState is where a client's handshake stands (docs/protocol.md §6).
type ClientState uint8

const (
	// clientDisconnected: made, not started.
	clientDisconnected ClientState = iota
	// ClientSendingInitial: sending Initials, resent on the backoff schedule
	// (ClientConfig.ResendFirst, doubling up to ResendInterval).
	ClientSendingInitial
	// clientSendingResponse: answering a Challenge, resending the Response.
	clientSendingResponse
	// clientConnected: the server Acked; the authorised cookie is known. A
	// restart (Restarting) keeps the state Connected.
	clientConnected
	// clientTimedOut, clientDenied, clientWrongVersion,
	// clientTokenRequired and clientWrongLayout are terminal.
	clientTimedOut
	clientDenied
	clientWrongVersion
	clientTokenRequired
	clientWrongLayout
	numClientStates
)

var clientStateNames = [numClientStates]string{"disconnected", "sending_initial",
	"sending_response", "connected", "timed_out", "denied", "wrong_version", "token_required", "wrong_layout"}

func (s ClientState) String() string {
	if s < numClientStates {
		return clientStateNames[s]
	}
	return "unknown"
}

// ClientEvent is a state change that Poll or Receive reports once, when it
// happens, so the caller need not compare states before and after.
type ClientEvent uint8

const (
	EventNone ClientEvent = iota
	// EventConnected: the first Ack; Cookie and SessionID are final.
	EventConnected
	// EventReconnected: a restart completed; the connection (cookie,
	// sequences) is unchanged and now reaches the server from the client's
	// current address.
	EventReconnected
	// EventDenied: see DeniedReason.
	EventDenied
	// EventWrongVersion: see ServerVersions.
	EventWrongVersion
	// EventTimedOut: the first connect or a restart got no progress from the
	// server within ConnectTimeout. After a restart it means the connection
	// is lost.
	EventTimedOut
	// EventRestarting: a RestartHandshake was honoured; restart packets
	// follow. The connection stays usable meanwhile.
	EventRestarting
	// EventRestartCanceled: a restart under way was given up because a
	// valid connection packet arrived (Heard): the server still reaches
	// this client, so the RestartHandshake was forged, or a straggler. The
	// connection carries on as before.
	EventRestartCanceled
	// EventTokenRequired: the first Ack was a sealed server's (its
	// Timestamp SealedAckTimestamp, docs/protocol.md §11.3): the server
	// made no connection and admits only a client that proves a connect
	// token. Terminal, for a client that does not prove one
	// (ClientConfig.ProofAfterChallenge false).
	EventTokenRequired
	// EventWrongLayout: the server's message layout differs from
	// ClientConfig.Layout (docs/protocol.md §3.7); see ServerLayout.
	// Terminal.
	EventWrongLayout
	numClientEvents
)

var clientEventNames = [numClientEvents]string{"none", "connected", "reconnected",
	"denied", "wrong_version", "timed_out", "restarting", "restart_canceled", "token_required", "wrong_layout"}

func (e ClientEvent) String() string {
	if e < numClientEvents {
		return clientEventNames[e]
	}
	return "unknown"
}

// ClientHandshake is a client's side of the stateless handshake
// (docs/protocol.md §6): Initial → Challenge → Response → Ack, and the restart
// that moves an established connection to a new address. It is pure: the
// caller sends what Poll and Receive write, feeds in every handshake packet
// from the server, and sleeps until NextDeadline. Not safe for concurrent
// use; it never allocates.
type ClientHandshake struct {
	cfg   ClientConfig
	rnd   wire.Rand
	state ClientState
	// restarting: Connected, and re-handshaking after a RestartHandshake.
	restarting bool
	// answering: the sub-phase of a running handshake (first connect or
	// restart): true while answering a Challenge (SendingResponse), false
	// while sending Initials. It is the only phase record, so a restart
	// needs no states of its own.
	answering bool
	sessionID uint8
	sentCount uint8

	// The Challenge being answered, echoed in every (Restart)Response.
	secretID    uint8
	timestamp   float64
	challenge   cookie.Cookie
	challengeAt float64

	// answered holds the last few Challenge cookies this attempt answered
	// (a ring, nAnswered valid entries, next slot at answeredNext). An Ack
	// or Denied for any of them is genuine: with a round trip longer than
	// ResendInterval two Challenges arrive, the first Response creates the
	// connection, and the server answers the second Response with an Ack
	// carrying the first cookie (§5: the connection's authorised cookie).
	// Matching only the latest cookie would drop that Ack forever.
	answered     [clientAnsweredCookies]cookie.Cookie
	answeredFrom [clientAnsweredCookies]challengeOrigin
	nAnswered    uint8
	answeredNext uint8

	authorised cookie.Cookie
	// authorisedFrom is the SecretId and Timestamp the authorised cookie
	// came with: a sealed client's proof carries them (docs/protocol.md
	// §11.3).
	authorisedFrom challengeOrigin
	deniedReason   uint8
	serverNetVer   uint32
	serverNetFea   uint16
	serverLayout   protocol.Layout

	// nextSend: when the next Initial or Response is due.
	nextSend float64
	// gap: the wait after the next packet sent before the one after it. Each
	// phase starts it at firstGap; every send doubles it up to
	// ResendInterval.
	gap float64
	// sentAt[k%clientSentTimes]: when the packet with SentCount k left (the
	// last clientSentTimes packets). rtt: the last round trip measured from
	// them, NaN before any.
	sentAt [clientSentTimes]float64
	rtt    float64
	// progressAt: when the server last advanced the running handshake; the
	// connect timeout counts from here.
	progressAt float64
	// restartMark: the last honoured RestartHandshake or (re)connect; the
	// next RestartHandshake is honoured RestartMinInterval after it.
	restartMark float64
	// heardAt: the last valid connection packet from the server (Heard), or
	// the last (re)connect.
	heardAt float64
	// pending: a RestartHandshake came at pendingAt that was not honoured
	// (too soon after heardAt or restartMark). Poll honours it once both
	// waits are over, unless the server is heard after it.
	pending   bool
	pendingAt float64

	// Scratch packets, kept here so encoding and decoding never allocate.
	in, out protocol.Handshake
}

// NewClientHandshake makes a client handshake not yet started. seed
// seeds the RandomData generator (0 draws one from crypto/rand).
func NewClientHandshake(cfg ClientConfig, seed uint64) ClientHandshake {
	return ClientHandshake{cfg: cfg.withDefaults(), rnd: wire.NewRand(seed), rtt: math.NaN()}
}

// Start begins the attempt: Disconnected → SendingInitial, with the first
// Initial due at once (the next Poll sends it). In any other state it does
// nothing: a new attempt needs a new ClientHandshake with a new ClientID.
func (c *ClientHandshake) Start(now float64) {
	if c.state != clientDisconnected {
		return
	}
	c.state = ClientSendingInitial
	c.answering = false
	c.nextSend = now
	c.gap = c.firstGap()
	c.progressAt = now
}

// State returns the current state. A restart keeps the state connected; see
// Restarting.
func (c *ClientHandshake) State() ClientState { return c.state }

// SessionID is the server's SessionID adopted from the last Challenge; 0
// before any. Connection packets carry it.
func (c *ClientHandshake) SessionID() uint8 { return c.sessionID }

// Cookie is the authorised cookie: the one the first Ack carried (with
// ProofAfterChallenge, the first Challenge's). Zero until connected; restarts never change it (the server keeps the connection's
// cookie when it moves it, and sequences and session tag derive from it).
func (c *ClientHandshake) Cookie() cookie.Cookie { return c.authorised }

// challengeOrigin is what a Challenge said with its cookie.
type challengeOrigin struct {
	secretID  uint8
	timestamp float64
}

// CookieOrigin is the SecretId and Timestamp of the Challenge whose cookie
// became the authorised cookie (zero until then): with the cookie, what a
// sealed client's proof carries (docs/protocol.md §11.3).
func (c *ClientHandshake) CookieOrigin() (secretID uint8, timestamp float64) {
	return c.authorisedFrom.secretID, c.authorisedFrom.timestamp
}

// DeniedReason is the server's reason once denied (1 server full,
// 2 refused by the application; other values are passed through).
func (c *ClientHandshake) DeniedReason() uint8 { return c.deniedReason }

// Restarting reports a restart in progress.
func (c *ClientHandshake) Restarting() bool { return c.restarting }

// ServerVersions are the NetworkVersion and NetworkFeatures a VersionUpgrade
// carried, for telling the user which build the server wants.
func (c *ClientHandshake) ServerVersions() (netVersion uint32, netFeatures uint16) {
	return c.serverNetVer, c.serverNetFea
}

// ServerLayout is the message layout a LayoutMismatch carried: the
// server's own (the zero Layout: a server without messages).
func (c *ClientHandshake) ServerLayout() protocol.Layout { return c.serverLayout }

// Heard tells the handshake that the connection accepted a valid connection
// packet from the server at time at (its session tag matched and the
// sequence state took it). A connected client calls it for such packets, at
// least before each Poll and Receive with the newest time (calling it per
// packet is not needed: only the latest time counts). It returns
// EventRestartCanceled when this ends a restart that began before at.
//
// This is what keeps an unauthenticated RestartHandshake from taking down a
// live connection (issue 12): one is honoured only after RestartSilence
// without such packets, and a restart under way is dropped as soon as one
// arrives. A caller that never calls Heard gets the protocol's older rule,
// a restart on any RestartHandshake RestartSilence after connecting.
func (c *ClientHandshake) Heard(at float64) ClientEvent {
	if !(at > c.heardAt) { // also ignores NaN
		return EventNone
	}
	c.heardAt = at
	if at > c.pendingAt {
		c.pending = false // the server reaches us: a stray or a forgery
	}
	if c.restarting && at > c.restartMark {
		c.restarting = false
		c.answering = false
		c.sentCount = 0
		return EventRestartCanceled
	}
	return EventNone
}

// active reports a running handshake: the first connect or a restart.
func (c *ClientHandshake) active() bool {
	return c.state == ClientSendingInitial || c.state == clientSendingResponse || c.restarting
}

// setAnswering switches the sub-phase and, outside a restart, the state that
// mirrors it.
func (c *ClientHandshake) setAnswering(a bool) {
	c.answering = a
	if c.restarting {
		return
	}
	if a {
		c.state = clientSendingResponse
	} else {
		c.state = ClientSendingInitial
	}
}

// NextDeadline is when Poll next has something to do (a send, the Challenge
// fallback or the timeout); +Inf when nothing is pending. Deadlines are
// inclusive: a Poll at exactly this time acts.
func (c *ClientHandshake) NextDeadline() float64 {
	if !c.active() {
		if c.pending && c.state == clientConnected {
			return c.pendingDue()
		}
		return math.Inf(1)
	}
	d := min(c.nextSend, c.progressAt+c.cfg.ConnectTimeout)
	if c.answering {
		d = min(d, c.challengeAt+c.cfg.ChallengeLifetime)
	}
	return d
}

// expire applies what time alone does to a running handshake: the timeout,
// then the fallback from an old Challenge to Initials. Both Poll and Receive
// call it first, so the outcome does not depend on which of them the caller
// happens to run first after a deadline.
func (c *ClientHandshake) expire(now float64) ClientEvent {
	if !c.active() {
		return EventNone
	}
	if now >= c.progressAt+c.cfg.ConnectTimeout {
		c.state = clientTimedOut
		c.restarting = false
		c.answering = false
		return EventTimedOut
	}
	if c.answering && now >= c.challengeAt+c.cfg.ChallengeLifetime {
		c.setAnswering(false)
		c.nextSend = now
		c.gap = c.firstGap()
	}
	return EventNone
}

// Poll does what is due at now: it reports a timeout, or writes the Initial,
// Response or RestartResponse due into out and returns its length (0 when
// nothing is due). out should hold MaxClientPacketLen bytes; if it is too
// small nothing is sent and the packet stays due.
func (c *ClientHandshake) Poll(now float64, out []byte) (n int, ev ClientEvent) {
	if ev = c.expire(now); ev != EventNone {
		return 0, ev
	}
	if c.pending && !c.active() && c.state == clientConnected && now >= c.pendingDue() {
		return c.restart(now, out), EventRestarting
	}
	if !c.active() || now < c.nextSend {
		return 0, EventNone
	}
	return c.send(now, out), EventNone
}

// pendingDue is when a RestartHandshake not honoured on arrival (pendingAt)
// is: once the connection has been silent RestartSilence and
// RestartMinInterval has passed since the last restart or (re)connect.
func (c *ClientHandshake) pendingDue() float64 {
	return max(c.heardAt+c.cfg.RestartSilence, c.restartMark+c.cfg.RestartMinInterval)
}

// send writes the packet for the current phase into out. Every packet is
// fresh: same echoed fields, but the current SentCount and new RandomData,
// as UE5 does when it resends.
func (c *ClientHandshake) send(now float64, out []byte) int {
	h := &c.out
	*h = protocol.Handshake{
		SessionID:       c.sessionID,
		ClientID:        c.cfg.ClientID,
		Restart:         c.restarting,
		MinVersion:      protocol.MinHandshakeVersion,
		CurVersion:      protocol.CurHandshakeVersion,
		Type:            protocol.TypeInitial,
		SentCount:       c.sentCount,
		NetworkVersion:  c.cfg.NetworkVersion,
		NetworkFeatures: c.cfg.NetworkFeatures,
		Layout:          c.cfg.Layout,
	}
	if c.answering {
		h.Type = protocol.TypeResponse
		if c.restarting {
			h.Type = protocol.TypeRestartResponse
			h.OrigCookie = c.authorised
		}
		h.SecretID = c.secretID
		h.Timestamp = c.timestamp
		h.Cookie = c.challenge
	}
	// UE5's length, 16 − rand[0, 8] bytes. Any length in 8..16 lets the
	// server answer under its no-amplification rule: a Challenge or Ack body
	// is no bigger than an Initial's or Response's, so the server's 8..R
	// random bytes always fit.
	r := protocol.MaxRandomBytes - c.rnd.Intn(protocol.MaxRandomBytes-protocol.MinRandomBytes+1)
	c.rnd.Fill(h.Random[:r])
	h.RandomLen = uint8(r)
	n := wire.EncodeHandshake(out, c.cfg.Magic, h)
	if n == 0 {
		c.nextSend = now
		return 0
	}
	c.sentAt[c.sentCount%clientSentTimes] = now
	c.sentCount++
	c.nextSend = now + c.gap
	c.gap = min(2*c.gap, c.cfg.ResendInterval)
	return n
}

// firstGap is the wait before a phase's first resend (ClientConfig.ResendFirst).
// A ResendInterval of +Inf still means no resends at all.
func (c *ClientHandshake) firstGap() float64 {
	if math.IsInf(c.cfg.ResendInterval, 1) {
		return c.cfg.ResendInterval
	}
	g := c.cfg.ResendFirst
	if !(g > 0) {
		g = clientDefaultResendFirst
		if c.rtt >= 0 { // not NaN: measured
			g = max(clientResendRTTs*c.rtt, clientMinResendFirst)
		}
	}
	return min(g, c.cfg.ResendInterval)
}

// measure takes a round-trip sample from a server reply that echoes
// SentCount sent, if that is one of the last clientSentTimes packets sent.
// The echo names the very packet answered, resends included, so a sample is
// never ambiguous. A forged reply can feed in any sample, but a sample only
// moves the first resend of a phase between 50 ms and ResendInterval.
func (c *ClientHandshake) measure(now float64, sent uint8) {
	if ago := c.sentCount - sent; ago == 0 || ago > clientSentTimes {
		return
	}
	if s := now - c.sentAt[sent%clientSentTimes]; s >= 0 {
		c.rtt = s
	}
}

// Receive handles one datagram from the server. A reply, if any (a Response
// right after a Challenge, a restart Initial right after a RestartHandshake),
// is written into out (MaxClientPacketLen bytes) and its length returned.
// drop says why pkt was ignored (DropNone when it was used). ev reports a
// state change; it may be EventTimedOut with a drop when the attempt had
// already run out of time before pkt arrived. Connection packets are not the
// handshake's business: DropUnexpectedType.
func (c *ClientHandshake) Receive(now float64, pkt []byte, out []byte) (n int, ev ClientEvent, drop protocol.DropReason) {
	if ev = c.expire(now); ev != EventNone {
		return 0, ev, protocol.DropUnexpectedType
	}
	switch c.state {
	case ClientSendingInitial, clientSendingResponse, clientConnected:
	default:
		// Not started, or ended: nothing the server says matters.
		return 0, EventNone, protocol.DropUnexpectedType
	}
	// DecodeHandshake answers a connection packet with DropUnexpectedType.
	h := &c.in
	if r := wire.DecodeHandshake(c.cfg.Magic, pkt, h); r != protocol.DropNone {
		return 0, EventNone, r
	}
	switch h.Type {
	case protocol.TypeChallenge, protocol.TypeAck, protocol.TypeRestartHandshake, protocol.TypeVersionUpgrade, protocol.TypeDenied,
		protocol.TypeLayoutMismatch:
	default:
		return 0, EventNone, protocol.DropUnexpectedType
	}
	if h.ClientID != c.cfg.ClientID {
		return 0, EventNone, protocol.DropWrongClientID
	}
	// The SessionID is not checked: a Challenge brings the server's current
	// one (adopted below), and an Ack or Denied is bound to us by its cookie.

	if h.Type == protocol.TypeVersionUpgrade {
		// Whatever versions it carries: it says the server will not talk to
		// this build, and a VersionUpgrade's base is the server's own.
		if c.state == clientConnected {
			return 0, EventNone, protocol.DropUnexpectedType
		}
		c.state = clientWrongVersion
		c.serverNetVer = h.NetworkVersion
		c.serverNetFea = h.NetworkFeatures
		return 0, EventWrongVersion, protocol.DropNone
	}
	if !clientVersionsOK(h.MinVersion, h.CurVersion) {
		return 0, EventNone, protocol.DropBadVersion
	}
	if h.Type == protocol.TypeLayoutMismatch {
		// The answer to an Initial that declared a layout (§3.7); a
		// client that declared none, or is past its Initials' answer,
		// was not asked about it.
		if c.state == clientConnected || c.cfg.Layout == (protocol.Layout{}) {
			return 0, EventNone, protocol.DropUnexpectedType
		}
		c.state = clientWrongLayout
		c.serverLayout = h.Layout
		return 0, EventWrongLayout, protocol.DropNone
	}

	switch h.Type {
	case protocol.TypeChallenge:
		return c.onChallenge(now, h, out)
	case protocol.TypeAck:
		ev, drop = c.onAck(now, h)
		return 0, ev, drop
	case protocol.TypeDenied:
		// Connected, a Denied can only refuse a restart: the server does
		// not hold the connection any more (DeniedUnknownConnection: it
		// restarted, or closed it), so the connection is lost, and saying
		// so now spares the caller the wait for ConnectTimeout.
		if c.state == clientConnected && !(c.restarting && c.answering) {
			return 0, EventNone, protocol.DropUnexpectedType
		}
		if !c.wasAnswered(&h.Cookie) {
			return 0, EventNone, protocol.DropWrongCookie
		}
		c.state = clientDenied
		c.restarting = false
		c.answering = false
		c.deniedReason = h.Reason
		return 0, EventDenied, protocol.DropNone
	default: // protocol.TypeRestartHandshake
		return c.onRestart(now, out)
	}
}

// clientVersionsOK is the server's acceptance window (docs/protocol.md §3)
// applied to the server's packets: RemoteMin in [3, 4] and not above
// RemoteCur. A RemoteCur above 4 is fine; the server answers in our format.
func clientVersionsOK(remoteMin, remoteCur uint8) bool {
	return remoteMin >= protocol.MinHandshakeVersion && remoteMin <= protocol.CurHandshakeVersion && remoteMin <= remoteCur
}

// onChallenge answers a Challenge while handshaking or restarting. A later
// Challenge replaces the one being answered (as in UE5): it is the server's
// newest word, and its cookie is the freshest.
func (c *ClientHandshake) onChallenge(now float64, h *protocol.Handshake, out []byte) (int, ClientEvent, protocol.DropReason) {
	if !(h.Timestamp > 0) { // also rejects NaN
		return 0, EventNone, protocol.DropBadBody
	}
	if c.state == clientConnected && !c.restarting {
		return 0, EventNone, protocol.DropUnexpectedType
	}
	// Only the step from Initials to a Response counts as progress. A
	// Challenge while already answering (a late answer to an earlier
	// Initial, or a replay) does not extend the attempt, so a server that
	// keeps rejecting our Responses, or anyone repeating its Challenges,
	// cannot keep the client handshaking forever: every attempt ends within
	// ConnectTimeout of its last step forward, and steps forward happen at
	// most once per ChallengeLifetime.
	c.measure(now, h.SentCount)
	if c.cfg.ProofAfterChallenge && !c.restarting {
		c.sessionID = h.SessionID
		c.connect(now, &h.Cookie, challengeOrigin{h.SecretID, h.Timestamp})
		return 0, EventConnected, protocol.DropNone
	}
	if !c.answering {
		c.progressAt = now
		// A new phase: its resends start over from the first gap.
		c.gap = c.firstGap()
	}
	c.sessionID = h.SessionID
	c.secretID = h.SecretID
	c.timestamp = h.Timestamp
	c.challenge = h.Cookie
	c.challengeAt = now
	c.setAnswering(true)
	c.remember(&h.Cookie, challengeOrigin{h.SecretID, h.Timestamp})
	return c.send(now, out), EventNone, protocol.DropNone
}

// onAck completes the first connect or a restart.
func (c *ClientHandshake) onAck(now float64, h *protocol.Handshake) (ClientEvent, protocol.DropReason) {
	if !(h.Timestamp < 0) {
		return EventNone, protocol.DropBadBody
	}
	if c.restarting {
		// The server Acks a RestartResponse with the connection's own cookie
		// (§5), so OrigCookie is the only genuine one. Before a
		// RestartResponse went out, an Ack with it can only be a late
		// duplicate from the first connect (the server has not moved the
		// connection): taking it would end the restart too early.
		if !c.answering {
			return EventNone, protocol.DropUnexpectedType
		}
		if h.Cookie != c.authorised {
			return EventNone, protocol.DropWrongCookie
		}
		c.measure(now, h.SentCount)
		c.restarting = false
		c.answering = false
		c.sentCount = 0
		c.restartMark = now
		c.heardAt = max(c.heardAt, now)
		return EventReconnected, protocol.DropNone
	}
	if c.state == clientConnected {
		return EventNone, protocol.DropUnexpectedType // a duplicate Ack: harmless
	}
	// Accepted in SendingInitial too: after the Challenge fallback an Ack
	// for an earlier Response is still the server's connection.
	i := c.answeredIndex(&h.Cookie)
	if i < 0 {
		return EventNone, protocol.DropWrongCookie
	}
	c.measure(now, h.SentCount)
	if h.Timestamp == SealedAckTimestamp && !c.cfg.ProofAfterChallenge {
		// A sealed server: it made no connection, and this client has
		// no token to prove.
		c.state = clientTokenRequired
		c.answering = false
		return EventTokenRequired, protocol.DropNone
	}
	c.connect(now, &h.Cookie, c.answeredFrom[i])
	return EventConnected, protocol.DropNone
}

// connect completes the first connect with authorised cookie ck, which
// came with from.
func (c *ClientHandshake) connect(now float64, ck *cookie.Cookie, from challengeOrigin) {
	c.authorised = *ck
	c.authorisedFrom = from
	c.state = clientConnected
	c.answering = false
	c.sentCount = 0
	// A RestartHandshake within RestartMinInterval of connecting answers a
	// packet sent before the connection existed at its current address.
	c.restartMark = now
	c.heardAt = now
}

// onRestart honours a RestartHandshake: the server got our connection
// packets from an address it does not know, so we re-prove the address and
// ask it to move the connection.
func (c *ClientHandshake) onRestart(now float64, out []byte) (int, ClientEvent, protocol.DropReason) {
	if c.state != clientConnected {
		return 0, EventNone, protocol.DropUnexpectedType
	}
	if c.restarting {
		// The server answers each of our connection packets from the new
		// address until the move is done; these repeat the request under
		// way and must not reset it (nor extend its timeout).
		return 0, EventNone, protocol.DropUnexpectedType
	}
	// The server still reaches us here: the request is forged (anyone who
	// knows both addresses can send one) or answers a stray packet. A
	// connection that hears the server is never given up for it. The
	// request is kept, though (pendingAt): if the silence then lasts
	// RestartSilence, Poll honours it, so a client that moved restarts
	// RestartSilence after the server's last packet, not when its next
	// packet draws another RestartHandshake after that (docs/protocol.md
	// §6.4: the server's stall bound waits for no more).
	if !(now-c.heardAt >= c.cfg.RestartSilence) {
		c.pending, c.pendingAt = true, now
		return 0, EventNone, protocol.DropRestartUnneeded
	}
	// Counted from the last honoured request or (re)connect, so the stragglers
	// that answer packets sent before a restart completed do not start another.
	if now-c.restartMark < c.cfg.RestartMinInterval {
		c.pending, c.pendingAt = true, now
		return 0, EventNone, protocol.DropRateLimited
	}
	return c.restart(now, out), EventRestarting, protocol.DropNone
}

// restart begins the restart a RestartHandshake asked for and writes its
// first Initial into out.
func (c *ClientHandshake) restart(now float64, out []byte) int {
	c.restarting = true
	c.answering = false
	c.restartMark = now
	c.pending = false
	// The Challenge cookies of this restart, for its Denied (onChallenge
	// remembers them); those of the first connect have served.
	c.nAnswered, c.answeredNext = 0, 0
	// A restart that the server never completes (it has already closed the
	// connection, or cannot be reached from here) ends in TimedOut after
	// ConnectTimeout without progress: the connection is then lost, and
	// staying Connected would only hide that from the caller.
	c.progressAt = now
	c.gap = c.firstGap()
	return c.send(now, out)
}

// remember adds an answered Challenge cookie to the ring.
func (c *ClientHandshake) remember(ck *cookie.Cookie, from challengeOrigin) {
	if c.wasAnswered(ck) {
		return
	}
	c.answered[c.answeredNext] = *ck
	c.answeredFrom[c.answeredNext] = from
	c.answeredNext = (c.answeredNext + 1) % clientAnsweredCookies
	if c.nAnswered < clientAnsweredCookies {
		c.nAnswered++
	}
}

// wasAnswered reports whether this attempt answered a Challenge with ck.
func (c *ClientHandshake) wasAnswered(ck *cookie.Cookie) bool { return c.answeredIndex(ck) >= 0 }

// answeredIndex is ck's place in the ring, or -1.
func (c *ClientHandshake) answeredIndex(ck *cookie.Cookie) int {
	for i := range int(c.nAnswered) {
		if c.answered[i] == *ck {
			return i
		}
	}
	return -1
}
