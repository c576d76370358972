package message

import (
	"errors"
	"fmt"
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
	// Bulk marks a channel whose messages may wait for the game's: every
	// packet carries the entries of the other channels first, and a bulk
	// channel's new units go only while the congestion window has room,
	// so a level download fills the path without delaying the game's
	// messages (docs/protocol.md §14.4). Both sides need not agree on it.
	Bulk bool
}

// Config configures the message layer of every connection of one side.
// The zero value (no channels) turns messages off.
type Config struct {
	// Channels, at most MaxChannels; channel i is Channels[i].
	Channels []ChannelConfig
	// MaxMessageSize: the largest reliable message (0: DefaultMaxMessageSize,
	// at most MaxMessageSizeLimit).
	MaxMessageSize int
	// SendRate: the most bytes of message entries per second one
	// connection sends, resends and fragments included (0:
	// DefaultSendRate): a ceiling an operator sets for a host's NIC or
	// bill. Below it each connection's congestion controller paces at
	// the rate its path carries (PathStats).
	SendRate int
	// AckDelay: a side that received reliable messages and has sent no
	// packet for this long sends an ack-only packet (0: DefaultAckDelay).
	AckDelay time.Duration
	// ResendFactor and MinResend: an unacknowledged reliable message is
	// sent again once max(MinResend, ResendFactor × the retransmission
	// timeout) has passed since it was last sent; the timeout is the
	// smoothed RTT + 2 × its deviation, and a message's later resends back
	// off. Below 1, copies go before an ack could be back, riding only on
	// packets that leave anyway, and only while the path loses packets
	// (at least 0.1 % of the last ~64 found lost; a new path counts as
	// lossy): lower latency under loss for more bytes (0:
	// DefaultResendFactor, DefaultMinResend; tuning.md, "Messages").
	ResendFactor float64
	MinResend    time.Duration
	// StallTimeout: a reliable message unacknowledged this long ends the
	// connection (Endpoint.Stalled), though the peer acknowledges other
	// packets (0: DefaultStallTimeout).
	StallTimeout time.Duration
	// StallSilence and StallRTTs: a peer that acknowledges no packet
	// while reliable messages are in flight is ended as stalled after
	// max(StallSilence, StallRTTs × its smoothed round trip), counted
	// from its last ack or the oldest message's first send, whichever is
	// later (0: DefaultStallSilence, DefaultStallRTTs). Meanwhile the
	// endpoint sends it one packet per retransmission timeout, doubled
	// each time. A player on a lossy path acknowledges something every
	// round trip or so and is not ended by it.
	StallSilence time.Duration
	StallRTTs    int
	// ReceiveBudget bounds the bytes all endpoints of one Layer hold for
	// out-of-order and partly reassembled messages (0:
	// DefaultReceiveBudget); ConnReceiveBudget bounds one endpoint's (0:
	// derived from MaxMessageSize and the window).
	ReceiveBudget     int64
	ConnReceiveBudget int
	// SendBudget bounds the bytes all endpoints of one Layer hold for
	// sending: queued messages and reliable ones unacknowledged (0:
	// DefaultSendBudget), counted in grants of eight packets' storage.
	// Every endpoint may hold one grant whatever the budget (the floor:
	// so at most SendBudget + one grant per connection); beyond it, while
	// more than half of the budget is in use, no endpoint holds more than
	// its share, SendBudget divided by the endpoints holding some. Send
	// beyond the budget or the share returns ErrSendShare (which is
	// ErrQueueFull).
	SendBudget int64
}

