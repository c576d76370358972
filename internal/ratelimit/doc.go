// Package ratelimit holds the token buckets that bound the server's
// replies to unproven sources (docs/protocol.md §5): per-source, per-IP
// and per-network tables of GCRA buckets (Limiter), a single Bucket, and a
// lock-free SharedBucket that several receive loops spend from. Time comes
// in as Unix seconds; nothing reads the clock or allocates per packet.
//
// Flow is the budget of packets and bytes per second of a proven
// connection's inbound packets: the same algorithm in integer nanoseconds,
// its rule shared and each connection's state two words (FlowState).
package ratelimit
