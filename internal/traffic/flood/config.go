package flood

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/token"
)

// Hard limits. Every run stops by itself: Count and MaxDuration cannot be
// unbounded, and these caps keep a typo from turning a test into a
// minutes-long flood of the machine.
const (
	// MaxCount is the most datagrams one Run sends.
	MaxCount = 10_000_000
	// MaxDurationLimit is the longest MaxDuration.
	MaxDurationLimit = 2 * time.Minute
	// MaxSources bounds the source sockets (each is a file descriptor and
	// a receiving goroutine).
	MaxSources = 4096
	// MaxGrace is the longest drain after sending.
	MaxGrace = 5 * time.Second
	// MaxBatch is the kernel's UIO_MAXIOV: the most datagrams per sendmmsg.
	MaxBatch = 1024
)

// Defaults for zero Config fields.
const (
	DefaultCount       = 100_000
	DefaultMaxDuration = 10 * time.Second
	DefaultSources     = 200
	DefaultBatch       = 64
	// DefaultGrace is long enough for a loaded server on this machine to
	// answer what is still queued (its receive buffer drains in a few
	// milliseconds); the drain also ends early after quietPeriod without
	// a reply.
	DefaultGrace = 300 * time.Millisecond
)

// quietPeriod ends the drain early: once every source has been silent this
// long, late replies are not coming.
const quietPeriod = 50 * time.Millisecond

// firstSource is where default IPv4 sources start. Linux routes all of
// 127.0.0.0/8 to the loopback interface, so these bind without setup, and
// 127.0.2.x stays clear of the 127.0.0.x addresses tests and servers use.
var firstSource = netip.AddrFrom4([4]byte{127, 0, 2, 1})

// ErrNotLoopback is returned for a server or source address outside the
// loopback network: this engine sends hostile traffic and is only ever
// pointed at a server on the same host.
var ErrNotLoopback = errors.New("flood: only loopback addresses (127.0.0.0/8, ::1) may be used")

// Kind is a class of hostile datagram.
type Kind uint8

const (
	// KindInitial: a valid Initial; the server answers a Challenge, at most
	// 32/s per source (burst 64) by default.
	KindInitial Kind = iota
	// KindForged: a Response with a random cookie (mostly with the real
	// SecretId and Timestamp, so it reaches the HMAC check: bad_cookie;
	// some with the other secret or an old Timestamp).
	KindForged
	// KindReplay: a valid Response whose Challenge was obtained at another
	// address, sent from the flood's sources: bad_cookie, since the cookie
	// binds the address.
	KindReplay
	// KindGarbage: empty datagrams, random bytes of random sizes, and
	// near-valid packets each broken in one way (magic, size, type,
	// version, body, terminator, session).
	KindGarbage
	// KindConn: well-formed connection packets with random tags from
	// addresses that hold no connection; the server answers
	// RestartHandshake, at most 4/s per source (burst 8).
	KindConn
	// KindTruncated: valid packets cut short.
	KindTruncated
	// KindOversize: datagrams longer than the server's MaxDatagram.
	KindOversize
	// KindVersion: Initials with another NetworkVersion; the server answers
	// VersionUpgrade, at most 4/s per source and 512 per 300 s in total.
	KindVersion
	// KindProof (sealed mode, docs/protocol.md §11): hostile proof
	// packets carrying the source's own handshake cookie (see Config.
	// ProtocolID): tokens for another protocol id, expired, sealed under
	// another key, bit-flipped; proofs with a broken version info,
	// truncated, oversized; with Config.PrivateKey also tokens that open
	// but list another server, or whose inner seal is forged. The server
	// answers some with a refusal no larger than a tenth of the proof.
	KindProof
	// KindSealed (sealed mode): sealed connection packets with random
	// counters and ciphertext, on the source's own connection (or with
	// random tags when it has none).
	KindSealed
	// NumKinds counts the kinds.
	NumKinds
)

var kindNames = [NumKinds]string{"initial", "forged", "replay", "garbage", "conn", "truncated", "oversize", "version", "proof", "sealed"}

