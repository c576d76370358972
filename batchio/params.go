package batchio

import "time"

// Tunables. Every number that shapes batchio's behaviour lives here, with the
// reason for its value. The measurements behind them were taken with the echo
// harness of echo_bench_linux_test.go (TestEchoCompare, BATCHIO_ECHO=1: the
// server in a child process, its CPU per echoed datagram read from /proc);
// the figures, the commands that repeat them and the options measured and
// rejected are in tuning.md, "batchio: receive modes, batch size, DF and
// drop counting".

const (
	// MaxSockets caps Config.Sockets. One SO_REUSEPORT socket per P is the
	// useful maximum (more sockets than Ps only add idle loops), and 64
	// keeps the per-group memory (batches and WriteTo queues) bounded on
	// very large machines.
	MaxSockets = 64

	// DefaultBatchSize is the number of messages per Batch made by
	// Group.NewBatch. 64 was the cheapest per packet of 8, 16, 32 and 64 in
	// the echo harness; beyond it the kernel's per-packet work dominates
	// and a bigger batch only delays the first reply of a burst.
	// 64 × 2 KiB = 128 KiB per batch.
	DefaultBatchSize = 64

	// DefaultMessageSize is the slot size of Group.NewBatch and of the
	// WriteTo queue. It holds any datagram of a 1500-byte-MTU path (1472
	// bytes of IPv4 payload) with room to spare, and a power of two keeps
	// slots from straddling pages. Larger datagrams arrive truncated and
	// are flagged (Message.Truncated).
	DefaultMessageSize = 2048

	// DefaultQueueSize is the number of slots of one half of a socket's
	// WriteTo queue (the queue is double-buffered: one half fills while
	// the other is being sent). Senders block only while both halves are
	// busy, so this bounds memory, not throughput: 64 × 2 KiB × 2 = 256 KiB
	// per socket.
	DefaultQueueSize = 64

	// DefaultRecvBuffer and DefaultSendBuffer are the requested SO_RCVBUF
	// and SO_SNDBUF. 4 MiB absorbs 5–10 ms of a 1 Mpps burst of small
	// datagrams (each costs ≈ 768 bytes of kernel truesize) while a loop
	// is descheduled; the kernel doubles the value for its bookkeeping.
	DefaultRecvBuffer = 4 << 20
	DefaultSendBuffer = 4 << 20

	// blockingWakeInterval is the SO_RCVTIMEO of sockets in ModeBlocking.
	// Close wakes a blocked receiver at once with shutdown(2); this timeout
	// is only the safety net that bounds how long a receiver can sleep
	// past Close if that wake-up were ever missed, and the bound on how
	// long a blocked sender waits before rechecking for Close. Five wake-ups
	// a second cost nothing measurable.
	blockingWakeInterval = 200 * time.Millisecond
)
