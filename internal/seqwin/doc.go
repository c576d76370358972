// Package seqwin is one side's sequence and ack window of a connection
// (docs/protocol.md §8): numbering sent packets, checking a received
// packet's Seq, Ack and AckBits against the window, reporting which of our
// packets were delivered or lost, and the round-trip time. The server's
// connections and the client use it alike; it does no I/O and reads no
// clock.
package seqwin
