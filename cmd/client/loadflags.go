package main

import (
	"flag"
	"net/netip"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/token"
)

// trafficFlags are the flags of the commands that aim traffic at a server
// (load, flood): the server and its wire settings, and sealed mode.
type trafficFlags struct {
	wire   *wireFlags
	sealed *sealedFlags
}

// addTrafficFlags defines the wire and the sealed-mode flags; keyUse says
// what the key is for in this command.
func addTrafficFlags(fs *flag.FlagSet, keyUse string) trafficFlags {
	return trafficFlags{wire: addWireFlags(fs), sealed: addSealedFlags(fs, keyUse)}
}

// trafficTarget is what the traffic flags say: the server, its wire
// settings, and in sealed mode its key and protocol id (no key and 0
// without).
type trafficTarget struct {
	server   netip.AddrPort
	wire     conn.Config
	key      *[token.KeyBytes]byte
	protocol uint64
}

// parse parses args into fs, then reads the sealed-mode flags (keyNeeded
// as sealedFlags.parse takes it), the server and its wire settings.
func (f trafficFlags) parse(fs *flag.FlagSet, args []string, keyNeeded bool) (trafficTarget, error) {
	var t trafficTarget
	if err := parseFlags(fs, args); err != nil {
		return t, err
	}
	var err error
	if t.key, t.protocol, err = f.sealed.parse(keyNeeded); err != nil {
		return t, err
	}
	if t.server, err = f.wire.target(); err != nil {
		return t, err
	}
	t.wire, err = f.wire.config()
	return t, err
}
