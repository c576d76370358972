package main

import "time"

const (
	// shutdownTimeout bounds the final Shutdown: promotions still running,
	// the Disconnect packets, the last scrape and the Agones Shutdown call.
	shutdownTimeout = 5 * time.Second

	// connLogRate and connLogBurst bound the debug lines about single
	// connections (connected, disconnected), per second and in a burst:
	// a handshake flood or a mass timeout must not turn the log into the
	// bottleneck. Lines left out are counted in the next one (suppressed).
	connLogRate  = 100
	connLogBurst = 200

	// agonesAddressTimeout bounds the wait for the GameServer's public
	// address (sealed mode with -agones): the pod runs before the
	// controller has written it, and the sidecar may start after the
	// server, but both take seconds, not minutes.
	agonesAddressTimeout = 30 * time.Second
)
