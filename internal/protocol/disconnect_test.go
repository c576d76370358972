package protocol

import (
	"strconv"
	"testing"
)

// Every reason has a label and a text, and no two share a label (the
// metric's series would collide).
func TestDisconnectNames(t *testing.T) {
	seen := map[string]DisconnectReason{}
	for r := DisconnectReason(1); r < NumDisconnectReasons; r++ {
		n := disconnectNames[r]
		if n.label == "" || n.text == "" {
			t.Errorf("reason %d has no label or text in disconnectNames", r)
		}
		if o, ok := seen[n.label]; ok {
			t.Errorf("reasons %d and %d share the label %q", o, r, n.label)
		}
		seen[n.label] = r
	}
	if got := DisconnectReason(NumDisconnectReasons).Label(); got != "reason_"+strconv.Itoa(NumDisconnectReasons) {
		t.Errorf("an unknown reason is labelled %q", got)
	}
}
