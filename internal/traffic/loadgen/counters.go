package loadgen

import (
	"sync/atomic"
	"unsafe"

	"github.com/udpgate/udpgate/internal/protocol"
)

// Counter indexes, in the order of the Counters fields (counters_test.go
// checks it). Workers count into plain fields and publish the changed ones
// once per loop iteration, so sampling costs the hot path nothing.
const (
	cSent = iota
	cReplies
	cLost
	cLate
	cUnexpected
	cRefused
	cKeepAlivesIn
	cKeepAlivesOut
	cClosed
	cSeqLost
	cHandshakesStarted
	cHandshakes
	cHandshakeFailures
	cHandshakePackets
	cDisconnects
	cDeniedFull
	cDeniedRefused
	cDeniedOther
	cTimedOut
	cWrongVersion
	cTokenRequired
	cWrongLayout
	cResent
	cClosedApp
	cClosedShutdown
	cClosedTimedOut
	cClosedReplaced
	cClosedOther
	cRestartHandshakes
	cRestarts
	cReconnects
	cRestartsFailed
	cRestartsCanceled
	cRestartsDenied
	cProofs
	cRefusedExpired
	cRefusedInvalid
	cRefusedForeign
	cRefusedInUse
	cRefusedFull
	cSealedReplay
	cSealedForged
	cMsgSent
	cMsgDelivered
	cMsgOutOfOrder
	cMsgDuplicated
	cMsgRefused
	cMsgDropped
	cMsgUnexpected
	cMsgPackets
	cMsgAckOnly
	cMsgStalled
	cServerSilent
	cBulkSent
	cBulkDelivered
	cBulkOutOfOrder
	cBulkDuplicated
	cBulkRefused
	cBulkBytes
	nCounters
)

