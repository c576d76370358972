package conn

import (
	"github.com/udpgate/udpgate/internal/protocol"
)

// DropReason is why a datagram was dropped: the index of Stats.Drops and of
// Client.Drops. The reasons are the protocol's (docs/protocol.md); String
// names each, as logs and metrics label them.
type DropReason uint8

// NumDropReasons is the number of drop reasons, the length of Stats.Drops.
const NumDropReasons = DropReason(protocol.NumDropReasons)

// String is the reason's name, such as "bad_cookie".
func (r DropReason) String() string { return protocol.DropReason(r).String() }
