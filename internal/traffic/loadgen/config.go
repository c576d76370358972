package loadgen

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
	"github.com/udpgate/udpgate/message"
	"github.com/udpgate/udpgate/token"
)

// Mode is what the simulated clients send and what counts as an answer.
type Mode uint8

const (
	// ModeEcho sends PacketSize raw bytes; any reply from the server is the
	// answer. For raw echo servers (the baseline).
	ModeEcho Mode = iota
	// ModeInitial sends Initials; the answer is a Challenge.
	ModeInitial
	// ModeResponse sends, from each connected client, the Response that
	// connected it; the answer is an Ack. Needs Connect.
	ModeResponse
	// ModeData sends Data packets; the answer is the echoed Data packet.
	// Needs Connect.
	ModeData
	numModes
)

var modeNames = [numModes]string{"echo", "initial", "response", "data"}

func (m Mode) String() string {
	if m < numModes {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ParseMode returns the mode named s (as Mode.String spells it).
func ParseMode(s string) (Mode, error) {
	for i, n := range modeNames {
		if n == s {
			return Mode(i), nil
		}
	}
	return 0, fmt.Errorf("loadgen: unknown mode %q (want echo, initial, response or data)", s)
}

// NeedsConnect reports whether the mode runs on connected clients, which
// Generator.Connect makes.
func (m Mode) NeedsConnect() bool { return m == ModeResponse || m == ModeData }

// MessageMode is what a ModeData Run sends: Data packets, or messages on
// one channel of the tools' layout (internal/msgcfg).
type MessageMode uint8

const (
	// MessagesOff: Data packets (the default).
	MessagesOff MessageMode = iota
	// MessagesReliable: messages on the reliable-ordered channel
	// (msgcfg.Reliable).
	MessagesReliable
	// MessagesUnreliable: messages on the unreliable channel
	// (msgcfg.Unreliable).
	MessagesUnreliable
	numMessageModes
)

var messageModeNames = [numMessageModes]string{"off", "reliable", "unreliable"}

func (m MessageMode) String() string {
	if m < numMessageModes {
		return messageModeNames[m]
	}
	return fmt.Sprintf("MessageMode(%d)", uint8(m))
}

// ParseMessageMode returns the message mode named s (as
// MessageMode.String spells it; "" is off).
func ParseMessageMode(s string) (MessageMode, error) {
	if s == "" {
		return MessagesOff, nil
	}
	for i, n := range messageModeNames {
		if n == s {
			return MessageMode(i), nil
		}
	}
	return 0, fmt.Errorf("loadgen: unknown message mode %q (want reliable, unreliable or off)", s)
}

// channel is the msgcfg channel a message mode sends on.
func (m MessageMode) channel() int {
	if m == MessagesUnreliable {
		return msgcfg.Unreliable
	}
	return msgcfg.Reliable
}

// Defaults. They are tuned for this machine class (2 vCPUs shared with the
// server under test); see tuning.md at the repository root.
const (
	// DefaultSockets: two load sockets, one per core, so the generator can
	// use both cores when the server leaves room, as the 2-socket echo
	// measurements of docs/limits.md did.
	DefaultSockets = 2
	// DefaultBatch: datagrams per sendmmsg/recvmmsg. Above 32 the system
	// call overhead is already under 3 % of the kernel's per-packet work.
	DefaultBatch = 32
	// DefaultWindow: outstanding requests per socket. Enough to keep a
	// server's batches full (it reads up to 32–64 at a time per socket)
	// without filling its 4 MiB receive buffer (≈ 5000 small datagrams).
	DefaultWindow = 256
	// DefaultPacketSize is ModeEcho's datagram size: a small game packet.
	DefaultPacketSize = 48
	// DefaultPayloadSize is ModeData's payload: 8 bytes of send time, the
	// rest padding. With the 19-byte connection header it makes a 51-byte
	// datagram, as small as a typical game update.
	DefaultPayloadSize = 32
	// DefaultLossTimeout: a request unanswered this long is lost. Loopback
	// round trips under load are well under 10 ms.
	DefaultLossTimeout = 100 * time.Millisecond
	// DefaultConnectTimeout: a handshake that makes no progress for this
	// long fails (docs/protocol.md §6's default).
	DefaultConnectTimeout = 10 * time.Second
	// connTimeout: a connected client that has accepted no packet from
	// the server for this long ends (docs/protocol.md §7.5's default).
	connTimeout = 5 * time.Second
	// DefaultKeepAlive: a connected client that has sent nothing for this
	// long sends a KeepAlive (docs/protocol.md §7's default interval), so a
	// slow Rate does not let the server time it out.
	DefaultKeepAlive = time.Second
	// DefaultResendInterval: the longest gap between a client's handshake
	// resends (docs/protocol.md §6.2's default), which handshake.ClientHandshake
	// backs off to from its first resend gap (100 ms, or 3 round trips), so
	// handshake latency percentiles include what a real client waits after a
	// loss.
	DefaultResendInterval = time.Second
	// DefaultSocketBuffer: SO_RCVBUF/SO_SNDBUF of the load sockets.
	DefaultSocketBuffer = 4 << 20
	// DefaultMessageSize: a message's bytes: 8 of first-send time, 8 of
	// its number on its client, the rest padding.
	DefaultMessageSize = 64
	// MinMessageSize: the time and the number must fit.
	MinMessageSize = 16
	// DefaultMessageRate: messages per second per client.
	DefaultMessageRate = 10
	// DefaultMessageDrain: at the end of a Run with reliable messages, how
	// long the clients wait for the echoes of messages still in flight
	// (resending as the message layer says) before counting them missing.
	DefaultMessageDrain = 5 * time.Second
	// DefaultBulkRate: bulk messages per second per client (Config.BulkSize).
	DefaultBulkRate = 1
	// msgPollEvery: how often a worker looks for message timers due
	// (resends, acks, stalls); less often with many clients.
	msgPollEvery = time.Millisecond

	// DefaultFirstSource is the first simulated client address. 127.0.0.x
	// is left to servers and other tools.
	DefaultFirstSource = "127.1.0.1"

	// DefaultTokenExpire: sealed-mode tokens stay valid this long after
	// New, longer than any phase, so that every phase of a generator's life
	// can prove them.
	DefaultTokenExpire = time.Hour
	// DefaultTokenTimeout is the connection timeout sealed-mode tokens
	// carry (a netcode.io server uses it; udpgate's keeps its own
	// Timeout).
	DefaultTokenTimeout = 10 * time.Second

	// MaxClients bounds a generator: in ModeData each client holds a
	// seqwin.SeqState (about 600 bytes).
	MaxClients = 1_000_000
	// MaxSockets bounds the load sockets (one goroutine and thread each).
	MaxSockets = 1024
	// MaxPhase is the longest any phase may run, whatever the caller asks.
	MaxPhase = 10 * time.Minute
)

// Config describes a load.
type Config struct {
	// Server is the address under load. It must be an IPv4 loopback
	// address (127.0.0.0/8).
	Server netip.AddrPort
	Mode   Mode
	// Clients is the number of simulated clients.
	Clients int
	// Sockets is the number of load sockets (0: DefaultSockets). Sources,
	// when set, overrides it.
	Sockets int
	// Sources, if > 0, is the number of distinct source addresses: the
	// generator then opens ⌈Clients/Sources⌉ sockets, one port per client
	// at each address.
	Sources int
	// FirstSource is the first client address (zero: DefaultFirstSource).
	// Addresses are taken in order, skipping those ending in .0 and .255,
	// and must all lie in 127.0.0.0/8.
	FirstSource netip.Addr
	// Batch is the datagram count of each sendmmsg/recvmmsg (0: default).
	Batch int
	// Window is the most requests outstanding per socket (0: default).
	// Connect uses it as the number of handshakes in flight per socket.
	Window int
	// PacketSize is ModeEcho's datagram size (0: default).
	PacketSize int
	// PayloadSize is ModeData's payload size (0: default). Payloads of 8
	// bytes or more carry the send time, from which round-trip latency is
	// measured; smaller ones are timed by the client's last send.
	PayloadSize int
	// Rate, if > 0, is the requests per second each client sends in Run; a
	// client may then have several outstanding. 0 is closed loop: every
	// client sends again as soon as its answer is in, within Window.
	Rate float64
	// Wire settings; they must match the server's.
	Magic           wire.Magic
	NetworkVersion  uint32
	NetworkFeatures uint16
	// LossTimeout, ConnectTimeout, ResendInterval, KeepAlive: see the
	// defaults. A KeepAlive longer than the server's timeout lets idle
	// clients time out; benchmarks whose server never times clients out
	// set it long so that only Data flows.
	LossTimeout    time.Duration
	ConnectTimeout time.Duration
	ResendInterval time.Duration
	KeepAlive      time.Duration
	// MaxPackets bounds the requests Run sends (0: no bound beyond time).
	MaxPackets uint64
	// RecvBuffer and SendBuffer size the load sockets (0: default).
	RecvBuffer int
	SendBuffer int

	// Messages (ModeData only), if not MessagesOff: Run sends messages
	// instead of Data, through one message.Endpoint per client over
	// Messages packets (protocol.KindMessages), at MessageRate per client
	// (0: DefaultMessageRate), each MessageSize bytes (0:
	// DefaultMessageSize; at least MinMessageSize) carrying its first-send
	// time and its number, and counts the server's echoes (cmd/server's
	// echo application sends each message back on its channel).
	// MessageConfig is the clients' message layer, which must match the
	// server's channels (zero: msgcfg.Config(0, 0), the tools' layout).
	// MessageDrain bounds the wait for reliable echoes at the end of a Run
	// (0: DefaultMessageDrain). MaxPackets bounds the messages sent.
	Messages      MessageMode
	MessageSize   int
	MessageRate   float64
	MessageConfig message.Config
	MessageDrain  time.Duration

	// BulkSize (ModeData only), if > 0, adds a bulk stream to every
	// client: BulkSize-byte messages (at least MinMessageSize, at most
	// MessageConfig.MaxMessageSize, which the server must allow too) on
	// the layout's bulk channel (msgcfg.Bulk, reliable-ordered and
	// bulk), BulkRate per client per second (0: DefaultBulkRate; it may
	// be fractional), beside the Messages traffic or alone (then the
	// clients send only bulk messages). Bulk messages carry the same
	// header as the others (first-send time and number) with numbers and
	// counts of their own (Counters.BulkSent …, RunResult.BulkLatency).
	// A bulk message the endpoint's queue refuses (message.ErrQueueFull:
	// the server or the send rate does not keep up) is skipped and
	// counted (Counters.BulkRefused), not retried. With bulk, the
	// default MessageDrain grows by the time the queued bulk bytes take
	// to go and come back at the send rate.
	BulkSize int
	BulkRate float64

	// Sealed mode (docs/protocol.md §11; ModeData only). PrivateKey, if not
	// nil, is the server's private key: the generator makes one netcode.io
	// connect token per client with it (token.Generate, for ProtocolID),
	// each client proves its token right after the Challenge (no Response, no Ack), and every connection
	// packet both ways is sealed. The tokens are made from a secret drawn at
	// New, so a client's token and keys are the same at every proof
	// without being stored.
	PrivateKey *[token.KeyBytes]byte
	ProtocolID uint64
	// TokenExpire is how long the tokens are valid from New (0:
	// DefaultTokenExpire); TokenTimeout is the connection timeout they carry
	// (0: DefaultTokenTimeout; negative: none).
	TokenExpire  time.Duration
	TokenTimeout time.Duration
	// TokenAddresses are the server addresses the tokens admit to (nil:
	// Server alone). A server refuses a token that does not list one of
	// its public addresses.
	TokenAddresses []netip.AddrPort
}

// sealed reports whether the clients run in sealed mode.
func (c *Config) sealed() bool { return c.PrivateKey != nil }

// withDefaults validates c and fills its zero fields.
func (c Config) withDefaults() (Config, error) {
	if err := CheckServer(c.Server); err != nil {
		return c, err
	}
	if c.Mode >= numModes {
		return c, fmt.Errorf("loadgen: unknown mode %d", c.Mode)
	}
	if c.Clients < 1 || c.Clients > MaxClients {
		return c, fmt.Errorf("loadgen: %d clients: use 1 to %d", c.Clients, MaxClients)
	}
	if c.Sockets < 0 || c.Sources < 0 || c.Batch < 0 || c.Window < 0 || c.PacketSize < 0 ||
		c.PayloadSize < 0 || c.Rate < 0 || c.LossTimeout < 0 || c.ConnectTimeout < 0 ||
		c.ResendInterval < 0 || c.KeepAlive < 0 || c.RecvBuffer < 0 || c.SendBuffer < 0 {
		return c, errors.New("loadgen: negative setting (0 takes the default)")
	}
	c.Sockets = cmp.Or(c.Sockets, DefaultSockets)
	if c.Sources > 0 {
		c.Sockets = (c.Clients + c.Sources - 1) / c.Sources
	}
	c.Sockets = min(c.Sockets, c.Clients)
	if c.Sockets > MaxSockets {
		return c, fmt.Errorf("loadgen: %d clients over %d source addresses need %d sockets (at most %d): use more sources",
			c.Clients, c.Sources, c.Sockets, MaxSockets)
	}
	if !c.FirstSource.IsValid() {
		c.FirstSource = netip.MustParseAddr(DefaultFirstSource)
	}
	if _, err := sourceAddr(c.FirstSource, c.perSocket(0)-1); err != nil {
		return c, err
	}
	c.Batch = cmp.Or(c.Batch, DefaultBatch)
	c.Batch = min(c.Batch, 1024)
	c.Window = cmp.Or(c.Window, DefaultWindow)
	c.PacketSize = cmp.Or(c.PacketSize, DefaultPacketSize)
	if c.PacketSize > protocol.MaxDatagramLimit {
		return c, fmt.Errorf("loadgen: PacketSize %d is above %d", c.PacketSize, protocol.MaxDatagramLimit)
	}
	c.PayloadSize = cmp.Or(c.PayloadSize, DefaultPayloadSize)
	dataLen := wire.ConnLen(c.Magic, protocol.KindData, c.PayloadSize)
	if c.sealed() {
		dataLen = wire.SealedConnLen(c.Magic, c.PayloadSize)
	}
	if dataLen > protocol.DefaultMaxDatagram {
		return c, fmt.Errorf("loadgen: PayloadSize %d makes %d-byte Data packets, above the server's default %d",
			c.PayloadSize, dataLen, protocol.DefaultMaxDatagram)
	}
	if c.sealed() {
		if c.Mode != ModeData {
			return c, fmt.Errorf("loadgen: sealed mode (a PrivateKey) runs on Data connections: use mode data, not %v", c.Mode)
		}
		if c.TokenExpire < 0 {
			return c, errors.New("loadgen: negative TokenExpire (0 takes the default)")
		}
		c.TokenExpire = cmp.Or(c.TokenExpire, DefaultTokenExpire)
		c.TokenTimeout = cmp.Or(c.TokenTimeout, DefaultTokenTimeout)
		if c.TokenAddresses == nil {
			c.TokenAddresses = []netip.AddrPort{c.Server}
		}
	}
	if err := c.messageDefaults(); err != nil {
		return c, err
	}
	c.LossTimeout = cmp.Or(c.LossTimeout, DefaultLossTimeout)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, DefaultConnectTimeout)
	c.ResendInterval = cmp.Or(c.ResendInterval, DefaultResendInterval)
	c.KeepAlive = cmp.Or(c.KeepAlive, DefaultKeepAlive)
	c.RecvBuffer = cmp.Or(c.RecvBuffer, DefaultSocketBuffer)
	c.SendBuffer = cmp.Or(c.SendBuffer, DefaultSocketBuffer)
	return c, nil
}

// perSocket is the number of clients socket s serves: clients s, s+S, ….
func (c *Config) perSocket(s int) int { return (c.Clients - s + c.Sockets - 1) / c.Sockets }

// SourcesUsed is the number of distinct source addresses the load uses.
func (c *Config) SourcesUsed() int { return c.perSocket(0) }

// CheckServer refuses every destination but an IPv4 loopback address: the
// generator sends hundreds of thousands of datagrams a second and must never
// aim them at another host.
func CheckServer(ap netip.AddrPort) error {
	a := ap.Addr().Unmap()
	switch {
	case !ap.IsValid() || ap.Port() == 0:
		return fmt.Errorf("loadgen: server address %v is not a host:port", ap)
	case a.Is6() && a.IsLoopback():
		return fmt.Errorf("loadgen: server %v: IPv6 is not supported; many source addresses exist only in 127.0.0.0/8, so use an IPv4 loopback server such as 127.0.0.1:%d", ap, ap.Port())
	case !a.Is4() || !a.IsLoopback():
		return fmt.Errorf("loadgen: server %v is not a loopback address: load is only sent to 127.0.0.0/8 (run the server locally, e.g. -listen 127.0.0.1:%d)", ap, ap.Port())
	}
	return nil
}

// messages reports whether Run sends messages (small ones, bulk ones or
// both): the clients then have message endpoints.
func (c *Config) messages() bool { return c.Messages != MessagesOff || c.BulkSize > 0 }

// bulk reports whether the clients send bulk messages.
func (c *Config) bulk() bool { return c.BulkSize > 0 }

// msgPayload is the room for message entries in one Messages packet of a
// DefaultMaxDatagram datagram, sealed or not.
func (c *Config) msgPayload() int {
	if c.sealed() {
		return protocol.DefaultMaxDatagram - wire.SealedConnLen(c.Magic, 0)
	}
	return protocol.DefaultMaxDatagram - wire.ConnLen(c.Magic, protocol.KindMessages, 0)
}

// messageDefaults validates the message settings and fills their zeros.
func (c *Config) messageDefaults() error {
	if c.Messages >= numMessageModes {
		return fmt.Errorf("loadgen: unknown message mode %d", c.Messages)
	}
	if c.BulkSize < 0 || !(c.BulkRate >= 0 && c.BulkRate <= 1e6) {
		return errors.New("loadgen: negative BulkSize, or a BulkRate negative or above 1e6 (0 takes the default)")
	}
	if !c.messages() {
		return nil
	}
	if c.Mode != ModeData {
		return fmt.Errorf("loadgen: messages run on Data connections: use mode data, not %v", c.Mode)
	}
	if c.MessageSize < 0 || !(c.MessageRate >= 0 && c.MessageRate <= 1e6) || c.MessageDrain < 0 {
		return errors.New("loadgen: negative message setting (0 takes the default), or a MessageRate above 1e6")
	}
	c.MessageSize = cmp.Or(c.MessageSize, DefaultMessageSize)
	c.MessageRate = cmp.Or(c.MessageRate, DefaultMessageRate)
	if len(c.MessageConfig.Channels) == 0 {
		c.MessageConfig = msgcfg.Config(c.MessageConfig.MaxMessageSize, c.MessageConfig.SendRate)
	}
	l, err := message.NewLayer(c.MessageConfig, c.msgPayload())
	if err != nil {
		return fmt.Errorf("loadgen: MessageConfig: %w", err)
	}
	ep := l.NewEndpoint()
	defer ep.Release()
	if c.Messages != MessagesOff {
		if len(c.MessageConfig.Channels) <= c.Messages.channel() {
			return fmt.Errorf("loadgen: MessageConfig has %d channels: %v messages go on channel %d", len(c.MessageConfig.Channels), c.Messages, c.Messages.channel())
		}
		most := ep.MaxSize(c.Messages.channel())
		if c.MessageSize < MinMessageSize || c.MessageSize > most {
			return fmt.Errorf("loadgen: MessageSize %d: %v messages are %d to %d bytes (the send time and a number take %d)",
				c.MessageSize, c.Messages, MinMessageSize, most, MinMessageSize)
		}
	}
	if c.bulk() {
		if err := c.bulkDefaults(ep); err != nil {
			return err
		}
	}
	if c.MessageDrain == 0 {
		c.MessageDrain = DefaultMessageDrain + c.bulkTransfer()
	}
	return nil
}

// bulkDefaults validates the bulk settings with an endpoint of the
// clients' message layer and fills their zeros.
func (c *Config) bulkDefaults(ep *message.Endpoint) error {
	c.BulkRate = cmp.Or(c.BulkRate, DefaultBulkRate)
	chs := c.MessageConfig.Channels
	if len(chs) <= msgcfg.Bulk || chs[msgcfg.Bulk].Kind != message.ReliableOrdered {
		return fmt.Errorf("loadgen: MessageConfig has no reliable-ordered channel %d for bulk messages (the tools' layout, internal/msgcfg, has)", msgcfg.Bulk)
	}
	if c.BulkSize < MinMessageSize {
		return fmt.Errorf("loadgen: BulkSize %d: bulk messages are at least %d bytes (the send time and a number)", c.BulkSize, MinMessageSize)
	}
	if most := ep.MaxSize(msgcfg.Bulk); c.BulkSize > most {
		return fmt.Errorf("loadgen: BulkSize %d is above the largest reliable message, MessageConfig.MaxMessageSize %d: raise it (up to %d), and the server's as well",
			c.BulkSize, most, message.MaxMessageSizeLimit)
	}
	// The channel's queue must take one bulk message when empty, or every
	// send would be refused: the message layer keeps room for one
	// largest message unless the unit count is what runs out.
	if err := ep.Send(msgcfg.Bulk, make([]byte, c.BulkSize), 0); err != nil {
		return fmt.Errorf("loadgen: a bulk message of %d bytes does not fit the bulk channel's empty queue: %w", c.BulkSize, err)
	}
	return nil
}

// bulkTransfer is about how long the bulk messages a client may have
// queued take to reach the server and come back at the send rate (both
// sides' queues hold 2 × the largest message by default): what the drain
// at the end of a Run adds with bulk (0 without).
func (c *Config) bulkTransfer() time.Duration {
	if !c.bulk() {
		return 0
	}
	queued := 2 * max(cmp.Or(c.MessageConfig.MaxMessageSize, message.DefaultMaxMessageSize), 64<<10)
	if len(c.MessageConfig.Channels) > msgcfg.Bulk {
		queued = max(queued, c.MessageConfig.Channels[msgcfg.Bulk].MaxQueued)
	}
	rate := cmp.Or(c.MessageConfig.SendRate, message.DefaultSendRate)
	return time.Duration(2 * float64(queued) / float64(rate) * float64(time.Second))
}