// Counters are cumulative since New, summed over the sockets. Every field
// is a uint64, in the order of the counter indexes.
type Counters struct {
	// Sent: requests sent by Run (Initials, Responses, Data or raw
	// datagrams; KeepAlives are counted apart).
	Sent uint64
	// Replies: answers of the expected kind that matched an outstanding
	// request.
	Replies uint64
	// Lost: requests written off after LossTimeout without an answer.
	Lost uint64
	// Late: answers that came after their request was written off.
	Late uint64
	// Unexpected: datagrams that were not an answer: undecodable, another
	// type, a stale sequence number, from a stranger, or for no client.
	Unexpected uint64
	// Refused: datagrams the kernel would not send (they end up Lost).
	Refused uint64
	// KeepAlivesIn and KeepAlivesOut: KeepAlive packets received from the
	// server and sent by idle clients (ModeData).
	KeepAlivesIn  uint64
	KeepAlivesOut uint64
	// Closed: connections the server ended with a Disconnect; the
	// Closed* fields below split it by reason.
	Closed uint64
	// SeqLost: client packets the server's acks reported lost (the
	// client-to-server direction, from seqwin.SeqState; ModeData).
	SeqLost uint64
	// HandshakesStarted, Handshakes, HandshakeFailures: Connect's clients
	// started, connected, and failed. DeniedFull … WrongVersion split
	// HandshakeFailures by cause.
	HandshakesStarted uint64
	Handshakes        uint64
	HandshakeFailures uint64
	// HandshakePackets: Initials and Responses Connect sent, resends
	// included.
	HandshakePackets uint64
	// Disconnects: Disconnect packets sent.
	Disconnects uint64

	// Why handshakes failed. Denied by the server's reason (docs/protocol.md
	// §3: 1 server full, 2 refused by the application, anything else);
	// TimedOut: no progress within ConnectTimeout, or still handshaking
	// when the phase ended; WrongVersion: the server sent VersionUpgrade;
	// TokenRequired: a sealed server's Ack (docs/protocol.md §11.3), to a
	// run without tokens; WrongLayout: the server sent LayoutMismatch (its
	// message channels or largest message differ, §3.7).
	DeniedFull    uint64
	DeniedRefused uint64
	DeniedOther   uint64
	TimedOut      uint64
	WrongVersion  uint64
	TokenRequired uint64
	WrongLayout   uint64
	// Resent: clients that connected only after resending an Initial or a
	// Response (a request or its answer was lost, or came after the 1 s
	// resend interval).
	Resent uint64

	// Connections the server closed, by the Disconnect's reason (docs/protocol.md
	// §7: 1 closed by the application, 2 shutdown, 3 timed out, 4
	// replaced; ClosedOther: any other reason byte, or none).
	ClosedApp      uint64
	ClosedShutdown uint64
	ClosedTimedOut uint64
	ClosedReplaced uint64
	ClosedOther    uint64

	// Restarts (docs/protocol.md §6, "Restart"; ModeData), as
	// handshake.ClientHandshake rules them: RestartHandshakes received by
	// connected clients; Restarts honoured (a restart Initial went out:
	// only after the server has been silent for RestartSilence, and at
	// most once per 1.1 s); Reconnects: restarts the server completed
	// with an Ack (the connection goes on, sequences unchanged);
	// RestartsCanceled: restarts dropped because a valid packet from the
	// server arrived meanwhile (the connection goes on); RestartsFailed:
	// restarts that timed out, and RestartsDenied: restarts the server
	// refused (Denied: it does not know the connection). Both lose the
	// connection, and the client stops.
	RestartHandshakes uint64
	Restarts          uint64
	Reconnects        uint64
	RestartsFailed    uint64
	RestartsCanceled  uint64
	RestartsDenied    uint64

	// Sealed mode (docs/protocol.md §11). Proofs: proof packets sent,
	// resends included (also in HandshakePackets).
	Proofs uint64
	// Tokens the server refused while the client proved it, by the
	// refusal's Disconnect reason: 5 token expired, 6 token invalid (wrong
	// key or protocol id), 7 this server is not in the token, 8 token in
	// use from another address, 9 server full. Each is also a handshake
	// failure.
	RefusedExpired uint64
	RefusedInvalid uint64
	RefusedForeign uint64
	RefusedInUse   uint64
	RefusedFull    uint64
	// Sealed packets from the server that did not open: SealedReplay, a
	// counter seen already or older than the replay window; SealedForged,
	// one that does not authenticate under the connection's key.
	SealedReplay uint64
	SealedForged uint64

	// Messages (Config.Messages). MessagesSent: messages the clients'
	// endpoints accepted (message.Endpoint.Send); MessagesDelivered: their
	// echoes that came back, each message once; MessagesOutOfOrder: echoes
	// that came after a later one (on the reliable-ordered channel also a
	// gap: an echo ahead of the next expected), MessagesDuplicated: echoes
	// of a message that had come back already. MessagesRefused: sends the
	// endpoint refused (its queue full: the server or the send rate does
	// not keep up); MessagesDropped: Messages packets the endpoint's Check
	// refused; MessagesUnexpected: messages that were no echo of ours
	// (another channel, too short, a number never sent).
	MessagesSent       uint64
	MessagesDelivered  uint64
	MessagesOutOfOrder uint64
	MessagesDuplicated uint64
	MessagesRefused    uint64
	MessagesDropped    uint64
	MessagesUnexpected uint64
	// MessagePackets: Messages packets sent (resends included);
	// MessageAcks: KeepAlives sent only to acknowledge messages.
	MessagePackets uint64
	MessageAcks    uint64
	// MessagesStalled: clients ended because a reliable message stayed
	// unacknowledged for the stall bound (message.Endpoint.Stalled).
	MessagesStalled uint64

	// ServerSilent: connected clients that accepted no packet from the
	// server for the connection timeout (docs/protocol.md §7.5: 5 s, or a
	// sealed token's timeout) while Run sent, and ended as a client of
	// the protocol does: a server gone without a Disconnect, or whose
	// Disconnects were all lost (ModeData).
	ServerSilent uint64

	// Bulk messages (Config.BulkSize), counted as the Messages* fields
	// count the others: BulkSent, accepted by the endpoints; BulkDelivered,
	// echoes back, each message once; BulkOutOfOrder and BulkDuplicated
	// (the bulk channel is reliable-ordered: either is a fault);
	// BulkRefused, bulk messages skipped because the bulk channel's queue
	// was full (message.ErrQueueFull); BulkBytes, the payload bytes of
	// the echoes delivered. Packets, drops, unexpected messages and
	// stalls count in the Message* fields above with the others.
	BulkSent       uint64
	BulkDelivered  uint64
	BulkOutOfOrder uint64
	BulkDuplicated uint64
	BulkRefused    uint64
	BulkBytes      uint64
}

// Counters must be exactly the counter array, field for index.
var (
	_ [unsafe.Sizeof(Counters{}) - nCounters*8]byte
	_ [nCounters*8 - unsafe.Sizeof(Counters{})]byte
)

func (c *Counters) array() *[nCounters]uint64 { return (*[nCounters]uint64)(unsafe.Pointer(c)) }

func countersFrom(a *[nCounters]uint64) Counters {
	var c Counters
	*c.array() = *a
	return c
}

