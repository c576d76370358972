package loadgen

import (
	"context"
	"sync"
)

// watch wakes Generator.Await each time a worker publishes changed
// counters.
type watch struct {
	mu sync.Mutex
	ch chan struct{} // closed at the next publish
}

// fire wakes the waiter; a nil watch (no one waits) does nothing.
func (w *watch) fire() {
	if w == nil {
		return
	}
	w.mu.Lock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
	w.mu.Unlock()
}

// next returns a channel closed at the next publish.
func (w *watch) next() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

// Await waits until done accepts the counters, checking them now and each
// time a worker publishes changed ones (once per batch it receives), and
// reports whether done accepted them before ctx ended. It may run during
// a phase, from another goroutine; one Await at a time.
func (g *Generator) Await(ctx context.Context, done func(*Counters) bool) bool {
	w := &watch{}
	for _, wk := range g.workers {
		wk.ctr.watch.Store(w)
	}
	defer func() {
		for _, wk := range g.workers {
			wk.ctr.watch.Store(nil)
		}
	}()
	for {
		next := w.next()
		if c := g.Counters(); done(&c) {
			return true
		}
		select {
		case <-next:
		case <-ctx.Done():
			return false
		}
	}
}
