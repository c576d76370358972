package conn

import (
	"github.com/udpgate/udpgate/internal/protocol"
)

// DropReason is why a datagram was dropped: the index of Stats.Drops and of
// Client.Drops. The reasons are the protocol's (docs/protocol.md), one
// definition for conn, fastpath and the metrics; String names each, as logs
// and metrics label them, such as "bad_cookie".
type DropReason = protocol.DropReason
