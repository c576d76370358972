package netsim

import (
	"fmt"
	"sync"
	"time"
)

// DefaultBottleneckQueue is a Bottleneck's queue, in bytes, when
// NewBottleneck is given 0.
const DefaultBottleneckQueue = 64 << 10

// Bottleneck is a link's narrowest hop: a rate and a drop-tail queue shared
// by every path whose Link names it, as a home router's uplink is shared by
// the flows behind it. Sizes are datagram payload bytes: no IP or UDP
// header is counted.
//
// A datagram of n bytes offered at time t leaves at max(t, the departure
// of the datagram before it) + n/rate, and is queued until then; one that
// would take the bytes queued beyond the queue's size is dropped
// (Stats.BottleneckDrops). The departures are exact: in a synctest bubble,
// 1000-byte datagrams through 10000 bytes per second leave 100 ms apart to
// the nanosecond.
//
// It is safe for concurrent use, and may be shared by paths of one network
// or of several (their clocks must agree).
type Bottleneck struct {
	rate  int64 // bytes per second
	limit int   // the queue's bytes

	mu     sync.Mutex
	queue  fifo      // accepted datagrams that have not left yet
	queued int       // their bytes
	last   time.Time // departure of the last datagram accepted
	rem    int64     // what last's division by rate left over, in ns×rate
	stats  BottleneckStats
}

// BottleneckStats counts a Bottleneck's datagrams. The datagrams offered
// and neither dropped nor forwarded are queued.
type BottleneckStats struct {
	Offered   uint64 // datagrams that reached the queue
	Dropped   uint64 // dropped by the full queue
	Forwarded uint64 // left the queue
	Bytes     uint64 // bytes that left the queue
	MaxQueue  int    // most bytes queued at once
}

// NewBottleneck returns a bottleneck of rate bytes per second (more than
// 0) after a drop-tail queue of queueBytes bytes (0: DefaultBottleneckQueue).
func NewBottleneck(rate int64, queueBytes int) *Bottleneck {
	if rate <= 0 {
		panic(fmt.Sprintf("netsim: NewBottleneck: rate %d bytes per second", rate))
	}
	if queueBytes <= 0 {
		queueBytes = DefaultBottleneckQueue
	}
	return &Bottleneck{rate: rate, limit: queueBytes}
}

// Stats returns the bottleneck's counters as of now (time.Now: the fake
// clock inside a synctest bubble).
func (b *Bottleneck) Stats() BottleneckStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.retireLocked(time.Now())
	return b.stats
}

// retireLocked counts the datagrams whose departure has come as
// forwarded. b.mu is held.
func (b *Bottleneck) retireLocked(now time.Time) {
	for b.queue.len() > 0 && !b.queue.peek().at.After(now) {
		d := b.queue.pop()
		b.queued -= d.n
		b.stats.Forwarded++
		b.stats.Bytes += uint64(d.n)
	}
}

// admit offers a datagram of n bytes at now: ok is false if the queue
// drops it, else left is when it leaves the bottleneck.
func (b *Bottleneck) admit(now time.Time, n int) (left time.Time, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.retireLocked(now)
	b.stats.Offered++
	if b.queued+n > b.limit {
		b.stats.Dropped++
		return time.Time{}, false
	}
	start := b.last
	if start.Before(now) {
		start, b.rem = now, 0
	}
	ns := int64(n)*int64(time.Second) + b.rem
	b.last = start.Add(time.Duration(ns / b.rate))
	b.rem = ns % b.rate
	b.queue.push(departure{at: b.last, n: n})
	b.queued += n
	b.stats.MaxQueue = max(b.stats.MaxQueue, b.queued)
	return b.last, true
}

// departure is a datagram in a bottleneck's queue.
type departure struct {
	at time.Time
	n  int
}

// fifo is a ring of departures, which allocates only to grow.
type fifo struct {
	buf        []departure
	head, size int
}

func (r *fifo) len() int         { return r.size }
func (r *fifo) peek() *departure { return &r.buf[r.head] }

func (r *fifo) push(d departure) {
	if r.size == len(r.buf) {
		nb := make([]departure, max(16, 2*len(r.buf)))
		for i := range r.size {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.size)%len(r.buf)] = d
	r.size++
}

func (r *fifo) pop() departure {
	d := r.buf[r.head]
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	return d
}