// Sub returns c − o, field by field: the counts between two samples.
func (c Counters) Sub(o Counters) Counters {
	a, b := c.array(), o.array()
	for i := range a {
		a[i] -= b[i]
	}
	return c
}

// Ending is one way clients ended, with its count.
type Ending struct {
	What  string
	Count uint64
}

// Endings lists, in a fixed order, every way clients ended that happened at
// least once: handshakes denied (by reason), timed out or refused for the
// version; connections closed by the server (by reason), lost after a
// failed or refused restart. Empty when every client is still connected (or was
// disconnected by the generator itself).
func (c Counters) Endings() []Ending {
	var out []Ending
	for _, e := range [...]Ending{
		{"handshake denied: server full", c.DeniedFull},
		{"handshake denied: refused by the application", c.DeniedRefused},
		{"handshake denied: other reason", c.DeniedOther},
		{"handshake timed out", c.TimedOut},
		{"handshake refused: wrong version", c.WrongVersion},
		{"handshake ended: the server is sealed and needs a connect token", c.TokenRequired},
		{"handshake refused: the server's message layout differs (-message-max-size, channels)", c.WrongLayout},
		{"token refused: token expired", c.RefusedExpired},
		{"token refused: token invalid (wrong key or protocol id)", c.RefusedInvalid},
		{"token refused: this server is not in the token", c.RefusedForeign},
		{"token refused: token already in use from another address", c.RefusedInUse},
		{"token refused: server full", c.RefusedFull},
		{"closed by the server: application", c.ClosedApp},
		{"closed by the server: shutdown", c.ClosedShutdown},
		{"closed by the server: timed out", c.ClosedTimedOut},
		{"closed by the server: replaced", c.ClosedReplaced},
		{"closed by the server: other reason", c.ClosedOther},
		{"restart timed out (connection lost)", c.RestartsFailed},
		{"restart refused by the server (connection lost)", c.RestartsDenied},
		{"reliable message unacknowledged too long (stalled)", c.MessagesStalled},
		{"timed out: the server was silent for the connection timeout", c.ServerSilent},
	} {
		if e.Count > 0 {
			out = append(out, e)
		}
	}
	return out
}

// Ended is the number of clients that ended other than by the generator's
// own Disconnect: the sum of Endings.
func (c Counters) Ended() uint64 {
	return c.HandshakeFailures + c.Closed + c.RestartsFailed + c.RestartsDenied + c.MessagesStalled + c.ServerSilent
}

// deniedCounter is the counter for a Denied reason.
func deniedCounter(reason uint8) int {
	switch reason {
	case protocol.DeniedServerFull:
		return cDeniedFull
	case protocol.DeniedRefused:
		return cDeniedRefused
	}
	return cDeniedOther
}

// refusedCounter is the counter for a refusal's Disconnect reason, or -1
// when the reason is not a refusal.
func refusedCounter(reason uint8) int {
	switch reason {
	case protocol.DisconnectTokenExpired:
		return cRefusedExpired
	case protocol.DisconnectTokenInvalid:
		return cRefusedInvalid
	case protocol.DisconnectForeignServer:
		return cRefusedForeign
	case protocol.DisconnectTokenInUse:
		return cRefusedInUse
	case protocol.DisconnectServerFull:
		return cRefusedFull
	case protocol.DisconnectRefused:
		// The application's refusal: a Denied(2) before sealed mode.
		return cDeniedRefused
	}
	return -1
}

// closedCounter is the counter for a Disconnect reason.
func closedCounter(reason uint8) int {
	switch reason {
	case protocol.DisconnectClosed:
		return cClosedApp
	case protocol.DisconnectShutdown:
		return cClosedShutdown
	case protocol.DisconnectTimedOut:
		return cClosedTimedOut
	case protocol.DisconnectReplaced:
		return cClosedReplaced
	}
	return cClosedOther
}

// counters is a worker's private counts and their published copy, on cache
// lines of their own so that sampling never contends with the worker.
type counters struct {
	loc  [nCounters]uint64
	done [nCounters]uint64 // values last published
	_    [64]byte
	pub  [nCounters]atomic.Uint64
	_    [64]byte

	// watch is Generator.Await's (watch.go) while one waits.
	watch atomic.Pointer[watch]
}

func (c *counters) publish() {
	changed := false
	for i, v := range c.loc {
		if v != c.done[i] {
			c.pub[i].Store(v)
			c.done[i] = v
			changed = true
		}
	}
	if changed {
		c.watch.Load().fire()
	}
}