// Errors returned by Send, and by NewLayer for configuration faults.
var (
	ErrNoChannel   = errors.New("message: no such channel (configure it in Config.Messages.Channels, equal on both sides)")
	ErrMessageSize = errors.New("message: message too large for its channel (reliable: Config.MaxMessageSize; unreliable and sequenced: one packet, see MaxSize)")
	// ErrUndelivered: a connection was closed with reliable messages
	// unacknowledged (conn's Close, after its linger).
	ErrUndelivered = errors.New("message: closed with reliable messages unacknowledged (raise conn.Config.Linger, or wait for OnSendable or Stats.Queued before closing)")
	ErrQueueFull   = errors.New("message: channel send queue full (the peer is not keeping up or the send rate is too low: retry later, or raise ChannelConfig.MaxQueued or Config.SendRate)")
	// ErrSendShare is ErrQueueFull (errors.Is) for a connection that holds
	// its share of the server-wide send budget, or whose Send would pass
	// the budget.
	ErrSendShare = fmt.Errorf("%w: this connection holds its share of the server-wide send budget, which others contend for (retry later, or raise Config.SendBudget)", ErrQueueFull)
)

// DropReason says why a received message entry or packet was dropped.
type DropReason uint8

// PathStats is what an endpoint's congestion controller knows of the
// path (docs/protocol.md §14.4). Before the first reliable packet it
// holds the RTT and the pacing rate (the ceiling, SendRate) only.
type PathStats struct {
	RTT        time.Duration // smoothed round trip
	BaseRTT    time.Duration // the path's round trip without queue (the smallest of the last minute or so)
	QueueDelay time.Duration // what this connection's packets wait in the bottleneck's queue now
	Window     int           // bytes the sender may have in flight (the congestion window)
	InFlight   int           // bytes of reliable packets sent and not yet acknowledged or lost
	PacingRate int64         // bytes per second packets leave at
	// DeliveryRate is the bytes per second acknowledged over the last
	// round trip (at least 50 ms): the path's rate while the window is
	// full, what the application sends otherwise.
	DeliveryRate int64
	SlowStart    bool
	// Competing: another flow fills the bottleneck's queue (a loss-based
	// TCP or QUIC transfer); the controller competes by loss until it
	// leaves, and the game's messages wait in that queue meanwhile.
	Competing        bool
	CongestionEvents uint64 // window cuts for loss
}

// Stats are an endpoint's message counters, its send queues and what it
// knows of the path.
type Stats struct {
	Sent      uint64 // messages accepted by Send
	Delivered uint64 // messages returned by Next
	Acked     uint64 // reliable messages acknowledged by the peer
	// Resent counts reliable entries sent again because they were lost
	// or late: their packet reported lost, a later packet acknowledged
	// first (fast repair), or the retransmission timeout passed. 0 on a
	// path that loses and delays nothing.
	Resent uint64
	// Copies counts speculative copies: reliable entries sent again
	// before any sign of loss, riding on packets that leave anyway once
	// ResendFactor × the timeout has passed (Config.ResendFactor), so
	// that a loss costs less than a round trip. They are bytes spent, not
	// repairs: a loss-free path has them too, for its first ~150 packets
	// (until it shows that it loses nothing: Config.ResendFactor).
	Copies uint64
	// QueueFull counts the unreliable and sequenced messages that arrived
	// while the receiver's poll queue was full, dropped (DropQueueFull;
	// conn's Config.ReceiveQueue); 0 again after Release.
	QueueFull uint64
	// InFlight: reliable messages queued or unacknowledged; after
	// Release (a connection that ended), those it discarded so, which
	// may not have arrived.
	InFlight int
	// Queued is the storage each channel holds for sending: messages
	// queued, and reliable ones not yet acknowledged (what
	// ChannelConfig.MaxQueued bounds). A bulk sender keeps its channel's
	// below MaxQueued, or waits to be told it drained
	// (Endpoint.TakeSendable, conn's OnSendable), so that Send does not
	// return ErrQueueFull.
	Queued [MaxChannels]int
	// Path is what the congestion controller knows of the path.
	Path PathStats
}

// counters are the Stats an endpoint keeps; Stats adds the rest.
type counters struct {
	Sent, Delivered, Acked, Resent, Copies uint64
}
