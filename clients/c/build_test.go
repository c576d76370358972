package cclient_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The C library and its test programs are built with the system compiler
// (cc, or $CC) into a temporary directory, never into the source tree.

var (
	buildDir string
	buildMu  sync.Mutex
	builds   = map[string]*build{}
)

// build is one program's build, done once however many tests want it.
type build struct {
	once sync.Once
	path string
	err  error
}

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "udpgate-cclient-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// compiler returns the C compiler to use, or skips the test saying why.
func compiler(t testing.TB) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s): install one (scripts/deps.sh) to run the C client's tests", cc)
	}
	return cc
}

// sodiumFlags returns libsodium's compile and link flags, or skips.
func sodiumFlags(t testing.TB) []string {
	t.Helper()
	out, err := exec.Command("pkg-config", "--cflags", "--libs", "libsodium").Output()
	if err != nil {
		// No pkg-config: try the plain library.
		if _, err2 := os.Stat("/usr/include/sodium.h"); err2 != nil {
			t.Skipf("libsodium not found (pkg-config libsodium: %v): install libsodium-dev (scripts/deps.sh)", err)
		}
		return []string{"-lsodium"}
	}
	return strings.Fields(string(out))
}

// variant is how a program is built.
type variant string

const (
	plain    variant = "plain"    // -O2
	sanitize variant = "sanitize" // -fsanitize=address,undefined
	fuzzer   variant = "fuzzer"   // clang -fsanitize=fuzzer,address,undefined
)

// program builds test/<name>.c with the library's sources and returns the
// executable's path; a build failure fails the test.
func program(t testing.TB, name string, v variant) string {
	t.Helper()
	cc := compiler(t)
	if v == fuzzer {
		if _, err := exec.LookPath("clang"); err != nil {
			t.Skip("no clang for the libFuzzer driver: install clang (scripts/deps.sh)")
		}
		cc = "clang"
	}
	sodium := sodiumFlags(t)
	key := name + "/" + string(v)
	buildMu.Lock()
	b := builds[key]
	if b == nil {
		b = &build{}
		builds[key] = b
	}
	buildMu.Unlock()
	b.once.Do(func() { b.path, b.err = compile(cc, name, v, sodium) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// compile builds test/<name>.c and the library's sources into one
// executable under buildDir.
func compile(cc, name string, v variant, sodium []string) (string, error) {
	srcs, _ := filepath.Glob("src/*.c")
	if name == "vectors" { // the codec, the seal and addresses
		srcs = []string{"src/wire.c", "src/sealed.c", "src/socket.c"}
	}
	out := filepath.Join(buildDir, name+"-"+string(v))
	args := []string{"-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Iinclude", "-g"}
	switch v {
	case plain:
		args = append(args, "-O2")
	case sanitize:
		args = append(args, "-O1", "-fno-omit-frame-pointer", "-fsanitize=address,undefined", "-fno-sanitize-recover=all")
	case fuzzer:
		args = append(args, "-O1", "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all")
	}
	args = append(args, "-o", out, filepath.Join("test", name+".c"))
	args = append(args, srcs...)
	args = append(args, sodium...)
	args = append(args, "-lm")
	cmd := exec.Command(cc, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// TestMake: the Makefile builds the static and shared library and
// udpgate.pc warning-free (-Werror) with gcc and with clang, into a
// temporary directory.
func TestMake(t *testing.T) {
	t.Parallel()
	compiler(t)
	sodiumFlags(t)
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make: install it (scripts/deps.sh)")
	}
	for _, cc := range []string{"gcc", "clang"} {
		t.Run(cc, func(t *testing.T) {
			if _, err := exec.LookPath(cc); err != nil {
				t.Skipf("no %s: install it (scripts/deps.sh)", cc)
			}
			dir := t.TempDir()
			out, err := exec.Command("make", "-s", "CC="+cc, "BUILD="+dir).CombinedOutput()
			if err != nil {
				t.Fatalf("make CC=%s: %v\n%s", cc, err, out)
			}
			for _, f := range []string{"libudpgate.a", "libudpgate.so", "udpgate.pc"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestCMake: CMakeLists.txt configures and builds both libraries.
func TestCMake(t *testing.T) {
	t.Parallel()
	compiler(t)
	sodiumFlags(t)
	if _, err := exec.LookPath("cmake"); err != nil {
		t.Skip("no cmake: install it (scripts/deps.sh)")
	}
	dir := t.TempDir()
	for _, args := range [][]string{{"-S", ".", "-B", dir}, {"--build", dir}} {
		if out, err := exec.Command("cmake", args...).CombinedOutput(); err != nil {
			t.Fatalf("cmake %v: %v\n%s", args, err, out)
		}
	}
	for _, f := range []string{"libudpgate.a", "libudpgate.so", "udpgate.pc"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLineBudget: the library stays within issue 30's 5,000 lines of C
// (wc -l src/*.c include/*.h).
func TestLineBudget(t *testing.T) {
	files, _ := filepath.Glob("src/*.c")
	hs, _ := filepath.Glob("include/*.h")
	n := 0
	for _, f := range append(files, hs...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n += bytes.Count(b, []byte("\n"))
	}
	if n == 0 || n > 5000 {
		t.Fatalf("%d lines of C in src/*.c and include/*.h, budget 5,000", n)
	}
	t.Logf("%d lines", n)
}

// TestReadmeGameLoop: README.md's game loop (its first C block) compiles
// warning-free as C99.
func TestReadmeGameLoop(t *testing.T) {
	t.Parallel()
	cc := compiler(t)
	sodium := sodiumFlags(t)
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), "```c\n")
	code, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 || !strings.Contains(code, "udpgate_client_update") {
		t.Fatal("README.md: no C block with the game loop")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "loop.c")
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	srcs, _ := filepath.Glob("src/*.c")
	args := append([]string{"-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Iinclude", "-o",
		filepath.Join(dir, "loop"), src}, srcs...)
	args = append(append(args, sodium...), "-lm")
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// TestAPI: test/api.c's checks of the public API's contracts without a
// server (arguments, configuration, names, addresses, states, the receive
// buffer rules, timeouts at their exact times), plain and under the
// sanitizers.
func TestAPI(t *testing.T) {
	t.Parallel()
	for _, v := range []variant{plain, sanitize} {
		out, err := exec.Command(program(t, "api", v)).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "ok ") {
			t.Fatalf("%s: %v\n%s", v, err, out)
		}
	}
}
