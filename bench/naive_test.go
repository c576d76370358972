package main

import (
	"context"
	"testing"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/traffic/loadgen"
	"github.com/udpgate/udpgate/internal/wire"
)

type gotPackets struct {
	conn.NopHandler
	ch chan string
}

func (g gotPackets) OnPacket(_ *conn.Conn, p []byte) { g.ch <- string(p) }

// TestNaiveSpeaksTheProtocol: udpgate's own client connects to the naive
// baseline and gets its Data echoed, so the baseline does the same work on
// the same wire format.
func TestNaiveSpeaksTheProtocol(t *testing.T) {
	s := newNaive(wire.Magic{}, benchNetVersion)
	addr, err := s.listen(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	h := gotPackets{ch: make(chan string, 4)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cli, err := conn.Dial(ctx, addr.String(), conn.Config{Handler: h, NetworkVersion: benchNetVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for _, msg := range []string{"hello", "again"} {
		if _, err := cli.Send([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-h.ch:
			if got != msg {
				t.Fatalf("echo %q, want %q", got, msg)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no echo of %q", msg)
		}
	}
}

// TestServersUnderLoad drives each server (in process) briefly with the
// mode each scenario uses, so a broken variant fails here, not halfway
// through a long harness run.
func TestServersUnderLoad(t *testing.T) {
	for _, kind := range []string{kindUdpgate, kindRawEcho, kindNaive} {
		for _, k := range []string{scChallenge, scAck, scData} {
			t.Run(kind+"/"+k, func(t *testing.T) {
				v, _ := parseVariant(kind + "/s1")
				if kind == kindNaive {
					v, _ = parseVariant(kind)
				}
				srv, err := startServer(v, false, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer srv.close()
				sc := scenario{Name: k + "-200", Kind: k, Clients: 200}
				g, err := loadgen.New(loadgen.Config{
					Server: srv.addr, Mode: sc.mode(kind), Clients: sc.Clients, Window: 32,
					PacketSize: sc.requestSize(), NetworkVersion: benchNetVersion, LossTimeout: time.Second,
				})
				if err != nil {
					t.Fatal(err)
				}
				defer g.Close()
				if g.Config().Mode.NeedsConnect() {
					c, err := g.Connect(context.Background())
					if err != nil || c.Connected != sc.Clients {
						t.Fatalf("connect: %+v, %v", c, err)
					}
				}
				// A 150 ms window on a busy machine can fall entirely in
				// a pause of the server's process, so a window with no
				// answer is run again (at most 5 runs): a server that
				// never answers still fails.
				var r loadgen.RunResult
				for i := range 5 {
					if r, err = g.Run(context.Background(), loadgen.RunSpec{Window: 150 * time.Millisecond}); err != nil {
						t.Fatal(err)
					}
					if r.Window.Replies > 0 {
						break
					}
					t.Logf("run %d: no answer in the window; running again", i+1)
				}
				if r.Window.Replies == 0 || r.Window.Unexpected != 0 {
					t.Errorf("answers %d, unexpected %d; server %s", r.Window.Replies, r.Window.Unexpected, srv.stats())
				}
			})
		}
	}
}
