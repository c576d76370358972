package message

import (
	"bytes"
	"testing"
)

// Receive memory in shares (docs/protocol.md §14.5): one test per rule.

func unit(id uint16) entry { return entry{id: id, data: []byte("x")} }

// fillRecv has e take out-of-order units from id on (one 64-byte chunk each)
// until one is refused, and returns the refusal and the next id.
func fillRecv(t *testing.T, e *Endpoint, id uint16) (DropReason, uint16) {
	t.Helper()
	for ; ; id++ {
		p := payloadOf(e.l.kinds, unit(id))
		if r := e.Check(p); r != DropNone {
			return r, id
		}
		e.Receive(p, t0)
	}
}

// A 4096-byte budget: 64 units of 64 bytes, of which one is the slack
// (kept units: 63), contended from 32 on.
const shareBudget = 64 * 64

// TestShareFair: while the pool is contended (over half of ReceiveBudget
// held), an endpoint's out-of-order units are refused beyond its fair
// share, ReceiveBudget over the endpoints holding storage (over_share),
// and that is no pressure; one endpoint alone may take the whole pool,
// and its refusal ends nobody (nobody holds more). The full pool refusing
// an endpoint within its share is pressure: Reclaim names the bytes to
// free and the holding above which connections give way.
func TestShareFair(t *testing.T) {
	l := testLayer(t, func(c *Config) { c.ReceiveBudget = shareBudget })
	a := l.NewEndpoint()
	if r, id := fillRecv(t, a, 1); r != DropOverBudget || id != 64 || l.Holders() != 1 {
		t.Fatal(r, id, l.Holders())
	}
	if free, above := l.Reclaim(); free != 63*64-48*64 || above <= a.Held() {
		t.Fatal(free, above, a.Held())
	}
	a.Release()
	a, b, c := l.NewEndpoint(), l.NewEndpoint(), l.NewEndpoint()
	for id := uint16(1); id <= 12; id++ {
		mustReceive(t, a, payloadOf(l.kinds, unit(id)))
	}
	// Two holders: b's share is half the pool, 32 units.
	if r, id := fillRecv(t, b, 1); r != DropOverShare || id != 33 || b.Held() != 32*64 {
		t.Fatal(r, id, b.Held())
	}
	if free, _ := l.Reclaim(); free != 0 {
		t.Fatal("an over_share refusal reported as pressure")
	}
	// c's share is a third (21 units): it gets the 19 left, then the
	// full pool refuses it within its share.
	if r, id := fillRecv(t, c, 1); r != DropOverBudget || id != 20 {
		t.Fatal(r, id)
	}
	free, above := l.Reclaim()
	if free != 63*64-48*64 || above != 20*64 || b.Held() <= above || a.Held() > above {
		t.Fatal(free, above)
	}
	if d := l.Drops(); d[DropOverShare] != 1 || d[DropOverBudget] != 2 {
		t.Fatal(d)
	}
	releaseAll(t, l, a, b, c)
	if l.Holders() != 0 {
		t.Fatal(l.Holders())
	}
}

// TestShareReclaim: Reclaim reports pressure once; ending the heaviest
// (Release) lets the refused endpoint in.
func TestShareReclaim(t *testing.T) {
	l := testLayer(t, func(c *Config) { c.ReceiveBudget = shareBudget })
	a, b := l.NewEndpoint(), l.NewEndpoint()
	fillRecv(t, a, 1)
	l.Reclaim()
	if r := b.Check(payloadOf(l.kinds, unit(1))); r != DropOverBudget {
		t.Fatal(r)
	}
	free, above := l.Reclaim()
	if free != 63*64-48*64 || above != shareBudget/2 || a.Held() <= above {
		t.Fatal(free, above, a.Held())
	}
	if free, _ := l.Reclaim(); free != 0 {
		t.Fatal("pressure reported twice")
	}
	a.Release()
	mustReceive(t, b, payloadOf(l.kinds, unit(1)))
	releaseAll(t, l, a, b)
}

