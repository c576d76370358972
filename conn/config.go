package conn

import (
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/udpgate/udpgate/internal/defaults"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/ratelimit"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
	"github.com/udpgate/udpgate/netsim"
	"github.com/udpgate/udpgate/token"
)

// Config configures a Server (Listen) or a Client (Dial). The zero value is
// usable: every zero field takes the default named in params.go. Wire
// settings (Magic, NetworkVersion, NetworkFeatures) must be equal on both
// sides.
type Config struct {
	// Magic is the magic header, a string of '0' and '1' of at most 32
	// characters, first character first on the wire; empty for none.
	Magic string
	// NetworkVersion and NetworkFeatures must match between client and
	// server; a mismatched client is told VersionUpgrade.
	NetworkVersion  uint32
	NetworkFeatures uint16
	// IgnoreNetworkVersion: the server accepts any NetworkVersion (features
	// are still compared).
	IgnoreNetworkVersion bool
	// SessionID (0..3) is the server's session; changing it on restart
	// invalidates every client of the earlier session.
	SessionID uint8
	// MaxDatagram is the largest datagram sent or accepted: default 1200,
	// at most 1472.
	MaxDatagram int

	// Server sockets: Sockets SO_REUSEPORT sockets (0: GOMAXPROCS), each
	// with its receive loop, receiving in batches of BatchSize (0:
	// batchio's default); socket buffer sizes in bytes (0: batchio's
	// default).
	//
	// Unless NoSteering is set, the kernel steers handshake packets to
	// half of the sockets (at least one) and connection packets to every
	// socket, or, while a handshake flood backs up (and for the first
	// half second), to the others only (at least one), so a handshake
	// flood does not queue ahead of a player (batchio.Steer). Where the kernel cannot (before Linux 4.5,
	// or under a seccomp filter), every socket takes every packet and
	// Listen logs a warning.
	Sockets    int
	NoSteering bool
	BatchSize  int
	RecvBuffer int
	SendBuffer int
	// AllowFragmentation clears the don't-fragment bit the server sets on
	// IPv4 datagrams (batchio.Config.AllowFragmentation: DF spares the
	// kernel a per-datagram IP ID, −6 % CPU per packet on the bench). Set
	// it only if clients sit behind paths whose MTU cannot carry
	// MaxDatagram bytes plus 28 of headers.
	AllowFragmentation bool
	// DSCP, if not 0, marks every datagram the server sends with this
	// Differentiated Services code point (0..63; 46 is Expedited
	// Forwarding), for networks that prioritise game traffic.
	DSCP int

	// MaxClients bounds connections (0: 100 000); beyond it a proven
	// client is answered Denied(1).
	MaxClients int
	// MaxClientsPerIP and MaxClientsPerPrefix bound the connections from
	// one IP address and from one /24 (IPv4) or /64 (IPv6) network (0: 256
	// and 1024, negative: unlimited); beyond them a proven client is
	// answered Denied(3), too many connections from its network. The
	// defaults admit a few hundred players behind one carrier-grade NAT
	// address and about a thousand from one NAT pool or IPv6 subscriber;
	// a server that expects more from one network (a LAN event) raises or
	// disables them.
	MaxClientsPerIP     int
	MaxClientsPerPrefix int
	// ChallengeRate and ChallengeBurst bound Challenge replies per source
	// (address and port) per second. As in a ratelimit.Limit, a rate of 0
	// takes the protocol default (32/s), a negative rate
	// (ratelimit.Unlimited) means unlimited (benchmarks), and a burst of 0
	// is twice the rate.
	ChallengeRate  float64
	ChallengeBurst float64
	// ChallengeRatePerIP and ChallengeRatePerPrefix bound Challenge
	// replies per second to one IP address (all its ports) and to one /24
	// (IPv4) or /64 (IPv6) network, for the whole server, so that a
	// spoofer cannot aim a host's whole port range at it; bursts are
	// twice the rate. 0 takes fastpath's defaults (64/s and 256/s, or
	// unlimited when ChallengeRate is negative), negative is unlimited.
	ChallengeRatePerIP     float64
	ChallengeRatePerPrefix float64
	// InboundPacketRate and InboundByteRate (server only) are the budget
	// of each proven connection's inbound packets per second and of their
	// bytes (0: 9,000 packets and 16 MiB, docs/protocol.md §7.8; negative,
	// ratelimit.Unlimited: unlimited). Each bucket holds 100 ms of its rate,
	// one datagram at least. A packet from the connection's address beyond
	// either is dropped right after the address lookup, before any
	// parsing, decryption or counting (DropInboundLimited): one client
	// cannot take the receive loop from the others.
	InboundPacketRate float64
	InboundByteRate   float64
	// PromotionWorkers bounds concurrent promotions (0: 64).
	PromotionWorkers int
	// Overload tunes overload control (server only).
	Overload OverloadConfig

	// KeepAlive: a side that has sent nothing for this long sends a
	// KeepAlive (0: 1 s); Timeout: a side that has received no valid
	// packet for this long closes the connection (0: 5 s; docs/protocol.md
	// §7). ConnectTimeout: how long a client waits for the server while
	// handshaking (0: 10 s; §6).
	KeepAlive      time.Duration
	Timeout        time.Duration
	ConnectTimeout time.Duration
	// SweepInterval: how often timers are checked (0: 100 ms).
	SweepInterval time.Duration

	// LocalAddr (client only) is the local address to bind, e.g.
	// "127.0.0.5:0"; empty binds any address of the server's family.
	LocalAddr string
	// Network, when set, makes Listen and Dial bind on this simulated
	// network instead of real sockets (tests; package netsim): addresses
	// are the network's, and an unspecified one binds its loopback. Host
	// names are the network's too (netsim.Network.SetHost; Dial never asks
	// the real DNS then).
	Network *netsim.Network

	// ClientID (client only): 0 picks one at random for each Dial, so a
	// restarted client is told apart from its stale connection; 1..7 fixes
	// it.
	ClientID uint8

	// Sealed mode (docs/protocol.md §11), server side: a PrivateKey turns
	// it on. Clients must then prove a netcode.io connect token made with
	// this key and ProtocolID (by the game's backend, package token)
	// before the Handler hears of them, and every connection packet is
	// sealed. Without a key the server is unsealed and UE-compatible.
	PrivateKey *[token.KeyBytes]byte
	ProtocolID uint64
	// PublicAddresses are the addresses clients are sent to (the server
	// list in their tokens); a token must list one of them. nil: the
	// listen address, which must then be a specific one (not 0.0.0.0 or
	// [::]).
	PublicAddresses []netip.AddrPort

	// Token (client) is a connect token: Dial then proves it after the
	// handshake and seals the connection. DialToken sets it.
	Token *token.ConnectToken

	// Messages configures message channels (docs/protocol.md §14):
	// reliable-ordered, unreliable and sequenced channels over the
	// connection, equal on both sides. The zero value turns them off;
	// Conn.Send's datagram pipe works either way.
	Messages message.Config
	// EgressRate (server only) is the server's egress budget in bytes per
	// second, all connections together (0: unlimited, the default). The
	// game's traffic goes first and is never held by it: Data, acks and
	// the entries of channels not declared bulk. The bulk
	// (ChannelConfig.Bulk channels, and fragments of large messages) gets
	// what that leaves, in max-min fair shares: each connection's bulk goes
	// at the smaller of its path's rate and its share, and a connection
	// that wants less than its share leaves the rest to the others
	// (package internal/egress; Stats.Egress*). It needs Messages: without
	// channels there is no bulk to hold.
	EgressRate int64
	// Linger: how long Close waits for the reliable messages still queued
	// or unacknowledged to be acknowledged before it disconnects (0: 5 s;
	// negative: Close discards them at once).
	Linger time.Duration
	// ReceiveQueue, above 0, turns on polling: the connections whose
	// Handler has no OnMessage keep their messages for
	// Conn.ReceiveMessage, a game loop's way to receive, instead of
	// discarding them. It bounds the bytes of unreliable and sequenced
	// messages one connection keeps (each costs its length and 5): those
	// beyond it are dropped, counted as the message drop "queue_full".
	// Reliable messages are never dropped: they wait in the receive
	// window (1024 units, at most Messages.ConnReceiveBudget bytes), and
	// beyond it the peer's packets are refused unacknowledged and resent.
	// 0 (the default): off; a Handler without OnMessage then discards
	// the messages that arrive.
	ReceiveQueue int
	// Handler receives connection events; nil ignores them.
	Handler Handler
	// Accept (server only) is asked, from a promotion worker, whether to
	// accept a proven client; a non-nil error refuses it with Denied(2).
	// A sealed server asks it on the receive loop, at the proof, once the
	// token checks out, and refuses with a sealed Disconnect reason 13
	// (docs/protocol.md §11.3).
	Accept func(remote netip.AddrPort) error
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now. Tests inject their own.
	Now func() time.Time
}

