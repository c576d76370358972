package message

// The endpoint's rings: slices of a power-of-two length indexed by a
// counter masked to it. Growing copies the live entries to the same
// counters in a larger ring; it is the cold path of the pushes.

// grownRing returns ring, whose counters head..tail-1 are live and which
// is full, copied into a ring twice as long (at least least).
func grownRing[T any](ring []T, head, tail uint32, least int) []T {
	size := max(least, 2*len(ring))
	q := make([]T, size)
	for p := head; p != tail; p++ {
		q[p&uint32(size-1)] = ring[p&uint32(len(ring)-1)]
	}
	return q
}

// grownRing16 returns ring, indexed by uint16 ids and shorter than n,
// copied into a ring of at least n entries (a power of two, at least 8)
// with its count entries from id from on at the same ids.
func grownRing16[T any](ring []T, n int, from uint16, count int) []T {
	size := max(8, len(ring))
	for size < n {
		size *= 2
	}
	q := make([]T, size)
	if len(ring) > 0 {
		om, nm := uint16(len(ring)-1), uint16(size-1)
		for i := range count {
			id := from + uint16(i)
			q[id&nm] = ring[id&om]
		}
	}
	return q
}

// Shrinking. A ring grows to what a burst needs (a large message's
// fragments, a backlog of unreliable messages, a window of out-of-order
// units) and would keep that size for the connection's life. So when a
// ring empties (there is nothing to copy then), it is replaced by a
// smaller one if it is longer than shrinkAbove and than shrinkFactor
// times what the ring held at most during its previous use (the period
// between its last two emptyings): after a burst, the first emptying
// gives the memory back. A steady flow (each use about as large as the
// one before) keeps its ring, and so allocates nothing per message; a
// flow that alternates bursts with small uses pays one allocation per
// burst, when it regrows.
const (
	shrinkAbove  = 64
	shrinkFactor = 4
)

// ringPeaks are a ring's largest use (entries held at once) in its
// current use and in the one before.
type ringPeaks[N uint16 | uint32] struct{ cur, prev N }

// note records a use of n entries.
func (p *ringPeaks[N]) note(n int) { p.cur = max(p.cur, N(n)) }

// emptied is called when the ring of length n has emptied: it returns the
// length of the ring that replaces it (at least least, a power of two,
// twice the previous use), or 0 to keep it, and starts a new use.
func (p *ringPeaks[N]) emptied(n, least int) int {
	prev := int(p.prev)
	p.prev, p.cur = p.cur, 0
	if n <= shrinkAbove || n <= shrinkFactor*prev {
		return 0
	}
	size := least
	for size < 2*prev {
		size *= 2
	}
	return size
}
