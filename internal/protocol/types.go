package protocol

import "github.com/udpgate/udpgate/cookie"

// Handshake versions spoken by this implementation (docs/protocol.md §3).
const (
	MinHandshakeVersion = 3
	CurHandshakeVersion = 4
)

// Wire geometry (docs/protocol.md §1–§3, §7).
const (
	// IDBits is SessionID (2) + ClientID (3), written after the magic header.
	IDBits = 5
	// BaseBits counts HandshakeBit through NetworkFeatures.
	BaseBits = 82
	// MaxMagicBits is the longest magic header.
	MaxMagicBits = 32
	// MinRandomBytes and MaxRandomBytes bound RandomData.
	MinRandomBytes = 8
	MaxRandomBytes = 16
	// ConnHeaderBytes is Tag(4) + Seq(2) + Ack(2) + AckBits(8) + Kind(1).
	ConnHeaderBytes = 17
	// SeqModulus: sequence numbers are 14 bits.
	SeqModulus = 1 << 14
	// DefaultMaxDatagram is the default largest datagram; MaxDatagramLimit
	// the largest a configuration may set (1500 MTU − IPv4 − UDP headers).
	DefaultMaxDatagram = 1200
	MaxDatagramLimit   = 1472
)

// PacketType is the handshake packet type (docs/protocol.md §3).
type PacketType uint8

const (
	TypeInitial PacketType = iota
	TypeChallenge
	TypeResponse
	TypeAck
	TypeRestartHandshake
	TypeRestartResponse
	TypeVersionUpgrade
	TypeDenied
	// TypeLayoutMismatch answers an Initial whose declared message layout
	// differs from the server's (docs/protocol.md §3.7).
	TypeLayoutMismatch
	NumPacketTypes
)

var typeNames = [NumPacketTypes]string{"initial", "challenge", "response", "ack",
	"restart_handshake", "restart_response", "version_upgrade", "denied", "layout_mismatch"}

func (t PacketType) String() string {
	if t < NumPacketTypes {
		return typeNames[t]
	}
	return "unknown"
}

// typeBodyBits is each known type's body size in bits (docs/protocol.md §3
// table). A table, because the size rule is on the path of every handshake
// packet.
var typeBodyBits = [NumPacketTypes]int{
	TypeInitial: 225, TypeChallenge: 225, TypeResponse: 225, TypeAck: 225,
	TypeRestartHandshake: 0, TypeRestartResponse: 385, TypeVersionUpgrade: 0, TypeDenied: 168,
	TypeLayoutMismatch: layoutBits,
}

// BodyBits is the type's body size in bits, or -1 for an unknown type.
func (t PacketType) BodyBits() int {
	if t < NumPacketTypes {
		return typeBodyBits[t]
	}
	return -1
}

// Denied reasons (docs/protocol.md §3).
const (
	DeniedServerFull uint8 = 1
	DeniedRefused    uint8 = 2
	// DeniedAddressLimit: the client's IP or network already holds as many
	// connections as the server allows one IP or network.
	DeniedAddressLimit uint8 = 3
)

// Kind is a connection packet's kind (docs/protocol.md §7).
type Kind uint8

const (
	KindData Kind = iota
	KindKeepAlive
	KindDisconnect
	// KindMessages carries message entries (docs/protocol.md §14, package
	// message): one or more bytes.
	KindMessages
)

// Handshake is one decoded or to-be-encoded handshake packet. It is a value
// type: decoders fill a caller-owned Handshake, so parsing allocates nothing.
// Fields a type does not carry are ignored by the encoder and zeroed by the
// decoder.
type Handshake struct {
	SessionID       uint8 // 0..3
	ClientID        uint8 // 0..7
	Restart         bool
	MinVersion      uint8
	CurVersion      uint8
	Type            PacketType
	SentCount       uint8
	NetworkVersion  uint32
	NetworkFeatures uint16

	SecretID   uint8         // Challenge, Response, Ack, RestartResponse
	Timestamp  float64       // Challenge, Response, Ack, RestartResponse
	Cookie     cookie.Cookie // Challenge, Response, Ack, RestartResponse, Denied
	OrigCookie cookie.Cookie // RestartResponse
	Reason     uint8         // Denied
	// Layout: an Initial's declared message layout (zero: none declared),
	// or a LayoutMismatch's, the server's own.
	Layout Layout

	Random    [MaxRandomBytes]byte
	RandomLen uint8 // 8..16
}

// ConnHeader is a connection packet's header (docs/protocol.md §7).
type ConnHeader struct {
	SessionID uint8
	ClientID  uint8
	Tag       uint32
	Seq       uint16
	Ack       uint16
	AckBits   uint64
	Kind      Kind
}

// layoutBits is the size of a Layout on the wire: the 28 bytes an Initial
// carries after its SecretId bit, and a LayoutMismatch's whole body.
const layoutBits = 224

// Layout is the message layout a side declares in its Initial and a server
// compares with its own (docs/protocol.md §3.7): the channels' kinds in
// order, the largest reliable message and the largest datagram, the
// settings both sides of a connection must share for its messages to be
// read as they were meant. The zero Layout declares nothing.
type Layout struct {
	// Channels is the number of channels, 0..32.
	Channels uint8
	// MaxDatagram is the largest datagram the side sends and accepts.
	MaxDatagram uint16
	// MaxMessage is the largest reliable message.
	MaxMessage uint32
	// Kinds holds channel i's kind code (1 reliable-ordered, 2 unreliable,
	// 3 sequenced) in bits 2i and 2i+1; codes of channels ≥ Channels are 0.
	Kinds uint64
}
