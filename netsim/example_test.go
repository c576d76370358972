package netsim_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/udpgate/udpgate/netsim"
)

// An echo server and a client over a link of 2 ms each way that loses
// nothing for this seed.
func Example() {
	nw := netsim.New()
	nw.SetLink(netsim.Link{Latency: 2 * time.Millisecond, Loss: 0.01, Seed: 1})
	srv, _ := nw.Bind(netip.MustParseAddrPort("10.0.0.1:7777"))
	cli, _ := nw.Bind(netip.AddrPort{}) // 127.0.0.1 and an ephemeral port
	defer srv.Close()
	defer cli.Close()

	go echo(srv)

	cli.WriteTo([]byte("ping"), srv.LocalAddr())
	cli.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1500)
	n, from, err := cli.ReadFrom(buf)
	fmt.Println(string(buf[:n]), from, err)
	fmt.Printf("%+v\n", nw.Stats())
	// Output:
	// ping 10.0.0.1:7777 <nil>
	// {Sent:2 Dropped:0 Lost:0 Duplicated:0 Reordered:0 Delivered:2 Undeliverable:0 QueueDrops:0 BottleneckDrops:0 InFlight:0}
}

// echo sends every datagram ep receives back to its sender, until ep is
// closed.
func echo(ep *netsim.Endpoint) {
	buf := make([]byte, 1500)
	for {
		n, from, err := ep.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		ep.WriteTo(buf[:n], from)
	}
}

// Two clients behind one uplink of 1000 bytes per second with a queue of
// 4000 bytes, each sending four 1000-byte datagrams, in turn: the queue
// takes the first two of each and drops the rest. The first leaves the
// uplink a second after it came (in a testing/synctest bubble, the test
// would not wait for it).
func ExampleBottleneck() {
	nw := netsim.New()
	up := netsim.NewBottleneck(1000, 4000)
	srv, _ := nw.Bind(netip.MustParseAddrPort("10.0.0.1:7777"))
	alice, _ := nw.Bind(netip.MustParseAddrPort("10.0.0.2:5000"))
	bob, _ := nw.Bind(netip.MustParseAddrPort("10.0.0.3:5000"))
	defer srv.Close()
	defer alice.Close()
	defer bob.Close()
	nw.SetPath(alice.LocalAddr(), srv.LocalAddr(), netsim.Link{Latency: 20 * time.Millisecond, Bottleneck: up})
	nw.SetPath(bob.LocalAddr(), srv.LocalAddr(), netsim.Link{Latency: 30 * time.Millisecond, Bottleneck: up})

	p := make([]byte, 1000)
	for range 4 {
		alice.WriteTo(p, srv.LocalAddr())
		bob.WriteTo(p, srv.LocalAddr())
	}
	fmt.Printf("%+v\n", up.Stats())
	fmt.Printf("%+v\n", nw.Stats())
	// Output:
	// {Offered:8 Dropped:4 Forwarded:0 Bytes:0 MaxQueue:4000}
	// {Sent:8 Dropped:0 Lost:0 Duplicated:0 Reordered:0 Delivered:0 Undeliverable:0 QueueDrops:0 BottleneckDrops:4 InFlight:4}
}
