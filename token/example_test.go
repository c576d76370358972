package token_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/udpgate/udpgate/token"
)

// A backend makes a token for an authenticated player; the game server opens
// the request the player's client sends.
func Example() {
	var privateKey [token.KeyBytes]byte // in real use: 32 secret random bytes, shared with the servers
	const protocolID = 0x1122334455667788
	server := netip.MustParseAddrPort("203.0.113.7:7777")

	// Backend.
	tok, err := token.Generate(&privateKey, &token.Params{
		ProtocolID:      protocolID,
		ClientID:        42,
		ServerAddresses: []netip.AddrPort{server},
		Expire:          30 * time.Second,
		Timeout:         5 * time.Second,
		UserData:        []byte("player:alice"),
	})
	if err != nil {
		panic(err)
	}
	file, _ := tok.MarshalBinary() // 2048 bytes, sent to the client over HTTPS

	// Client: read the token, send the request body to the first server.
	var got token.ConnectToken
	if err := got.UnmarshalBinary(file); err != nil {
		panic(err)
	}
	req := got.Request()
	body, _ := req.AppendBinary(nil)

	// Server: one Opener per receive loop.
	opener := token.NewOpener(&privateKey, protocolID)
	var p token.Private
	if err := opener.OpenRequest(&p, body, time.Now()); err != nil {
		panic(err)
	}
	fmt.Println(len(file), len(body), p.ClientID, p.HasServerAddress(server), string(p.UserData[:12]))
	fmt.Println(p.ClientToServerKey == got.ClientToServerKey)
	// Output:
	// 2048 1077 42 true player:alice
	// true
}
