package loadgen

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// Await returns at once when the counters already satisfy it, wakes at a
// worker's publish, and gives up when its context ends.
func TestAwait(t *testing.T) {
	g := newGen(t, Config{Server: netip.MustParseAddrPort("127.0.0.1:9"), Mode: ModeData, Clients: 2, Sockets: 2})
	ctx := context.Background()
	if !g.Await(ctx, func(*Counters) bool { return true }) {
		t.Fatal("Await refused counters its condition accepts")
	}
	// The worker publishes only after Await's first look: only the
	// publish's wake-up can end the wait.
	w := g.workers[1]
	looked := make(chan struct{})
	var once sync.Once
	go func() {
		<-looked
		w.ctr.loc[cHandshakes]++
		w.ctr.publish()
	}()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if !g.Await(wctx, func(c *Counters) bool {
		once.Do(func() { close(looked) })
		return c.Handshakes == 1
	}) {
		t.Fatal("Await missed a publish")
	}
	if w.ctr.watch.Load() != nil {
		t.Fatal("Await left its watch installed")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if g.Await(cancelled, func(c *Counters) bool { return c.Handshakes == 2 }) {
		t.Fatal("Await accepted counters its condition refuses")
	}
}
