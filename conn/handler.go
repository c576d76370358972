package conn

import (
	"errors"
	"fmt"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/message"
)

// DisconnectReason says why a connection ended (docs/protocol.md §7): the
// protocol's one definition, with its String and its metric Label, and the
// index of Stats.Disconnects.
type DisconnectReason = protocol.DisconnectReason

// The reasons a Handler's OnDisconnect and a DisconnectedError report. A
// sealed server's refusals of a connect token (docs/protocol.md §11.3) are
// never announced to its Handler; a client's Dial fails with the matching
// ErrToken* error or a *DeniedError instead.
const (
	// ReasonClosed: closed by the application on one side.
	ReasonClosed DisconnectReason = protocol.DisconnectClosed
	// ReasonShutdown: the server is shutting down.
	ReasonShutdown DisconnectReason = protocol.DisconnectShutdown
	// ReasonTimedOut: no valid packet for the timeout.
	ReasonTimedOut DisconnectReason = protocol.DisconnectTimedOut
	// ReasonReplaced: the client restarted (new ClientID from the same
	// address) and its new connection replaced this one.
	ReasonReplaced DisconnectReason = protocol.DisconnectReplaced
	// ReasonStalled: the peer stopped acknowledging: no packet
	// acknowledged for max(Config.Messages.StallSilence, StallRTTs round
	// trips) while reliable messages were in flight, or one reliable
	// message unacknowledged for StallTimeout.
	ReasonStalled DisconnectReason = protocol.DisconnectStalled
	// ReasonTokenRequired: the server is sealed and the client connected
	// without a connect token (docs/protocol.md §11.3); the client's Err
	// then matches ErrTokenRequired.
	ReasonTokenRequired DisconnectReason = protocol.DisconnectTokenRequired
)

// Handler receives connection events. Methods are called from the server's
// goroutines (receive loops, promotion workers, housekeeping) and from
// whichever goroutine calls Close, so they must be safe for concurrent use.
// They must not block: a slow OnPacket stalls every connection on its
// socket.
//
// The calls for one connection come in order: OnConnect returns before
// the connection's first packet or message reaches the Handler (a packet
// that arrives meanwhile waits for it), and OnDisconnect is called once,
// after every call a received packet made (OnPacket, OnSequencedPacket,
// OnMessage, and the OnDelivery, OnMessageDelivery and OnSendable reports
// it carried) has
// returned; none of those follows it. (A DeliveryHandler's loss reports
// that a Send itself makes, when the 128-packet window evicts a packet
// never acknowledged, run on the goroutine that called Send.) Calls for
// different connections run concurrently.
type Handler interface {
	// OnConnect: a client completed the handshake (server), or the client
	// connected (client).
	OnConnect(c *Conn)
	// OnPacket: a Data payload arrived. payload is borrowed for the call
	// only: it points into a receive buffer that is reused as soon as
	// OnPacket returns, so copy what you keep.
	OnPacket(c *Conn, payload []byte)
	// OnDisconnect: the connection ended; remote tells whether the peer
	// said so (a Disconnect packet) or this side decided (Close, timeout,
	// replacement, shutdown).
	OnDisconnect(c *Conn, reason DisconnectReason, remote bool)
}

// DeliveryHandler is optionally implemented by a Handler to learn, from the
// peer's acks, which Data packets arrived (delivered) and which fell out of
// the 64-packet window unacknowledged (lost). seq is what Conn.Send returned.
// Unreliable transport: lost packets are not resent.
type DeliveryHandler interface {
	OnDelivery(c *Conn, seq uint16, delivered bool)
}

// SequencedPacketHandler is optionally implemented by a Handler that wants
// each Data packet's sequence number (docs/protocol.md §7.3), to keep only
// the newest of reordered updates; it is called instead of OnPacket.
// Sequence numbers wrap at 16384: seq is newer than last when
// (seq − last) mod 16384 is 1..8191.
type SequencedPacketHandler interface {
	OnSequencedPacket(c *Conn, seq uint16, payload []byte)
}

// NopHandler ignores every event. Embed it to implement only some methods.
type NopHandler struct{}

func (NopHandler) OnConnect(*Conn)                            {}
func (NopHandler) OnPacket(*Conn, []byte)                     {}
func (NopHandler) OnDisconnect(*Conn, DisconnectReason, bool) {}

// Errors returned by Dial, Send and Close.
var (
	// ErrTimedOut: the server did not answer within ConnectTimeout; check the
	// address, that the server runs, and that Magic matches.
	ErrTimedOut = errors.New("conn: connect timed out: no answer from the server (check the address, that the server runs, and that Magic matches)")
	// ErrClosed: the connection or server is closed.
	ErrClosed = errors.New("conn: connection closed")
	// ErrPayloadSize: a payload is empty or does not fit MaxDatagram.
	ErrPayloadSize = errors.New("conn: payload is empty or larger than MaxDatagram allows")
)

