package loadgen

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
)

// Hold (ModeData, messages off) is the receive-memory attack of issue 29,
// for measuring a server's defence (docs/protocol.md §14.5): every
// connected client sends the Messages payloads given (made by hand: an
// unfinished largest message and a window of out-of-order units, say),
// each once, at most perSecond datagrams a second in all (0: 50 000),
// with a KeepAlive every KeepAlive interval meanwhile, then keeps its
// connection alive with KeepAlives until hold has passed
// since the call (at most MaxPhase) or ctx ends. It reads what the server sends, so the
// clients the server ends are counted (Counters: Closed and its reasons;
// the reason over_budget is ClosedOther). It returns the Messages packets
// sent.
func (g *Generator) Hold(ctx context.Context, payloads [][]byte, hold time.Duration, perSecond float64) (int, error) {
	if g.cfg.Mode != ModeData || g.cfg.messages() {
		return 0, errors.New("loadgen: Hold needs ModeData without messages")
	}
	for _, p := range payloads {
		if len(p) == 0 || len(p) > g.cfg.msgPayload() {
			return 0, errors.New("loadgen: a Hold payload is empty or longer than a Messages packet's payload")
		}
	}
	if perSecond <= 0 {
		perSecond = 50_000
	}
	end, err := g.begin(ctx)
	if err != nil {
		return 0, err
	}
	defer end()
	until := g.now() + int64(min(hold, MaxPhase))
	per := perSecond / float64(len(g.workers))
	sent := make([]int, len(g.workers))
	err = g.each(func(w *worker) { sent[w.idx] = w.hold(payloads, until, per) })
	n := 0
	for _, s := range sent {
		n += s
	}
	return n, err
}

// hold is Hold on one worker.
func (w *worker) hold(payloads [][]byte, until int64, perSecond float64) int {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := w.g.now()
	for j := range w.heardAt {
		w.heardAt[j] = start
	}
	sent := 0
	read := func() {
		nr, err := w.s.recv(w.rx)
		if err != nil {
			w.err = err
			return
		}
		now := w.g.now()
		for i := range nr {
			w.answer(i, now, false)
		}
	}
	lastKA := start
	for _, p := range payloads {
		if now := w.g.now(); now-lastKA >= int64(w.cfg.KeepAlive) {
			// A KeepAlive from every client each KeepAlive interval,
			// as the attacker of issue 29 sent: a server that takes
			// no refused packet for a sign of life still hears them.
			lastKA = now
			for j := range w.n {
				if w.state[j] == stConnected {
					w.send(w.buildConn(j, now, protocol.KindKeepAlive), j)
					w.ctr.loc[cKeepAlivesOut]++
				}
			}
		}
		for j := range w.n {
			if w.state[j] != stConnected || w.g.stopped() || w.err != nil {
				continue
			}
			now := w.g.now()
			w.send(w.buildConnWith(j, now, protocol.KindMessages, p), j)
			w.sentAt[j] = now
			sent++
			if w.tx.full() {
				w.flush()
				read()
				// Pace: a burst would only overflow the server's buffer.
				if ahead := time.Duration(float64(sent)/perSecond*1e9) - time.Duration(w.g.now()-start); ahead > 0 {
					time.Sleep(ahead)
				}
			}
		}
	}
	w.flush()
	lastScan := w.g.now()
	for w.err == nil && !w.g.stopped() && w.g.now() < until {
		read()
		if now := w.g.now(); now-lastScan >= int64(100*time.Millisecond) {
			lastScan = now
			w.scan(now) // KeepAlives
		}
		w.ctr.publish()
	}
	w.ctr.publish()
	return sent
}
