// Package message carries messages over a udpgate connection's Kind-3
// Messages packets (docs/protocol.md §14): reliable-ordered channels
// (exactly once, in order, fragmented up to Config.MaxMessageSize),
// unreliable ones, and sequenced (latest wins) ones, several entries per
// packet. Reliability rests on the packet layer's acks (fastpath's
// Seq/Ack/AckBits): each packet's reliable units are remembered and
// acknowledged or made due again when the packet is reported delivered or
// lost.
//
// The package is sans-I/O: it never reads a clock (times are Unix
// nanoseconds passed in), does no I/O and starts no goroutines. A Layer
// holds one side's configuration and budgets; an Endpoint is one
// connection's state.
//
// A connection's order of calls, per packet received: Check (before the
// packet layer accepts the packet; drop it unacknowledged when it fails),
// the packet layer's Acked/Lost reports and SetRTT, Receive, then Next
// until it returns false (or, for a receiver that reads later, only
// NextUnreliable, with Next when it reads: the reliable messages wait in
// the window meanwhile), and NextAcked until it returns false for a
// sender that reports each reliable message's delivery. Per packet sent:
// WritePayload (when WantsSend) and PacketSent for every packet; an
// ack-only packet when AckDue; timers at Deadline; the connection ends
// when Stalled (Unacked, then Release).
package message
