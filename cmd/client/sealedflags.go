package main

import (
	"flag"
	"fmt"

	"github.com/udpgate/udpgate/cmd/internal/sealflag"
	"github.com/udpgate/udpgate/token"
)

// sealedFlags are the sealed-mode flags that load and flood share.
type sealedFlags struct {
	keyFile, protocolID *string
}

// addSealedFlags defines -private-key-file and -protocol-id; keyUse says
// what the key is for in this command.
func addSealedFlags(fs *flag.FlagSet, keyUse string) *sealedFlags {
	return &sealedFlags{
		keyFile:    fs.String("private-key-file", "", "sealed mode: `file` holding the server's private key (64 hex characters); "+keyUse),
		protocolID: fs.String("protocol-id", "", "sealed mode: the server's protocol `id`, in hex (with or without 0x)"),
	}
}

// parse reads the flags: no key and protocol 0 when neither is given.
// keyNeeded: a protocol id alone is a usage error.
func (f *sealedFlags) parse(keyNeeded bool) (key *[token.KeyBytes]byte, protocol uint64, err error) {
	switch {
	case *f.keyFile == "" && *f.protocolID == "":
		return nil, 0, nil
	case *f.keyFile == "" && keyNeeded:
		return nil, 0, usagef("-protocol-id is for sealed mode: give -private-key-file too (the server's key), or leave -protocol-id out")
	case *f.protocolID == "":
		return nil, 0, usagef("sealed mode needs -protocol-id too: the server's -protocol-id, in hex")
	}
	if protocol, err = sealflag.ParseProtocolID(*f.protocolID); err != nil {
		return nil, 0, usagef("-protocol-id: %v", err)
	}
	if *f.keyFile != "" {
		if key, err = sealflag.ReadKeyFile(*f.keyFile); err != nil {
			return nil, 0, fmt.Errorf("-private-key-file: %w", err)
		}
	}
	return key, protocol, nil
}