// String returns the kind's name as ParseMix accepts it.
func (k Kind) String() string {
	if k < NumKinds {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Mix weighs the kinds: each datagram is of kind k with probability
// Mix[k] / sum(Mix). The zero Mix means DefaultMix.
type Mix [NumKinds]uint32

// DefaultMix sends every kind of the unsealed protocol equally often. The
// sealed-mode kinds (proof, sealed) are chosen by name: they mean
// something only to a server with a private key, and they make each source
// connect first.
var DefaultMix = Mix{1, 1, 1, 1, 1, 1, 1, 1}

// sealedKinds reports whether m has a sealed-mode kind, for which every
// source connects before the flood.
func (m Mix) sealedKinds() bool { return m[KindProof] > 0 || m[KindSealed] > 0 }

// maxWeight keeps the sum of weights far from overflow.
const maxWeight = 1_000_000

// ParseMix parses "initial=2,garbage=1,...": kinds not named get weight 0.
// "" is DefaultMix.
func ParseMix(s string) (Mix, error) {
	if strings.TrimSpace(s) == "" {
		return DefaultMix, nil
	}
	var m Mix
	for part := range strings.SplitSeq(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Mix{}, fmt.Errorf("flood: mix entry %q has no weight: write kind=weight, e.g. initial=1", part)
		}
		k, ok := kindByName(strings.TrimSpace(name))
		if !ok {
			return Mix{}, fmt.Errorf("flood: mix names unknown kind %q: use %s", name, strings.Join(kindNames[:], ", "))
		}
		w, err := strconv.ParseUint(strings.TrimSpace(val), 10, 32)
		if err != nil || w > maxWeight {
			return Mix{}, fmt.Errorf("flood: mix weight %q of %s is not a whole number from 0 to %d", val, k, maxWeight)
		}
		m[k] = uint32(w)
	}
	if m.total() == 0 {
		return Mix{}, fmt.Errorf("flood: mix %q gives every kind weight 0: give at least one kind a positive weight", s)
	}
	return m, nil
}

func kindByName(name string) (Kind, bool) {
	for k, n := range kindNames {
		if n == name {
			return Kind(k), true
		}
	}
	return 0, false
}

// String formats m as ParseMix accepts it.
func (m Mix) String() string {
	var b strings.Builder
	for k, w := range m {
		if w == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%d", Kind(k), w)
	}
	return b.String()
}

func (m Mix) total() uint64 {
	var t uint64
	for _, w := range m {
		t += uint64(w)
	}
	return t
}

// Config describes one flood. The zero value of every field but Server takes
// the default named beside it.
type Config struct {
	// Server is the target. It must be a loopback address.
	Server netip.AddrPort

	// Sources are the addresses to send from, one UDP socket each, bound
	// to addr:0, so the server sees len(Sources) distinct sources (an
	// address may repeat: its sockets get distinct ports). All must be
	// loopback addresses of the server's family. Empty: NumSources
	// addresses from 127.0.2.1 up (IPv4), or ::1 repeated (IPv6).
	Sources    []netip.Addr
	NumSources int // 0: DefaultSources (200)

	// Mix weighs the kinds of datagram (zero: DefaultMix).
	Mix Mix

	// Count is the number of datagrams to send (0: DefaultCount, at most
	// MaxCount). MaxDuration stops sending earlier if reached (0:
	// DefaultMaxDuration, at most MaxDurationLimit); it counts from the
	// start of Run, probe included.
	Count       int
	MaxDuration time.Duration
	// Rate is the target in datagrams per second; 0 sends as fast as
	// sendmmsg allows.
	Rate float64

	// Wire settings of the target, so the handshake kinds are well-formed
	// for it: Magic as conn.Config.Magic ('0'/'1' string), NetworkVersion
	// and NetworkFeatures as the server's, MaxDatagram the server's largest
	// datagram (0: 1200), which oversize datagrams exceed. SessionID is
	// used until the probe's Challenge reveals the server's own.
	Magic           string
	NetworkVersion  uint32
	NetworkFeatures uint16
	MaxDatagram     int
	SessionID       uint8

	// Sealed mode (the proof and sealed kinds). ProtocolID is the
	// server's, so that hostile tokens get past the protocol-id check to
	// the checks behind it (expiry, decryption). PrivateKey, if not nil,
	// is the server's private key: proofs then also carry tokens that open
	// but are refused further on (another server's; a forged inner seal).
	// Neither makes a token the server accepts.
	ProtocolID uint64
	PrivateKey *[token.KeyBytes]byte

	// Batch is the datagrams per sendmmsg (0: DefaultBatch, at most
	// MaxBatch); all datagrams of a batch leave from one source.
	Batch int
	// Senders is the number of sending goroutines (0: 1), each owning a
	// share of the sources. On two cores one sender leaves the other core
	// to the server.
	Senders int
	// Grace bounds the drain after sending, so replies still queued are
	// counted (0: DefaultGrace, at most MaxGrace). The drain ends earlier
	// once no reply has arrived for 50 ms.
	Grace time.Duration
	// Seed makes the traffic reproducible; 0 draws one.
	Seed uint64
}

// settings is a validated Config with defaults filled.
type settings struct {
	Config
	magic   wire.Magic
	sources []netip.Addr
}

func (c Config) settings() (settings, error) {
	s := settings{Config: c}
	if !c.Server.IsValid() || c.Server.Port() == 0 {
		return s, fmt.Errorf("flood: Config.Server %q is not an address with a port: set it to the server's address, e.g. 127.0.0.1:7777", c.Server)
	}
	s.Server = netip.AddrPortFrom(c.Server.Addr().Unmap(), c.Server.Port())
	if !s.Server.Addr().IsLoopback() {
		return s, fmt.Errorf("flood: server %s: %w: run the server on this host and target it at 127.0.0.1 or [::1]", s.Server, ErrNotLoopback)
	}
	m, err := wire.ParseMagic(c.Magic)
	if err != nil {
		return s, fmt.Errorf("flood: Magic: %w", err)
	}
	s.magic = m
	if c.SessionID > 3 {
		return s, fmt.Errorf("flood: SessionID %d is out of range: use 0..3 (the server's -session-id)", c.SessionID)
	}
	if err := bounded("Count", &s.Count, MaxCount, DefaultCount); err != nil {
		return s, err
	}
	if err := bounded("MaxDuration", &s.MaxDuration, MaxDurationLimit, DefaultMaxDuration); err != nil {
		return s, err
	}
	if !(c.Rate >= 0) { // also refuses NaN
		return s, fmt.Errorf("flood: Rate %v is negative: use datagrams per second, or 0 for as fast as possible", c.Rate)
	}
	switch {
	case c.MaxDatagram == 0:
		s.MaxDatagram = protocol.DefaultMaxDatagram
	case c.MaxDatagram < wire.MinConnLen(m)+1 || c.MaxDatagram > protocol.MaxDatagramLimit:
		return s, fmt.Errorf("flood: MaxDatagram %d is out of range: use the server's, %d..%d (default %d)",
			c.MaxDatagram, wire.MinConnLen(m)+1, protocol.MaxDatagramLimit, protocol.DefaultMaxDatagram)
	}
	if c.Mix == (Mix{}) {
		s.Mix = DefaultMix
	}
	if s.Mix[KindProof] > 0 && s.MaxDatagram < wire.ProofLen(m) {
		return s, fmt.Errorf("flood: MaxDatagram %d is below a proof packet's %d bytes, which a sealed-mode server must take: use the server's MaxDatagram",
			s.MaxDatagram, wire.ProofLen(m))
	}
	for k, w := range s.Mix {
		if w > maxWeight {
			return s, fmt.Errorf("flood: Mix weight %d of %s is too large: use 0..%d", w, Kind(k), maxWeight)
		}
	}
	if err := bounded("Batch", &s.Batch, MaxBatch, DefaultBatch); err != nil {
		return s, err
	}
	if err := bounded("Grace", &s.Grace, MaxGrace, DefaultGrace); err != nil {
		return s, err
	}
	if s.sources, err = c.sourceAddrs(s.Server.Addr()); err != nil {
		return s, err
	}
	switch {
	case c.Senders < 0:
		return s, fmt.Errorf("flood: Senders %d is negative: use 1 or more, or 0 for 1", c.Senders)
	case c.Senders == 0:
		s.Senders = 1
	}
	s.Senders = min(s.Senders, len(s.sources))
	return s, nil
}

// sourceAddrs returns the source address of each socket.
func (c Config) sourceAddrs(server netip.Addr) ([]netip.Addr, error) {
	if len(c.Sources) > 0 {
		if len(c.Sources) > MaxSources {
			return nil, fmt.Errorf("flood: %d Sources are too many: use at most %d", len(c.Sources), MaxSources)
		}
		out := make([]netip.Addr, len(c.Sources))
		for i, a := range c.Sources {
			a = a.Unmap()
			if !a.IsLoopback() {
				return nil, fmt.Errorf("flood: source %s: %w", a, ErrNotLoopback)
			}
			if a.Is4() != server.Is4() {
				return nil, fmt.Errorf("flood: source %s and server %s are of different address families: use sources of the server's family", a, server)
			}
			out[i] = a
		}
		return out, nil
	}
	n := c.NumSources
	if err := bounded("NumSources", &n, MaxSources, DefaultSources); err != nil {
		return nil, err
	}
	out := make([]netip.Addr, n)
	a := firstSource
	for i := range out {
		if server.Is6() {
			out[i] = netip.IPv6Loopback() // distinct ports tell them apart
			continue
		}
		out[i] = a
		a = nextHost(a)
	}
	return out, nil
}

// nextHost returns the IPv4 address after a, skipping the .0 and .255 of
// each /24 (some stacks treat them specially) and never leaving 127/8.
func nextHost(a netip.Addr) netip.Addr {
	for {
		a = a.Next()
		b := a.As4()
		if b[0] != 127 || !a.IsValid() {
			return firstSource
		}
		if b[3] != 0 && b[3] != 255 {
			return a
		}
	}
}

// bounded checks setting name's value *v against 0..limit and replaces 0
// with def.
func bounded[T int | time.Duration](name string, v *T, limit, def T) error {
	if *v < 0 || *v > limit {
		use := fmt.Sprintf("1..%v", limit)
		if _, ok := any(limit).(time.Duration); ok {
			use = fmt.Sprintf("at most %v", limit)
		}
		return fmt.Errorf("flood: %s %v is out of range: use %s, or 0 for %v", name, *v, use, def)
	}
	*v = cmp.Or(*v, def)
	return nil
}
