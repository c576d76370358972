package batchio_test

import (
	"fmt"
	"net"
	"time"

	"github.com/udpgate/udpgate/batchio"
)

// An echo server: one loop per socket receives a batch and sends it back
// from the same slots, with no allocation per datagram.
func Example() {
	g, err := batchio.Listen("127.0.0.1:0", batchio.Config{Sockets: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close()
	for _, s := range g.Sockets() {
		go func() {
			b := g.NewBatch()
			for {
				n, err := s.Recv(b)
				if err != nil {
					return // net.ErrClosed once the group is closed
				}
				// Each Message holds its datagram in Buf[:N] and its
				// source in Addr, which is where Send sends it.
				if err := s.Send(b, n); err != nil {
					return
				}
			}
		}()
	}

	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(g.LocalAddr()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte("ping"))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s\n", buf[:n])
	// Output: ping
}
