package conn_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"strings"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/message"
	"github.com/udpgate/udpgate/netsim"
)

// chatServer answers every reliable message with its length, on the
// channel it came on.
type chatServer struct{ conn.NopHandler }

func (chatServer) OnMessage(c *conn.Conn, ch int, msg []byte) {
	// msg is borrowed for this call; SendMessage copies it.
	_ = c.SendMessage(ch, fmt.Appendf(nil, "%d bytes", len(msg)))
}

// chatClient passes every message it receives to got.
type chatClient struct {
	conn.NopHandler
	got chan string
}

func (h chatClient) OnMessage(_ *conn.Conn, ch int, msg []byte) {
	h.got <- fmt.Sprintf("channel %d: %s", ch, msg)
}

// Messages over a simulated network (netsim) with 20 ms of latency each way
// and 10 % loss: reliable-ordered messages arrive once and in order
// whatever the loss, and one larger than a packet is cut into fragments
// and put back together. Both sides configure the same channels: a client
// with another layout would fail Dial (a *conn.VersionError whose Layout
// says what differs). The server is dialled by name, which the simulated
// network resolves (Network.SetHost); it never asks the real DNS.
//
// A test of a game's networking runs the same code inside
// testing/synctest's bubble (synctest.Test), where the latency, the
// resends and the timeouts take no real time and exact durations can be
// asserted; conn's own sim_*_test.go files do that.
func Example_messages() {
	nw := netsim.New()
	nw.SetLink(netsim.Link{Latency: 20 * time.Millisecond, Loss: 0.1, Seed: 7})
	nw.SetHost("game.example", netip.MustParseAddr("10.0.0.1"))

	layout := message.Config{Channels: []message.ChannelConfig{
		{Kind: message.ReliableOrdered}, // 0: chat and commands
		{Kind: message.Sequenced},       // 1: positions, latest wins
	}}
	srv, err := conn.Listen("10.0.0.1:7777", conn.Config{Network: nw, Handler: chatServer{}, Messages: layout})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := chatClient{got: make(chan string, 3)}
	cli, err := conn.Dial(ctx, "game.example:7777", conn.Config{Network: nw, Handler: h, Messages: layout})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	for _, msg := range []string{"hello", "gg", strings.Repeat("level data ", 1000)} {
		if err := cli.Conn().SendMessage(0, []byte(msg)); err != nil {
			log.Fatal(err)
		}
	}
	for range 3 {
		fmt.Println(<-h.got)
	}
	// Output:
	// channel 0: 5 bytes
	// channel 0: 2 bytes
	// channel 0: 11000 bytes
}
