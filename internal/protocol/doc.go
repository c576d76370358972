// Package protocol is the wire protocol's vocabulary (docs/protocol.md), one
// definition each: handshake packet types, connection packet kinds, drop
// reasons, Denied and Disconnect reasons, handshake versions and the wire's
// geometry, and the decoded packet values (Handshake, ConnHeader) that the
// codec fills and the decisions read. It holds no behaviour beyond names
// and sizes, so every other protocol package imports it and it imports
// none of them.
//
// A new packet type, kind, drop reason or reason code is declared here,
// with its metric label in the same table (drop.go, types.go).
package protocol
