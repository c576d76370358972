package conn

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/message"
	"github.com/udpgate/udpgate/netsim"
)

// Issue 31's silent failures: each test here failed before its fix.

// recordLog is a slog.Handler that keeps every record's level and
// message.
type recordLog struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (*recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *recordLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.recs = append(l.recs, r)
	l.mu.Unlock()
	return nil
}
func (l *recordLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *recordLog) WithGroup(string) slog.Handler      { return l }

// count returns how many records at level or above contain s.
func (l *recordLog) count(level slog.Level, s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if r.Level >= level && strings.Contains(r.Message, s) {
			n++
		}
	}
	return n
}

// lines returns every record, for failure messages.
func (l *recordLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		out = append(out, r.Level.String()+" "+r.Message)
	}
	return out
}

// TestSimUnhandledMessages: a server configured with channels whose
// Handler has no OnMessage still acknowledges the messages that arrive
// (their sender's reliable channel must not stall), but counts each as
// the message drop unhandled, in Stats and so in the metrics, and says
// so in its log once, however many arrive.
func TestSimUnhandledMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 5 * time.Millisecond})
		logs := &recordLog{}
		s, err := Listen(simServerAddr.String(), Config{Network: nw, Sockets: 2, Logger: slog.New(logs),
			Handler: NopHandler{}, Messages: testChannels})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		cli, err := simDial(t, nw, Config{Messages: testChannels})
		if err != nil {
			t.Fatal(err)
		}
		c := cli.Conn()
		for i := range 3 {
			if err := c.SendMessage(0, []byte("reliable")); err != nil {
				t.Fatal(err)
			}
			if err := c.SendMessage(1, []byte("unreliable")); err != nil {
				t.Fatal(err)
			}
			advance(time.Duration(i+1) * 10 * time.Millisecond)
		}
		advance(time.Second)
		if st := c.MessageStats(); st.InFlight != 0 || st.Acked != 3 {
			t.Errorf("the client's reliable messages: %d in flight, %d acknowledged; want 0 and 3", st.InFlight, st.Acked)
		}
		if got := s.Stats().MessageDrops[message.DropUnhandled]; got != 6 {
			t.Errorf("%d messages counted unhandled, want 6", got)
		}
		if n := logs.count(slog.LevelWarn, "no OnMessage"); n != 1 {
			t.Errorf("%d warnings that the Handler has no OnMessage, want 1; the log:\n%s", n, strings.Join(logs.lines(), "\n"))
		}
	})
}