// settings is a validated Config with defaults filled and derived values.
type settings struct {
	Config
	magic     wire.Magic
	keepAlive float64
	timeout   float64
	connectTO float64
	// delivery is Handler as a DeliveryHandler, or nil: asserted once,
	// not per packet.
	delivery DeliveryHandler
	// seqHandler is Handler as a SequencedPacketHandler, or nil.
	seqHandler SequencedPacketHandler
	// sendable is Handler as a SendableHandler, or nil.
	sendable SendableHandler
	// msgDelivery is Handler as a MessageDeliveryHandler, or nil.
	msgDelivery MessageDeliveryHandler
	// msgHandler is Handler as a MessageHandler, or nil: then the
	// messages that arrive are discarded, counted (message.DropUnhandled)
	// and, the first time, logged; unhandledLogged is shared by every copy
	// of these settings (a server's or client's connections).
	msgHandler      MessageHandler
	unhandledLogged *atomic.Bool
	// polling: ReceiveQueue is set and the Handler has no OnMessage, so
	// messages wait for ReceiveMessage (poll.go).
	polling bool
	// msgs is the message layer (nil: no channels configured), and
	// msgPayload the bytes one Messages packet carries.
	msgs       *message.Layer
	msgPayload int
	// inbound is each connection's inbound budget (Conn.inb), the server's
	// receive loops check it before anything else.
	inbound ratelimit.Flow
	// sealed: connections are sealed (a server with a PrivateKey, a client
	// with a Token). The packet path asks this, on the shared settings'
	// cache line, before it reads a connection's sec: with many
	// connections that field is a cache miss.
	sealed bool
}

