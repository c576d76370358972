package message_test

import (
	"fmt"

	"github.com/udpgate/udpgate/message"
)

// Two endpoints exchange a reliable message. The packet layer is
// left out: seq numbers are made up and the packet is acknowledged
// by hand (conn wires these calls to fastpath's acks).
func Example() {
	cfg := message.Config{Channels: []message.ChannelConfig{{Kind: message.ReliableOrdered}, {Kind: message.Unreliable}}}
	layer, err := message.NewLayer(cfg, 1180)
	if err != nil {
		panic(err)
	}
	client, server := layer.NewEndpoint(), layer.NewEndpoint()
	now := int64(1_795_000_000_000_000_000)

	client.Send(0, []byte("hello"), now)
	client.Send(1, []byte("pos"), now)
	buf := make([]byte, 1180)
	n := client.WritePayload(buf, 8160, now)
	client.PacketSent(now)
	fmt.Printf("payload % x\n", buf[:n])

	// The server checks the payload before its packet layer accepts the
	// packet, then receives it and takes the messages.
	if r := server.Check(buf[:n]); r != message.DropNone {
		panic(r)
	}
	server.Receive(buf[:n], now)
	for {
		ch, msg, ok := server.Next()
		if !ok {
			break
		}
		fmt.Printf("channel %d: %s\n", ch, msg)
	}
	fmt.Println("ack due after 5 ms:", server.AckDue(now+5e6))

	// The server's next packet acknowledges 8160.
	client.Acked(8160, now+20e6)
	st := client.Stats()
	fmt.Printf("sent %d, acked %d, in flight %d, queued on channel 0: %d bytes\n", st.Sent, st.Acked, st.InFlight, st.Queued[0])
	// Output:
	// payload 00 00 00 05 68 65 6c 6c 6f 01 03 70 6f 73
	// channel 1: pos
	// channel 0: hello
	// ack due after 5 ms: true
	// sent 2, acked 1, in flight 0, queued on channel 0: 0 bytes
}
