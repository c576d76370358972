package conn

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// manualClock is a clock that moves only when told to.
type manualClock struct{ ns atomic.Int64 }

func (c *manualClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *manualClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// linked counts the connections the wheel holds.
func (t *timers) linked() int {
	n := 0
	for i := range t.shards {
		w := &t.shards[i]
		w.mu.Lock()
		for _, c := range w.heads {
			for ; c != nil; c = c.timer.next {
				n++
			}
		}
		w.mu.Unlock()
	}
	return n
}

// The wheel sends KeepAlives when they are due and not before, closes
// silent connections at Timeout, keeps active ones, holds no closed
// connection, and catches up after a pause longer than a turn.
func TestTimerWheel(t *testing.T) {
	clk := &manualClock{}
	clk.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	// Housekeeping's own wheel turns once an hour here: this test drives a
	// wheel of its own with a 100 ms slot.
	s := listen(t, Config{Sockets: 1, Now: clk.Now, SweepInterval: time.Hour,
		KeepAlive: time.Second, Timeout: 5 * time.Second})
	const slot = 100 * time.Millisecond
	var tm timers
	tm.init(slot, clk.Now())

	const n = 1000
	conns := make([]*Conn, n)
	sock := s.socks[0]
	for i := range conns {
		p := promotion{addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 3, byte(i >> 8), byte(i)}), 9)}
		p.cookie[0], p.cookie[1] = byte(i), byte(i>>8)
		p.to.ClientID = 1
		c := s.newConn(&p, sock, clk.Now())
		c.timer.home = tm.home()
		if _, ok := s.tab.conns.Insert(p.addr, p.cookie, c); !ok {
			t.Fatal("insert failed")
		}
		s.tab.count.Add(1)
		tm.add(c)
		conns[i] = c
	}
	if got := tm.linked(); got != n {
		t.Fatalf("wheel holds %d connections, want %d", got, n)
	}
	sent := func() (k int) {
		for _, c := range conns {
			k += int(c.Stats().PacketsOut)
		}
		return k
	}
	step := func(d time.Duration) {
		for end := clk.ns.Load() + int64(d); clk.ns.Load() < end; {
			clk.Advance(slot)
			tm.advance(clk.Now())
		}
	}

	step(900 * time.Millisecond)
	if k := sent(); k != 0 {
		t.Fatalf("%d KeepAlives before KeepAlive", k)
	}
	step(100 * time.Millisecond)
	if k := sent(); k != n {
		t.Fatalf("%d KeepAlives at KeepAlive, want %d", k, n)
	}

	// The even half hears from its peers every 500 ms; the odd half is
	// silent and must close at 5 s.
	for range 10 {
		step(500 * time.Millisecond)
		for i := 0; i < n; i += 2 {
			conns[i].lastRecv.Store(clk.ns.Load())
		}
	}
	open := 0
	for i, c := range conns {
		closed := c.closed.Load()
		if closed != (i%2 == 1) {
			t.Fatalf("conn %d closed=%v after 6 s", i, closed)
		}
		if !closed {
			open++
		}
	}
	if got := tm.linked(); got != open {
		t.Fatalf("wheel holds %d connections, %d are open", got, open)
	}
	// Every open one sent a KeepAlive once a second: 6 in 6 s.
	if k := conns[0].Stats().PacketsOut; k != 6 {
		t.Fatalf("an active connection sent %d KeepAlives in 6 s, want 6", k)
	}

	// A pause of ten minutes, longer than a turn of the wheel: the
	// remaining connections time out on the first advance after it.
	clk.Advance(10 * time.Minute)
	tm.advance(clk.Now())
	for i, c := range conns {
		if !c.closed.Load() {
			t.Fatalf("conn %d still open after 10 silent minutes", i)
		}
	}
	if got := tm.linked(); got != 0 {
		t.Fatalf("wheel holds %d closed connections", got)
	}
	if s.Len() != 0 {
		t.Fatalf("server still counts %d connections", s.Len())
	}
}

// A connection closed by its application leaves the wheel at once, so the
// wheel never keeps a closed connection's memory until its slot comes.
func TestTimerWheelRemove(t *testing.T) {
	clk := &manualClock{}
	clk.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	s := listen(t, Config{Sockets: 1, Now: clk.Now, SweepInterval: time.Hour,
		KeepAlive: time.Hour, Timeout: 2 * time.Hour})
	var tm timers
	tm.init(100*time.Millisecond, clk.Now())
	var conns []*Conn
	for i := range 100 {
		p := promotion{addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 4, 0, byte(i)}), 9)}
		p.cookie[0] = byte(i)
		c := s.newConn(&p, s.socks[0], clk.Now())
		c.timer.home = tm.home()
		s.tab.conns.Insert(p.addr, p.cookie, c)
		s.tab.count.Add(1)
		tm.add(c)
		conns = append(conns, c)
	}
	for _, c := range conns[:60] {
		c.Close()
	}
	if got := tm.linked(); got != 40 {
		t.Fatalf("wheel holds %d connections after 60 of 100 closed", got)
	}
	// A closed connection is never added.
	tm.add(conns[0])
	if got := tm.linked(); got != 40 {
		t.Fatalf("adding a closed connection: wheel holds %d", got)
	}
}
