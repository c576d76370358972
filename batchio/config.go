package batchio

import (
	"fmt"
	"log/slog"
	"runtime"
	"syscall"
)

// Mode selects how a socket's receiver waits for datagrams.
type Mode uint8

const (
	// ModeAuto picks the fastest measured mode for the platform: see
	// autoMode in the per-OS files and params.go.
	ModeAuto Mode = iota
	// ModeNetpoll uses a non-blocking socket and parks the receiving
	// goroutine in Go's netpoller when the socket is empty. Goroutines are
	// cheap and no OS thread is held, but with more Ps than busy loops the
	// scheduler's idle-P spinning adds CPU per packet.
	ModeNetpoll
	// ModeBlocking uses a blocking socket: Recv sleeps in recvmmsg with
	// MSG_WAITFORONE, so the kernel wakes the thread directly and the
	// scheduler has no netpoller work per wake-up. Each receiving loop
	// holds an OS thread while idle (locking it with runtime.LockOSThread
	// is optional: it measured no different). Close still wakes a
	// blocked Recv at once.
	ModeBlocking
)

// String returns the mode's name as used in flags and logs.
func (m Mode) String() string {
	return enumName([]string{ModeAuto: "auto", ModeNetpoll: "netpoll", ModeBlocking: "blocking"}, "Mode", uint8(m))
}

// enumName returns names[v], or type(v) for a value without a name.
func enumName(names []string, typ string, v uint8) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}

// Config tunes a Group. The zero value is ready to use: every zero field
// takes the default documented in params.go.
type Config struct {
	// Sockets is the number of SO_REUSEPORT sockets bound to the address.
	// 0 means GOMAXPROCS; values above MaxSockets are capped. Platforms
	// without load-balancing SO_REUSEPORT always use one socket.
	Sockets int

	// Mode selects how receivers wait; see Mode.
	Mode Mode

	// BatchSize is the message count of batches made by Group.NewBatch:
	// the most datagrams one Recv returns. 0 means DefaultBatchSize.
	BatchSize int

	// MessageSize is the slot size, in bytes, of batches made by
	// Group.NewBatch and of the WriteTo queue: the largest datagram that
	// is received whole or accepted by WriteTo. 0 means DefaultMessageSize.
	MessageSize int

	// QueueSize is the slot count of each half of a socket's WriteTo
	// queue, and so the largest sendmmsg the queue issues. 0 means
	// DefaultQueueSize.
	QueueSize int

	// RecvBuffer and SendBuffer are the requested SO_RCVBUF and SO_SNDBUF
	// in bytes. 0 means DefaultRecvBuffer/DefaultSendBuffer; a negative
	// value leaves the system default alone. When the kernel grants less,
	// the Group reports a warning naming the sysctl to raise.
	RecvBuffer int
	SendBuffer int

	// AllowFragmentation, if true, leaves the kernel's path-MTU discovery
	// default alone, so IPv4 datagrams go out without the don't-fragment
	// bit. By default batchio sets DF for IPv4 traffic, as QUIC does
	// (IP_PMTUDISC_PROBE on IPv4 and dual-stack sockets; see params.go):
	// without DF, Linux picks an IP ID for every IPv4
	// datagram from a table hashed by destination, a cache miss per packet
	// once there are many peers. IPv6 is left alone: it has no per-packet
	// ID to save, and DF there would refuse datagrams of 1453-1472 bytes
	// on a 1500-byte link.
	//
	// DF costs nothing for datagrams that fit the path: up to 1472 bytes
	// of payload fit a 1500-byte MTU. The price is for larger ones: a
	// datagram larger than the outgoing interface's MTU is refused by the
	// kernel (EMSGSIZE, counted in Stats.TxErrors) instead of being
	// fragmented, and one larger than a smaller MTU further along the path
	// (a tunnel, PPPoE) is dropped there. PROBE rather than DO because it
	// ignores the path MTU cached from ICMP reports, so a forged or stale
	// report cannot make sends to a peer fail locally. Set it if the
	// server sends IPv4 datagrams larger than some path's MTU allows.
	// Linux only: the portable fallback leaves the system default.
	AllowFragmentation bool

	// Steer, if Steer.Enabled, sorts datagrams in the kernel between two
	// disjoint sets of sockets by one payload bit, so a flood of one kind
	// cannot fill the queues of the other (udpgate: handshake packets
	// apart from connection packets). The group then has
	// Steer.SetSockets + Steer.ClearSockets sockets. Linux 4.5 or later;
	// elsewhere, or when the kernel refuses, the group runs unsteered
	// with Sockets sockets and a warning. See Steer.
	Steer Steer

	// DSCP, if not 0, marks every datagram the group sends with this
	// Differentiated Services code point (0–63; 46 is Expedited
	// Forwarding, the usual class for game traffic): in the IPv4 TOS
	// byte, and in the IPv6 traffic class on IPv6 and dual-stack sockets.
	// 0 leaves the system default (0, best effort). Networks may ignore
	// or rewrite it; it helps only where the operator's routers honour
	// it. On Linux, setting the TOS also sets the socket's SO_PRIORITY
	// from it, which decides the band of the default pfifo_fast qdisc.
	DSCP int

	// Control, if not nil, is called for every socket after batchio has
	// set its own options and before bind, like net.ListenConfig.Control.
	// network is "udp4" or "udp6"; address is the address being bound.
	//
	// Control messages it enables (IP_PKTINFO, timestamps, …) are not
	// delivered: Recv passes the kernel no control buffer, because
	// filling one for every datagram costs measurable CPU and Message
	// has nowhere to put them. The kernel discards them (and sets
	// MSG_CTRUNC, which batchio ignores), so enabling them only adds
	// kernel work per datagram.
	Control func(network, address string, c syscall.RawConn) error

	// Logger, if not nil, receives at Warn level the problems Listen
	// worked around (a socket buffer capped by a sysctl, steering the
	// kernel refused), each with the fix.
	Logger *slog.Logger
}

