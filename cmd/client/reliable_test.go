package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/internal/testkit/netem"
)

// msgEchoServer echoes Data, and each message on the channel it came on,
// as cmd/server's echo application does.
type msgEchoServer struct{ echoServer }

func (*msgEchoServer) OnMessage(c *conn.Conn, ch int, msg []byte) { _ = c.SendMessage(ch, msg) }

// startMsgServer starts an echo server with the tools' channel layout.
func startMsgServer(t *testing.T, cfg conn.Config) (*conn.Server, *msgEchoServer) {
	t.Helper()
	h := &msgEchoServer{}
	cfg.Handler = h
	cfg.SweepInterval = 10 * time.Millisecond
	if len(cfg.Messages.Channels) == 0 {
		cfg.Messages = msgcfg.Config(0, 0)
	}
	return conntest.Listen(t, conn.Listen, cfg), h
}

// reliableInput is n numbered lines, some longer than a packet (they are
// fragmented), with an empty line (skipped) and a CRLF among them; want
// is what must come back, in order.
func reliableInput(n int) (in string, want []string) {
	var b strings.Builder
	for i := range n {
		line := fmt.Sprintf("line %d", i)
		if i%7 == 3 {
			line += " " + strings.Repeat(string(rune('a'+i%26)), 3000)
		}
		want = append(want, line)
		b.WriteString(line)
		switch i % 5 {
		case 1:
			b.WriteString("\r\n")
		case 2:
			b.WriteString("\n\n")
		default:
			b.WriteString("\n")
		}
	}
	return b.String(), want
}

func checkEchoes(t *testing.T, out string, want []string) {
	t.Helper()
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("%d echoes, want %d:\n%.2000s", len(got), len(want), out)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("echo %d is %.40q, want %.40q", i, got[i], want[i])
		}
	}
}

// TestConnectReliable: with -reliable every line comes back as a message,
// in order, long ones too, and the command exits 0 after closing cleanly.
func TestConnectReliable(t *testing.T) {
	srv, h := startMsgServer(t, conn.Config{NetworkVersion: 1})
	in, want := reliableInput(40)
	code, out, errb := runCmd(t, in, "connect", "-reliable", "-server", srv.Addr().String())
	if code != exitOK {
		t.Fatalf("status %d; stderr:\n%s", code, errb)
	}
	checkEchoes(t, out, want)
	if !strings.Contains(errb, "closed: sent 40 lines as reliable messages, 40 came back, 0 did not") {
		t.Errorf("stderr lacks the summary:\n%s", errb)
	}
	if r, remote := h.waitEnd(t); r != conn.ReasonClosed || !remote {
		t.Errorf("the server saw the end as %v (remote %v), want closed by the client", r, remote)
	}
}

