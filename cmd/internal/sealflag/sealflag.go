// Package sealflag parses the sealed-mode settings that cmd/server and
// cmd/client share: the private key (64 hex characters, from a file or an
// environment variable), the protocol id (a u64 in hex) and lists of
// server addresses. Its errors say what is wrong and how to fix it; the
// commands prefix them with the flag or variable the value came from.
package sealflag

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/udpgate/udpgate/token"
)

// MakeKey is the shell command, quoted in errors and docs, that makes a
// private key in the format ParseKey reads.
const MakeKey = "head -c 32 /dev/urandom | xxd -p -c 64"

// maxKeyFile bounds what ReadKeyFile reads: a key file is 64 characters and
// a line end; anything much larger is the wrong file.
const maxKeyFile = 4096

// ParseKey reads a private key written as 64 hex characters (either case,
// an optional 0x prefix). Surrounding whitespace, such as the newline
// that ends a file, is ignored.
func ParseKey(s string) (*[token.KeyBytes]byte, error) {
	s = strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(s, "0x"); ok {
		s = rest
	} else if rest, ok := strings.CutPrefix(s, "0X"); ok {
		s = rest
	}
	const want = 2 * token.KeyBytes
	if s == "" {
		return nil, fmt.Errorf("the private key is empty: want %d hex characters (%d bytes); make one with: %s", want, token.KeyBytes, MakeKey)
	}
	if i := strings.IndexFunc(s, isSpace); i >= 0 {
		return nil, fmt.Errorf("the private key has whitespace inside it (at character %d): write the %d hex characters on one line (xxd -p wraps at 60 unless given -c 64)", i+1, want)
	}
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return nil, fmt.Errorf("the private key has %q at character %d, which is not a hex digit: want %d characters of 0-9 and a-f; make one with: %s", s[i:i+1], i+1, want, MakeKey)
		}
	}
	if len(s) != want {
		return nil, fmt.Errorf("the private key is %d hex characters, want %d (%d bytes): use the backend's whole key, or make a new one with: %s", len(s), want, token.KeyBytes, MakeKey)
	}
	var k [token.KeyBytes]byte
	if _, err := hex.Decode(k[:], []byte(s)); err != nil {
		return nil, err // unreachable: checked above
	}
	if k == ([token.KeyBytes]byte{}) {
		return nil, fmt.Errorf("the private key is all zeros, a placeholder rather than a secret: make a real one with: %s", MakeKey)
	}
	return &k, nil
}

// ReadKeyFile reads a private key from a file holding its 64 hex
// characters. It recognises a file of 32 raw bytes, a common mistake, and
// says how to convert it.
func ReadKeyFile(path string) (*[token.KeyBytes]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("cannot read the private key: %s does not exist: check the path, or make a key with: %s > %s", path, MakeKey, path)
		}
		if errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("cannot read the private key: permission denied on %s: let the user running this command read it (and only that user: chmod 600)", path)
		}
		return nil, fmt.Errorf("cannot read the private key: %v", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read the private key from %s: %v: give the path of a file holding the key", path, err)
	}
	n := len(b)
	if n > maxKeyFile {
		return nil, fmt.Errorf("%s is not a private key file: it is larger than %d bytes; the file should hold only the %d hex characters of the key", path, maxKeyFile, 2*token.KeyBytes)
	}
	if n == token.KeyBytes && !isHexText(b) {
		return nil, fmt.Errorf("%s holds %d raw bytes, not hex text: the key file must hold the key as %d hex characters; convert it with: xxd -p -c 64 %s", path, n, 2*token.KeyBytes, path)
	}
	k, err := ParseKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// KeyID is a short fingerprint of a private key for logs: the first 4 bytes
// of its SHA-256, in hex. It lets an operator see that a server and a
// backend hold the same key without the key itself reaching a log.
func KeyID(k *[token.KeyBytes]byte) string {
	sum := sha256.Sum256(k[:])
	return hex.EncodeToString(sum[:4])
}

// ParseProtocolID reads a protocol id: a u64 in hex, with or without 0x.
// "10" is sixteen, as it is in the backend's netcode configuration where
// protocol ids are written 0x....
func ParseProtocolID(s string) (uint64, error) {
	h := strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(h, "0x"); ok {
		h = rest
	} else if rest, ok := strings.CutPrefix(h, "0X"); ok {
		h = rest
	}
	if h == "" {
		return 0, fmt.Errorf("the protocol id %q is empty: give the game's protocol id in hex, e.g. 0x1122334455667788, the same the backend puts in its tokens", s)
	}
	for i := 0; i < len(h); i++ {
		if !isHex(h[i]) {
			return 0, fmt.Errorf("the protocol id %q is not hex (%q is not a hex digit): give up to 16 hex digits, with or without 0x, e.g. 0x1122334455667788", s, h[i:i+1])
		}
	}
	if len(strings.TrimLeft(h, "0")) > 16 {
		return 0, fmt.Errorf("the protocol id %q has more than 16 hex digits: it is a 64-bit number, e.g. 0x1122334455667788", s)
	}
	v, err := strconv.ParseUint(h, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("the protocol id %q: %v", s, err) // unreachable: checked above
	}
	return v, nil
}

// FormatProtocolID writes a protocol id as ParseProtocolID reads it.
func FormatProtocolID(id uint64) string { return "0x" + strconv.FormatUint(id, 16) }

// ParseAddrs reads a comma-separated list of IP:port addresses, the form a
// connect token holds them in: 1 to token.MaxServerAddresses, each with an
// IP address (not a host name), a port other than 0 and no zone, none
// twice. IPv4-mapped IPv6 addresses are taken as IPv4.
func ParseAddrs(s string) ([]netip.AddrPort, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("no address: give IP:port addresses separated by commas, e.g. 203.0.113.7:7777,[2001:db8::7]:7777")
	}
	parts := strings.Split(s, ",")
	if len(parts) > token.MaxServerAddresses {
		return nil, fmt.Errorf("%d addresses: a connect token holds at most %d", len(parts), token.MaxServerAddresses)
	}
	addrs := make([]netip.AddrPort, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		a, err := netip.ParseAddrPort(p)
		switch {
		case p == "":
			return nil, fmt.Errorf("an empty address in %q: separate IP:port addresses by single commas", s)
		case err != nil:
			return nil, fmt.Errorf("%q is not IP:port: a connect token holds IP addresses, not host names; write IPv6 as [2001:db8::7]:7777", p)
		case a.Addr().Zone() != "":
			return nil, fmt.Errorf("%q has a zone (%%%s): a connect token cannot hold one; use a global or loopback address", p, a.Addr().Zone())
		case a.Port() == 0:
			return nil, fmt.Errorf("%q has port 0: give the port clients send to", p)
		case a.Addr().IsUnspecified():
			return nil, fmt.Errorf("%q is the unspecified address, which no client can send to: give the address clients reach the server at", p)
		}
		a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
		for _, b := range addrs {
			if b == a {
				return nil, fmt.Errorf("%v is listed twice", a)
			}
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// FormatAddrs writes addresses as ParseAddrs reads them.
func FormatAddrs(addrs []netip.AddrPort) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isSpace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f'
}

// isHexText reports whether b is hex digits and whitespace only.
func isHexText(b []byte) bool {
	return len(bytes.TrimFunc(b, func(r rune) bool { return r < 0x80 && (isHex(byte(r)) || isSpace(r)) })) == 0
}
