package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http/httptest"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/token"
)

// gameServerAt is GET /gameserver's answer for a scheduled GameServer on
// node address addr with the host ports of two ports, "default" and
// "game", in the SDK's JSON.
func gameServerAt(addr string, defaultPort, gamePort uint16) string {
	return `{"object_meta":{"name":"udpgate-x7k2p","namespace":"default"},"spec":{"health":{}},` +
		`"status":{"state":"Scheduled","address":"` + addr + `","ports":[` +
		`{"name":"default","port":` + strconv.Itoa(int(defaultPort)) + `},` +
		`{"name":"game","port":` + strconv.Itoa(int(gamePort)) + `}],"players":null}}`
}

// fakeSidecar serves sc on loopback and returns the environment that
// points the server at it.
func fakeSidecar(t *testing.T, sc *sidecar) environ {
	hs := httptest.NewServer(sc)
	t.Cleanup(hs.Close)
	return env("AGONES_SDK_HTTP_PORT", hs.URL[strings.LastIndex(hs.URL, ":")+1:])
}

// freeUDPPort is a loopback UDP port free a moment ago.
func freeUDPPort(t *testing.T) uint16 {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return uint16(c.LocalAddr().(*net.UDPAddr).Port)
}

// dialSealed connects with a token for the server at addr and protocol id
// 0x77 (the tests' servers use it).
func dialSealed(t *testing.T, addr netip.AddrPort) (*conn.Client, *echoes, error) {
	t.Helper()
	return dialSealedProtocol(t, addr, 0x77)
}

