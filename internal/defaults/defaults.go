// Package defaults holds conn's defaults that the commands show as flag
// defaults and the tests assert against: conn documents each one in its
// Config field's comment and keeps its exported API for what a game
// calls (internal/tools/arch's limit of 100 names a package).
package defaults

import "time"

const (
	// KeepAlive: a side that has sent nothing for this long sends a
	// KeepAlive (docs/protocol.md §7; conn.Config.KeepAlive).
	KeepAlive = 1 * time.Second
	// Timeout: a side that has received no valid packet for this long
	// closes the connection (§7; conn.Config.Timeout).
	Timeout = 5 * time.Second
	// ConnectTimeout: a client that hears nothing from the server for
	// this long while handshaking gives up (§6; conn.Config.ConnectTimeout).
	ConnectTimeout = 10 * time.Second
	// MaxClients bounds connections; a full server answers Denied(1)
	// (conn.Config.MaxClients).
	MaxClients = 100_000
	// MaxClientsPerIP and MaxClientsPerPrefix bound the connections of
	// one IP and of one /24 (IPv4) or /64 (IPv6) network, so that one
	// host or network cannot take every slot. They admit a few hundred
	// players behind one carrier-grade NAT address, and about a thousand
	// from one NAT pool or IPv6 subscriber; a server that expects more
	// from one network (a LAN event) raises or disables them
	// (conn.Config.MaxClientsPerIP, MaxClientsPerPrefix).
	MaxClientsPerIP     = 256
	MaxClientsPerPrefix = 1024
)
