// Package handshake holds the stateless handshake's decisions
// (docs/protocol.md §3–§6, §11.3): the server's per-datagram Decision
// (Server.Handle: reply, promote, migrate, pass a connection packet on,
// or drop), the server's hot-path request decoder and reply writer, and
// the client's handshake state machine (ClientHandshake). It builds on
// wire, ratelimit and cookie, does no I/O, starts no goroutine and never
// reads the clock: time comes in as Unix seconds (float64), so every rule
// is table-tested without sleeping.
package handshake
