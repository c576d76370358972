package flood_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/traffic/flood"
)

// A server test floods its server with a million hostile datagrams and
// checks both sides: no source was sent more bytes than it sent, and no
// connection was made.
func Example() {
	srv, err := conn.Listen("127.0.0.1:0", conn.Config{NetworkVersion: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := flood.Run(ctx, flood.Config{
		Server:         srv.Addr(),
		NetworkVersion: 1, // the server's, so Initials earn Challenges
		Count:          1_000_000,
		MaxDuration:    20 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range rep.Amplified() {
		fmt.Printf("%v received %d bytes for %d\n", s.Addr, s.Received.Bytes, s.Sent.Bytes)
	}
	if st := srv.Stats(); st.Accepted != 0 {
		fmt.Printf("the flood made %d connections\n", st.Accepted)
	}
	rep.Print(os.Stdout, 10)
}