// dialSealedProtocol connects with a token for the server at addr and
// protocol.
func dialSealedProtocol(t *testing.T, addr netip.AddrPort, protocol uint64) (*conn.Client, *echoes, error) {
	t.Helper()
	tok, err := token.Generate(testKey, &token.Params{ProtocolID: protocol, ClientID: 9,
		ServerAddresses: []netip.AddrPort{addr}, Expire: 30 * time.Second, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h := &echoes{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := conn.DialToken(ctx, tok, conn.Config{NetworkVersion: 1, Handler: h})
	if err == nil {
		t.Cleanup(func() { cl.Close() })
	}
	return cl, h, err
}

// TestAgonesSealedAddress: sealed, with -agones and no -public-addresses,
// the server takes its public address from the GameServer before it
// listens: the node's address and the host port of -agones-port-name, or
// of the first port. Tokens for that address are admitted; tokens for
// the address it listens on, when Agones says another, are not. Against
// a local stand-in of the sidecar, not a real one.
func TestAgonesSealedAddress(t *testing.T) {
	key := writeKey(t, testKeyHex, 0o600)
	port := freeUDPPort(t)
	listen := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
	sealed := []string{"-listen", listen.String(), "-agones", "-private-key-file", key, "-protocol-id", "0x77"}

	// The named port is the one the server listens on.
	sc := &sidecar{gameServer: gameServerAt("127.0.0.1", 7001, port)}
	r := start(t, append(sealed, "-agones-port-name", "game"), fakeSidecar(t, sc))
	want := regexp.QuoteMeta(listen.String())
	logged(t, r.stderr, `msg="agones: public address from the GameServer" gameserver=udpgate-x7k2p state=Scheduled address=127\.0\.0\.1 port_name=game (public_addresses=`+want+`)`)
	logged(t, r.stderr, `msg=listening .* sealed=true .* (public_addresses=`+want+`) `)
	cl, h, err := dialSealed(t, listen)
	if err != nil {
		t.Fatal(err)
	}
	echoed(t, cl, h)
	r.sigs <- syscall.SIGTERM
	if err := r.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if calls := sc.log(); len(calls) < 2 || calls[0] != "GET /gameserver" || calls[1] != "POST /ready" {
		t.Errorf("calls %q, want the GameServer read before Ready", calls)
	}

	// Without -agones-port-name the first port counts: the public address
	// is no longer the one listened on, and a token for the latter is for
	// another server.
	port = freeUDPPort(t)
	listen = netip.AddrPortFrom(listen.Addr(), port)
	sealed[1] = listen.String()
	sc = &sidecar{gameServer: gameServerAt("127.0.0.1", 7001, port)}
	r = start(t, sealed, fakeSidecar(t, sc))
	logged(t, r.stderr, `msg=listening .* sealed=true .* (public_addresses=127\.0\.0\.1:7001) `)
	if _, _, err := dialSealed(t, listen); !errors.Is(err, conn.ErrTokenForeignServer) {
		t.Errorf("a token for the listen address, not the GameServer's: %v, want ErrTokenForeignServer", err)
	}

	// -public-addresses, when given, is taken as it is: no GameServer read.
	sc = &sidecar{}
	sealed[1] = "127.0.0.1:0"
	r = start(t, append(sealed, "-public-addresses", "192.0.2.1:7777"), fakeSidecar(t, sc))
	logged(t, r.stderr, `msg=listening .* (public_addresses=192\.0\.2\.1:7777)`)
	logged(t, r.stderr, `msg="agones: (talking to the SDK sidecar)"`)
	if slices.Contains(sc.log(), "GET /gameserver") {
		t.Errorf("calls %q: the GameServer read with -public-addresses given", sc.log())
	}
}

// TestAgonesSealedAddressUnusable: a GameServer without the named port
// stops the server before it listens, with the cause and the fixes.
func TestAgonesSealedAddressUnusable(t *testing.T) {
	key := writeKey(t, testKeyHex, 0o600)
	sc := &sidecar{gameServer: gameServerAt("127.0.0.1", 7001, 7002)}
	args := []string{"-listen", "127.0.0.1:0", "-summary", "0", "-agones", "-agones-port-name", "gmae",
		"-private-key-file", key, "-protocol-id", "0x77"}
	var stderr conntest.SyncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := serve(ctx, args, fakeSidecar(t, sc), io.Discard, &stderr, make(chan os.Signal), func() {})
	if err == nil {
		t.Fatal("the server started")
	}
	for _, w := range []string{`no port named "gmae"`, `"default", "game"`, "-agones-port-name", "-public-addresses"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if strings.Contains(stderr.String(), "msg=listening") {
		t.Errorf("the server listened first:\n%s", stderr.String())
	}
	if slices.Contains(sc.log(), "POST /ready") {
		t.Errorf("calls %q: Ready without an address", sc.log())
	}
}

// TestAgonesSealedAddressStop: a stop signal while the GameServer has no
// address yet ends the wait and the server at once, without an error.
func TestAgonesSealedAddressStop(t *testing.T) {
	key := writeKey(t, testKeyHex, 0o600)
	sc := &sidecar{gameServer: `{"object_meta":{"name":"udpgate-x7k2p"},"status":{"state":"Creating","address":"","ports":[]}}`}
	args := []string{"-listen", "127.0.0.1:0", "-summary", "0", "-agones", "-private-key-file", key, "-protocol-id", "0x77"}
	stderr := &conntest.SyncBuffer{}
	sigs := make(chan os.Signal, 2)
	done := make(chan error, 1)
	go func() {
		done <- serve(context.Background(), args, fakeSidecar(t, sc), io.Discard, stderr, sigs, func() {})
	}()
	logged(t, stderr, `msg="agones: (waiting for the GameServer's address)" .*status\.address is not set yet`)
	sigs <- syscall.SIGHUP
	logged(t, stderr, `msg="signal: (SIGHUP ignored) while waiting`)
	sigs <- syscall.SIGTERM
	if err := stopped(t, done, 10*time.Second, "the server after SIGTERM"); err != nil {
		t.Errorf("stopped with %v, want nil", err)
	}
	logged(t, stderr, `msg="signal: (stopping while waiting for the GameServer's address)"`)
	if strings.Contains(stderr.String(), "msg=listening") {
		t.Errorf("the server listened:\n%s", stderr.String())
	}
}
