package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
)

// loadBulkServer starts an echo server with the tools' channel layout and
// the largest message maxSize (as cmd/server -message-max-size); cfg adds
// settings.
func loadBulkServer(t *testing.T, maxSize int, cfg conn.Config) *conn.Server {
	t.Helper()
	cfg.Handler, cfg.NetworkVersion, cfg.ChallengeRate, cfg.Sockets = &msgEchoServer{}, 1, -1, 1
	cfg.Messages = msgcfg.Config(maxSize, 0)
	return conntest.Listen(t, conn.Listen, cfg)
}

// TestLoadBulkFlags: the bulk flags' usage errors, each naming its flag;
// a bulk message above -message-max-size says to raise it on both sides.
func TestLoadBulkFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"-bulk-rate", "2"}, []string{"-bulk-rate needs -bulk-size"}},
		{[]string{"-message-max-size", "1000"}, []string{"-message-max-size needs -messages reliable or -bulk-size"}},
		{[]string{"-bulk-size", "8"}, []string{"-bulk-size 8 is out of range", "at least 16"}},
		{[]string{"-bulk-size", "-1"}, []string{"-bulk-size -1 is out of range"}},
		{[]string{"-bulk-size", "300000"}, []string{"-bulk-size 300000 is above -message-max-size 262144", "raise -message-max-size", "the server's (cmd/server -message-max-size)"}},
		{[]string{"-bulk-size", "9000000", "-message-max-size", "8388608"}, []string{"-bulk-size 9000000 is above -message-max-size 8388608"}},
		{[]string{"-bulk-size", "1000", "-message-max-size", "9000000"}, []string{"-message-max-size 9000000 is out of range", "1..8388608"}},
		{[]string{"-bulk-size", "1000", "-message-max-size", "0"}, []string{"-message-max-size 0 is out of range"}},
		{[]string{"-bulk-size", "1000", "-bulk-rate", "0"}, []string{"-bulk-rate 0 is out of range"}},
		{[]string{"-bulk-size", "1000", "-bulk-rate", "-0.5"}, []string{"-bulk-rate -0.5 is out of range"}},
		{[]string{"-messages", "reliable", "-message-size", "3000", "-message-max-size", "2000"}, []string{"-message-size 3000 is above -message-max-size 2000"}},
		{[]string{"-clients", "1000", "-bulk-size", "8388608", "-message-max-size", "8388608"}, []string{"-clients 1000 with -bulk-size 8388608", "at most 128"}},
	} {
		code, out, errb := runCmd(t, "", append([]string{"load", "-clients", "1"}, c.args...)...)
		if code != exitUsage || out != "" {
			t.Errorf("load %q: status %d, stdout %q; want a usage error", c.args, code, out)
		}
		for _, want := range c.want {
			if !strings.Contains(errb, want) {
				t.Errorf("load %q: stderr %q lacks %q", c.args, errb, want)
			}
		}
	}
}

