package handshake

// Tunables: the defaults of the server's reply budgets (docs/protocol.md §5)
// and the size of their tables. The budgets bound what a spoofed source can
// make the server send to one address: replies to an unproven address are
// never larger than their requests, so these caps are what keeps the
// server from being a useful reflector. Each per-source, per-IP and
// per-prefix default bursts twice its rate (see ServerConfig).
const (
	// DefaultChallengeRate caps Challenge replies per source, per second.
	// A real client sends at most 5 Initials in its first second (the
	// resend schedule below) and one a second after that, so this only
	// ever stops floods.
	DefaultChallengeRate = 32

	// DefaultChallengeIPRate caps Challenge replies per IP address, all
	// its ports together, and DefaultChallengePrefixRate per /24 (IPv4) or
	// /64 (IPv6) network, per second and for all of a server's receive
	// loops (ServerConfig.Loops). The per-source cap alone let a spoofer
	// draw a host's whole port range toward it (ratelimit_host_test.go).
	// These bound what one host, or one network, receives whatever its
	// port count: 64/s (about 3.6 KB/s of 56-byte Challenges) after a
	// burst of 128.
	//
	// Players behind one NAT share these budgets, and each needs one
	// Challenge per attempt (a client resends its Initial, soon at first
	// and then once a second, until it gets one): 128 players starting in
	// the same second all get theirs at once, and 256 (conn's default cap
	// of connections per IP) within 2 s more. A network's 1024 (conn's cap
	// per prefix) take about 2 s at 256/s after a burst of 512.
	DefaultChallengeIPRate     = 64
	DefaultChallengePrefixRate = 256

	// DefaultVersionUpgradeTotal caps VersionUpgrade replies whatever their
	// source: this many per versionUpgradeWindow seconds, and at most this
	// many at once, for the whole server when its loops share one budget
	// (ServerConfig.ShareVersionUpgradeTotal), else per loop.
	DefaultVersionUpgradeTotal = 512
	versionUpgradeWindow       = 300.0

	// defaultRestartRate and defaultVersionUpgradeRate cap RestartHandshake
	// and VersionUpgrade replies per source, per second.
	defaultRestartRate = 4
	// ProofRate caps the proofs (docs/protocol.md §11.3) a sealed
	// server looks at per source, per second, with a burst of twice
	// that: a client resends its proof every 250 ms (4/s), and a flood of
	// proofs is shed before any token is opened.
	ProofRate                 = 8
	defaultVersionUpgradeRate = 4
)

// The client's handshake resend schedule (docs/protocol.md §6.2), in
// seconds. In each phase (Initials, then Responses; a restart's alike) the
// first resend waits clientDefaultResendFirst, or clientResendRTTs times the
// last measured round trip but at least clientMinResendFirst; every later gap
// doubles, up to ClientConfig.ResendInterval (1 s). So a lost packet costs
// about 100 ms instead of 1 s, and a phase's timer sends at most 5 packets in
// its first second (at 0, 0.05, 0.15, 0.35, 0.75 s with the 50 ms floor), 4
// with the 100 ms default, then one a second: far inside every per-source
// budget above.
const (
	clientDefaultResendFirst = 0.1
	clientMinResendFirst     = 0.05
	clientResendRTTs         = 3
)
