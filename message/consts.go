package message

import "time"

// Limits and defaults (docs/protocol.md §14).
const (
	// MaxChannels is the most channels a Config may declare (5-bit index).
	MaxChannels = 32
	// DefaultMaxMessageSize is Config.MaxMessageSize's default.
	DefaultMaxMessageSize = 256 << 10
	// MaxMessageSizeLimit is the largest Config.MaxMessageSize.
	MaxMessageSizeLimit = 8 << 20
	// DefaultSendRate is Config.SendRate's default, bytes per second: the
	// ceiling of one connection's pacing rate (256 Mbit/s), above what a
	// player's path carries; the congestion controller finds the rate
	// below it.
	DefaultSendRate = 32 << 20
	// DefaultAckDelay is Config.AckDelay's default.
	DefaultAckDelay = 5 * time.Millisecond
	// DefaultResendFactor is Config.ResendFactor's default: copies of an
	// unacknowledged message ride on the packets that leave from 0.4 of
	// its retransmission timeout on, while the path loses packets
	// (tuning.md, "Messages").
	DefaultResendFactor = 0.4
	// DefaultMinResend is Config.MinResend's default.
	DefaultMinResend = 10 * time.Millisecond
	// DefaultStallTimeout is Config.StallTimeout's default: the bound of
	// one reliable message unacknowledged while the peer acknowledges
	// others.
	DefaultStallTimeout = 10 * time.Second
	// DefaultStallSilence and DefaultStallRTTs are Config.StallSilence's
	// and Config.StallRTTs's defaults: a peer that acknowledges nothing
	// while reliable messages are in flight is ended after max(2 s, 20
	// round trips) (docs/threat-model.md, "Receivers that never
	// acknowledge"). A client whose NAT rebinds is silent for the 1.5 s
	// restart silence of docs/protocol.md §6.4, then restarts at once (it
	// keeps the RestartHandshake that came during the silence) and moves
	// in two round trips.
	DefaultStallSilence = 2 * time.Second
	DefaultStallRTTs    = 20
	// DefaultReceiveBudget is Config.ReceiveBudget's default.
	DefaultReceiveBudget = 256 << 20
	// DefaultSendBudget is Config.SendBudget's default: as much as the
	// receive side's, 512 connections each with a full default queue.
	DefaultSendBudget = 256 << 20
	// DefaultMaxQueued is ChannelConfig.MaxQueued's default with the
	// default MaxMessageSize; in general it is 2 × max(MaxMessageSize,
	// 64 KiB), and never less than one largest message.
	DefaultMaxQueued = 2 * DefaultMaxMessageSize
)

// Window is the reliable receive window in units, a protocol constant
// (docs/protocol.md §14.3; a fragment is one unit): a receiver takes ids
// from the oldest it has not delivered (or taken into a reassembly) up to
// Window − 1 past it, and a sender never sends a unit id ≥ its oldest
// unacknowledged id + Window.
const Window = window

const (
	window        = 1024
	minQueuedBase = 64 << 10
	// minMaxPayload, maxMaxPayload bound NewLayer's maxPayload: a fragment
	// (maxPayload − 9) must hold at least 16 bytes and a 2-byte length.
	minMaxPayload = 25
	maxMaxPayload = maxLen + fragHeader
	// maxLivePackets: new reliable units wait while this many packets
	// carrying units are unreported; resends are not held back. Above
	// the 128 packets the packet layer tracks (seqwin.SeqRingSize): a
	// packet it stops tracking is Evicted, and its fate read from the
	// ack fields directly (Acks). Below the 1024-unit window: about
	// 1.1 MB in flight, 180 Mbit/s at a 50 ms round trip (docs/decisions.md,
	// "A 1024-unit window").
	maxLivePackets = 960
	// ackWindow is how far back a packet's ack fields reach (§7.4):
	// Ack, and AckBits for the 64 before it.
	ackWindow = 64
	// seqModulus is the packet sequence numbers' modulus (§7).
	seqModulus = 1 << 14
	// maxRecords bounds the packet records awaiting Acked or Lost.
	maxRecords = 1024
	// ackEvery: a side that received this many packets with reliable
	// units since its last packet acknowledges at once, not after
	// AckDelay.
	ackEvery = 4
	// packetThreshold: a packet with reliable units is taken as lost
	// once a packet sent this many sequence numbers after it is
	// acknowledged first (QUIC's kPacketThreshold), or more on a path
	// seen to reorder (records.lossThreshold; Endpoint.Acked).
	packetThreshold = 3
	// maxTimeouts bounds the doublings of the retransmission timeout
	// while a peer acknowledges nothing (64 × the first; an eighth of
	// the stall bound caps it sooner: Endpoint.timeoutInterval).
	maxTimeouts = 6
	// slackShare: ReceiveBudget / slackShare is the pool's slack, which
	// only in-order messages on their way to Next take (admit).
	slackShare = 64
	// maxBackoff bounds the doublings of one unit's resend interval
	// (16 × the first).
	maxBackoff = 4
)