// validate reports settings that have no sensible reading. Everything
// else is defaulted or clamped by normalize.
func (cfg Config) validate() error {
	if cfg.DSCP < 0 || cfg.DSCP > maxDSCP {
		return fmt.Errorf("batchio: DSCP %d is out of range: use a code point from 1 to %d (46 is Expedited Forwarding), or 0 to leave datagrams unmarked", cfg.DSCP, maxDSCP)
	}
	if cfg.Steer.Enabled && (cfg.Steer.Bit < 0 || cfg.Steer.Bit > maxSteerBit) {
		return fmt.Errorf("batchio: Steer.Bit %d is out of range: use a payload bit from 0 to %d (udpgate's HandshakeBit is the magic header's length in bits + 5), or turn steering off", cfg.Steer.Bit, maxSteerBit)
	}
	return nil
}

// normalize returns cfg with every default filled in and every value
// clamped to what batchio supports.
func (cfg Config) normalize() Config {
	if cfg.Sockets <= 0 {
		cfg.Sockets = runtime.GOMAXPROCS(0)
	}
	cfg.Sockets = min(cfg.Sockets, MaxSockets)
	if !reusePortBalances {
		cfg.Sockets = 1
	}
	if cfg.Mode == ModeAuto || cfg.Mode > ModeBlocking {
		cfg.Mode = autoMode
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	cfg.BatchSize = min(cfg.BatchSize, maxBatchSize)
	if cfg.MessageSize <= 0 {
		cfg.MessageSize = DefaultMessageSize
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	cfg.QueueSize = min(cfg.QueueSize, maxBatchSize)
	if cfg.RecvBuffer == 0 {
		cfg.RecvBuffer = DefaultRecvBuffer
	}
	if cfg.SendBuffer == 0 {
		cfg.SendBuffer = DefaultSendBuffer
	}
	return cfg
}

// maxBatchSize is the kernel's UIO_MAXIOV, the most messages one
// recvmmsg/sendmmsg call accepts.
const maxBatchSize = 1024
