package message

import "strconv"

// Drop reasons. DropNone (0) means accepted.
const (
	DropNone         DropReason = iota
	DropMalformed               // truncated entry, bad length encoding, empty payload
	DropReservedBits            // head bits 6-7 set
	DropBadChannel              // channel index not configured
	DropBadFragment             // F on a non-reliable channel, bad count/index, inconsistent fragments
	DropTooLarge                // entry or fragmented message over the limits
	DropOutOfWindow             // reliable unit id beyond the receive window
	DropOverBudget              // storage would exceed the endpoint's or the layer's budget
	DropDuplicate               // reliable unit already delivered or buffered (entry ignored)
	DropStale                   // sequenced message not newer than the newest delivered
	// DropUnhandled: a message delivered to a receiver that takes none
	// (Endpoint.Discard; conn: a Handler without OnMessage). It was
	// acknowledged: a reliable sender must not stall on a deaf peer.
	DropUnhandled
	// DropOverShare: a Messages packet with out-of-order units from a
	// connection that holds its fair share of a contended receive pool
	// (Config.ReceiveBudget; docs/protocol.md §14.5). Unacknowledged, so
	// resent.
	DropOverShare
	// DropQueueFull: an unreliable or sequenced message that arrived
	// while the receiver's poll queue had no room for it (conn's
	// Config.ReceiveQueue, read with ReceiveMessage); Endpoint.Overflow
	// counts it. Reliable messages are never dropped so: they wait in
	// the receive window, and the packets beyond it are refused
	// (over_budget), unacknowledged, and resent.
	DropQueueFull
	// NumDropReasons is the number of DropReason values.
	NumDropReasons = iota
)

var dropLabels = [NumDropReasons]string{
	"none", "malformed", "reserved_bits", "bad_channel", "bad_fragment",
	"too_large", "out_of_window", "over_budget", "duplicate", "stale",
	"unhandled", "over_share", "queue_full",
}

// Label is the reason's stable snake_case name, for metric labels.
func (r DropReason) Label() string {
	if int(r) < len(dropLabels) {
		return dropLabels[r]
	}
	return "unknown_" + strconv.Itoa(int(r))
}

// String returns Label.
func (r DropReason) String() string { return r.Label() }
