package conn

import (
	"testing"
	"unsafe"

	"github.com/udpgate/udpgate/internal/seqwin"
)

// The packet path touches Conn's fields up to the end of seq's scalars,
// one slot of seq's ring and the Handler contract's line; the loop's touch
// pass loads one word from each of those cache lines (tag, lastSend,
// SeqState.Touch, inflight) before handling a batch. This test keeps the layout that pass relies on: the hot fields in
// the first five lines (the fifth only for drop counters), before the ring,
// with tag and lastSend on the two lines that seq's scalars do not reach.
func TestConnLayout(t *testing.T) {
	var c Conn
	const line = 64
	hot := map[string]uintptr{
		"mu": unsafe.Offsetof(c.mu), "inLoop": unsafe.Offsetof(c.inLoop),
		"st": unsafe.Offsetof(c.st), "closed": unsafe.Offsetof(c.closed),
		"tag": unsafe.Offsetof(c.tag), "cookie": unsafe.Offsetof(c.cookie),
		"lastRecv": unsafe.Offsetof(c.lastRecv), "lastSend": unsafe.Offsetof(c.lastSend),
		"addr": unsafe.Offsetof(c.addr), "bytesIn": unsafe.Offsetof(c.bytesIn),
		"bytesOut": unsafe.Offsetof(c.bytesOut),
	}
	for name, off := range hot {
		if off >= unsafe.Offsetof(c.seq) {
			t.Errorf("%s at %d: after seq, past the hot lines", name, off)
		}
	}
	if l := unsafe.Offsetof(c.tag) / line; l != 0 {
		t.Errorf("tag on line %d, want 0", l)
	}
	if l := unsafe.Offsetof(c.lastSend) / line; l != 1 {
		t.Errorf("lastSend on line %d, want 1", l)
	}
	// The Handler contract's fields that every packet reads or changes
	// (awaitReady, enter, exit) share the one line the pass touches
	// through inflight.
	if a, b, d := unsafe.Offsetof(c.ready)/line, unsafe.Offsetof(c.inflight)/line, unsafe.Offsetof(c.discReady)/line; a != b || b != d {
		t.Errorf("ready, inflight and discReady on lines %d, %d and %d: want one line", a, b, d)
	}
	// seq's scalars: SeqState less its ring of send times (4-byte stamps).
	scalars := unsafe.Sizeof(c.seq) - 3*seqwin.SeqRingSize
	if end := unsafe.Offsetof(c.seq) + scalars; end > 5*line {
		t.Errorf("hot fields end at %d bytes: more than five cache lines", end)
	}
}
