// Package conn is udpgate's public API: a UDP server that admits clients
// through a stateless cookie handshake, the client that dials it, and the
// connections between them.
//
// # Servers
//
// Listen binds one SO_REUSEPORT socket per CPU (Config.Sockets) and runs a
// receive loop on each. Until a client echoes a valid cookie, the server
// stores nothing for it and never answers with more bytes than it
// received, so spoofed floods cost it little. A proven client is promoted
// to a connection by a worker pool off the receive loops, and the
// application hears about it through its Handler:
//
//	type game struct{ conn.NopHandler }
//
//	func (game) OnPacket(c *conn.Conn, payload []byte) {
//		c.Send(payload) // payload is borrowed for this call
//	}
//
//	srv, err := conn.Listen("0.0.0.0:7777", conn.Config{Handler: game{}, MaxClients: 5000})
//
// Handler methods run on the server's goroutines and must not block: a
// slow OnPacket stalls every connection of its socket. The zero Config is
// usable; every zero field takes the default in params.go.
//
// A running Server can be administered: Drain stops admitting clients while
// the connected ones are served, SetMaxClients, SetChallengeRate and
// SetOverload change limits live, Healthy reports whether every receive loop
// runs, Stats and SocketStats read the counters (package metrics exports
// them to Prometheus), and Shutdown tells every client (Disconnect, reason
// shutdown) before it closes the sockets.
//
// # Clients
//
// Dial runs the client side of the handshake and returns a connected
// Client, or a typed error: ErrTimedOut when nothing answers,
// *DeniedError when the server is full, holds as many connections from the
// client's address or network as it allows, or refuses the client,
// *VersionError when the NetworkVersion or NetworkFeatures differ, and
// ErrTokenRequired when the server is sealed and Config.Token is not set.
// Client.Done and Client.Err say when and why a connection ended
// (*DisconnectedError). Rebind moves a client to a new local port, as a
// NAT rebinding would; the server follows it (migration).
//
// # Connections
//
// Both sides talk through a Conn, in two ways. Send transmits one Data
// payload unreliably, with a sequence number; the peer's acks measure the
// RTT and, for a Handler that also implements DeliveryHandler, say which
// payloads arrived and which were lost. A Data payload is never resent:
// the application decides what its loss means. With Config.Messages, the
// connection also carries messages on channels (package message):
// SendMessage queues one, a reliable-ordered channel resends what is lost
// and delivers every message once and in order, and a Handler that
// implements MessageHandler receives them. Without OnMessage, a game loop
// polls for them with ReceiveMessage when Config.ReceiveQueue is set
// (ExampleConn_ReceiveMessage); otherwise they are acknowledged and
// counted as dropped (message.DropUnhandled). A Handler that implements
// MessageDeliveryHandler hears when each reliable message it sent was
// acknowledged, or that the connection ended first.
// KeepAlives flow while a side has nothing to send, and a connection
// silent for Config.Timeout ends.
//
// A Handler hears of a connection in order: OnConnect returns before the
// connection's first packet or message reaches OnPacket or OnMessage, and
// OnDisconnect comes once, after the last of them has returned.
//
// # The protocol
//
// The wire format, the handshake and the rules each side follows are
// specified in docs/protocol.md; fastpath/testdata/vectors.json holds
// byte-exact examples. Config.Magic, NetworkVersion and NetworkFeatures
// must be equal on both sides. Package fastpath implements the protocol
// without I/O, cookie the handshake's secrets, batchio the sockets and
// shard the connection tables; conn puts them together.
package conn
