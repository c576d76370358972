package conn

import (
	"sync"
	"sync/atomic"
	"time"
)

// timers are a server's connection timers: KeepAlive after KeepAlive idle,
// close after Timeout silent. A connection sits in a hashed timer wheel at
// its next deadline, so housekeeping visits it about once per KeepAlive, or
// once per wheel turn when its deadlines are further off, instead of on every
// sweep: walking 100k connections every 100 ms cost 6–7 % of the server's
// CPU in the data-100k benchmark, each visit a cache miss on a struct the
// packet path had no reason to touch.
//
// Deadlines move with every packet (lastRecv and lastSend are atomics the
// packet path stores), and the wheel does not follow them: when a
// connection's slot comes up, its deadline is recomputed and it is either
// due (ticked) or moved on. A connection is therefore never late by more
// than one SweepInterval, as with the sweep it replaces.
//
// The wheel is split into timerShards, each with its own lock, so that
// promotion workers adding connections and closes removing them wait at most
// for one shard's share of a tick.
type timers struct {
	interval int64 // SweepInterval in ns: one wheel slot
	shards   [timerShards]timerWheel
	next     atomic.Uint32 // round-robin shard for new connections
}

// timerLink is a connection's place in its wheel.
type timerLink struct {
	prev, next *Conn // guarded by the home wheel's mu, as are slot and linked
	slot       uint32
	// home is the wheel's index plus one (0: none). It is set before the
	// connection is published and never changes, so remove can read it
	// without a lock; an index, not a pointer, keeps Conn small.
	home   uint8
	linked bool
}

type timerWheel struct {
	mu    sync.Mutex
	heads [wheelSlots]*Conn
	tick  int64 // the last slot processed, in SweepIntervals since the epoch
	fire  []*Conn
	_     [64]byte
}

func (t *timers) init(interval time.Duration, now time.Time) {
	t.interval = int64(interval)
	tick := now.UnixNano() / t.interval
	for i := range t.shards {
		t.shards[i].tick = tick
	}
}

// home picks a new connection's wheel, round robin.
func (t *timers) home() uint8 {
	return uint8((t.next.Add(1)-1)%timerShards) + 1
}

// wheel is c's home wheel, or nil.
func (t *timers) wheel(c *Conn) *timerWheel {
	if c.timer.home == 0 {
		return nil
	}
	return &t.shards[c.timer.home-1]
}

// add schedules a new connection, unless it closed already.
func (t *timers) add(c *Conn) {
	w := t.wheel(c)
	w.mu.Lock()
	if !c.closed.Load() && !c.timer.linked {
		w.schedule(c, t.interval)
	}
	w.mu.Unlock()
}

// reschedule moves c to the slot of its deadline now, which moved earlier
// (a sealed connection proven before its proof deadline).
func (t *timers) reschedule(c *Conn) {
	t.remove(c)
	t.add(c)
}

// remove takes a closing connection out of its wheel, so that a wheel never
// keeps a closed connection (and its memory) until its slot comes. The
// caller has set c.closed, so neither add nor advance links it again.
func (t *timers) remove(c *Conn) {
	w := t.wheel(c)
	if w == nil {
		return
	}
	w.mu.Lock()
	if c.timer.linked {
		w.unlink(c)
	}
	w.mu.Unlock()
}

// advance runs every slot up to now: connections whose deadline has come
// are ticked (outside the lock: a tick sends, or closes and so calls
// remove), the others move to their new deadline's slot.
func (t *timers) advance(now time.Time) {
	ns := now.UnixNano()
	target := ns / t.interval
	for i := range t.shards {
		w := &t.shards[i]
		w.mu.Lock()
		from := w.tick + 1
		if target-w.tick > wheelSlots {
			from = target - wheelSlots + 1 // a long pause: each slot once
		}
		fire := w.fire[:0]
		for tk := from; tk <= target; tk++ {
			slot := uint32(tk % wheelSlots)
			c := w.heads[slot]
			w.heads[slot] = nil
			w.tick = tk // slots are now counted from this one
			for c != nil {
				next := c.timer.next
				c.timer.prev, c.timer.next, c.timer.linked = nil, nil, false
				switch {
				case c.closed.Load():
				case deadline(c) <= ns:
					fire = append(fire, c)
				default:
					w.schedule(c, t.interval)
				}
				c = next
			}
		}
		w.tick = max(w.tick, target)
		w.mu.Unlock()
		if len(fire) == 0 {
			continue
		}
		for _, c := range fire {
			c.tick(now)
		}
		w.mu.Lock()
		for _, c := range fire {
			if !c.closed.Load() && !c.timer.linked {
				w.schedule(c, t.interval)
			}
		}
		w.mu.Unlock()
		clear(fire)
		w.fire = fire[:0]
	}
}

// deadline is when c next needs attention: its KeepAlive or its timeout.
func deadline(c *Conn) int64 {
	if c.st.sealed && !c.sec.proven() {
		return c.sec.proofBy
	}
	return min(c.lastSend.Load()+int64(c.st.KeepAlive), c.lastRecv.Load()+c.timeoutNs())
}

// schedule links c into the slot of its deadline: the first slot that
// starts at or after it, at least the next one, at most a turn ahead.
func (w *timerWheel) schedule(c *Conn, interval int64) {
	tk := (deadline(c) + interval - 1) / interval
	tk = min(max(tk, w.tick+1), w.tick+wheelSlots-1)
	slot := uint32(tk % wheelSlots)
	head := w.heads[slot]
	c.timer.prev, c.timer.next = nil, head
	if head != nil {
		head.timer.prev = c
	}
	w.heads[slot] = c
	c.timer.slot, c.timer.linked = slot, true
}

func (w *timerWheel) unlink(c *Conn) {
	if c.timer.prev != nil {
		c.timer.prev.timer.next = c.timer.next
	} else {
		w.heads[c.timer.slot] = c.timer.next
	}
	if c.timer.next != nil {
		c.timer.next.timer.prev = c.timer.prev
	}
	c.timer.prev, c.timer.next, c.timer.linked = nil, nil, false
}
