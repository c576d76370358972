// Package wire is the protocol's codec (docs/protocol.md §1–§3, §7, §11):
// the LSB-first bit writer and reader, the magic header, the packet prefix,
// handshake and connection packet encode and decode, the sealed packet
// framing, and the RandomData generator. It is pure: bytes in, bytes or a
// protocol.DropReason out, with no I/O, no clock and no allocation.
//
// Its tests check every packet against the byte-exact vectors of
// fastpath/testdata/vectors.json; package wiretest shares those vectors
// with the tests of the packages built on wire.
package wire
