// Package shard holds the server's connection maps: AddrMap, a concurrent
// map from netip.AddrPort to *T, and Map, which indexes the same entries by
// address and by a 20-byte cookie and keeps the two indexes consistent under
// insertion, migration (Move) and deletion. It knows nothing of the protocol:
// a cookie is 20 opaque bytes.
//
// # Design
//
// Sharding. Each map is split into a power of two shards (DefaultShards), and
// each shard has its own writer lock, sequence number and table, alone on a
// cache line. A key's shard and its place in the shard's table come from one
// XXH64 (github.com/cespare/xxhash/v2's algorithm, written out for these key
// lengths and tested against the library) of As16 ‖ port, keyed with a
// secret seed per map, so no one outside the process can aim keys at one
// shard or one probe sequence, and a key is hashed once per operation.
// HashAddr gives the address hash to other fixed tables keyed by address.
//
// Tables. Each shard is a Swiss table (groups of 8 slots, a control word of
// 7-bit hash tags per group, SWAR matching) whose control words are kept in
// an array apart from the 32-byte slots, so that they stay cached long after
// the slots do: a miss usually costs one cached load, and a hit that one
// plus the slot. Deletion leaves a tombstone only in a full group; a table
// that runs out of never-used slots is rebuilt, doubling when live entries
// fill 7/16 of it. Tables never shrink. Entries never move within a table,
// which keeps sweeps simple.
//
// Lock-free lookups. Get and GetByCookie take no lock and write no shared
// memory. A lookup reads the shard's sequence number, probes, and accepts the
// result only if the sequence number was even and has not changed (a
// seqlock); writers hold the shard's mutex and make the sequence number odd
// while they change the table. Every word a reader loads is loaded
// atomically, so this is correct under the Go memory model and clean under
// the race detector, and a reader overlapping a write may read stale words
// but never leaves the table's memory. For that, values are pointers (*T): a
// reader must load a value in one atomic operation, which an arbitrary V
// cannot be. Lookups do not wait for sweeps or rebuilds, and under parallel
// load no cache line bounces between cores for a read. A lookup that
// overlaps a write section spins briefly; if the section outlasts the spin
// (its writer was descheduled in it), the lookup waits on the shard's mutex,
// which parks it and leaves its core to the writer.
//
// Two indexes. A Map entry is in both indexes, and each index's slot carries
// the entry's key in the other, so either finds its twin without a search.
// Values are stored in both, so GetByCookie needs one shard only. A mutation
// locks every shard it changes (address shards before cookie shards, and by
// index within each kind: one global order, hence no deadlock) and keeps all
// of them in a write section from its first change to its last; a reader
// validates its one shard. Every operation is therefore linearizable, and no
// Get or GetByCookie can observe one index with an entry or a value the other
// lacks. Move starts from the cookie, whose shard comes last in the lock
// order: it reads the cookie's address without locking, locks in order, and
// retries if the entry moved meanwhile.
//
// Sweeps. RangeShard visits one shard with its writer lock held, so periodic
// work (keepalives, timeouts, expiry) never holds up the whole map, nor any
// lookup. The callback decides each entry's fate by returning an Action
// (Keep, Remove, Stop, Remove|Stop), which deletes without allocating or
// collecting keys; it must not call the map's writing methods.
//
// # Performance
//
// The benchmarks in bench_test.go (BenchmarkGet, BenchmarkGetParallel,
// BenchmarkShardRead, BenchmarkHash and the write benchmarks) compare the
// maps with Go maps and other guards; their figures are in tuning.md,
// "shard: lookup and write costs".
package shard
