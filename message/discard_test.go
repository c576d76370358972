package message

import "testing"

// TestDiscard: a receiver that takes no messages discards them: each is
// counted as DropUnhandled, none as delivered, and the storage of the
// reliable ones is freed.
func TestDiscard(t *testing.T) {
	l := testLayer(t, nil)
	e := l.NewEndpoint()
	kinds := []Kind{ReliableOrdered, Unreliable, Sequenced}
	mustReceive(t, e, payloadOf(kinds,
		entry{ch: 0, id: 0, data: []byte("reliable")},
		entry{ch: 1, data: []byte("unreliable")},
		entry{ch: 2, id: 0, data: []byte("sequenced")}))
	if n := e.Discard(); n != 3 {
		t.Fatalf("Discard took %d messages, want the packet's 3", n)
	}
	mustReceive(t, e, payloadOf(kinds, entry{ch: 0, id: 2, data: []byte("out of order")}))
	if n := e.Discard(); n != 0 {
		t.Fatalf("Discard took %d messages, want none: the one received waits for id 1", n)
	}
	mustReceive(t, e, payloadOf(kinds, entry{ch: 0, id: 1, data: []byte("the gap")}))
	if n := e.Discard(); n != 2 {
		t.Fatalf("Discard took %d messages, want the gap and the one behind it", n)
	}
	if d := l.Drops()[DropUnhandled]; d != 5 {
		t.Errorf("%d counted unhandled, want 5", d)
	}
	if st := e.Stats(); st.Delivered != 0 {
		t.Errorf("Delivered %d after Discard, want 0", st.Delivered)
	}
	if h := l.Held(); h != 0 {
		t.Errorf("%d bytes held after Discard", h)
	}
}
