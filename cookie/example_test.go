package cookie_test

import (
	"fmt"
	"net/netip"

	"github.com/udpgate/udpgate/cookie"
)

// A server answers an Initial with a cookie and, when the Response echoes
// it, checks it without having remembered anything in between.
func Example() {
	now := 1_800_000_000.0 // Unix seconds, from the server's clock
	secrets, err := cookie.NewSecrets(now, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	signer := cookie.NewSigner(secrets) // one per receive loop

	client := netip.MustParseAddrPort("198.51.100.7:5000")
	var c cookie.Cookie
	id := signer.GenerateTo(&c, now, client) // sent in the Challenge

	// The Response carries id, the timestamp and c back.
	fmt.Println(signer.Verify(id, now, client, &c, now+1))
	spoofed := netip.MustParseAddrPort("203.0.113.9:5000")
	fmt.Println(signer.Verify(id, now, spoofed, &c, now+1))

	// Housekeeping rotates the secrets; a cookie made before the rotation
	// stays valid until it expires.
	rotated, _ := secrets.MaybeRotate(now + 20)
	fmt.Println("rotated:", rotated, signer.Verify(id, now, client, &c, now+21))
	fmt.Println(signer.Verify(id, now, client, &c, now+cookie.MaxLifetime))
	// Output:
	// valid
	// mismatch
	// rotated: true valid
	// expired
}
