package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
)

// msgClient records the messages a client receives, by channel.
type msgClient struct {
	conn.NopHandler
	mu   sync.Mutex
	got  map[int][]string
	more chan struct{} // a message arrived; capacity 1
}

func newMsgClient() *msgClient {
	return &msgClient{got: map[int][]string{}, more: make(chan struct{}, 1)}
}

func (m *msgClient) OnMessage(_ *conn.Conn, ch int, msg []byte) {
	m.mu.Lock()
	m.got[ch] = append(m.got[ch], string(msg))
	m.mu.Unlock()
	select {
	case m.more <- struct{}{}:
	default:
	}
}

// await waits until cond holds of what arrived, or fails after a generous
// bound.
func (m *msgClient) await(t *testing.T, what string, cond func(got map[int][]string) bool) {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		m.mu.Lock()
		ok := cond(m.got)
		got := fmt.Sprint(m.got)
		m.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-m.more:
		case <-deadline.C:
			t.Fatalf("%s: not within 20 s; received %s", what, got)
		}
	}
}

func dialMessages(t *testing.T, addr string, h conn.Handler) *conn.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := conn.Dial(ctx, addr, conn.Config{NetworkVersion: 1, Handler: h, Messages: msgcfg.Config(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// TestEchoMessages: by default the server has the tools' channels and the
// echo application sends each message back on the channel it came on: a
// reliable one larger than a packet comes back whole and in order, the
// unreliable and sequenced ones too on loopback. Data is still echoed.
func TestEchoMessages(t *testing.T) {
	r := start(t, nil, env())
	h := newMsgClient()
	cl := dialMessages(t, r.udp, h)
	big := strings.Repeat("0123456789", 1000) // 10 kB: fragmented
	want := []string{"one", big, "three", "four"}
	for _, m := range want {
		if err := cl.Conn().SendMessage(msgcfg.Reliable, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Conn().SendMessage(msgcfg.Unreliable, []byte("u")); err != nil {
		t.Fatal(err)
	}
	if err := cl.Conn().SendMessage(msgcfg.Sequenced, []byte("s")); err != nil {
		t.Fatal(err)
	}
	h.await(t, "the reliable echoes", func(got map[int][]string) bool { return len(got[msgcfg.Reliable]) >= len(want) })
	h.mu.Lock()
	rel := h.got[msgcfg.Reliable]
	h.mu.Unlock()
	if len(rel) != len(want) {
		t.Fatalf("%d reliable echoes, want %d", len(rel), len(want))
	}
	for i := range want {
		if rel[i] != want[i] {
			t.Errorf("reliable echo %d is %.20q (%d bytes), want %.20q (%d bytes)", i, rel[i], len(rel[i]), want[i], len(want[i]))
		}
	}
	h.await(t, "the unreliable and sequenced echoes", func(got map[int][]string) bool {
		return len(got[msgcfg.Unreliable]) == 1 && len(got[msgcfg.Sequenced]) == 1
	})
}

// TestDiscardMessages: the discard application drops messages; Data is
// not echoed either, and the connection lives on.
func TestDiscardMessages(t *testing.T) {
	r := start(t, []string{"-app", "discard"}, env())
	h := newMsgClient()
	cl := dialMessages(t, r.udp, h)
	for i := range 5 {
		if err := cl.Conn().SendMessage(msgcfg.Reliable, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// The server has them when the client's queue is acknowledged.
	conntest.Eventually(t, "the messages acknowledged", func() bool { return cl.Conn().MessageStats().InFlight == 0 })
	select {
	case <-cl.Done():
		t.Fatalf("the connection ended: %v", cl.Err())
	default:
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.got) != 0 {
		t.Errorf("discard echoed %v", h.got)
	}
}

// TestMessageSettings: the message flags, their variables and validation.
func TestMessageSettings(t *testing.T) {
	o, err := load([]string{"-message-max-size", "100000", "-message-send-rate", "1000000", "-message-send-budget", "5000000",
		"-message-stall-timeout", "7s", "-message-stall-silence", "3s", "-message-stall-rtts", "30",
		"-message-receive-budget", "50000000", "-message-conn-receive-budget", "600000", "-egress-rate", "5000000"}, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := o.config(nil, nil).Messages
	if len(m.Channels) != msgcfg.NumChannels || m.MaxMessageSize != 100000 || m.SendRate != 1000000 || m.SendBudget != 5000000 ||
		m.StallTimeout != 7*time.Second || m.StallSilence != 3*time.Second || m.StallRTTs != 30 ||
		m.ReceiveBudget != 50000000 || m.ConnReceiveBudget != 600000 {
		t.Errorf("config Messages %+v", m)
	}
	if r := o.config(nil, nil).EgressRate; r != 5000000 {
		t.Errorf("-egress-rate 5000000: config EgressRate %d", r)
	}
	o, err = load(nil, env("UDPGATE_MESSAGES", "false"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if m := o.config(nil, nil).Messages; len(m.Channels) != 0 {
		t.Errorf("UDPGATE_MESSAGES=false: channels %+v", m.Channels)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-messages=false", "-message-max-size", "1000"}, "-messages is off"},
		{[]string{"-message-max-size", "-1"}, "must not be negative"},
		{[]string{"-message-send-rate", "-1"}, "must not be negative"},
		{[]string{"-message-send-budget", "-1"}, "must not be negative"},
		{[]string{"-message-stall-rtts", "-1"}, "must not be negative"},
		{[]string{"-messages=false", "-message-stall-silence", "1s"}, "-messages is off"},
		{[]string{"-message-receive-budget", "-1"}, "-message-receive-budget -1"},
		{[]string{"-message-conn-receive-budget", "-1"}, "-message-conn-receive-budget -1"},
		{[]string{"-message-conn-receive-budget", "1000"}, "ConnReceiveBudget 1000 below one largest message"},
		{[]string{"-messages=false", "-message-receive-budget", "1000"}, "-messages is off"},
		{[]string{"-egress-rate", "-1"}, "must not be negative"},
		{[]string{"-messages=false", "-egress-rate", "1000"}, "-messages is off"},
		{[]string{"-message-max-size", "1000000000"}, "-message-max-size 1000000000"},
	} {
		if _, err := load(c.args, env(), io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error with %q", c.args, err, c.want)
		}
	}
}
