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
