package conn

import "time"

// Tunables of the connection layer, in one place. The defaults of Config's
// fields that the commands show (KeepAlive, Timeout, ConnectTimeout,
// MaxClients and the per-network limits) are internal/defaults'. Protocol
// constants that are not tunable (40 s cookie lifetime, 64-packet window)
// live in fastpath and cookie; socket tunables (batch size, buffers) in
// batchio.
const (
	// defaultLinger: Close waits this long, at most, for queued reliable
	// messages to be acknowledged (Config.Linger).
	defaultLinger = 5 * time.Second
	// recentlyDisconnected: an address whose connection closed stays known
	// this long, so its stray packets get no RestartHandshake (§5).
	recentlyDisconnected = 120 * time.Second
	// disconnectPackets: how many Disconnect packets a closing side sends.
	// Redundancy instead of acknowledgement: the peer may be gone.
	disconnectPackets = 5
	// timeoutDisconnectPackets: how many a side sends when it closes on a
	// timeout. The peer has been silent for the whole timeout and is
	// likely gone: more would mostly be bytes sent to nobody.
	timeoutDisconnectPackets = 1

	// Sealed mode (docs/protocol.md §11).

	// proofResendInterval: a client repeats its proof (a fresh packet)
	// this often until the server's first sealed packet arrives.
	proofResendInterval = 250 * time.Millisecond
	// proofWindow bounds how long a client proves one handshake, whatever
	// its ConnectTimeout: its proofs carry the handshake's cookie, which a
	// server accepts for at least 15 s after making it (docs/protocol.md
	// §4, §11.3), and the Challenge came at least half a round trip after
	// that.
	proofWindow = 14 * time.Second

	// messageTick is how often the message timer serves connections with
	// messages in flight (resends, prompt acks): fine against the tens of
	// milliseconds of a resend interval, and it visits only connections
	// that have work.
	messageTick = 5 * time.Millisecond
	// idleBudgetTick is how often the message timer, with no connection
	// listed, still recomputes an egress budget, so that its figures fall
	// to zero; without a budget it sleeps until a connection joins.
	idleBudgetTick = 100 * time.Millisecond
	// defaultSweepInterval is how often housekeeping advances the timer
	// wheel (keepalives, timeouts) and expires leftovers. A keepalive is
	// late by at most this much. Each connection is visited about once per
	// KeepAlive, not once per sweep.
	defaultSweepInterval = 100 * time.Millisecond

	// wheelSlots is the timer wheel's size in SweepIntervals (102.4 s at
	// the default): deadlines further off wait a turn and are recomputed.
	wheelSlots = 1024
	// timerShards splits the wheel so that adding and removing a
	// connection waits for at most one shard's share of a tick.
	timerShards = 16

	// maxRecentFactor caps the recently-disconnected table at this many
	// entries per allowed client, so churn cannot grow memory without bound;
	// past the cap, stray packets from an unremembered address only cost a
	// rate-limited RestartHandshake.
	maxRecentFactor = 4

	// handshakeQueue is the receive buffer, in bytes, that the handshake
	// sockets of a steered server share, each getting at least batchio's
	// default: a login storm's Initials and Responses arrive in one burst,
	// and a datagram the kernel drops there costs its client a 1 s
	// resend. The memory is the kernel's, used only while datagrams wait.
	handshakeQueue = 32 << 20

	// shareBatch is how many handshake datagrams a steered server's
	// connection loop takes from a handshake socket at a time during a
	// login storm, when its own socket is empty (loop.run): a whole
	// batch, as the handshake loop takes, since smaller shares cost a
	// storm's handshakes more system calls (tuning.md, "Issue 21, round
	// 6").
	shareBatch = 64
	// playerAge: a connection challenged this long ago, or spreadHold
	// before the handshake sockets' busy spell began (spreader.busySince),
	// is a player, and a connection loop whose socket brings a player's
	// packet takes no share of a storm for spreadHold (loop.sharing). The
	// others are the storm's own clients: a storm of 100k takes 1–3 s
	// here.
	playerAge = 5 * time.Second
	// shareCheck is how often a connection loop looks at a login storm's
	// backlog while the backlog does not fill a share: the handshake loop
	// keeps up with it, and a hundred looks a second cost nothing
	// measurable.
	shareCheck = 10 * time.Millisecond

	// inboundBurst: each inbound bucket holds this much of its rate (and
	// one datagram at least), so a burst after a pause passes: 900
	// packets and 1.6 MiB at the defaults.
	inboundBurst = 100 * time.Millisecond

	// defaultPromotionWorkers sizes the promotion pool. Promotions run the
	// application's accept hook, which may be slow; the socket loops never
	// wait for them.
	defaultPromotionWorkers = 64
	// promotionBatch bounds the proven clients one worker promotes between
	// two sendmmsg calls of their replies.
	promotionBatch = 256
	// promotionQueue bounds the proven clients waiting in one loop's queue.
	// Only a client that answered a Challenge from its own address gets
	// there, so this is a login storm's depth, not an attacker's: a
	// 100k-client storm on one loop fits. Beyond it a Response is dropped
	// (promotion_full) and the client's next resend (§6.2) tries again.
	promotionQueue = 1 << 16
)

// Overload control (overload.go). Connectionless datagrams are those from
// addresses that hold no connection: handshakes, strays, attacks. This
// machine's server handles roughly 300–500 k datagrams/s per core (bench/),
// and a Challenge costs a cookie (about 130 ns) plus a send; the levels
// start well before that, and the caps keep legitimate handshakes possible
// (a client retries every second) while an attack is shed.
const (
	// defaultBurstThreshold, defaultFloodThreshold and
	// defaultSevereThreshold: connectionless datagrams per second at which
	// LevelBurst, LevelFlood and LevelSevere begin
	// (OverloadConfig.Thresholds).
	defaultBurstThreshold  = 5_000
	defaultFloodThreshold  = 50_000
	defaultSevereThreshold = 200_000
	// defaultFloodChallengeCap and defaultSevereChallengeCap: Challenge
	// replies per second per receive loop at LevelFlood and LevelSevere
	// (OverloadConfig.ChallengeCaps).
	defaultFloodChallengeCap  = 10_000
	defaultSevereChallengeCap = 1_000

	// defaultOverloadCooloff: how long the rate must stay under a level's
	// threshold before the level steps down.
	defaultOverloadCooloff = 10 * time.Second
	// overloadLogEvery rate-limits level-change logs.
	overloadLogEvery = time.Second
)