// TestLoadBulkJSON: 2 clients × a 300 KB bulk stream at 2 a second beside
// reliable messages: every bulk message and every small one comes back,
// and the JSON report has the bulk fields, apart from the messages'.
func TestLoadBulkJSON(t *testing.T) {
	s := loadBulkServer(t, 1<<20, conn.Config{})
	code, out, errb := runCmd(t, "", "load", "-json", "-server", s.Addr().String(), "-clients", "2",
		"-messages", "reliable", "-message-rate", "20", "-message-max-size", "1048576",
		"-bulk-size", "300000", "-bulk-rate", "2", "-duration", "1s", "-disconnect", "2")
	if code != exitOK {
		t.Fatalf("exit status %d, stderr %q\n%s", code, errb, out)
	}
	// Decoding fills the embedded parts only if they are there.
	rep := loadReport{Run: &loadRunJSON{loadMessagesJSON: &loadMessagesJSON{}, loadBulkJSON: &loadBulkJSON{}}}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, out)
	}
	if rep.BulkBytes != 300000 || rep.BulkRate != 2 || rep.MessageMaxBytes != 1<<20 || rep.Messages != "reliable" || !rep.OK {
		t.Errorf("settings: bulk %d bytes at %v/s, largest message %d, messages %q, ok %v (%s)",
			rep.BulkBytes, rep.BulkRate, rep.MessageMaxBytes, rep.Messages, rep.OK, rep.Error)
	}
	if rep.Run == nil || rep.Run.loadBulkJSON == nil || rep.Run.loadMessagesJSON == nil {
		t.Fatalf("run %+v has no message or bulk part:\n%s", rep.Run, out)
	}
	b, m := rep.Run.loadBulkJSON, rep.Run.loadMessagesJSON
	t.Logf("bulk %+v", *b)
	t.Logf("messages %+v", *m)
	// The goodput is over the whole run, the drain included, which is
	// longer than the window.
	if b.Sent == 0 || b.Delivered != b.Sent || b.DeliveredBytes != 300000*b.Delivered || b.OutOfOrder != 0 || b.Duplicated != 0 ||
		b.Unanswered != 0 || b.Goodput <= 0 || b.Goodput > float64(b.DeliveredBytes)/rep.Run.ElapsedSeconds ||
		b.RTTP50 <= 0 || b.RTTP99 < b.RTTP50 {
		t.Errorf("bulk %+v (run of %v s)", *b, rep.Run.ElapsedSeconds)
	}
	if m.Sent == 0 || m.Delivered != m.Sent || m.OutOfOrder != 0 || m.Unanswered != 0 || m.RTTP50 <= 0 {
		t.Errorf("messages %+v", *m)
	}
	// The exact names, as scripts read them.
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	run, _ := raw["run"].(map[string]any)
	for _, k := range []string{"bulk_sent", "bulk_delivered", "bulk_goodput_bytes_per_second", "bulk_rtt_p50_ms", "bulk_rtt_p99_ms",
		"bulk_refused", "message_rtt_p50_ms", "message_rtt_p99_ms"} {
		if _, ok := run[k].(float64); !ok {
			t.Errorf("run has no number %s", k)
		}
	}
}

// TestLoadBulkText: bulk alone, at a fractional rate: only bulk messages
// go, and the text report has the bulk lines.
func TestLoadBulkText(t *testing.T) {
	s := loadBulkServer(t, 0, conn.Config{})
	code, out, errb := runCmd(t, "", "load", "-server", s.Addr().String(), "-clients", "3",
		"-bulk-size", "50000", "-bulk-rate", "0.5", "-duration", "300ms", "-disconnect", "1")
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errb)
	if code != exitOK {
		t.Fatalf("exit status %d", code)
	}
	for _, want := range []string{
		"0.5 bulk messages/s per client, 50000 bytes each",
		"bulk: 3 clients for",
		"50000-byte messages: ",
		" refused (queue full), 0 out of order, 0 duplicated, 0 unanswered at the end; goodput ",
		"bulk round trips (from the first send to the echo's last byte): p50 ",
		"Messages packets",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	if strings.Contains(out, "messages: 3 clients") || strings.Contains(out, "data: ") {
		t.Error("small messages or Data reported without them")
	}
}

// TestLoadBulkServerTooSmall: a server whose -message-max-size differs
// from the clients' refuses them at connect (docs/protocol.md §3.7): the
// command fails at once, counts them, and says what to set.
func TestLoadBulkServerTooSmall(t *testing.T) {
	s := loadBulkServer(t, 100_000, conn.Config{})
	code, out, errb := runCmd(t, "", "load", "-server", s.Addr().String(), "-clients", "1",
		"-bulk-size", "200000", "-message-max-size", "200000", "-duration", "200ms", "-disconnect", "1")
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errb)
	if code != exitFailure || !strings.Contains(errb, "message layout differs") || !strings.Contains(errb, "-message-max-size") {
		t.Errorf("exit status %d, stderr %q; want a failure naming the layout and -message-max-size", code, errb)
	}
	if !strings.Contains(out, "handshake refused: the server's message layout differs") {
		t.Errorf("stdout does not count the refusal")
	}
}