// TestConnectReliableLossy: through a proxy that drops 10 % of the
// datagrams each way, every line still comes back, in order.
func TestConnectReliableLossy(t *testing.T) {
	srv, _ := startMsgServer(t, conn.Config{NetworkVersion: 1})
	p, err := netem.New(srv.Addr(), netem.Config{Loss: 0.10, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	var dropped [2]atomic.Int64 // by direction
	p.Observe(func(f netem.Fate, _ []byte) {
		if f.Copies == 0 {
			dropped[f.Dir].Add(1)
		}
	})
	in, want := reliableInput(60)
	code, out, errb := runCmd(t, in, "connect", "-reliable", "-server", p.Addr().String(), "-wait", "60s", "-quiet")
	if code != exitOK {
		t.Fatalf("status %d; stderr:\n%s", code, errb)
	}
	checkEchoes(t, out, want)
	t.Logf("the proxy dropped %d datagrams to the server, %d to the client", dropped[netem.ToServer].Load(), dropped[netem.ToClient].Load())
	if dropped[netem.ToServer].Load() == 0 || dropped[netem.ToClient].Load() == 0 {
		t.Error("the proxy dropped nothing in some direction: the test did not test loss")
	}
}

// TestConnectReliableSealed: -reliable works over sealed packets too.
func TestConnectReliableSealed(t *testing.T) {
	h := &msgEchoServer{}
	srv := conntest.Listen(t, conn.Listen, conn.Config{
		Handler: h, SweepInterval: 10 * time.Millisecond, NetworkVersion: 1,
		PrivateKey: testPrivateKey(t), ProtocolID: testProtocolID, Messages: msgcfg.Config(0, 0),
	})
	tok := makeToken(t, srv.Addr().String())
	in, want := reliableInput(12)
	code, out, errb := runCmd(t, in, "connect", "-reliable", "-token", tok)
	if code != exitOK {
		t.Fatalf("status %d; stderr:\n%s", code, errb)
	}
	checkEchoes(t, out, want)
	if !strings.Contains(errb, "(sealed)") {
		t.Errorf("stderr:\n%s", errb)
	}
}

// TestConnectReliableNoEcho: against a server that drops the messages,
// the command waits -wait and exits 1 saying how many lines did not come
// back.
func TestConnectReliableNoEcho(t *testing.T) {
	srv := conntest.Listen(t, conn.Listen, conn.Config{
		Handler: &discardMsgs{}, NetworkVersion: 1, Messages: msgcfg.Config(0, 0),
	})
	code, out, errb := runCmd(t, "a\nb\nc\n", "connect", "-reliable", "-server", srv.Addr().String(), "-wait", "300ms")
	if code != exitFailure || !strings.Contains(errb, "3 of 3 lines did not come back within -wait 300ms") || out != "" {
		t.Errorf("status %d, stdout %q, stderr:\n%s", code, out, errb)
	}
}

// discardMsgs takes messages and answers nothing.
type discardMsgs struct{ conn.NopHandler }

func (*discardMsgs) OnMessage(*conn.Conn, int, []byte) {}

// TestReadLongLines: lines up to the limit come whole, longer ones as nil
// (read to their end), with \n or \r\n, and a last line without one.
func TestReadLongLines(t *testing.T) {
	long := strings.Repeat("x", 100_000)
	in := "a\r\n" + long + "\n" + long + "y\n\nlast"
	lines := make(chan []byte)
	errc := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	go readLongLines(strings.NewReader(in), len(long), lines, errc, done)
	var got []string
	for l := range lines {
		if l == nil {
			got = append(got, "<too long>")
		} else {
			got = append(got, fmt.Sprintf("%d:%.3s", len(l), l))
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	want := []string{"1:a", "100000:xxx", "<too long>", "0:", "4:las"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("lines %q, want %q", got, want)
	}
}

// loadMsgServer starts a load-test echo server with the tools' channels.
func loadMsgServer(t *testing.T) *conn.Server {
	t.Helper()
	return conntest.Listen(t, conn.Listen, conn.Config{
		Handler:        &msgEchoServer{},
		NetworkVersion: 1,
		ChallengeRate:  -1,
		Sockets:        1,
		Messages:       msgcfg.Config(0, 0),
	})
}

// TestLoadMessagesReliable: load -messages reliable: every message sent
// comes back, none out of order or twice, and the JSON report has the
// message fields.
func TestLoadMessagesReliable(t *testing.T) {
	s := loadMsgServer(t)
	for _, size := range []string{"64", "3000"} {
		t.Run(size, func(t *testing.T) {
			var out, errb strings.Builder
			err := runLoad([]string{"-server", s.Addr().String(), "-clients", "60", "-messages", "reliable",
				"-message-size", size, "-message-rate", "20", "-duration", "500ms", "-disconnect", "2", "-json"}, &out, &errb)
			if err != nil {
				t.Fatalf("%v\n%s%s", err, out.String(), errb.String())
			}
			var rep map[string]any
			if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			run, _ := rep["run"].(map[string]any)
			t.Logf("run: %v", run)
			num := func(k string) float64 {
				v, ok := run[k].(float64)
				if !ok {
					t.Errorf("run has no %s", k)
				}
				return v
			}
			sent, delivered := num("messages_sent"), num("messages_delivered")
			if sent == 0 || delivered != sent || num("messages_out_of_order") != 0 || num("messages_duplicated") != 0 || num("messages_unanswered") != 0 {
				t.Errorf("sent %v, delivered %v, out of order %v, duplicated %v, unanswered %v", sent, delivered,
					run["messages_out_of_order"], run["messages_duplicated"], run["messages_unanswered"])
			}
			if p50, p99 := num("message_rtt_p50_ms"), num("message_rtt_p99_ms"); p50 <= 0 || p99 < p50 {
				t.Errorf("message round trips p50 %v p99 %v ms", p50, p99)
			}
			if rep["messages"] != "reliable" || rep["ok"] != true {
				t.Errorf("messages %v, ok %v, error %v", rep["messages"], rep["ok"], rep["error"])
			}
		})
	}
}

// TestLoadMessagesText: the text report of an unreliable message run.
func TestLoadMessagesText(t *testing.T) {
	s := loadMsgServer(t)
	var out, errb strings.Builder
	err := runLoad([]string{"-server", s.Addr().String(), "-clients", "20", "-messages", "unreliable",
		"-message-rate", "20", "-duration", "300ms", "-disconnect", "1"}, &out, &errb)
	t.Logf("output:\n%s%s", out.String(), errb.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"20 unreliable messages/s per client, 64 bytes each", "messages: 20 clients for", "unreliable: ", "delivered (echoed)", "message round trips (from the first send): p50 "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestLoadMessagesFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-messages", "sometimes"}, `-messages "sometimes": use reliable or unreliable`},
		{[]string{"-message-size", "100"}, "-message-size needs -messages"},
		{[]string{"-messages", "reliable", "-message-size", "8"}, "-message-size 8 is too small"},
		{[]string{"-messages", "reliable", "-message-rate", "0"}, "-message-rate 0 is out of range"},
	} {
		var out strings.Builder
		err := runLoad(append([]string{"-clients", "1"}, c.args...), &out, &out)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("load %q: %v, want an error with %q", c.args, err, c.want)
		}
	}
}

// TestConnectReliableTooLong: a line longer than -message-max-size is not
// sent, the others are, and the status is 1.
func TestConnectReliableTooLong(t *testing.T) {
	// The server's largest message is the client's: layouts must agree
	// (docs/protocol.md §3.7; TestConnectReliableLayoutMismatch).
	srv, _ := startMsgServer(t, conn.Config{NetworkVersion: 1, Messages: msgcfg.Config(2000, 0)})
	in := "a\n" + strings.Repeat("x", 3000) + "\nb\n"
	code, out, errb := runCmd(t, in, "connect", "-reliable", "-server", srv.Addr().String(), "-message-max-size", "2000")
	if code != exitFailure || out != "a\nb\n" || !strings.Contains(errb, "1 of 3 lines not sent: longer than the largest message") {
		t.Errorf("status %d, stdout %q, stderr:\n%s", code, out, errb)
	}
}

// TestConnectReliableLayoutMismatch: a client whose -message-max-size
// differs from the server's is refused at connect, never prints
// "connected", and says what differs and what to set.
func TestConnectReliableLayoutMismatch(t *testing.T) {
	srv, _ := startMsgServer(t, conn.Config{NetworkVersion: 1})
	code, out, errb := runCmd(t, "a\n", "connect", "-reliable", "-server", srv.Addr().String(), "-message-max-size", "2000")
	if code != exitFailure || out != "" || strings.Contains(errb, "connected") ||
		!strings.Contains(errb, "MaxMessageSize is 262144 on the server, 2000 on this client") || !strings.Contains(errb, "-message-max-size") {
		t.Errorf("status %d, stdout %q, stderr:\n%s", code, out, errb)
	}
}
