package csharp_test

// The C# binding, tested by the server it talks to: the C library is built
// as a shared library with the system compiler, the binding, its sample and
// its check program with Mono's mcs, all into a temporary directory; the
// sample runs under mono against an in-process sealed udpgate server with an
// echo handler.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/internal/testkit/netem"
	"github.com/udpgate/udpgate/token"
)

var (
	testKey        = [token.KeyBytes]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32}
	otherKey       = [token.KeyBytes]byte{99}
	testProtocolID = uint64(0x1122334455667788)
)

// ---- building --------------------------------------------------------------

var (
	buildDir  string
	buildOnce sync.Once
	buildErr  error
)

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "udpgate-csharp-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// tools skips the test, saying what is missing and how to get it, unless
// every tool the build needs is here.
func tools(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"mcs", "mono", "make", "cc", "pkg-config"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: install mono-mcs, mono-runtime, make, a C compiler and pkg-config (scripts/deps.sh) to test the C# binding", tool)
		}
	}
	if err := exec.Command("pkg-config", "--exists", "libsodium").Run(); err != nil {
		t.Skip("libsodium not found (pkg-config libsodium): install libsodium-dev (scripts/deps.sh) to test the C# binding")
	}
}

func run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return nil
}

// build makes, once for the package, with the two Makefiles: libudpgate.so
// (clients/c, exporting only the header's functions), Udpgate.dll and
// sample.exe; then check.exe (test/Check.cs with the binding's sources, for
// its internals), layout (test/layout.c) and the C client's bench program
// (clients/c/test/bench.c) linked with the same libudpgate.so.
func build(t testing.TB) string {
	t.Helper()
	tools(t)
	buildOnce.Do(func() {
		cdir := filepath.Join(buildDir, "c")
		if buildErr = run("make", "-s", "-C", "../c", "BUILD="+cdir, cdir+"/libudpgate.so"); buildErr != nil {
			return
		}
		if buildErr = os.Rename(filepath.Join(cdir, "libudpgate.so"), filepath.Join(buildDir, "libudpgate.so")); buildErr != nil {
			return
		}
		// The soname, which C programs linked with -ludpgate load.
		if buildErr = os.Symlink("libudpgate.so", filepath.Join(buildDir, "libudpgate.so.0")); buildErr != nil {
			return
		}
		if buildErr = run("make", "-s", "OUT="+buildDir); buildErr != nil {
			return
		}
		if buildErr = run("cc", "-std=c99", "-Wall", "-Werror", "-I../c/include", "-o", filepath.Join(buildDir, "layout"), "test/layout.c"); buildErr != nil {
			return
		}
		if buildErr = run("cc", "-std=c99", "-O2", "-Wall", "-Werror", "-I../c/include", "-o", filepath.Join(buildDir, "bench"),
			"../c/test/bench.c", "-L"+buildDir, "-ludpgate"); buildErr != nil {
			return
		}
		src, _ := filepath.Glob("src/*.cs")
		buildErr = run("mcs", append([]string{"-nologo", "-warnaserror+", "-out:" + filepath.Join(buildDir, "check.exe"), "test/Check.cs"}, src...)...)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

// mono runs a program of the build under mono with the library on
// LD_LIBRARY_PATH and returns its exit code and combined output.
func mono(t testing.TB, prog string, args ...string) (int, string) {
	t.Helper()
	dir := build(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mono", append([]string{"--debug", filepath.Join(dir, prog)}, args...)...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok || ctx.Err() != nil {
			t.Fatalf("mono %s %s: %v\n%s", prog, strings.Join(args, " "), err, out)
		}
		code = ee.ExitCode()
	}
	return code, string(out)
}

// ---- the server --------------------------------------------------------------

// echoServer echoes every message on the channel it came on, and every Data
// packet (cmd/server's -app echo), and records the reliable messages.
type echoServer struct {
	conn.NopHandler
	mu       sync.Mutex
	reliable [][]byte
	closeAt  int // if > 0: at this many reliable messages, close the connection
}

// OnPacket echoes a Data packet (§7.1).
func (e *echoServer) OnPacket(c *conn.Conn, p []byte) { _, _ = c.Send(p) }

func (e *echoServer) OnMessage(c *conn.Conn, ch int, msg []byte) {
	if ch == 0 {
		e.mu.Lock()
		e.reliable = append(e.reliable, append([]byte(nil), msg...))
		n, closeAt := len(e.reliable), e.closeAt
		e.mu.Unlock()
		if closeAt > 0 && n >= closeAt {
			_ = c.Close() // in the callback: returns at once, lingers in the background
			return
		}
	}
	_ = c.SendMessage(ch, msg)
}

// startServer starts a udpgate server on 127.0.0.1:0 with the stock message
// layout, sealed with testKey when sealed is set.
func startServer(t testing.TB, sealed bool) (*conn.Server, *echoServer) {
	t.Helper()
	h := &echoServer{}
	cfg := conn.Config{
		NetworkVersion: 1,
		Messages:       msgcfg.Config(0, 0),
		Handler:        h,
		Sockets:        1,
		Timeout:        30 * time.Second,
	}
	if sealed {
		cfg.PrivateKey, cfg.ProtocolID = &testKey, testProtocolID
	}
	s, err := conn.Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, h
}

// tokenFile writes a connect token, sealed with key, for the server at
// internal dialled at public (a proxy's address, or the server's), and
// returns its path.
func tokenFile(t testing.TB, key *[token.KeyBytes]byte, public, internal netip.AddrPort) string {
	t.Helper()
	tok, err := token.Generate(key, &token.Params{
		ProtocolID:              testProtocolID,
		ClientID:                42,
		ServerAddresses:         []netip.AddrPort{public},
		InternalServerAddresses: []netip.AddrPort{internal},
		Expire:                  60 * time.Second,
		Timeout:                 30 * time.Second,
	})
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

// ---- the sample ----------------------------------------------------------------

// TestCSharpSampleSealed is issue 30's target 5: the Mono sample connects
// with a token and exchanges reliable messages, all echoed once and in order.
func TestCSharpSampleSealed(t *testing.T) {
	s, h := startServer(t, true)
	const n = 500
	code, out := mono(t, "sample.exe", "-token", tokenFile(t, &testKey, s.Addr(), s.Addr()), "-n", strconv.Itoa(n), "-size", "300", "-timeout", "30")
	if code != 0 {
		t.Fatalf("sample exited %d:\n%s", code, out)
	}
	if !strings.Contains(out, fmt.Sprintf("ok: %d echoes of 300 bytes in order", n)) {
		t.Fatalf("sample's output lacks the success line:\n%s", out)
	}
	// The server got each message once, in order, byte for byte.
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.reliable) != n {
		t.Fatalf("server got %d reliable messages, want %d", len(h.reliable), n)
	}
	for i, m := range h.reliable {
		if len(m) != 300 || int(m[0])|int(m[1])<<8|int(m[2])<<16|int(m[3])<<24 != i || m[299] != byte(i*31+299) {
			t.Fatalf("server's message %d is wrong: % x...", i, m[:8])
		}
	}
	t.Logf("%s", strings.TrimSpace(out))
}

// TestCSharpSampleLossy: the sealed sample through the lossy proxy the C
// client's tests use, 10 % of the datagrams dropped each way: every message
// still comes back once and in order.
func TestCSharpSampleLossy(t *testing.T) {
	s, h := startServer(t, true)
	proxy, err := netem.New(s.Addr(), netem.Config{Loss: 0.10, Seed: 7, SocketBuffer: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	const n = 300
	code, out := mono(t, "sample.exe", "-token", tokenFile(t, &testKey, proxy.Addr(), s.Addr()), "-n", strconv.Itoa(n), "-size", "100", "-timeout", "60")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("ok: %d echoes", n)) {
		t.Fatalf("sample exited %d:\n%s", code, out)
	}
	h.mu.Lock()
	got := len(h.reliable)
	h.mu.Unlock()
	if got != n {
		t.Fatalf("server got %d reliable messages, want %d", got, n)
	}
	t.Logf("%s", strings.TrimSpace(out))
}

// TestCSharpSampleTransport: the sealed sample through the game's own
// socket (an ITransport over a .NET socket: the C client's send/receive
// callbacks into managed code) and the lossy proxy, 10 % each way.
func TestCSharpSampleTransport(t *testing.T) {
	s, h := startServer(t, true)
	proxy, err := netem.New(s.Addr(), netem.Config{Loss: 0.10, Seed: 11, SocketBuffer: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	const n = 300
	code, out := mono(t, "sample.exe", "-transport", "-token", tokenFile(t, &testKey, proxy.Addr(), s.Addr()), "-n", strconv.Itoa(n), "-size", "100", "-timeout", "60")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("ok: %d echoes", n)) || !strings.Contains(out, "the game's socket sent") {
		t.Fatalf("sample exited %d:\n%s", code, out)
	}
	h.mu.Lock()
	got := len(h.reliable)
	h.mu.Unlock()
	if got != n {
		t.Fatalf("server got %d reliable messages, want %d", got, n)
	}
	t.Logf("%s", strings.TrimSpace(out))
}

// TestCSharpSampleUnsealed: the same without a token, by address.
func TestCSharpSampleUnsealed(t *testing.T) {
	s, _ := startServer(t, false)
	code, out := mono(t, "sample.exe", "-connect", s.Addr().String(), "-n", "100")
	if code != 0 || !strings.Contains(out, "ok: 100 echoes") {
		t.Fatalf("sample exited %d:\n%s", code, out)
	}
}

// TestCSharpSampleRefused: a refusal reaches C# as its State and the C
// library's text, and the sample exits 1 saying so.
func TestCSharpSampleRefused(t *testing.T) {
	s, _ := startServer(t, true)
	for _, tc := range []struct {
		name        string
		args        []string
		state, text string
	}{
		{"wrong key", []string{"-token", tokenFile(t, &otherKey, s.Addr(), s.Addr())}, "TokenInvalid", "connect token invalid"},
		{"no token", []string{"-connect", s.Addr().String()}, "TokenRequired", "the server is sealed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := mono(t, "sample.exe", append(tc.args, "-n", "1", "-timeout", "10")...)
			if code != 1 || !strings.Contains(out, "FAIL: "+tc.text) || !strings.Contains(out, "(state "+tc.state+",") {
				t.Fatalf("sample exited %d, want 1 with %q and state %s:\n%s", code, tc.text, tc.state, out)
			}
		})
	}
}

// TestCSharpErrors: each misuse raises UdpgateException with the C
// library's result and its text (or ObjectDisposedException after Dispose),
// and a configuration of the caller's reaches the library.
func TestCSharpErrors(t *testing.T) {
	code, out := mono(t, "check.exe", "errors")
	if code != 0 {
		t.Fatalf("check.exe errors exited %d:\n%s", code, out)
	}
	want := `max datagram 5: UdpgateException Invalid udpgate: create: invalid argument (-1)
magic 2: UdpgateException Invalid udpgate: create: invalid argument (-1)
33 channels: UdpgateException Invalid udpgate: config: 33 channels (at most 32): invalid argument (-1)
custom config: Disconnected max 1175 262144
max message size of channel 2: UdpgateException Channel udpgate: max message size of channel 2: no such channel (-6)
send before connect: UdpgateException State udpgate: send: wrong state (-5)
try send before connect: State
connect to a name: UdpgateException Address udpgate: connect localhost:7777: bad address (-4)
connect with 10 bytes: UdpgateException Token udpgate: connect token: bad connect token (-11)
receive when empty: False peek -1
throwing transport: SocketError, the game's socket is closed
address: True [2001:db8::1]:7777 family 6 port 7777 byte 1 01, [2001:db8::1]:7777, round trip True; True 10.1.2.3:9 10.1.2.3:9 True; False
state after dispose: ObjectDisposedException`
	if got := strings.TrimSpace(out); got != want {
		t.Fatalf("check.exe errors:\n%s\nwant:\n%s", got, want)
	}
}

// TestCSharpSampleServerCloses: the server closing the connection in the
// middle of the exchange ends the sample with ServerClosed and the
// library's text. (Not Server.Shutdown: with the client sending, Shutdown
// can lose all five Disconnects, a server bug reported with issue 30's C#
// binding: they are queued in the receive loop's send batch, and Shutdown
// closes the sockets before the loop flushes it.)
func TestCSharpSampleServerCloses(t *testing.T) {
	s, h := startServer(t, true)
	h.mu.Lock()
	h.closeAt = 50
	h.mu.Unlock()
	code, out := mono(t, "sample.exe", "-token", tokenFile(t, &testKey, s.Addr(), s.Addr()), "-n", "100000000", "-timeout", "60")
	if code != 1 || !strings.Contains(out, "FAIL: closed by the server (state ServerClosed, reason 1) after 49 of 100000000 echoes") {
		t.Fatalf("sample exited %d, want 1 with the server's close after 49 echoes:\n%s", code, out)
	}
}

// TestCSharpChannels: every send and receive of the binding against the
// echo server: a Data packet and a message on each channel of the stock
// layout come back byte for byte on their channel, a buffer too small for
// the next message raises Buffer and leaves it queued (PeekSize tells), the
// reliable channels' queues empty when acknowledged, and the statistics
// count what went.
func TestCSharpChannels(t *testing.T) {
	s, _ := startServer(t, false)
	code, out := mono(t, "check.exe", "channels", s.Addr().String())
	if code != 0 {
		t.Fatalf("check.exe channels exited %d:\n%s", code, out)
	}
	small := `into 10 bytes Buffer "udpgate: receive into 10 bytes (the next message has 100): buffer too small (-10)"`
	want := `state Connected, local address is IPv4 loopback or any: True
channel -1: send Ok, peek 100, ` + small + `, then True on -1 100 bytes, same True
channel 0: send Ok, queued > 100 True, peek 100, ` + small + `, then True on 0 100 bytes, same True
channel 1: send Ok, peek 100, ` + small + `, then True on 1 100 bytes, same True
channel 2: send Ok, peek 100, ` + small + `, then True on 2 100 bytes, same True
channel 3: send Ok, queued > 100 True, peek 100, ` + small + `, then True on 3 100 bytes, same True
stats: messages sent 5, received 5, rtt > 0 True, packets sent > 0 True, bad tags 0, queued 0 0
after disconnect: Disconnected`
	if got := strings.TrimSpace(out); got != want {
		t.Fatalf("check.exe channels:\n%s\nwant:\n%s", got, want)
	}
}

// ---- the mirrors ---------------------------------------------------------------

// TestCSharpEnumsMatchHeader: every value of the header's udpgate_result,
// udpgate_state, udpgate_channel_kind and udpgate_drop has a C# member of
// the same name (UDPGATE_STATE_TOKEN_IN_USE: State.TokenInUse) and value,
// and C# has no other.
func TestCSharpEnumsMatchHeader(t *testing.T) {
	header, err := os.ReadFile("../c/include/udpgate.h")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	enums := map[string]struct{ csharp, prefix string }{
		"udpgate_result":       {"Result", "UDPGATE_ERR_"},
		"udpgate_state":        {"State", "UDPGATE_STATE_"},
		"udpgate_channel_kind": {"ChannelKind", "UDPGATE_"},
		"udpgate_drop":         {"Drop", "UDPGATE_DROP_"},
	}
	block := regexp.MustCompile(`(?s)typedef enum (\w+) \{(.*?)\}`)
	member := regexp.MustCompile(`(?m)^\s*(UDPGATE_\w+)(?:\s*=\s*(-?\d+))?\s*,?`)
	for _, b := range block.FindAllSubmatch(header, -1) {
		e, ok := enums[string(b[1])]
		if !ok {
			t.Fatalf("udpgate.h has enum %s, which the binding does not mirror", b[1])
		}
		next := 0
		for _, m := range member.FindAllSubmatch(b[2], -1) {
			name := string(m[1])
			if len(m[2]) > 0 {
				next, _ = strconv.Atoi(string(m[2]))
			}
			if name == "UDPGATE_OK" {
				name = "UDPGATE_ERR_OK"
			}
			if !strings.HasPrefix(name, e.prefix) {
				t.Fatalf("%s: %s lacks the prefix %s", b[1], name, e.prefix)
			}
			want[e.csharp+"."+camel(strings.TrimPrefix(name, e.prefix))] = next
			next++
		}
	}
	if len(want) < 50 {
		t.Fatalf("parsed only %d enum values from udpgate.h: %v", len(want), want)
	}
	code, out := mono(t, "check.exe", "enums")
	if code != 0 {
		t.Fatalf("check.exe enums exited %d:\n%s", code, out)
	}
	got := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var name string
		var v int
		if _, err := fmt.Sscanf(sc.Text(), "%s %d", &name, &v); err != nil {
			t.Fatalf("check.exe enums: %q: %v", sc.Text(), err)
		}
		got[name] = v
	}
	var diffs []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s = %d is missing in C#", k, v))
		} else if g != v {
			diffs = append(diffs, fmt.Sprintf("%s is %d in C#, %d in udpgate.h", k, g, v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s is in C# only", k))
		}
	}
	sort.Strings(diffs)
	for _, d := range diffs {
		t.Error(d)
	}
}

// camel turns the header's TOKEN_IN_USE into TokenInUse; NOMEM, the one
// abbreviation, is NoMemory.
func camel(s string) string {
	if s == "NOMEM" {
		return "NoMemory"
	}
	var b strings.Builder
	for _, w := range strings.Split(s, "_") {
		if w != "" {
			b.WriteString(w[:1] + strings.ToLower(w[1:]))
		}
	}
	return b.String()
}

// TestCSharpLayoutMatchesHeader: the C# mirrors of udpgate_config,
// udpgate_stats and udpgate_address have the C compiler's offsets and sizes.
func TestCSharpLayoutMatchesHeader(t *testing.T) {
	dir := build(t)
	c, err := exec.Command(filepath.Join(dir, "layout")).Output()
	if err != nil {
		t.Fatal(err)
	}
	code, cs := mono(t, "check.exe", "layout")
	if code != 0 {
		t.Fatalf("check.exe layout exited %d:\n%s", code, cs)
	}
	want := strings.Split(strings.TrimSpace(string(c)), "\n")
	got := strings.Split(strings.TrimSpace(cs), "\n")
	sort.Strings(want)
	sort.Strings(got)
	if strings.Join(want, "\n") != strings.Join(got, "\n") {
		t.Fatalf("layouts differ:\nC:\n%s\nC#:\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
}

// TestCSharpReceiveAllocs: a message's round trip through the binding
// (TrySend, Update, TryReceive into the caller's buffer, State, GetStats)
// allocates nothing on the managed heap once warm, with the library's
// socket and through a caller's transport (the callbacks into C#; the
// transport, over a connected socket, allocates nothing of its own).
func TestCSharpReceiveAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation tests run without -race (scripts/test.sh)")
	}
	s, _ := startServer(t, false)
	for _, mode := range []string{"socket", "transport"} {
		t.Run(mode, func(t *testing.T) {
			code, out := mono(t, "check.exe", "allocs", s.Addr().String(), "2000", mode)
			if code != 0 {
				t.Fatalf("check.exe allocs exited %d:\n%s", code, out)
			}
			var bytes, n int
			if _, err := fmt.Sscanf(strings.TrimSpace(out), "allocated %d bytes for %d messages", &bytes, &n); err != nil {
				t.Fatalf("check.exe allocs: %q: %v", out, err)
			}
			if bytes != 0 {
				t.Fatalf("the binding allocated %d bytes for %d messages, want 0", bytes, n)
			}
		})
	}
}

// BenchmarkCSharpThroughput: the C client's bench program and the same loop
// in C# (check.exe bench), one after the other in every iteration against
// one echo server: 200,000 reliable 16-byte messages each way. It reports
// the median rate of each and the median of the iterations' C#/C ratios,
// the binding's cost. (Not the unreliable channel: there the rate counts
// only the echoes that were not dropped, so the slower sender scores higher.)
//
//	go test -run '^$' -bench CSharpThroughput -benchtime 5x ./clients/csharp/
func BenchmarkCSharpThroughput(b *testing.B) {
	dir := build(b)
	s, _ := startServer(b, false)
	rate := func(out string) float64 {
		var r float64
		if _, err := fmt.Sscanf(out, "rate %f", &r); err != nil {
			b.Fatalf("bench: %v\n%s", err, out)
		}
		return r
	}
	var c, cs, ratio []float64
	for i := 0; i < b.N; i++ {
		args := []string{s.Addr().String(), "200000", "16", "0"}
		cmd := exec.Command(filepath.Join(dir, "bench"), args...)
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("bench: %v\n%s", err, out)
		}
		code, mout := mono(b, "check.exe", append([]string{"bench"}, args...)...)
		if code != 0 {
			b.Fatalf("check.exe bench exited %d:\n%s", code, mout)
		}
		rc, rcs := rate(string(out)), rate(mout)
		c, cs, ratio = append(c, rc), append(cs, rcs), append(ratio, rcs/rc)
		b.Logf("C: %s\nC#: %s", strings.TrimSpace(string(out)), strings.TrimSpace(mout))
	}
	b.ReportMetric(median(c), "c-msgs/s")
	b.ReportMetric(median(cs), "cs-msgs/s")
	b.ReportMetric(median(ratio), "cs/c")
}

// BenchmarkCSharpCall: what one call through the binding costs (P/Invoke,
// the SafeHandle's reference count, the Span's pinning), measured on calls
// whose C side returns at once: State, TryReceive with nothing waiting,
// TrySend before connecting. Each op is one run of check.exe calls.
//
//	go test -run '^$' -bench CSharpCall -benchtime 5x ./clients/csharp/
func BenchmarkCSharpCall(b *testing.B) {
	var st, rx, tx []float64
	for i := 0; i < b.N; i++ {
		code, out := mono(b, "check.exe", "calls", "2000000")
		if code != 0 {
			b.Fatalf("check.exe calls exited %d:\n%s", code, out)
		}
		var s, r, x float64
		if _, err := fmt.Sscanf(out, "state %f receive %f send %f", &s, &r, &x); err != nil {
			b.Fatalf("check.exe calls: %v\n%s", err, out)
		}
		st, rx, tx = append(st, s), append(rx, r), append(tx, x)
	}
	b.ReportMetric(median(st), "ns/State")
	b.ReportMetric(median(rx), "ns/TryReceive")
	b.ReportMetric(median(tx), "ns/TrySend")
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
