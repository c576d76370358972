// Package netsim is a simulated datagram network, in memory, for tests of
// programs built on udpgate: servers and clients exchange datagrams over it
// as over UDP, through links that lose, duplicate, delay and reorder them
// with seeded randomness.
//
// A Network holds the addresses bound on it. Listen binds a Group of
// endpoints to one address, as SO_REUSEPORT sockets would be (every
// datagram of one source reaches the same endpoint); Bind binds one
// Endpoint, a client's socket. An Endpoint has both the batch methods a
// udpgate server's receive loops use (Recv and Send of a batchio.Batch,
// WriteTo, Class, Stats) and a plain datagram API for clients (ReadFrom,
// WriteTo, SetReadDeadline, Close); PacketConn adapts it to net.PacketConn.
// conn.Config.Network runs conn.Listen and conn.Dial over a Network.
//
// # Links
//
// Every datagram crosses a Link chosen by its path (SetPath, SetLink): a
// set of probabilities (Loss, Duplicate, Reorder) drawn from the rule's
// own random stream, seeded by Link.Seed, and a delay (Latency plus a
// uniform Jitter). A datagram with no delay is queued at its destination
// before the send returns; a delayed one is held by the network and
// delivered by a timer when its time comes.
//
// # Bottlenecks
//
// A Link may name a Bottleneck (NewBottleneck): a rate in bytes per second
// and a drop-tail queue in bytes, as a home router or a mobile uplink has,
// shared by every path whose Link names the same one, so that flows behind
// one uplink compete for its rate and its queue:
//
//	up := netsim.NewBottleneck(125_000, 32<<10) // 1 Mbit/s, 32 KiB queue
//	nw.SetPath(alice, server, netsim.Link{Latency: 20 * time.Millisecond, Bottleneck: up})
//	nw.SetPath(bob, server, netsim.Link{Latency: 30 * time.Millisecond, Bottleneck: up})
//
// A datagram takes its link's loss and duplication draws first; each
// surviving copy then joins the bottleneck's queue, or is dropped if its
// bytes would overflow the queue (Stats.BottleneckDrops, and the
// bottleneck's own BottleneckStats); it leaves the queue at max(its
// arrival, the previous departure) + its size / rate, and its Latency,
// Jitter and reordering count from then. Sizes are payload bytes (no IP or
// UDP header). In a synctest bubble the departures are exact: ten
// 1000-byte datagrams sent at once through 10,000 bytes per second and a
// Latency of 25ms arrive at 125ms, 225ms, ... 1025ms.
//
// # Virtual time
//
// The network keeps no goroutines of its own: delays are timers
// (time.AfterFunc) and a blocked reader waits on a sync.Cond. Inside a
// testing/synctest bubble both are durably blocking and the timers run on
// the bubble's fake clock, so a test over a lossy, slow network runs in
// microseconds and observes exact delays: a datagram sent over a link of
// Latency 25ms is read exactly 25ms after it was sent. Bind and use a
// network inside the bubble whose time it should follow.
//
// # Counters
//
// Stats counts datagrams at each stage. Every datagram sent, and every
// duplicate made, ends exactly once as dropped by Network.Drop, lost by its
// link, delivered to a queue, undeliverable (nobody bound its destination
// when it arrived), a queue drop (its destination's queue was full) or a
// bottleneck drop (its link's Bottleneck queue was full), or is still in
// flight (queued at a bottleneck or delayed):
//
//	Sent + Duplicated == Dropped + Lost + Delivered + Undeliverable + QueueDrops + BottleneckDrops + InFlight
package netsim
