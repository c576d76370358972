package batchio

import (
	"fmt"
	"net/netip"
)

// Message is one datagram slot of a Batch.
//
// After Recv, Buf is the slot itself (its full capacity, never resliced),
// Buf[:N] holds the datagram and Addr its source. Before Send, the caller
// sets N (and may write into Buf, or point Buf at other memory) and Addr, the
// destination; Send transmits Buf[:N]. Recv points Buf back at the slot.
type Message struct {
	// Buf is the slot's memory: len(Buf) == cap(Buf) == the batch's
	// message size after Recv.
	Buf []byte
	// N is the datagram's length in Buf.
	N int
	// Addr is the source after Recv and the destination for Send. Sources
	// are always plain: an IPv4 peer of a dual-stack socket appears as an
	// IPv4 address, not as an IPv4-mapped IPv6 one.
	Addr netip.AddrPort
	// Truncated reports, after Recv, that the datagram was larger than the
	// slot: Buf[:N] holds only its first N bytes and the rest is lost. The
	// caller should drop it; the socket counts it in Stats.RxTruncated.
	// Send ignores it.
	Truncated bool
}

// Batch is a reusable set of message slots together with the kernel
// structures (iovecs, mmsghdrs, socket addresses) that describe them, so
// that receiving or sending a batch allocates nothing.
//
// A Batch may be used with any Socket but by one goroutine at a time.
type Batch struct {
	// Msgs has the batch's size; do not reslice or replace it.
	Msgs []Message

	slots   []byte // one backing array for every slot
	msgSize int    // usable bytes per slot
	stride  int    // distance between slots: msgSize plus slotPad
	sys     batchSys
}

// NewBatch returns a batch of size messages of bufSize bytes each, backed
// by one allocation. size must be in [1, 1024] (the kernel's UIO_MAXIOV)
// and bufSize in [1, 65535].
func NewBatch(size, bufSize int) *Batch {
	if size < 1 || size > maxBatchSize {
		panic(fmt.Sprintf("batchio: NewBatch size %d out of range [1, %d]", size, maxBatchSize))
	}
	if bufSize < 1 || bufSize > 65535 {
		panic(fmt.Sprintf("batchio: NewBatch bufSize %d out of range [1, 65535]", bufSize))
	}
	b := &Batch{
		Msgs:    make([]Message, size),
		msgSize: bufSize,
		stride:  bufSize + slotPad,
	}
	b.slots = make([]byte, size*b.stride)
	for i := range b.Msgs {
		b.Msgs[i].Buf = b.slot(i)
	}
	b.sys.init(b)
	return b
}

// slot returns slot i at its full usable size.
func (b *Batch) slot(i int) []byte {
	off := i * b.stride
	return b.slots[off : off+b.msgSize : off+b.msgSize]
}
