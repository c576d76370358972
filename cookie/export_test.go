package cookie

// Test hooks: ways to make cookies that the tests use and the server does
// not.

import "net/netip"

// Generate is GenerateTo returning the cookie.
func (g *Signer) Generate(ts float64, addr netip.AddrPort) (secretID uint8, c Cookie) {
	secretID = g.sync().Active
	g.sign(&c, secretID, ts, addr)
	return secretID, c
}

// GenerateWith makes a cookie under secret secretID, which must be 0 or 1.
func (g *Signer) GenerateWith(secretID uint8, ts float64, addr netip.AddrPort) Cookie {
	g.sync()
	var c Cookie
	g.sign(&c, secretID, ts, addr)
	return c
}

// Snapshot returns the snapshot the Signer uses, catching up with the
// latest one first.
func (g *Signer) Snapshot() *Snapshot { return g.sync() }
