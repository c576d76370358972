// Package conntest is the test kit of udpgate's connection layer: an
// in-memory network whose endpoints stand in for the server's UDP sockets,
// a manual clock, and the helpers the packages' tests share.
//
// The network is package netsim's, with shorthands: conn's tests drive the
// receive loops batch by batch, with no sockets, no goroutines of their own
// and no sleeps, as wireguard-go's conn/bindtest does for its device. An
// Endpoint has the methods conn's transport needs (Recv and Send of a
// batchio.Batch, WriteTo, Class, Stats); a Group is what the server sees of
// its sockets as a whole. Tests that run whole servers and clients over a
// lossy network in virtual time use netsim and testing/synctest directly
// (conn.Config.Network).
//
// The package does not import conn, so that conn's own tests can use it;
// Listen and Echo take conn's types as type parameters instead.
package conntest
