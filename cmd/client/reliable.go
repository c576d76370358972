package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/message"
)

// connect -reliable: each line of standard input is one message on the
// reliable-ordered channel (msgcfg.Reliable) of the tools' channel layout,
// which cmd/server configures by default (-messages). The message layer
// resends until the server has it, and the echo application sends it back
// on the same channel, so every line comes back, in order, unless the
// connection ends or -wait runs out at the end of input.

// reliableWait is -wait's default with -reliable: lost packets are resent,
// so the echoes are worth waiting for.
const reliableWait = 10 * time.Second

// reliableRetry is how long a line waits when the send queue is full
// before it is offered again (an echo coming back wakes it sooner).
const reliableRetry = 10 * time.Millisecond

// reliableSession handles the connection with -reliable: the echoes come
// as messages; Data, if any, is printed as without -reliable.
type reliableSession struct {
	*session
	// Guarded by session.mu.
	lines     int         // lines sent as messages
	echoed    int         // their echoes, matched in order
	unmatched int         // messages that were no echo of the next line
	inflight  []sentLine  // sent, echo awaited, oldest first
	head      int         // inflight[head:] are awaited
	tooLong   int         // lines not sent: larger than a message
	other     map[int]int // messages on other channels, by channel
}

type sentLine struct {
	text []byte
	at   time.Time
}

var _ conn.MessageHandler = (*reliableSession)(nil)

// OnMessage prints a message and matches an echo on the reliable channel
// to the oldest line awaiting one. msg is borrowed for the call.
func (r *reliableSession) OnMessage(c *conn.Conn, ch int, msg []byte) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := fmt.Fprintln(r.out, printable(msg)); err != nil && r.outErr == nil {
		r.outErr = err
	}
	switch {
	case ch != msgcfg.Reliable:
		if r.other == nil {
			r.other = map[int]int{}
		}
		r.other[ch]++
	case r.head < len(r.inflight) && string(r.inflight[r.head].text) == string(msg):
		rtt := now.Sub(r.inflight[r.head].at)
		r.inflight[r.head] = sentLine{}
		r.head++
		if r.head == len(r.inflight) {
			r.inflight, r.head = r.inflight[:0], 0
		}
		r.echoed++
		r.rtts.add(rtt)
		fmt.Fprintf(r.status, "rtt %v (smoothed %v)\n", roundRTT(rtt), roundRTT(c.RTT()))
	default:
		r.unmatched++
		fmt.Fprintf(r.status, "message on channel %d is not the echo of the next line awaited\n", ch)
	}
	select {
	case r.got <- struct{}{}:
	default:
	}
}

// awaited is the number of lines whose echo has not come.
func (r *reliableSession) awaited() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inflight) - r.head
}

// runReliable sends each line of stdin as a reliable message, waits at the
// end of input for the echoes (up to wait), closes the connection cleanly
// and fails unless every line came back.
func runReliable(ctx context.Context, cli *conn.Client, r *reliableSession, stdin io.Reader, wait time.Duration, server string) error {
	c := cli.Conn()
	limit := c.MaxMessageSize(msgcfg.Reliable)
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	go readLongLines(stdin, limit, lines, readErr, done)
	n := 0
	for {
		select {
		case <-ctx.Done():
			r.statusf("interrupted: closing")
			return r.finishReliable(cli, wait, true)
		case <-cli.Done():
			return explainEnd(cli.Err(), server)
		case line, ok := <-lines:
			if !ok {
				if err := <-readErr; err != nil {
					r.finishReliable(cli, wait, true)
					return fmt.Errorf("reading standard input: %w", err)
				}
				r.awaitEchoes(ctx, cli, wait)
				return r.finishReliable(cli, wait, ctx.Err() != nil)
			}
			n++
			if line == nil { // longer than limit
				r.mu.Lock()
				r.tooLong++
				r.mu.Unlock()
				r.statusf("line %d not sent: longer than the %d bytes a reliable message carries (the server's -message-max-size must allow them too)", n, limit)
				continue
			}
			if len(line) == 0 {
				continue
			}
			if err := r.sendLine(ctx, cli, line); err != nil {
				r.finishReliable(cli, wait, true)
				return fmt.Errorf("sending line %d: %w", n, err)
			}
		}
	}
}

