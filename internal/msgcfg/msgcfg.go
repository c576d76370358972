// Package msgcfg is the message channel layout of udpgate's own tools: the
// server (cmd/server), the test client (cmd/client) and the load
// generator (internal/traffic/loadgen) all configure these channels, in this
// order, so that any of them can talk messages to any other. Both sides of
// a connection must configure the same channels (message.Config), so the
// layout lives in one place.
//
// It is a package of its own directly under internal/ rather than part of
// internal/traffic/loadgen or under cmd/internal: cmd/internal is not
// importable by internal/traffic/loadgen (which bench/ uses too), and the
// server should not depend on the load generator to learn three channel
// kinds.
package msgcfg

import "github.com/udpgate/udpgate/message"

// The channels, by number.
const (
	// Reliable is channel 0: reliable-ordered (every message exactly once,
	// in order; up to the configured largest message, fragmented).
	Reliable = 0
	// Unreliable is channel 1: at most once, in arrival order, one packet.
	Unreliable = 1
	// Sequenced is channel 2: unreliable, and a message older than the
	// newest delivered is dropped.
	Sequenced = 2
	// Bulk is channel 3: reliable-ordered and declared bulk
	// (message.ChannelConfig.Bulk): its messages yield to the other
	// channels' in every packet and wait for the congestion window.
	Bulk = 3
	// NumChannels is how many channels the layout has.
	NumChannels = 4
)

// Channels returns the layout's channels (a new slice each call).
func Channels() []message.ChannelConfig {
	return []message.ChannelConfig{
		Reliable:   {Kind: message.ReliableOrdered},
		Unreliable: {Kind: message.Unreliable},
		Sequenced:  {Kind: message.Sequenced},
		Bulk:       {Kind: message.ReliableOrdered, Bulk: true},
	}
}

// Config returns the layout as a message.Config with the largest reliable
// message maxSize and the send rate sendRate in bytes per second (0 for
// either: the message package's default).
func Config(maxSize, sendRate int) message.Config {
	return message.Config{Channels: Channels(), MaxMessageSize: maxSize, SendRate: sendRate}
}

// ChannelName names a channel of the layout for messages and reports.
func ChannelName(ch int) string {
	switch ch {
	case Reliable:
		return "reliable"
	case Unreliable:
		return "unreliable"
	case Sequenced:
		return "sequenced"
	case Bulk:
		return "bulk"
	}
	return "unknown"
}
