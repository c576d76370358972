package batchio

import (
	"sync/atomic"

	"golang.org/x/sys/cpu"
)

// Stats are a socket's (or, summed, a group's) counters since Listen.
type Stats struct {
	// RxPackets and RxBytes count datagrams received, truncated ones
	// included.
	RxPackets uint64
	RxBytes   uint64
	// RxBatches counts receive calls that returned datagrams, so
	// RxPackets/RxBatches is the average batch fill (see RxBatchFill).
	RxBatches uint64
	// RxTruncated counts datagrams larger than their slot.
	RxTruncated uint64
	// RxDrops counts datagrams the kernel dropped because the receive
	// buffer was full (the kernel counter it comes from, the socket's
	// sk_drops, also takes the rare datagram with a bad checksum or
	// refused by a socket filter). It is read from the kernel
	// (SO_MEMINFO) when Stats is called, so it is current even while no
	// traffic arrives and costs the receive path nothing. Always 0 where
	// SO_MEMINFO does not exist: Linux before 4.12 (Listen warns) and the
	// portable fallback.
	RxDrops uint64
	// RxErrors counts receive errors that were retried (for example a
	// pending ICMP error reported by the kernel).
	RxErrors uint64

	// TxPackets and TxBytes count datagrams handed to the kernel.
	TxPackets uint64
	TxBytes   uint64
	// TxCalls counts send system calls (sendmmsg), so TxPackets/TxCalls is
	// the average send batch.
	TxCalls uint64
	// TxErrors counts datagrams that were not sent because of an error
	// particular to them (no route, permission denied by a firewall,
	// destination of the wrong address family, …); the rest of their
	// batch was still sent.
	TxErrors uint64
	// TxPartial counts send calls that sent only part of their batch; the
	// rest was sent by the following calls.
	TxPartial uint64
	// TxWaits counts the times a sender waited for the socket to become
	// writable (EAGAIN) before carrying on.
	TxWaits uint64
	// QueueWaits counts WriteTo calls that waited because the socket's
	// queue was full.
	QueueWaits uint64
}

// RxBatchFill returns the average number of datagrams per receive call.
func (s Stats) RxBatchFill() float64 {
	if s.RxBatches == 0 {
		return 0
	}
	return float64(s.RxPackets) / float64(s.RxBatches)
}

// add accumulates o into s.
func (s *Stats) add(o Stats) {
	s.RxPackets += o.RxPackets
	s.RxBytes += o.RxBytes
	s.RxBatches += o.RxBatches
	s.RxTruncated += o.RxTruncated
	s.RxDrops += o.RxDrops
	s.RxErrors += o.RxErrors
	s.TxPackets += o.TxPackets
	s.TxBytes += o.TxBytes
	s.TxCalls += o.TxCalls
	s.TxErrors += o.TxErrors
	s.TxPartial += o.TxPartial
	s.TxWaits += o.TxWaits
	s.QueueWaits += o.QueueWaits
}

// counters are a socket's published statistics. Loops count into local
// variables and publish once per batch, so the atomics are touched once per
// system call, not once per datagram. Receive and send counters sit on
// separate cache lines because they are written by different goroutines
// (the receiving loop; the loop's Send and WriteTo flushers), the drop
// counters on a third because Stats callers write them, and the pads keep
// neighbouring sockets' counters off each other's lines.
type counters struct {
	_           cpu.CacheLinePad
	rxPackets   atomic.Uint64
	rxBytes     atomic.Uint64
	rxBatches   atomic.Uint64
	rxTruncated atomic.Uint64
	rxErrors    atomic.Uint64
	_           cpu.CacheLinePad
	txPackets   atomic.Uint64
	txBytes     atomic.Uint64
	txCalls     atomic.Uint64
	txErrors    atomic.Uint64
	txPartial   atomic.Uint64
	txWaits     atomic.Uint64
	queueWaits  atomic.Uint64
	_           cpu.CacheLinePad
	rxDrops     atomic.Uint64
	rxDropsSeen atomic.Uint32 // last cumulative kernel value seen
	_           cpu.CacheLinePad
}

// rxBatch is what one receive call adds to the counters.
type rxBatch struct {
	packets, bytes, truncated uint64
}

func (c *counters) publishRx(r rxBatch) {
	c.rxPackets.Add(r.packets)
	c.rxBytes.Add(r.bytes)
	c.rxBatches.Add(1)
	if r.truncated != 0 {
		c.rxTruncated.Add(r.truncated)
	}
}

// noteDrops records the socket's cumulative kernel drop count. The
// kernel's counter is a wrapping uint32, so the difference to the last
// value seen is added, modulo 2³²; callers must hand values in the order
// the kernel reported them (socketSys.readDrops serializes).
func (c *counters) noteDrops(cum uint32) {
	if prev := c.rxDropsSeen.Swap(cum); cum != prev {
		c.rxDrops.Add(uint64(cum - prev))
	}
}

// txBatch is what one Send adds to the counters.
type txBatch struct {
	packets, bytes, calls, errors, partial, waits uint64
}

func (c *counters) publishTx(t txBatch) {
	if t.calls != 0 {
		c.txPackets.Add(t.packets)
		c.txBytes.Add(t.bytes)
		c.txCalls.Add(t.calls)
	}
	if t.errors != 0 {
		c.txErrors.Add(t.errors)
	}
	if t.partial != 0 {
		c.txPartial.Add(t.partial)
	}
	if t.waits != 0 {
		c.txWaits.Add(t.waits)
	}
}

func (c *counters) snapshot() Stats {
	return Stats{
		RxPackets:   c.rxPackets.Load(),
		RxBytes:     c.rxBytes.Load(),
		RxBatches:   c.rxBatches.Load(),
		RxTruncated: c.rxTruncated.Load(),
		RxDrops:     c.rxDrops.Load(),
		RxErrors:    c.rxErrors.Load(),
		TxPackets:   c.txPackets.Load(),
		TxBytes:     c.txBytes.Load(),
		TxCalls:     c.txCalls.Load(),
		TxErrors:    c.txErrors.Load(),
		TxPartial:   c.txPartial.Load(),
		TxWaits:     c.txWaits.Load(),
		QueueWaits:  c.queueWaits.Load(),
	}
}
