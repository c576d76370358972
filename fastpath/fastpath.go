// Package fastpath is udpgate's wire protocol (docs/protocol.md) for a
// service that runs its own sockets and wants the protocol without
// package conn: the server's connectionless decisions, the client's
// handshake state machine, the connection packet codec and the sequence
// and ack window. Like the packages it fronts, it does no I/O, starts no
// goroutine and never reads the clock: time comes in as Unix seconds
// (float64), and nothing here allocates per packet.
//
// A receive loop makes one Server and hands every datagram to
// Server.Handle; the Decision says whether to send the reply written into
// the output buffer, promote a client that proved its address (then
// ServerConfig.BuildAck), or pass a connection packet on to the
// connection's SeqState. A client drives a ClientHandshake with Poll and
// Receive. The examples show each.
//
// The names here are aliases of udpgate's internal packages, one
// definition each; sealed mode (docs/protocol.md §11) is conn's alone.
package fastpath

import (
	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/ratelimit"
	"github.com/udpgate/udpgate/internal/seqwin"
	"github.com/udpgate/udpgate/internal/wire"
)

type (
	// The server's side of the handshake (docs/protocol.md §3–§5).

	// ServerConfig is what a server enforces on the wire.
	ServerConfig = handshake.ServerConfig
	// Server decides, for one receive loop, what to do with each datagram.
	Server = handshake.Server
	// Decision is the outcome of Server.Handle.
	Decision = handshake.Decision
	// Action is what the caller must do with a datagram.
	Action = handshake.Action
	// Peer is what the caller knows about a datagram's source.
	Peer = handshake.Peer
	// ReplyTo is what a later reply to a proven client needs.
	ReplyTo = handshake.ReplyTo
	// ClosedAddrs is the caller's memory of recently closed addresses.
	ClosedAddrs = handshake.ClosedAddrs
	// Shed is overload control's say over the next decisions.
	Shed = handshake.Shed
	// Limit is a reply budget: a token bucket's rate and burst.
	Limit = ratelimit.Limit
	// Bucket is one token bucket, as Shed.Challenges holds.
	Bucket = ratelimit.Bucket
	// Grant is a token a Bucket reserved, spent only if the reply is sent.
	Grant = ratelimit.Grant
	// Layout is a side's message layout, which a client declares in its
	// Initials and a server compares (docs/protocol.md §3.7).
	Layout = protocol.Layout

	// The client's side of the handshake (docs/protocol.md §6).

	// ClientConfig is what a client's handshake sends and how patient it is.
	ClientConfig = handshake.ClientConfig
	// ClientHandshake is a client's handshake state machine.
	ClientHandshake = handshake.ClientHandshake
	// ClientState is where a client's handshake stands, for logs: a
	// caller acts on the ClientEvents instead.
	ClientState = handshake.ClientState
	// ClientEvent is a state change that Poll or Receive reports once.
	ClientEvent = handshake.ClientEvent

	// The vocabulary and the codec (docs/protocol.md §1–§3, §7).

	// Magic is the configured magic header.
	Magic = wire.Magic
	// PacketType is a handshake packet's type.
	PacketType = protocol.PacketType
	// Handshake is one decoded handshake packet.
	Handshake = protocol.Handshake
	// Kind is a connection packet's kind.
	Kind = protocol.Kind
	// ConnHeader is a connection packet's header.
	ConnHeader = protocol.ConnHeader
	// DropReason says why a datagram was dropped.
	DropReason = protocol.DropReason
	// Rand is the random source of a reply's RandomData.
	Rand = wire.Rand

	// The sequence and ack window (docs/protocol.md §8).

	// SeqState is one side's sequence state for one connection.
	SeqState = seqwin.SeqState
	// AckReport is what one Receive learned about our own packets.
	AckReport = seqwin.AckReport
	// SentPacket is one of our packets as an AckReport reports it.
	SentPacket = seqwin.SentPacket
	// SeqStats counts a SeqState's traffic.
	SeqStats = seqwin.SeqStats
)

const (
	// The Actions of a Decision. Sealed mode's are conn's alone: a
	// ServerConfig without Sealed never decides them.
	ActDrop    = handshake.ActDrop
	ActReply   = handshake.ActReply
	ActPromote = handshake.ActPromote
	ActMigrate = handshake.ActMigrate
	ActConn    = handshake.ActConn

	// The ClientEvents a caller acts on: the attempt's end. Other events
	// (a restart's) need no action: the caller keeps sending what Poll and
	// Receive write.
	EventConnected     = handshake.EventConnected
	EventDenied        = handshake.EventDenied
	EventWrongVersion  = handshake.EventWrongVersion
	EventWrongLayout   = handshake.EventWrongLayout // the server's message layout differs (docs/protocol.md §3.7)
	EventTimedOut      = handshake.EventTimedOut
	EventTokenRequired = handshake.EventTokenRequired // a sealed server's Ack: it wants a connect token (docs/protocol.md §11.3), which conn.DialToken proves

	// Connection packet kinds.
	KindData       = protocol.KindData
	KindKeepAlive  = protocol.KindKeepAlive
	KindDisconnect = protocol.KindDisconnect
	KindMessages   = protocol.KindMessages

	// DropNone is a DropReason's "not dropped".
	DropNone = protocol.DropNone

	// Unlimited, as a Limit's Rate, turns the limit off.
	Unlimited = ratelimit.Unlimited

	// Buffer sizes: the largest reply a Server writes, the largest
	// handshake packet a client sends, a connection header's bytes after
	// the prefix, and the default largest datagram.
	MaxReplyLen        = handshake.MaxReplyLen
	MaxClientPacketLen = handshake.MaxClientPacketLen
	ConnHeaderBytes    = protocol.ConnHeaderBytes
	DefaultMaxDatagram = protocol.DefaultMaxDatagram
)

// NewServer makes a receive loop's decision state; seed 0 draws the
// random seeds from crypto/rand.
func NewServer(cfg ServerConfig, secrets *cookie.Secrets, seed uint64, now float64) *Server {
	return handshake.NewServer(cfg, secrets, seed, now)
}

// NewClientHandshake makes a client handshake; Start begins it. Seed 0
// draws its random seed from crypto/rand.
func NewClientHandshake(cfg ClientConfig, seed uint64) ClientHandshake {
	return handshake.NewClientHandshake(cfg, seed)
}

// ParseMagic parses a magic header written as '0' and '1' characters,
// first on the wire first.
func ParseMagic(s string) (Magic, error) { return wire.ParseMagic(s) }

// DecodeHandshake parses b as a handshake packet under magic header m.
func DecodeHandshake(m Magic, b []byte, h *Handshake) DropReason {
	return wire.DecodeHandshake(m, b, h)
}

// ConnHeaderOffset is where a connection packet's byte-aligned header
// starts, after the prefix.
func ConnHeaderOffset(m Magic) int { return wire.ConnHeaderOffset(m) }

// EncodeConn writes a connection packet into dst and returns its length,
// or 0 when it does not fit or h is invalid.
func EncodeConn(dst []byte, m Magic, h *ConnHeader, payload []byte) int {
	return wire.EncodeConn(dst, m, h, payload)
}

// DecodeConn parses b as a connection packet into *h and returns its
// payload, a subslice of b.
func DecodeConn(m Magic, b []byte, h *ConnHeader) (payload []byte, r DropReason) {
	return wire.DecodeConn(m, b, h)
}

// NewRand seeds a Rand; seed 0 draws a seed from crypto/rand.
func NewRand(seed uint64) Rand { return wire.NewRand(seed) }
