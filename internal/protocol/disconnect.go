package protocol

import "strconv"

// DisconnectReason says why a connection ended: the byte of a Disconnect
// packet (docs/protocol.md §7), and the index of conn's Stats.Disconnects.
// conn.DisconnectReason is an alias of it. The reasons below are untyped
// constants, so they compare with a payload byte as they are and convert to
// a DisconnectReason where one is wanted.
type DisconnectReason uint8

// Disconnect reasons (docs/protocol.md §7). A new reason is a constant here
// and its label and text in disconnectNames; NumDisconnectReasons follows.
const (
	DisconnectClosed   = 1
	DisconnectShutdown = 2
	DisconnectTimedOut = 3
	DisconnectReplaced = 4

	// Sealed mode's refusals of a proof (docs/protocol.md §11.3): sent
	// unsealed (5, 6: the server has no key the client could check) or
	// sealed (7, 8, 9).
	DisconnectTokenExpired  = 5
	DisconnectTokenInvalid  = 6
	DisconnectForeignServer = 7
	DisconnectTokenInUse    = 8
	DisconnectServerFull    = 9

	// DisconnectStalled: the peer left a reliable message unacknowledged
	// for the stall bound (docs/protocol.md §14).
	DisconnectStalled = 10
	// DisconnectTokenRequired (sealed mode): the server needs a connect
	// token and the client sent connection packets in clear; sent in
	// clear with the connection's Tag (docs/protocol.md §11.3).
	DisconnectTokenRequired = 11
	// DisconnectAddressLimit (sealed mode): the token was proven, but the
	// server holds as many connections from the client's address or
	// network as it allows; sealed, as 7–9.
	DisconnectAddressLimit = 12
	// DisconnectRefused (sealed mode): the token was proven, but the
	// application refused the client (the server's Accept hook); sealed,
	// as 7–9.
	DisconnectRefused = 13
	// DisconnectOverBudget: the server's receive memory for messages was
	// full and the connection held more than its fair share of it
	// (docs/protocol.md §14.5): ended, heaviest first, to make room for
	// the others.
	DisconnectOverBudget = 14

	// NumDisconnectReasons bounds the reasons: a Disconnect byte at or
	// above it is read as DisconnectClosed.
	NumDisconnectReasons = DisconnectOverBudget + 1
)

// disconnectNames are each reason's metric label (snake_case, stable) and
// its text for errors and logs.
var disconnectNames = [NumDisconnectReasons]struct{ label, text string }{
	DisconnectClosed:        {"closed", "closed"},
	DisconnectShutdown:      {"shutdown", "server shutdown"},
	DisconnectTimedOut:      {"timed_out", "timed out"},
	DisconnectReplaced:      {"replaced", "replaced"},
	DisconnectTokenExpired:  {"token_expired", "token expired"},
	DisconnectTokenInvalid:  {"token_invalid", "token invalid (wrong key or protocol id)"},
	DisconnectForeignServer: {"foreign_server", "this server is not in the token"},
	DisconnectTokenInUse:    {"token_in_use", "token already in use from another address"},
	DisconnectServerFull:    {"server_full", "server full"},
	DisconnectStalled:       {"stalled", "stalled: the peer stopped acknowledging messages"},
	DisconnectTokenRequired: {"token_required", "token required: the server is in sealed mode and needs a connect token"},
	DisconnectAddressLimit:  {"address_limit", "too many connections from this address or network"},
	DisconnectRefused:       {"refused", "refused by the server's application"},
	DisconnectOverBudget:    {"over_budget", "held more than its share of the server's receive memory for messages"},
}

// Label is the reason as a metric label: snake_case, stable.
func (r DisconnectReason) Label() string {
	if r < NumDisconnectReasons && disconnectNames[r].label != "" {
		return disconnectNames[r].label
	}
	return "reason_" + strconv.Itoa(int(r))
}

func (r DisconnectReason) String() string {
	if r < NumDisconnectReasons && disconnectNames[r].text != "" {
		return disconnectNames[r].text
	}
	return "reason " + strconv.Itoa(int(r))
}
