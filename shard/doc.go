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
// load no cache line bounces between cores for a read.
//
// Two indexes. A Map entry is in both indexes, and each index's slot carries
// the entry's key in the other, so either finds its twin without a search.
// Values are stored in both, so GetByCookie needs one shard only. A mutation
// locks every shard it changes (address shards before cookie shards, and by
// index within each kind: one global order, hence no deadlock) and keeps all
// of them in a write section from its first change to its last; a reader
// validates its one shard. Every operation is therefore linearizable, and no
// Get or GetByCookie can observe one index with an entry or a value the other
// lacks. Move and DeleteByCookie start from the cookie, whose shard comes
// last in the lock order: they read the cookie's address without locking,
// lock in order, and retry if the entry moved meanwhile.
//
// Sweeps. RangeShard visits one shard with its writer lock held, so periodic
// work (keepalives, timeouts, expiry) never holds up the whole map, nor any
// lookup. The callback decides each entry's fate by returning an Action
// (Keep, Remove, Stop, Remove|Stop), which deletes without allocating or
// collecting keys; it must not call the map's writing methods.
//
// # Performance
//
// Measured on the machine of docs/limits.md (2 vCPU, Go 1.26, shared with other
// work, hence 8 runs) with
//
//	go test -run '^$' -bench 'Get$|GetParallel|ShardRead' -count 8 ./shard/
//
// Keys and queries are as in docs/limits.md §4, and in BenchmarkGet each query
// depends on the result of the one before, so hits are latencies (misses
// return nil on a predicted branch and overlap, for every map alike).
// Medians, ns per lookup, against an unlocked Go map of the same keys in the
// same run:
//
//	                 AddrMap   Map    map[AddrPort]*T   RWMutex+map
//	hit     1 k       31.3     30.2        23.6            31.8
//	hit   100 k       64.2     65.7        71.1            87.0
//	hit     1 M      311      303         313             329
//	miss    1 k       14.9     14.9         8.4            26.3
//	miss  100 k       29.5     29.2        31.2            63.1
//	miss    1 M       31.5     32.1        68.2           242
//
// From 100 k entries up, lookups cost 0.9–1.0x an unlocked Go map for hits
// and 0.5–0.95x for misses (the control words stay cached where Go's, one
// per cache line of slots, do not). At 1 k entries, where everything is in
// L1/L2 and the difference is instructions, they cost 1.3x (hits) and 1.8x
// (misses): the seeded XXH64 alone is 6.3 ns of a 15 ns miss, where Go's map
// hashes with AES instructions. On both cores at once (BenchmarkGetParallel)
// lookups take 15 / 31 / 133 ns against 115 / 128 / 220 ns for one
// RWMutex-guarded map (1 k / 100 k / 1 M), as fast as an unlocked Go map.
//
// From a full run (-bench . -count 5): BenchmarkShardRead compares guards
// for the same table at 1 k; the seqlock read costs 31 ns serial and 15 ns
// in parallel, a sync.Mutex per shard 33 and 40, a sync.RWMutex read lock 35
// and 26.
// Writes take the locks and do every store atomically: an AddrMap insert
// plus delete costs 125–223 ns, a Map insert plus delete (two indexes, two
// locks each) 0.4–1.1 µs, a Move 0.3–0.8 µs (1 k–100 k entries); a rebuild
// of a 16 k-entry shard takes about 3 ms of that shard's writer lock.
package shard
