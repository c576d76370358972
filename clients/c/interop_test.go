package cclient_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/netem"
	"github.com/udpgate/udpgate/token"
)

var (
	testKey        = [token.KeyBytes]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32}
	otherKey       = [token.KeyBytes]byte{99}
	testProtocolID = uint64(0x1122334455667788)
)

// echoServer records every message it gets, per channel, and echoes it on
// the channel it came on (cmd/server's -app echo).
type echoServer struct {
	conn.NopHandler
	mu       sync.Mutex
	got      map[int][][]byte
	connects atomic.Int64
}

func (e *echoServer) OnConnect(*conn.Conn) { e.connects.Add(1) }

// OnPacket echoes a Data packet (§7.1).
func (e *echoServer) OnPacket(c *conn.Conn, p []byte) { _, _ = c.Send(p) }

func (e *echoServer) OnMessage(c *conn.Conn, ch int, msg []byte) {
	e.mu.Lock()
	if e.got == nil {
		e.got = map[int][][]byte{}
	}
	e.got[ch] = append(e.got[ch], append([]byte(nil), msg...))
	e.mu.Unlock()
	_ = c.SendMessage(ch, msg)
}

func (e *echoServer) messages(ch int) [][]byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.got[ch]
}

type setup struct {
	ipv6   bool
	sealed bool
	loss   float64
	cfg    func(*conn.Config)
}