// TestShareNextUnit: a channel's next unit (id == expect), and the units
// that follow it in order in the same packet, pass a pool full of kept
// units, the endpoint's budget and its share: they take the slack on
// their way to Next, which frees them. A unit after a hole does not.
func TestShareNextUnit(t *testing.T) {
	l := testLayer(t, func(c *Config) { c.ReceiveBudget = 4 * shareBudget }) // slack: 4 units
	a, b := l.NewEndpoint(), l.NewEndpoint()
	if r, id := fillRecv(t, a, 2); r != DropOverBudget || id != 2+252 {
		t.Fatal(r, id)
	}
	// b holds nothing; the pool is full. In order: accepted.
	mustReceive(t, b, payloadOf(l.kinds, unit(0), unit(1), unit(2)))
	if _, msgs := drain(b); len(msgs) != 3 {
		t.Fatal(len(msgs))
	}
	if r := b.Check(payloadOf(l.kinds, unit(3), unit(5))); r != DropOverBudget {
		t.Fatal("a unit after a hole passed a full pool:", r)
	}
	// a, holding the pool: units 0 and 1 fill the hole before its 252
	// held units, and all are delivered.
	mustReceive(t, a, payloadOf(l.kinds, unit(0), unit(1)))
	if _, msgs := drain(a); len(msgs) != 254 {
		t.Fatal(len(msgs))
	}
	if l.Held() != 0 || l.Holders() != 0 {
		t.Fatal(l.Held(), l.Holders())
	}
	releaseAll(t, l, a, b)
}

// TestShareNextUnitUndrained: a caller that does not take its messages
// (no Next between packets) gets no free pass: the next units then count
// against the endpoint's budget like out-of-order ones.
func TestShareNextUnitUndrained(t *testing.T) {
	l := testLayer(t, func(c *Config) { c.ConnReceiveBudget = (11+32)*100 + 5*64 })
	e := l.NewEndpoint()
	r, id := fillRecv(t, e, 0)
	if r != DropOverBudget || id != 5 {
		t.Fatal(r, id)
	}
	if _, msgs := drain(e); len(msgs) != 5 {
		t.Fatal(len(msgs))
	}
	mustReceive(t, e, payloadOf(l.kinds, unit(5)))
	releaseAll(t, l, e)
}

// TestShareReassembly: the reassembly in progress is the endpoint's
// guaranteed minimum: its fragments, in order and out of order, are
// accepted while the endpoint is over its share of a contended pool and
// its other out-of-order units are refused; the message completes. Only
// a full pool refuses them, and that is pressure.
func TestShareReassembly(t *testing.T) {
	l := testLayer(t, func(c *Config) { c.ReceiveBudget = 6000 })
	a, b := l.NewEndpoint(), l.NewEndpoint()
	f := func(idx uint16) []byte {
		n := 91
		if idx == 10 {
			n = 90 // 1000 bytes in all: MaxMessageSize
		}
		return payloadOf(l.kinds, frag(idx, idx, 11, string(bytes.Repeat([]byte{byte(idx)}, n))))
	}
	for id := uint16(1); id <= 20; id++ {
		mustReceive(t, b, payloadOf(l.kinds, unit(id)))
	}
	mustReceive(t, a, f(0))
	drain(a)
	// a's out-of-order units after the message, up to its share (half).
	if r, _ := fillRecv(t, a, 20); r != DropOverShare || a.Held() > 3000 {
		t.Fatal(r, a.Held())
	}
	for idx := uint16(10); idx >= 2; idx-- {
		mustReceive(t, a, f(idx))
		if r := a.Check(payloadOf(l.kinds, unit(100))); r != DropOverShare {
			t.Fatal(r)
		}
	}
	if a.Held() <= 3000 {
		t.Fatal("a not over its share:", a.Held())
	}
	mustReceive(t, a, f(1))
	_, msgs := drain(a)
	if len(msgs) != 1 || len(msgs[0]) != 1000 || msgs[0][999] != 10 {
		t.Fatal(len(msgs))
	}
	releaseAll(t, l, a, b)

	// A full pool refuses a reassembly: pressure.
	l = testLayer(t, func(c *Config) { c.ReceiveBudget = shareBudget })
	a, b = l.NewEndpoint(), l.NewEndpoint()
	fillRecv(t, b, 1)
	l.Reclaim()
	if r := a.Check(f(0)); r != DropOverBudget {
		t.Fatal(r)
	}
	if free, above := l.Reclaim(); free == 0 || above != shareBudget/2 {
		t.Fatal("no pressure", free, above)
	}
	releaseAll(t, l, a, b)
}

// TestShareRefusalAlloc: the share rules allocate nothing: a refusal of
// the heaviest holder, a refusal by the full pool (pressure), an in-order
// unit passing the full pool.
func TestShareRefusalAlloc(t *testing.T) {
	l := testLayer(t, func(c *Config) { c.ReceiveBudget = 4 * shareBudget })
	a, c := l.NewEndpoint(), l.NewEndpoint()
	_, id := fillRecv(t, a, 1)
	over := payloadOf(l.kinds, unit(id))
	far, next := payloadOf(l.kinds, unit(5)), payloadOf(l.kinds, unit(0))
	checkSteadyAllocs(t, "round", func() {
		if a.Check(over) == DropNone || c.Check(far) != DropOverBudget || c.Check(next) != DropNone {
			t.Fatal("rules changed")
		}
	})
	releaseAll(t, l, a, c)
}
