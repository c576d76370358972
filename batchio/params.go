package batchio

import "time"

// Tunables. Every number that shapes batchio's behaviour lives here, with the
// reason for its value.
//
// Measurements. Echo harness (echo_bench_linux_test.go): the server runs in
// a child process with GOMAXPROCS=2 (so 2 sockets for the batchio variants);
// the load comes from 16 sources 127.0.0.2…17, sendmmsg bursts of 32 ×
// 48 bytes, 128 in flight per source; server CPU is read from the child's
// /proc schedstat over a 3 s window; variants interleaved, 3 repetitions;
// runs where other processes took CPU (server + load < 90 % of the busy
// machine) were repeated. 2-vCPU KVM guest, Linux 6.18, Go 1.26:
//
//	variant (batch 64, the default)         server CPU ns/pkt   ÷ plain  echoes/s
//	plain ReadFrom/WriteToUDPAddrPort loop  3819 (3587–3935)    1.00     248 k
//	  (1 socket, 1 goroutine)
//	ModeNetpoll, 2 sockets                  2306 (2303–2414)    0.63     414 k
//	ModeBlocking, 2 sockets                 1842 (1829–1855)    0.50     542 k
//
// The same with batch 32 (another interleaved run): plain 3610, netpoll
// 2271 (0.63), blocking 1881 (0.52).
//
//	ModeBlocking batch size    8     16     32     64
//	server CPU ns/pkt        1973   1941   1922   1847   (medians; 64 was
//	                                                     best in every rep)
//
// Earlier runs, under more noise, gave the same order: plain 3.7–4.2
// µs, netpoll 2.3–2.6, blocking 2.07–2.17, blocking/plain 0.49–0.56. Also
// measured and rejected: RawSyscall for non-blocking calls (netpoll: 5–10 %
// less CPU, but several runs had sources stalled ≥ 50 ms and kernel
// receive-queue drops; blocking with a MSG_DONTWAIT RawSyscall fast path:
// 3 % less, within noise, while holding the P through every call), and
// LockOSThread in blocking loops (no measurable difference: 2026–2121 ns
// without vs 2070–2167 with). Repeat with
//
//	BATCHIO_ECHO=1 go test -run TestEchoCompare -v -timeout 30m ./batchio/
//	BATCHIO_ECHO=1 BATCHIO_ECHO_VARIANTS=blocking/b8,blocking/b16,blocking/b32,blocking/b64 \
//		go test -run TestEchoCompare -v -timeout 30m ./batchio/
//
// Don't-fragment bit and kernel drop counting. Server profiles showed two
// per-datagram kernel costs of batchio's own choosing. Without DF the
// kernel picks an IP ID for every IPv4 datagram (__ip_select_ident: a
// siphash and a slot of a table hashed by destination; 3.6 % of server CPU
// samples at 1k clients, 10.9 % at 100k, where the slot is a cache miss).
// SO_RXQ_OVFL, once a socket has dropped anything, makes the kernel write
// a control message into every datagram it delivers, for the rest of the
// socket's life (__sock_recv_cmsgs, put_cmsg: 2.4 %). So DF is on by
// default for IPv4 (Config.AllowFragmentation) and drops are read with SO_MEMINFO
// when Stats is called. Echo harness, the previous batchio (a test binary
// of the parent commit run as variant "blocking@/tmp/old.test") against
// this one; server CPU ns/pkt ÷ before, within a repetition, median
// (range) of 4–8 clean repetitions of 2 s, two runs where two figures:
//
//	load                        drops by SO_MEMINFO  both (default)     DF
//	16 sources, never dropped   0.98, 0.99           0.97, 0.99         0.98, 1.00
//	                            (0.96–1.02)          (0.94–1.01)
//	16 sources, sockets         0.94, 0.96           0.93, 0.95         0.99, 0.98
//	  overflowed once (PREDROP) (0.90–0.99)          (0.90–0.98)
//	256 sources × 32 in flight  0.985 (0.94–1.01)    0.966 (0.95–0.99)  0.98
//	512 sources × 32, dropping  0.977 (0.97–0.98)    0.94 (0.91–1.00)   0.96
//
// (DF: both ÷ drops-only.) Echoes/s rose 1–5 %. In a perf profile of the
// "before" server (16 sources, overflowed once) __sock_recv_cmsgs,
// put_cmsg, __ip_select_ident and siphash_3u32 took 2.0, 0.4, 0.6 and
// 0.4 % of its samples; the "after" server shows none of them. The DF gain
// grows with the number of destinations, which loopback with a few hundred
// sources keeps in cache; the server profiles are the better guide there.
// Repeat with (old.test built at the older commit, with overflowSockets
// copied into its harness if it predates it):
//
//	BATCHIO_ECHO=1 BATCHIO_ECHO_PREDROP=1 BATCHIO_ECHO_REPS=8 BATCHIO_ECHO_DUR=2s \
//		BATCHIO_ECHO_VARIANTS=blocking@/tmp/old.test,blocking/frag,blocking \
//		BATCHIO_ECHO_BASE=blocking@/tmp/old.test \
//		go test -run TestEchoCompare -v -timeout 30m ./batchio/

const (
	// MaxSockets caps Config.Sockets. One SO_REUSEPORT socket per P is the
	// useful maximum (more sockets than Ps only add idle loops), and 64
	// keeps the per-group memory (batches and WriteTo queues) bounded on
	// very large machines.
	MaxSockets = 64

	// DefaultBatchSize is the number of messages per Batch made by
	// Group.NewBatch. 64 measured 4–6 % cheaper per packet than 32 in every
	// repetition (see above); beyond it the kernel's per-packet work
	// dominates and a bigger batch only delays the first reply of a burst.
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

	// BlockingWakeInterval is the SO_RCVTIMEO of sockets in ModeBlocking.
	// Close wakes a blocked receiver at once with shutdown(2); this timeout
	// is only the safety net that bounds how long a receiver can sleep
	// past Close if that wake-up were ever missed, and the bound on how
	// long a blocked sender waits before rechecking for Close. Five wake-ups
	// a second cost nothing measurable.
	BlockingWakeInterval = 200 * time.Millisecond
)
