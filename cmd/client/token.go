package main

import (
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/udpgate/udpgate/cmd/internal/sealflag"
	"github.com/udpgate/udpgate/token"
)

const tokenSynopsis = `Make a netcode.io 1.02 connect token, as a game's backend does for a player,
and write its 2048 bytes to -out. "client connect -token FILE" connects with
it to a server in sealed mode (cmd/server -private-key-file) that has the same
private key and -protocol-id and is one of the -server addresses.

The token's private part is sealed under the private key; the file also holds
the client's two packet keys in clear, so treat it as a secret of the player
(it is written readable by its owner only). Tokens made here are accepted by
netcode.io servers, and tokens made by netcode.io backends by udpgate.`

// tokenDefaultServer is -server's default, the other commands' default.
const tokenDefaultServer = "127.0.0.1:7777"

func runToken(args []string, stderr io.Writer) error {
	fs := newFlagSet("token", tokenSynopsis, stderr)
	protocolID := fs.String("protocol-id", "", "the game's protocol `id`, in hex (with or without 0x), as the server's -protocol-id (required)")
	keyFile := fs.String("private-key-file", "", "`file` holding the private key shared with the servers, 64 hex characters, as the server's -private-key-file (required)")
	servers := fs.String("server", tokenDefaultServer, "the servers the token admits to, `IP:port[,...]` (1 to 32), tried in order; the server's -public-addresses")
	clientID := fs.Uint64("client-id", 0, "the player's unique `id` (a number, as the backend assigns; required)")
	expire := fs.Duration("expire", 30*time.Second, "how long the token can be used to connect, whole seconds")
	timeout := fs.Duration("timeout", 5*time.Second, "the connection timeout the token carries, whole seconds")
	userData := fs.String("user-data", "", "up to 256 bytes for the game server, in `hex` (empty: none)")
	out := fs.String("out", "", "`file` to write the token to (required; readable by its owner only)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var missing []string
	for _, name := range []string{"protocol-id", "private-key-file", "client-id", "out"} {
		if !set[name] {
			missing = append(missing, "-"+name)
		}
	}
	if len(missing) > 0 {
		return usagef("%s %s required: a token is made for one game (-protocol-id), under its private key (-private-key-file), for one player (-client-id), into a file (-out); see client token -h",
			strings.Join(missing, ", "), plural(len(missing), "is", "are"))
	}
	id, err := sealflag.ParseProtocolID(*protocolID)
	if err != nil {
		return usagef("-protocol-id: %v", err)
	}
	addrs, err := sealflag.ParseAddrs(*servers)
	if err != nil {
		return usagef("-server %q: %v", *servers, err)
	}
	if err := wholeSeconds("-expire", *expire); err != nil {
		return err
	}
	if err := wholeSeconds("-timeout", *timeout); err != nil {
		return err
	}
	if *timeout > math.MaxInt32*time.Second {
		return usagef("-timeout %v is too long: a token holds at most %d seconds", *timeout, math.MaxInt32)
	}
	data, err := parseUserData(*userData)
	if err != nil {
		return err
	}
	key, err := sealflag.ReadKeyFile(*keyFile)
	if err != nil {
		return fmt.Errorf("-private-key-file: %w", err)
	}
	tok, err := token.Generate(key, &token.Params{
		ProtocolID:      id,
		ClientID:        *clientID,
		ServerAddresses: addrs,
		Expire:          *expire,
		Timeout:         *timeout,
		UserData:        data,
	})
	if err != nil {
		return err // the flags were checked: a failure here is not the user's
	}
	b, err := tok.MarshalBinary()
	if err != nil {
		return err
	}
	if err := writeSecret(*out, b); err != nil {
		return fmt.Errorf("-out: %w: choose a file in a directory you can write", err)
	}
	expires := time.Unix(int64(tok.ExpireTimestamp), 0)
	fmt.Fprintf(stderr, "wrote %s: a %d-byte connect token for client %d, protocol id %s, servers %s, key %s; usable until %s (%v)\n",
		*out, len(b), *clientID, sealflag.FormatProtocolID(id), sealflag.FormatAddrs(addrs), sealflag.KeyID(key),
		expires.Format(time.RFC3339), *expire)
	return nil
}

// wholeSeconds checks a duration the token holds in whole seconds.
func wholeSeconds(name string, d time.Duration) error {
	switch {
	case d < time.Second:
		return usagef("%s %v: use at least 1s", name, d)
	case d%time.Second != 0:
		return usagef("%s %v: a token counts whole seconds; use e.g. %v", name, d, d.Round(time.Second))
	}
	return nil
}

// parseUserData reads -user-data: hex, at most token.UserDataBytes bytes.
func parseUserData(s string) ([]byte, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "0x")
	b, err := hex.DecodeString(s)
	var inv hex.InvalidByteError
	switch {
	case errors.As(err, &inv):
		return nil, usagef("-user-data: %q is not a hex digit: give the bytes in hex, two digits a byte (e.g. -user-data 7b7d)", rune(inv))
	case errors.Is(err, hex.ErrLength):
		return nil, usagef("-user-data has an odd number of hex digits (%d): give two digits a byte", len(s))
	case err != nil:
		return nil, usagef("-user-data: %v", err)
	case len(b) > token.UserDataBytes:
		return nil, usagef("-user-data is %d bytes: a token carries at most %d (%d hex digits)", len(b), token.UserDataBytes, 2*token.UserDataBytes)
	}
	return b, nil
}

// writeSecret writes b to path readable by its owner only, replacing the
// file's content (and tightening the mode of a file that exists).
func writeSecret(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
