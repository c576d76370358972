package conn_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/udpgate/udpgate/conn"
)

// echoApp sends every payload back to its sender.
type echoApp struct{ conn.NopHandler }

func (echoApp) OnPacket(c *conn.Conn, payload []byte) {
	// payload is borrowed for this call; Send copies it.
	_, _ = c.Send(payload)
}

// printer prints what the client receives.
type printer struct {
	conn.NopHandler
	got chan string
}

func (p printer) OnPacket(_ *conn.Conn, payload []byte) { p.got <- string(payload) }

func Example() {
	srv, err := conn.Listen("127.0.0.1:0", conn.Config{Handler: echoApp{}, MaxClients: 1000})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p := printer{got: make(chan string, 1)}
	cli, err := conn.Dial(ctx, srv.Addr().String(), conn.Config{Handler: p})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	// Datagrams may be lost: a real client would resend or tolerate it.
	for {
		if _, err := cli.Send([]byte("hello")); err != nil {
			log.Fatal(err)
		}
		select {
		case msg := <-p.got:
			fmt.Println(msg, srv.Len())
			return
		case <-time.After(time.Second):
		}
	}
	// Output: hello 1
}

func ExampleConfig_accept() {
	// Refuse clients from outside a network; they get Denied(2).
	cfg := conn.Config{
		MaxClients: 64,
		Accept: func(remote netip.AddrPort) error {
			if !remote.Addr().IsLoopback() {
				return errors.New("not from here")
			}
			return nil
		},
	}
	_ = cfg
}
