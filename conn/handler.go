package conn

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/udpgate/udpgate/internal/protocol"
)

// DisconnectReason says why a connection ended. Values 1–4 are the wire's
// Disconnect reasons (docs/protocol.md §7).
type DisconnectReason uint8

const (
	// ReasonClosed: closed by the application on one side.
	ReasonClosed DisconnectReason = DisconnectReason(protocol.DisconnectClosed)
	// ReasonShutdown: the server is shutting down.
	ReasonShutdown DisconnectReason = DisconnectReason(protocol.DisconnectShutdown)
	// ReasonTimedOut: no valid packet for the timeout.
	ReasonTimedOut DisconnectReason = DisconnectReason(protocol.DisconnectTimedOut)
	// ReasonReplaced: the client restarted (new ClientID from the same
	// address) and its new connection replaced this one.
	ReasonReplaced DisconnectReason = DisconnectReason(protocol.DisconnectReplaced)

	// Sealed mode: why a server refused a client's connect token
	// (docs/protocol.md §11.3). A refused connection was never announced
	// to the server's Handler; a client's Dial fails with the matching
	// ErrToken* error.

	// ReasonTokenExpired: the token is past its expire time.
	ReasonTokenExpired DisconnectReason = DisconnectReason(protocol.DisconnectTokenExpired)
	// ReasonTokenInvalid: the token does not open under the server's key
	// and protocol id.
	ReasonTokenInvalid DisconnectReason = DisconnectReason(protocol.DisconnectTokenInvalid)
	// ReasonForeignServer: the token does not list this server.
	ReasonForeignServer DisconnectReason = DisconnectReason(protocol.DisconnectForeignServer)
	// ReasonTokenInUse: the token is in use from another address.
	ReasonTokenInUse DisconnectReason = DisconnectReason(protocol.DisconnectTokenInUse)
	// ReasonServerFull: the server holds MaxClients connections.
	ReasonServerFull DisconnectReason = DisconnectReason(protocol.DisconnectServerFull)

	// ReasonStalled: a reliable message stayed unacknowledged for
	// Config.Messages.StallTimeout; the peer stopped acknowledging.
	ReasonStalled DisconnectReason = DisconnectReason(protocol.DisconnectStalled)
	// ReasonTokenRequired: the server is sealed and the client connected
	// without a connect token (docs/protocol.md §11.3); the client's Err
	// then matches ErrTokenRequired.
	ReasonTokenRequired DisconnectReason = DisconnectReason(protocol.DisconnectTokenRequired)
	// ReasonAddressLimit: a proven token, refused because the server
	// holds MaxClientsPerIP or MaxClientsPerPrefix connections from the
	// client's address or network; a client's Dial fails with a
	// *DeniedError of reason protocol.DeniedAddressLimit, as after the
	// handshake's Denied(3).
	ReasonAddressLimit DisconnectReason = DisconnectReason(protocol.DisconnectAddressLimit)
	// ReasonRefused: a proven token, refused by the server's
	// Config.Accept; a client's Dial fails with a *DeniedError of reason
	// protocol.DeniedRefused, as after the handshake's Denied(2).
	ReasonRefused DisconnectReason = DisconnectReason(protocol.DisconnectRefused)
)

// NumDisconnectReasons bounds DisconnectReason values (Stats.Disconnects is
// indexed by reason).
const NumDisconnectReasons = 14

// Label is the reason as a metric label: snake_case, stable.
func (r DisconnectReason) Label() string {
	switch r {
	case ReasonClosed:
		return "closed"
	case ReasonShutdown:
		return "shutdown"
	case ReasonTimedOut:
		return "timed_out"
	case ReasonReplaced:
		return "replaced"
	case ReasonTokenExpired:
		return "token_expired"
	case ReasonTokenInvalid:
		return "token_invalid"
	case ReasonForeignServer:
		return "foreign_server"
	case ReasonTokenInUse:
		return "token_in_use"
	case ReasonServerFull:
		return "server_full"
	case ReasonStalled:
		return "stalled"
	case ReasonTokenRequired:
		return "token_required"
	case ReasonAddressLimit:
		return "address_limit"
	case ReasonRefused:
		return "refused"
	}
	return "reason_" + strconv.Itoa(int(r))
}

func (r DisconnectReason) String() string {
	switch r {
	case ReasonClosed:
		return "closed"
	case ReasonShutdown:
		return "server shutdown"
	case ReasonTimedOut:
		return "timed out"
	case ReasonReplaced:
		return "replaced"
	case ReasonTokenExpired:
		return "token expired"
	case ReasonTokenInvalid:
		return "token invalid (wrong key or protocol id)"
	case ReasonForeignServer:
		return "this server is not in the token"
	case ReasonTokenInUse:
		return "token already in use from another address"
	case ReasonServerFull:
		return "server full"
	case ReasonStalled:
		return "stalled: the peer stopped acknowledging messages"
	case ReasonTokenRequired:
		return "token required: the server is in sealed mode and needs a connect token"
	case ReasonAddressLimit:
		return "too many connections from this address or network"
	case ReasonRefused:
		return "refused by the server's application"
	}
	return fmt.Sprintf("reason %d", uint8(r))
}

// Handler receives connection events. Methods are called from the server's
// goroutines (receive loops, promotion workers, housekeeping) and from
// whichever goroutine calls Close, so they must be safe for concurrent use.
// They must not block: a slow OnPacket stalls every connection on its
// socket.
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
// NetworkVersion or NetworkFeatures.
type VersionError struct {
	ServerNetworkVersion  uint32
	ServerNetworkFeatures uint16
}

func (e *VersionError) Error() string {
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
