// Package flood is a hostile-traffic engine for testing a udpgate server's
// defences: it sends a bounded mix of valid Initials, forged and replayed
// Responses, garbage, truncated and oversize datagrams and connection
// packets from unknown addresses, from hundreds of source sockets, and
// counts everything the server sends back to each source.
//
// Its job is to make the server's promises measurable from outside: an
// unproven source never receives more bytes than it sent (no amplification),
// replies to it are rate-limited, and no amount of such traffic creates a
// connection. Report gives the per-source byte counts and ratios that check
// the first two; the server's own Stats check the third.
//
// The engine is used by `go run ./cmd/client flood` and by the server's
// flood tests. It only ever targets loopback addresses, and every run is
// bounded in datagrams (Config.Count, at most MaxCount) and in time
// (Config.MaxDuration, at most MaxDurationLimit): it stops by itself.
//
// Sending costs next to nothing per datagram: datagrams are drawn from
// templates built before the run (packets.go) and leave in sendmmsg batches
// of one source each; the send loop allocates nothing. Each source socket
// has its own receiving goroutine, parked in the netpoller, that classifies
// replies with fastpath's decoders.
package flood