func (c Config) settings() (settings, error) {
	s := settings{Config: c}
	m, err := wire.ParseMagic(c.Magic)
	if err != nil {
		return s, fmt.Errorf("config: Magic %q is not valid: %v (use up to 32 characters of '0' and '1', or leave it empty)", c.Magic, err)
	}
	s.magic = m
	if c.SessionID > 3 {
		return s, fmt.Errorf("config: SessionID %d is out of range: use 0, 1, 2 or 3", c.SessionID)
	}
	if c.ClientID > 7 {
		return s, fmt.Errorf("config: ClientID %d is out of range: use 1..7, or 0 for a random one", c.ClientID)
	}
	if s.MaxDatagram == 0 {
		s.MaxDatagram = protocol.DefaultMaxDatagram
	}
	if s.MaxDatagram < wire.MinConnLen(m)+1 || s.MaxDatagram > protocol.MaxDatagramLimit {
		return s, fmt.Errorf("config: MaxDatagram %d is out of range: use %d..%d bytes (default %d)",
			c.MaxDatagram, wire.MinConnLen(m)+1, protocol.MaxDatagramLimit, protocol.DefaultMaxDatagram)
	}
	if c.Sockets < 0 || c.BatchSize < 0 || c.RecvBuffer < 0 || c.SendBuffer < 0 || c.PromotionWorkers < 0 || c.MaxClients < 0 {
		return s, fmt.Errorf("config: Sockets, BatchSize, RecvBuffer, SendBuffer, PromotionWorkers and MaxClients must not be negative (0 takes the default)")
	}
	if s.MaxClients == 0 {
		s.MaxClients = defaults.MaxClients
	}
	if s.MaxClientsPerIP == 0 {
		s.MaxClientsPerIP = defaults.MaxClientsPerIP
	}
	if s.MaxClientsPerPrefix == 0 {
		s.MaxClientsPerPrefix = defaults.MaxClientsPerPrefix
	}
	if s.PromotionWorkers == 0 {
		s.PromotionWorkers = defaultPromotionWorkers
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"KeepAlive", &s.KeepAlive, defaults.KeepAlive},
		{"Timeout", &s.Timeout, defaults.Timeout},
		{"ConnectTimeout", &s.ConnectTimeout, defaults.ConnectTimeout},
		{"SweepInterval", &s.SweepInterval, defaultSweepInterval},
	} {
		if *d.v < 0 {
			return s, fmt.Errorf("config: %s %v is negative: use a positive duration, or 0 for the default %v", d.name, *d.v, d.def)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if s.KeepAlive >= s.Timeout {
		return s, fmt.Errorf("config: KeepAlive %v must be shorter than Timeout %v, or idle connections time out: lower KeepAlive or raise Timeout", s.KeepAlive, s.Timeout)
	}
	if c.EgressRate < 0 {
		return s, fmt.Errorf("config: EgressRate %d is negative: use bytes per second, or 0 for no egress budget", c.EgressRate)
	}
	if c.ChallengeBurst < 0 {
		return s, fmt.Errorf("config: ChallengeBurst %v is negative: use a positive burst, or 0 for the default", c.ChallengeBurst)
	}
	for _, r := range []struct {
		name string
		v    *float64
		def  float64
	}{{"InboundPacketRate", &s.InboundPacketRate, ratelimit.DefaultInboundPacketRate}, {"InboundByteRate", &s.InboundByteRate, ratelimit.DefaultInboundByteRate}} {
		switch {
		case math.IsNaN(*r.v) || math.IsInf(*r.v, 0) || (*r.v > 0 && *r.v < 1):
			return s, fmt.Errorf("config: %s %v is not a rate: use at least 1 per second, 0 for the default %v, or a negative rate for unlimited", r.name, *r.v, r.def)
		case *r.v == 0:
			*r.v = r.def
		}
	}
	s.inbound = ratelimit.NewFlow(s.InboundPacketRate, s.InboundByteRate, inboundBurst.Seconds(), s.MaxDatagram)
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.Handler == nil {
		s.Handler = NopHandler{}
	}
	s.delivery, _ = s.Handler.(DeliveryHandler)
	if err := s.sealedSettings(); err != nil {
		return s, err
	}
	s.sealed = s.PrivateKey != nil || s.Token != nil
	s.seqHandler, _ = s.Handler.(SequencedPacketHandler)
	s.sendable, _ = s.Handler.(SendableHandler)
	s.msgDelivery, _ = s.Handler.(MessageDeliveryHandler)
	s.msgHandler, _ = s.Handler.(MessageHandler)
	if c.ReceiveQueue < 0 {
		return s, fmt.Errorf("config: ReceiveQueue %d is negative: use the bytes of unreliable messages a connection keeps for ReceiveMessage, or 0 for no polling", c.ReceiveQueue)
	}
	if c.ReceiveQueue > 0 && len(c.Messages.Channels) == 0 {
		return s, fmt.Errorf("config: ReceiveQueue %d is set but no message channels are: configure Config.Messages, or leave ReceiveQueue 0", c.ReceiveQueue)
	}
	s.polling = c.ReceiveQueue > 0 && s.msgHandler == nil
	s.unhandledLogged = new(atomic.Bool)
	if s.Linger == 0 {
		s.Linger = defaultLinger
	}
	if len(c.Messages.Channels) > 0 {
		s.msgPayload = s.MaxDatagram - wire.ConnLen(m, protocol.KindMessages, 0)
		if s.sealed {
			s.msgPayload = s.MaxDatagram - wire.SealedConnLen(m, 0)
		}
		if s.msgs, err = message.NewLayer(c.Messages, s.msgPayload); err != nil {
			return s, fmt.Errorf("config: Messages: %w", err)
		}
	}
	s.Overload = s.Overload.withDefaults()
	s.keepAlive = s.KeepAlive.Seconds()
	s.timeout = s.Timeout.Seconds()
	s.connectTO = s.ConnectTimeout.Seconds()
	return s, nil
}

// fastpathConfig is the wire configuration a server's loops enforce, for
// a server whose handshake packets are spread over loops receive loops.
func (s *settings) fastpathConfig(loops int) handshake.ServerConfig {
	fc := handshake.ServerConfig{
		Magic:                s.magic,
		SessionID:            s.SessionID,
		NetworkVersion:       s.NetworkVersion,
		NetworkFeatures:      s.NetworkFeatures,
		IgnoreNetworkVersion: s.IgnoreNetworkVersion,
		MaxDatagram:          s.MaxDatagram,
		Sealed:               s.PrivateKey != nil,
		Layout:               msgcfg.Layout(&s.Messages, s.MaxDatagram),
	}
	// Config's rates mean what a ratelimit.Limit's do (0 the default, a
	// negative rate unlimited, a burst of 0 twice the rate), so they pass
	// through. The per-IP and per-network budgets are totals that fastpath
	// shares out over the handshake loops.
	fc.ChallengeLimit = ratelimit.Limit{Rate: s.ChallengeRate, Burst: s.ChallengeBurst}
	fc.ChallengeIPLimit = ratelimit.Limit{Rate: s.ChallengeRatePerIP}
	fc.ChallengePrefixLimit = ratelimit.Limit{Rate: s.ChallengeRatePerPrefix}
	fc.Loops = loops
	return fc
}

// seconds converts a clock reading to the protocol's Unix seconds.
func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