// The message errors, the message package's own values under conn's name
// (errors.Is(err, conn.ErrQueueFull) needs no import of message), as the
// disconnect reasons are protocol's.
var (
	// ErrQueueFull: SendMessage or QueueMessage found the channel's send
	// queue full (ChannelConfig.MaxQueued), or the connection holding its
	// share of the server-wide send budget (message.ErrSendShare, which
	// matches it): retry later, or after OnSendable.
	ErrQueueFull = message.ErrQueueFull
	// ErrMessageSize: a message larger than its channel takes
	// (Conn.MaxMessageSize); no retry fixes it.
	ErrMessageSize = message.ErrMessageSize
	// ErrNoChannel: no such channel, or no channels configured
	// (Config.Messages); no retry fixes it.
	ErrNoChannel = message.ErrNoChannel
	// ErrUndelivered: Close ended the connection with reliable messages
	// unacknowledged (the error wraps it and says how many).
	ErrUndelivered = message.ErrUndelivered
)

// MessageDeliveryHandler is optionally implemented by a Handler to learn
// the fate of each reliable message it sent (reliable-ordered channels;
// unreliable and sequenced messages are not reported). id numbers the
// messages that SendMessage and QueueMessage accepted (returned nil) on
// the channel, from 1: the connection's third accepted message on
// channel 0 is (0, 3). Every id is reported exactly once, in order per
// channel: delivered when the peer acknowledged it and every earlier
// message of its channel, on the connection's receive path, like
// OnMessage; not delivered when the connection ended first (Close after
// its linger, a timeout, a stall, the peer's Disconnect), just before
// OnDisconnect: it may have arrived, its ack did not. A Handler without it
// costs nothing; with it, each acknowledged message costs a call.
type MessageDeliveryHandler interface {
	OnMessageDelivery(c *Conn, channel int, id uint64, delivered bool)
}

// SendableHandler is optionally implemented by a Handler to learn when a
// message channel whose SendMessage or QueueMessage returned
// ErrQueueFull has drained to half its ChannelConfig.MaxQueued:
// a bulk sender (a level download) queues its next part then, instead of
// polling. Called on the connection's receive path, like OnMessage.
type SendableHandler interface {
	OnSendable(c *Conn, channel int)
}

// DeniedError is Dial's error when the server refused the client; Reason
// is the Denied packet's (protocol.Denied*).
type DeniedError struct{ Reason uint8 }

func (e *DeniedError) Error() string {
	switch e.Reason {
	case protocol.DeniedServerFull:
		return "conn: denied: server full (try again later or another server)"
	case protocol.DeniedRefused:
		return "conn: denied: refused by the server's application"
	case protocol.DeniedAddressLimit:
		return "conn: denied: too many connections from this IP address or network (close some, or ask the server's operator to raise its per-IP and per-network connection limits)"
	}
	return fmt.Sprintf("conn: denied with reason %d", e.Reason)
}

// VersionError is Dial's error when the server speaks another
// NetworkVersion or NetworkFeatures, or (Layout set) configures other
// message channels.
type VersionError struct {
	ServerNetworkVersion  uint32
	ServerNetworkFeatures uint16
	// Layout, when not empty, says how the server's message layout
	// (channels, kinds, MaxMessageSize, MaxDatagram) differs from this
	// client's: the versions matched, but the server would misread this
	// client's messages (docs/protocol.md §3.7).
	Layout string
}

func (e *VersionError) Error() string {
	if e.Layout != "" {
		return "conn: the server's message layout differs: " + e.Layout +
			": configure Config.Messages (channels in the same order, same kinds, same MaxMessageSize) and MaxDatagram as the server does"
	}
	return fmt.Sprintf("conn: wrong version: the server runs NetworkVersion %d features %d: set Config.NetworkVersion and NetworkFeatures to match",
		e.ServerNetworkVersion, e.ServerNetworkFeatures)
}

// DisconnectedError is the error a Client reports once its established
// connection ended, and why.
type DisconnectedError struct {
	Reason DisconnectReason
	Remote bool
}

// Is makes a connection that a sealed server closed because the client
// has no connect token match ErrTokenRequired.
func (e *DisconnectedError) Is(target error) bool {
	return target == ErrTokenRequired && e.Reason == ReasonTokenRequired && e.Remote
}

func (e *DisconnectedError) Error() string {
	if e.Reason == ReasonTokenRequired && e.Remote {
		return ErrTokenRequired.Error()
	}
	who := "locally"
	if e.Remote {
		who = "by the peer"
	}
	return fmt.Sprintf("conn: disconnected %s: %v", who, e.Reason)
}