// startServer starts a udpgate server on 127.0.0.1:0 with the stock message
// layout (internal/msgcfg) and, with loss, the lossy proxy in front of it.
// It returns the server, the address the client dials, the proxy (or nil)
// and the echo handler.
func startServer(t testing.TB, su setup) (*conn.Server, netip.AddrPort, *netem.Proxy, *echoServer) {
	t.Helper()
	h := &echoServer{}
	cfg := conn.Config{
		NetworkVersion: 1,
		Messages:       msgcfg.Config(0, 0),
		Handler:        h,
		Sockets:        1,
		Timeout:        30 * time.Second,
	}
	if su.sealed {
		cfg.PrivateKey, cfg.ProtocolID = &testKey, testProtocolID
	}
	if su.cfg != nil {
		su.cfg(&cfg)
	}
	listenAddr := "127.0.0.1:0"
	if su.ipv6 {
		listenAddr = "[::1]:0"
	}
	s, err := conn.Listen(listenAddr, cfg)
	if err != nil && su.ipv6 {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	addr := s.Addr()
	var proxy *netem.Proxy
	if su.loss >= 0 {
		proxy, err = netem.New(s.Addr(), netem.Config{Loss: su.loss, Seed: 7, SocketBuffer: 4 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { proxy.Close() })
		addr = proxy.Addr()
	}
	return s, addr, proxy, h
}

// tokenFile writes a connect token for the server at internal, dialled at
// public, and returns its path.
func tokenFile(t *testing.T, key *[token.KeyBytes]byte, public, internal netip.AddrPort, mod func(*token.Params)) string {
	t.Helper()
	p := token.Params{
		ProtocolID:              testProtocolID,
		ClientID:                42,
		ServerAddresses:         []netip.AddrPort{public},
		InternalServerAddresses: []netip.AddrPort{internal},
		Expire:                  60 * time.Second,
		Timeout:                 30 * time.Second,
	}
	if mod != nil {
		mod(&p)
	}
	tok, err := token.Generate(key, &p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tok.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runC runs the C client program and returns its output; it fails the test
// on a non-zero exit.
func runC(t testing.TB, prog string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(prog), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// clientArgs are the C client's arguments for a setup.
func clientArgs(t *testing.T, su setup, s *conn.Server, addr netip.AddrPort, extra ...string) []string {
	var args []string
	if su.sealed {
		args = append(args, "-token", tokenFile(t, &testKey, addr, s.Addr(), nil))
	}
	return append(args, extra...)
}

// eachVariant runs f with the C client built plain and with AddressSanitizer
// and UndefinedBehaviorSanitizer (issue 30, target 3).
func eachVariant(t *testing.T, f func(t *testing.T, prog string)) {
	for _, v := range []variant{plain, sanitize} {
		t.Run(string(v), func(t *testing.T) { f(t, program(t, "client", v)) })
	}
}

func modes(t *testing.T, f func(t *testing.T, su setup)) {
	for _, sealed := range []bool{false, true} {
		t.Run(fmt.Sprintf("sealed=%v", sealed), func(t *testing.T) { f(t, setup{sealed: sealed, loss: -1}) })
	}
}

// numbered matches test/client.c's fill and size_of.
func numbered(i uint32) []byte {
	n := 20 + int(i%200)
	if i%100 == 50 {
		n = 5000
	}
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*7 + uint32(j)*13 + uint32(j>>8))
	}
	binary.LittleEndian.PutUint32(b, i)
	return b
}

// TestConnect: the C client connects, unsealed and sealed, and its
// allocator hook sees no allocation after create.
func TestConnect(t *testing.T) {
	eachVariant(t, func(t *testing.T, prog string) {
		modes(t, func(t *testing.T, su setup) {
			s, addr, _, _ := startServer(t, su)
			out := runC(t, prog, clientArgs(t, su, s, addr, "connect", addr.String())...)
			if !strings.HasPrefix(out, fmt.Sprintf("state %d ", 2)) {
				t.Fatalf("not connected:\n%s", out)
			}
		})
	})
}

// TestReliableLossy: 1,000 reliable messages through 10 % loss each way
// arrive once and in order at the server, and their echoes once and in
// order at the C client (issue 30, target 1).
func TestReliableLossy(t *testing.T) {
	eachVariant(t, func(t *testing.T, prog string) {
		modes(t, func(t *testing.T, su setup) {
			su.loss = 0.1
			s, addr, _, h := startServer(t, su)
			const n = 1000
			out := runC(t, prog, clientArgs(t, su, s, addr, "reliable", addr.String(), strconv.Itoa(n))...)
			if !strings.Contains(out, "ok reliable 1000") {
				t.Fatalf("C client:\n%s", out)
			}
			got := h.messages(msgcfg.Reliable)
			if len(got) != n {
				t.Fatalf("server got %d reliable messages, want exactly %d", len(got), n)
			}
			for i, m := range got {
				if !bytes.Equal(m, numbered(uint32(i))) {
					t.Fatalf("server's message %d is not the C client's message %d", i, i)
				}
			}
		})
	})
}

// TestBigMessageLossy: a 256 KiB message each way, byte-exact, through 10 %
// loss.
func TestBigMessageLossy(t *testing.T) {
	eachVariant(t, func(t *testing.T, prog string) {
		modes(t, func(t *testing.T, su setup) {
			su.loss = 0.1
			s, addr, _, h := startServer(t, su)
			out := runC(t, prog, clientArgs(t, su, s, addr, "big", addr.String(), strconv.Itoa(256<<10))...)
			if !strings.Contains(out, "ok big 262144") {
				t.Fatalf("C client:\n%s", out)
			}
			got := h.messages(msgcfg.Reliable)
			if len(got) != 1 || len(got[0]) != 256<<10 {
				t.Fatalf("server got %d messages", len(got))
			}
		})
	})
}

// TestSequenced: the sequenced channel delivers only newer messages, both
// ways (the C client checks the echoes, this test the server's log).
func TestSequenced(t *testing.T) {
	eachVariant(t, func(t *testing.T, prog string) {
		modes(t, func(t *testing.T, su setup) {
			su.loss = 0.1
			s, addr, _, h := startServer(t, su)
			out := runC(t, prog, clientArgs(t, su, s, addr, "sequenced", addr.String(), "600")...)
			if !strings.Contains(out, "ok sequenced") {
				t.Fatalf("C client:\n%s", out)
			}
			got := h.messages(msgcfg.Sequenced)
			if len(got) == 0 {
				t.Fatal("server got no sequenced message")
			}
			last := int64(-1)
			for _, m := range got {
				id := int64(binary.LittleEndian.Uint32(m))
				if id <= last {
					t.Fatalf("server got sequenced %d after %d", id, last)
				}
				last = id
			}
			t.Logf("%s; server got %d", strings.TrimSpace(out), len(got))
		})
	})
}

// connectState runs the C client's connect mode and returns the state it
// reports and how long it took.
func connectState(t *testing.T, prog string, args ...string) (int, float64, string) {
	t.Helper()
	out := runC(t, prog, args...)
	var st int
	var secs float64
	if _, err := fmt.Sscanf(out, "state %d %f", &st, &secs); err != nil {
		t.Fatalf("C client: %v\n%s", err, out)
	}
	return st, secs, out
}

// The endings of issue 30's target 1, each its own enum value within 2 s.
const (
	stConnected       = 2
	stDeniedFull      = -2
	stVersionMismatch = -7
	stTokenExpired    = -8
	stTokenInvalid    = -9
	stTokenForeign    = -10
	stTokenRequired   = -12
	stTimedOut        = -13
	stShutdown        = -14
	stLayoutMismatch  = -19
)

func TestRefusals(t *testing.T) {
	eachVariant(t, func(t *testing.T, prog string) {
		check := func(t *testing.T, want int, args ...string) {
			t.Helper()
			st, secs, out := connectState(t, prog, args...)
			if st != want || secs >= 2 {
				t.Fatalf("state %d after %.3fs, want %d within 2 s:\n%s", st, secs, want, out)
			}
		}
		t.Run("server-full", func(t *testing.T) {
			modes(t, func(t *testing.T, su setup) {
				su.cfg = func(c *conn.Config) { c.MaxClients = 1 }
				s, addr, _, _ := startServer(t, su)
				// A first C client takes the only slot and holds it.
				first := exec.Command(prog, clientArgs(t, su, s, addr, "wait", addr.String())...)
				stdout, _ := first.StdoutPipe()
				if err := first.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { first.Process.Kill(); first.Wait() }()
				line, _ := bufio.NewReader(stdout).ReadString('\n')
				if line != "connected\n" {
					t.Fatalf("first client: %q", line)
				}
				check(t, stDeniedFull, clientArgs(t, su, s, addr, "connect", addr.String())...)
			})
		})
		t.Run("version-mismatch", func(t *testing.T) {
			modes(t, func(t *testing.T, su setup) {
				s, addr, _, _ := startServer(t, su)
				check(t, stVersionMismatch, clientArgs(t, su, s, addr, "-nv", "2", "connect", addr.String())...)
			})
		})
		t.Run("layout-mismatch", func(t *testing.T) {
			// A server whose largest message differs from the C client's
			// (the stock layout's 256 KiB): refused at connect (§3.7).
			modes(t, func(t *testing.T, su setup) {
				su.cfg = func(c *conn.Config) { c.Messages = msgcfg.Config(100_000, 0) }
				s, addr, _, _ := startServer(t, su)
				check(t, stLayoutMismatch, clientArgs(t, su, s, addr, "connect", addr.String())...)
				if n := s.Stats().HandshakeOut[protocol.TypeLayoutMismatch]; n == 0 {
					t.Errorf("the server sent no LayoutMismatch (type 8)")
				}
			})
		})
		t.Run("token-required", func(t *testing.T) {
			_, addr, _, _ := startServer(t, setup{sealed: true, loss: -1})
			check(t, stTokenRequired, "connect", addr.String())
		})
		t.Run("token-expired", func(t *testing.T) {
			s, addr, _, _ := startServer(t, setup{sealed: true, loss: -1})
			tf := tokenFile(t, &testKey, addr, s.Addr(), func(p *token.Params) {
				p.Now = func() time.Time { return time.Now().Add(-time.Hour) }
			})
			check(t, stTokenExpired, "-token", tf, "connect", addr.String())
		})
		t.Run("wrong-key", func(t *testing.T) {
			s, addr, _, _ := startServer(t, setup{sealed: true, loss: -1})
			check(t, stTokenInvalid, "-token", tokenFile(t, &otherKey, addr, s.Addr(), nil), "connect", addr.String())
		})
		t.Run("foreign-server", func(t *testing.T) {
			_, addr, _, _ := startServer(t, setup{sealed: true, loss: -1})
			other := netip.MustParseAddrPort("127.0.0.1:9")
			check(t, stTokenForeign, "-token", tokenFile(t, &testKey, addr, other, nil), "connect", addr.String())
		})
	})
}

// waitEnding starts the C client in wait mode, calls act once it is
// connected, and returns the state it ends in and the seconds from act to
// the client's exit.
func waitEnding(t *testing.T, prog string, act func(), args ...string) (int, float64, string) {
	t.Helper()
	cmd := exec.Command(prog, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	line, _ := r.ReadString('\n')
	if line != "connected\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("C client: %q", line)
	}
	start := time.Now()
	act()
	rest, _ := r.ReadString(0)
	err = cmd.Wait()
	secs := time.Since(start).Seconds()
	if err != nil {
		t.Fatalf("C client: %v\n%s", err, rest)
	}
	var st int
	var x float64
	if _, err := fmt.Sscanf(rest, "state %d %f", &st, &x); err != nil {
		t.Fatalf("C client: %v\n%s", err, rest)
	}
	return st, secs, rest
}

// TestSilentServer: a server that falls silent is reported as timed out at
// the configured timeout.
func TestSilentServer(t *testing.T) {
	eachVariant(t, func(t *testing.T, prog string) {
		modes(t, func(t *testing.T, su setup) {
			su.loss = 0
			s, addr, proxy, _ := startServer(t, su)
			const timeout = 2.0
			args := []string{"-timeout", "2", "wait", addr.String()}
			if su.sealed {
				// A sealed connection's timeout is the token's (§11.3).
				args = append([]string{"-token", tokenFile(t, &testKey, addr, s.Addr(), func(p *token.Params) {
					p.Timeout = 2 * time.Second
				})}, args...)
			}
			st, secs, out := waitEnding(t, prog, func() { proxy.Close() }, args...)
			if st != stTimedOut || secs < timeout-0.2 || secs > timeout+2 {
				t.Fatalf("state %d after %.3fs, want %d at the %.0f s timeout:\n%s", st, secs, stTimedOut, timeout, out)
			}
		})
	})
}

// TestShutdown: the server's shutdown is reported as such.
func TestShutdown(t *testing.T) {
	eachVariant(t, func(t *testing.T, prog string) {
		modes(t, func(t *testing.T, su setup) {
			s, addr, _, _ := startServer(t, su)
			st, _, out := waitEnding(t, prog, func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				s.Shutdown(ctx)
			}, clientArgs(t, su, s, addr, "wait", addr.String())...)
			if st != stShutdown {
				t.Fatalf("state %d, want %d (shutdown):\n%s", st, stShutdown, out)
			}
		})
	})
}

// TestData: Data packets (§7.1) go both ways beside the messages.
func TestData(t *testing.T) {
	eachVariant(t, func(t *testing.T, prog string) {
		modes(t, func(t *testing.T, su setup) {
			s, addr, _, _ := startServer(t, su)
			out := runC(t, prog, clientArgs(t, su, s, addr, "data", addr.String(), "200")...)
			if !strings.Contains(out, "ok data") {
				t.Fatalf("C client:\n%s", out)
			}
		})
	})
}

// TestIPv6: the library's socket speaks IPv6, unsealed and sealed.
func TestIPv6(t *testing.T) {
	eachVariant(t, func(t *testing.T, prog string) {
		modes(t, func(t *testing.T, su setup) {
			su.ipv6 = true
			s, addr, _, h := startServer(t, su)
			if !addr.Addr().Is6() {
				t.Fatalf("server at %v", addr)
			}
			out := runC(t, prog, clientArgs(t, su, s, addr, "reliable", addr.String(), "300")...)
			if !strings.Contains(out, "ok reliable 300") || len(h.messages(0)) != 300 {
				t.Fatalf("C client:\n%s", out)
			}
		})
	})
}

// TestCallbacks: the application owns the socket and passes send and
// receive callbacks (Unreal's FSocket, Godot's PacketPeerUDP): the same
// reliable exchange through 10 % loss, unsealed and sealed.
func TestCallbacks(t *testing.T) {
	eachVariant(t, func(t *testing.T, prog string) {
		modes(t, func(t *testing.T, su setup) {
			su.loss = 0.1
			s, addr, _, h := startServer(t, su)
			out := runC(t, prog, clientArgs(t, su, s, addr, "-callbacks", "4", "reliable", addr.String(), "300")...)
			if !strings.Contains(out, "ok reliable 300") || len(h.messages(0)) != 300 {
				t.Fatalf("C client:\n%s", out)
			}
		})
	})
}

// TestAllocsAfterCreate: the allocator hook is called once, by
// udpgate_client_create, and never again while the client connects, sends
// and receives 500 reliable messages (some fragmented) through 10 % loss,
// unsealed and sealed (issue 30, target 3). Every run of test/client.c
// checks this; this test names it.
func TestAllocsAfterCreate(t *testing.T) {
	prog := program(t, "client", plain)
	modes(t, func(t *testing.T, su setup) {
		su.loss = 0.1
		s, addr, _, _ := startServer(t, su)
		out := runC(t, prog, clientArgs(t, su, s, addr, "reliable", addr.String(), "500")...)
		if !strings.Contains(out, "ok reliable 500") || !strings.Contains(out, "\nallocs 1\n") {
			t.Fatalf("want 500 echoes and exactly 1 allocation (at create):\n%s", out)
		}
	})
}

// TestMagic: a magic header (§2) moves the connection header to byte 2;
// client and server agree on it, unsealed and sealed.
func TestMagic(t *testing.T) {
	eachVariant(t, func(t *testing.T, prog string) {
		modes(t, func(t *testing.T, su setup) {
			su.cfg = func(c *conn.Config) { c.Magic = "1011" }
			s, addr, _, h := startServer(t, su)
			out := runC(t, prog, clientArgs(t, su, s, addr, "-magic", "1011", "reliable", addr.String(), "200")...)
			if !strings.Contains(out, "ok reliable 200") || len(h.messages(0)) != 200 {
				t.Fatalf("C client:\n%s", out)
			}
		})
	})
}

// TestTokenFallback: a token lists a server that does not answer first;
// the client gives it the connect timeout and connects to the next one
// (§11.3: a client tries the token's servers in order).
func TestTokenFallback(t *testing.T) {
	prog := program(t, "client", plain)
	s, addr, _, _ := startServer(t, setup{sealed: true, loss: -1})
	dead := netip.MustParseAddrPort("127.0.0.1:9")
	tf := tokenFile(t, &testKey, addr, s.Addr(), func(p *token.Params) {
		p.ServerAddresses = []netip.AddrPort{dead, addr}
		p.InternalServerAddresses = []netip.AddrPort{dead, s.Addr()}
	})
	st, secs, out := connectState(t, prog, "-token", tf, "-connect-timeout", "1", "connect", "unused")
	if st != stConnected || secs < 0.9 {
		t.Fatalf("state %d after %.3fs, want connected to the second server after the first's 1 s:\n%s", st, secs, out)
	}
}
