package loadgen

import (
	"reflect"
	"testing"
)

// TestCountersLayout checks that every counter index names the Counters
// field of the same meaning: Counters is read as the counter array.
func TestCountersLayout(t *testing.T) {
	var c Counters
	fields := map[int]*uint64{
		cSent: &c.Sent, cReplies: &c.Replies, cLost: &c.Lost, cLate: &c.Late,
		cUnexpected: &c.Unexpected, cRefused: &c.Refused,
		cKeepAlivesIn: &c.KeepAlivesIn, cKeepAlivesOut: &c.KeepAlivesOut,
		cClosed: &c.Closed, cSeqLost: &c.SeqLost,
		cHandshakesStarted: &c.HandshakesStarted, cHandshakes: &c.Handshakes,
		cHandshakeFailures: &c.HandshakeFailures, cHandshakePackets: &c.HandshakePackets,
		cDisconnects: &c.Disconnects,
		cDeniedFull:  &c.DeniedFull, cDeniedRefused: &c.DeniedRefused, cDeniedOther: &c.DeniedOther,
		cTimedOut: &c.TimedOut, cWrongVersion: &c.WrongVersion, cTokenRequired: &c.TokenRequired, cWrongLayout: &c.WrongLayout, cResent: &c.Resent,
		cClosedApp: &c.ClosedApp, cClosedShutdown: &c.ClosedShutdown, cClosedTimedOut: &c.ClosedTimedOut,
		cClosedReplaced: &c.ClosedReplaced, cClosedOther: &c.ClosedOther,
		cRestartHandshakes: &c.RestartHandshakes, cRestarts: &c.Restarts,
		cReconnects: &c.Reconnects, cRestartsFailed: &c.RestartsFailed,
		cRestartsCanceled: &c.RestartsCanceled, cRestartsDenied: &c.RestartsDenied,
		cProofs: &c.Proofs, cRefusedExpired: &c.RefusedExpired, cRefusedInvalid: &c.RefusedInvalid,
		cRefusedForeign: &c.RefusedForeign, cRefusedInUse: &c.RefusedInUse, cRefusedFull: &c.RefusedFull,
		cSealedReplay: &c.SealedReplay, cSealedForged: &c.SealedForged,
		cMsgSent: &c.MessagesSent, cMsgDelivered: &c.MessagesDelivered, cMsgOutOfOrder: &c.MessagesOutOfOrder,
		cMsgDuplicated: &c.MessagesDuplicated, cMsgRefused: &c.MessagesRefused, cMsgDropped: &c.MessagesDropped,
		cMsgUnexpected: &c.MessagesUnexpected, cMsgPackets: &c.MessagePackets, cMsgAckOnly: &c.MessageAcks,
		cMsgStalled: &c.MessagesStalled, cServerSilent: &c.ServerSilent,
		cBulkSent: &c.BulkSent, cBulkDelivered: &c.BulkDelivered, cBulkOutOfOrder: &c.BulkOutOfOrder,
		cBulkDuplicated: &c.BulkDuplicated, cBulkRefused: &c.BulkRefused, cBulkBytes: &c.BulkBytes,
	}
	if len(fields) != nCounters || reflect.TypeOf(c).NumField() != nCounters {
		t.Fatalf("%d indexes mapped, %d fields, %d counters", len(fields), reflect.TypeOf(c).NumField(), nCounters)
	}
	var a [nCounters]uint64
	for i := range a {
		a[i] = uint64(i + 1)
	}
	c = countersFrom(&a)
	for i, f := range fields {
		if *f != uint64(i+1) {
			t.Errorf("counter %d lands in a field holding %d", i, *f)
		}
	}
	d := c.Sub(Counters{Sent: 1, RestartsDenied: 2})
	if d.Sent != 0 || d.RestartsDenied != uint64(cRestartsDenied+1-2) || d.Replies != c.Replies {
		t.Errorf("Sub: %+v", d)
	}
}

func TestEndings(t *testing.T) {
	c := Counters{HandshakeFailures: 4, DeniedFull: 2, TimedOut: 1, RefusedForeign: 1, Closed: 4, ClosedShutdown: 4, RestartsFailed: 5, RestartsDenied: 1}
	got := c.Endings()
	want := []Ending{
		{"handshake denied: server full", 2},
		{"handshake timed out", 1},
		{"token refused: this server is not in the token", 1},
		{"closed by the server: shutdown", 4},
		{"restart timed out (connection lost)", 5},
		{"restart refused by the server (connection lost)", 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Endings() = %v, want %v", got, want)
	}
	if c.Ended() != 14 {
		t.Errorf("Ended() = %d, want 14", c.Ended())
	}
	if len((Counters{Sent: 9, Replies: 9}).Endings()) != 0 {
		t.Error("endings without any")
	}
}
