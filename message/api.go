package message

// API CONTRACT (fixed by the coordinator; the implementation fills it in).
// Other packages (conn, internal/loadgen, bench) are written against these
// exact names and signatures. Times are Unix nanoseconds (int64) from the
// caller's clock: the package never reads a clock and does no I/O.

import (
	"errors"
	"time"
)

// Kind is a channel's delivery mode.
type Kind uint8

const (
	// ReliableOrdered: every message is delivered exactly once, in the
	// order sent on its channel; messages up to Config.MaxMessageSize are
	// fragmented and reassembled.
	ReliableOrdered Kind = iota
	// Unreliable: each message is sent once and delivered at most once, in
	// arrival order; at most one packet's payload (Endpoint.MaxSize).
	Unreliable
	// Sequenced: unreliable, latest wins: a message older than the newest
	// one delivered on its channel is dropped.
	Sequenced
)

// ChannelConfig configures one channel. Both sides must configure the
// same channels in the same order.
type ChannelConfig struct {
	Kind Kind
	// MaxQueued bounds the bytes of this channel's messages held for
	// sending (queued plus unacknowledged); Send beyond it returns
	// ErrQueueFull. 0: DefaultMaxQueued (at least MaxMessageSize).
	MaxQueued int
}

// Config configures the message layer of every connection of one side.
// The zero value (no channels) turns messages off.
type Config struct {
	// Channels, at most MaxChannels; channel i is Channels[i].
	Channels []ChannelConfig
	// MaxMessageSize: the largest reliable message (0: DefaultMaxMessageSize,
	// at most MaxMessageSizeLimit).
	MaxMessageSize int
	// SendRate: bytes of message entries per second one connection may
	// send, resends and fragments included (0: DefaultSendRate).
	SendRate int
	// AckDelay: a side that received reliable messages and has sent no
	// packet for this long sends an ack-only packet (0: DefaultAckDelay).
	AckDelay time.Duration
	// ResendFactor and MinResend: an unacknowledged reliable message is
	// sent again once max(MinResend, ResendFactor × RTT) has passed since
	// it was last sent (0: DefaultResendFactor, DefaultMinResend).
	ResendFactor float64
	MinResend    time.Duration
	// StallTimeout: a reliable message unacknowledged this long ends the
	// connection (Endpoint.Stalled) (0: DefaultStallTimeout).
	StallTimeout time.Duration
	// ReceiveBudget bounds the bytes all endpoints of one Layer hold for
	// out-of-order and partly reassembled messages (0:
	// DefaultReceiveBudget); ConnReceiveBudget bounds one endpoint's (0:
	// derived from MaxMessageSize and the window).
	ReceiveBudget     int64
	ConnReceiveBudget int
}

// Errors returned by Send, and by NewLayer for configuration faults.
var (
	ErrNoChannel   = errors.New("message: no such channel (configure it in Config.Messages.Channels, equal on both sides)")
	ErrMessageSize = errors.New("message: message too large for its channel (reliable: Config.MaxMessageSize; unreliable and sequenced: one packet, see MaxSize)")
	ErrQueueFull   = errors.New("message: channel send queue full (the peer is not keeping up or the send rate is too low: retry later, or raise ChannelConfig.MaxQueued or Config.SendRate)")
)

// DropReason says why a received message entry or packet was dropped.
type DropReason uint8

// Stats are an endpoint's message counters.
type Stats struct {
	Sent      uint64 // messages accepted by Send
	Delivered uint64 // messages returned by Next
	Acked     uint64 // reliable messages acknowledged by the peer
	Resent    uint64 // entries sent again
	InFlight  int    // reliable messages queued or unacknowledged
}

// Layer is the shared, validated configuration and budgets of one side
// (a server's or a client's): create it once, then one Endpoint per
// connection. Safe for concurrent use.
//
//	func NewLayer(cfg Config, maxPayload int) (*Layer, error)
//	    maxPayload: bytes available for one packet's message entries.
//	func (l *Layer) NewEndpoint() *Endpoint
//	func (l *Layer) Drops() [NumDropReasons]uint64
//	func (l *Layer) Held() int64   // bytes held for reassembly, all endpoints
//	func (l *Layer) Enabled() bool // at least one channel
//
// Endpoint is one connection's message state. Not safe for concurrent
// use: the caller serialises (conn holds the connection's mutex).
//
// Sending:
//
//	func (e *Endpoint) Send(ch int, msg []byte, now int64) error
//	    copies msg; ErrNoChannel, ErrMessageSize, ErrQueueFull.
//	func (e *Endpoint) MaxSize(ch int) int
//	    the largest message channel ch accepts.
//	func (e *Endpoint) SetRTT(rtt time.Duration)
//	func (e *Endpoint) WantsSend(now int64) bool
//	    WritePayload would write something now (new or due entries, budget allowing).
//	func (e *Endpoint) WritePayload(dst []byte, seq uint16, now int64) int
//	    packs due entries into dst (a Messages packet's payload) for the
//	    packet numbered seq; 0 when nothing is due.
//	func (e *Endpoint) PacketSent(now int64)
//	    any packet went to the peer (it carries acks): clears a due ack.
//	func (e *Endpoint) AckDue(now int64) bool
//	    an ack-only packet should go now.
//	func (e *Endpoint) Acked(seq uint16, now int64)
//	func (e *Endpoint) Lost(seq uint16, now int64)
//	    the packet layer's reports (fastpath.AckReport, eviction).
//	func (e *Endpoint) Deadline() int64
//	    Unix ns of the next timer event (resend, ack, stall), 0 when idle.
//	func (e *Endpoint) Stalled(now int64) bool
//	func (e *Endpoint) Stats() Stats
//
// Receiving:
//
//	func (e *Endpoint) Check(payload []byte) DropReason
//	    before the packet layer accepts the packet: well-formed and within budgets.
//	func (e *Endpoint) Receive(payload []byte, now int64)
//	    after it accepted it.
//	func (e *Endpoint) Next() (ch int, msg []byte, ok bool)
//	    the next deliverable message; msg is valid until the next call of
//	    Next or Receive.
//	func (e *Endpoint) Release()
//	    frees every buffer (the connection closed).
