package conn_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/message"
	"github.com/udpgate/udpgate/netsim"
)

// echoServer sends every message back on its channel.
type echoServer struct{ conn.NopHandler }

func (echoServer) OnMessage(c *conn.Conn, ch int, msg []byte) { _ = c.SendMessage(ch, msg) }

// A game loop that polls for messages instead of taking callbacks: with
// Config.ReceiveQueue set and a Handler without OnMessage, each frame
// reads what arrived with Conn.ReceiveMessage into the loop's own buffer,
// until ErrNoMessage. Reliable messages wait for the loop (the peer holds
// back while they fill the receive window); unreliable ones beyond
// ReceiveQueue's bytes are dropped and counted. The same works on a
// server's connections (Server.Range).
func ExampleConn_ReceiveMessage() {
	nw := netsim.New()
	nw.SetLink(netsim.Link{Latency: 20 * time.Millisecond, Loss: 0.1, Seed: 1})
	layout := message.Config{Channels: []message.ChannelConfig{
		{Kind: message.ReliableOrdered}, // 0: chat and commands
		{Kind: message.Sequenced},       // 1: positions, latest wins
	}}
	srv, err := conn.Listen("10.0.0.1:7777", conn.Config{Network: nw, Handler: echoServer{}, Messages: layout})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// No Handler: nothing to call back, every message waits for the loop.
	cli, err := conn.Dial(ctx, "10.0.0.1:7777", conn.Config{Network: nw, Messages: layout, ReceiveQueue: 64 << 10})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	c := cli.Conn()
	for _, m := range []string{"hello", "ready", "go"} {
		if err := c.SendMessage(0, []byte(m)); err != nil {
			log.Fatal(err)
		}
	}

	buf := make([]byte, c.MaxMessageSize(0)) // holds any message: no io.ErrShortBuffer
	tick := time.NewTicker(16 * time.Millisecond)
	defer tick.Stop()
	for got := 0; got < 3; {
		<-tick.C // a frame
		for {
			ch, n, err := c.ReceiveMessage(buf)
			if errors.Is(err, conn.ErrNoMessage) {
				break // all read: simulate and render the frame
			}
			if err != nil {
				log.Fatal(err) // conn.ErrClosed: the connection ended
			}
			fmt.Printf("channel %d: %s\n", ch, buf[:n])
			got++
		}
	}
	// Output:
	// channel 0: hello
	// channel 0: ready
	// channel 0: go
}
