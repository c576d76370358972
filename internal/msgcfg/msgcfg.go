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

import (
	"fmt"
	"strings"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/message"
)

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

// Layout is the message layout (docs/protocol.md §3.7) a side with message
// configuration c and largest datagram maxDatagram declares in its Initials
// and, as a server, compares an Initial's with: the zero Layout without
// channels. It lives here, beside the stock layout, because conn and the
// load generator both declare one.
func Layout(c *message.Config, maxDatagram int) protocol.Layout {
	if len(c.Channels) == 0 {
		return protocol.Layout{}
	}
	l := protocol.Layout{Channels: uint8(len(c.Channels)), MaxDatagram: uint16(maxDatagram)}
	reliable := false
	for i, ch := range c.Channels {
		// The wire's codes are the kinds' values plus one: 0 is "no
		// channel".
		l.Kinds |= uint64(ch.Kind+1) << (2 * i)
		reliable = reliable || ch.Kind == message.ReliableOrdered
	}
	if reliable {
		l.MaxMessage = uint32(c.MaxMessageSize)
		if c.MaxMessageSize == 0 {
			l.MaxMessage = message.DefaultMaxMessageSize
		}
	}
	return l
}

// kindNames are the wire's kind codes (docs/protocol.md §3.7) by name.
var kindNames = [4]string{"none", "reliable-ordered", "unreliable", "sequenced"}

// LayoutDiff says, for a user, how layout server differs from layout
// client: the channel count, the first channel of another kind, the
// largest message and the largest datagram, whichever differ.
func LayoutDiff(server, client protocol.Layout) string {
	if server == (protocol.Layout{}) {
		return "the server has no message channels, this client " + describe(client)
	}
	var diffs []string
	sk, ck := kindsOf(server), kindsOf(client)
	if len(sk) != len(ck) {
		diffs = append(diffs, "the server has "+describe(server)+", this client "+describe(client))
	} else {
		for i := range sk {
			if sk[i] != ck[i] {
				diffs = append(diffs, fmt.Sprintf("channel %d is %s on the server, %s on this client", i, sk[i], ck[i]))
				break
			}
		}
	}
	if server.MaxMessage != client.MaxMessage {
		diffs = append(diffs, fmt.Sprintf("MaxMessageSize is %d on the server, %d on this client", server.MaxMessage, client.MaxMessage))
	}
	if server.MaxDatagram != client.MaxDatagram {
		diffs = append(diffs, fmt.Sprintf("MaxDatagram is %d on the server, %d on this client", server.MaxDatagram, client.MaxDatagram))
	}
	return strings.Join(diffs, "; ")
}

// describe names a layout's channels: "3 channels (reliable-ordered,
// unreliable, sequenced)".
func describe(l protocol.Layout) string {
	return fmt.Sprintf("%d channels (%s)", l.Channels, strings.Join(kindsOf(l), ", "))
}

// kindsOf names a layout's channel kinds, in order.
func kindsOf(l protocol.Layout) []string {
	k := make([]string, l.Channels)
	for i := range k {
		k[i] = kindNames[l.Kinds>>(2*i)&3]
	}
	return k
}