// sendLine sends one line as a message, recording it first (its echo may
// come before SendMessage returns). A full send queue (the server or the
// network slower than standard input) waits for echoes and retries.
func (r *reliableSession) sendLine(ctx context.Context, cli *conn.Client, line []byte) error {
	r.mu.Lock()
	r.inflight = append(r.inflight, sentLine{text: line, at: time.Now()})
	r.lines++
	r.mu.Unlock()
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		err := cli.Conn().SendMessage(msgcfg.Reliable, line)
		if !errors.Is(err, message.ErrQueueFull) {
			if err != nil {
				r.mu.Lock()
				r.inflight = r.inflight[:len(r.inflight)-1]
				r.lines--
				r.mu.Unlock()
				if errors.Is(err, message.ErrNoChannel) {
					return fmt.Errorf("%w: does the server run with -messages (its default)?", err)
				}
			}
			return err
		}
		if t == nil {
			t = time.NewTimer(reliableRetry)
		} else {
			t.Reset(reliableRetry)
		}
		select {
		case <-r.got:
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-cli.Done():
			return cli.Err()
		}
	}
}

// awaitEchoes waits until every line sent has its echo, or wait passes,
// or the connection or ctx ends.
func (r *reliableSession) awaitEchoes(ctx context.Context, cli *conn.Client, wait time.Duration) {
	awaitAll(ctx, cli, wait, r.got, r.awaited)
}

// finishReliable closes the connection cleanly and prints the summary; it
// fails unless every line came back (interrupted: the lines not sent are
// not counted).
func (r *reliableSession) finishReliable(cli *conn.Client, wait time.Duration, interrupted bool) error {
	rtt := cli.Conn().RTT()
	cli.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	missing := len(r.inflight) - r.head
	fmt.Fprintf(r.status, "closed: sent %d lines as reliable messages, %d came back, %d did not", r.lines, r.echoed, missing)
	if rt := r.rtts; rt.n > 0 {
		fmt.Fprintf(r.status, "; rtt min %v avg %v max %v, smoothed %v",
			roundRTT(rt.min), roundRTT(rt.sum/time.Duration(rt.n)), roundRTT(rt.max), roundRTT(rtt))
	}
	fmt.Fprintln(r.status)
	var errs []error
	if r.outErr != nil {
		errs = append(errs, fmt.Errorf("writing echoes: %w", r.outErr))
	}
	if missing > 0 {
		why := fmt.Sprintf("within -wait %v after the end of input", wait)
		if interrupted {
			why = "before the client stopped"
		}
		errs = append(errs, fmt.Errorf("%d of %d lines did not come back %s", missing, r.lines, why))
	}
	if r.tooLong > 0 {
		errs = append(errs, fmt.Errorf("%d of %d lines not sent: longer than the largest message (-message-max-size)", r.tooLong, r.lines+r.tooLong))
	}
	if r.unmatched > 0 {
		errs = append(errs, fmt.Errorf("%d messages on the reliable channel were not the echo of the next line (out of order or foreign)", r.unmatched))
	}
	return errors.Join(errs...)
}

// readLongLines sends each line of rd, without its line ending (\n or
// \r\n), to lines as a new slice; a line longer than limit bytes is read
// to its end and sent as nil. It then closes lines and reports the read
// error, nil at end of input. It stops when done closes.
func readLongLines(rd io.Reader, limit int, lines chan<- []byte, errc chan<- error, done <-chan struct{}) {
	br := bufio.NewReaderSize(rd, 64<<10)
	for {
		var line []byte
		over := false
		var err error
		for {
			var frag []byte
			frag, err = br.ReadSlice('\n')
			if !over {
				if len(line)+len(frag) > limit+2 { // + "\r\n"
					over, line = true, nil
				} else {
					line = append(line, frag...)
				}
			}
			if err != bufio.ErrBufferFull {
				break
			}
		}
		if err != nil && err != io.EOF {
			errc <- err
			close(lines)
			return
		}
		eof := err == io.EOF
		if eof && len(line) == 0 && !over {
			break
		}
		if !over {
			if n := len(line); n > 0 && line[n-1] == '\n' {
				line = line[:n-1]
			}
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			if len(line) > limit {
				over, line = true, nil
			} else if line == nil {
				line = []byte{}
			}
		}
		select {
		case lines <- line:
		case <-done:
			return
		}
		if eof {
			break
		}
	}
	errc <- nil
	close(lines)
}
