package main

import (
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/udpgate/udpgate/batchio"
)

// The C echo (variant rawecho/c) is the raw echo written in C with the same
// batch shape (cecho/echo.c): the floor that the Go raw echo only
// approaches. The harness compiles it at bench time with the system's C
// compiler into a temporary directory; the child of a rawecho/c variant
// replaces itself with it (same PID, so the CPU read from /proc is the C
// echo's), and it speaks the child protocol of childMain.

//go:embed cecho/echo.c
var cEchoSource []byte

// cEchoEnv carries the compiled C echo's path to the children.
const cEchoEnv = "UDPGATE_BENCH_CECHO"

// buildCEcho compiles the C echo if a variant asks for it. Without a C
// compiler, or if it fails, the C variants are dropped with a message that
// says why; the rest of the run goes on. cleanup removes the binary.
func buildCEcho(opt *options, log io.Writer) (cleanup func()) {
	cleanup = func() {}
	want := false
	for _, v := range opt.Variants {
		want = want || v.C
	}
	if !want {
		return cleanup
	}
	drop := func(why string) {
		fmt.Fprintf(log, "bench: skipping the C echo variants (rawecho/c): %s\n", why)
		kept := opt.Variants[:0]
		for _, v := range opt.Variants {
			if !v.C {
				kept = append(kept, v)
			}
		}
		opt.Variants = kept
	}
	cc := os.Getenv("CC")
	if cc == "" {
		for _, c := range []string{"cc", "gcc", "clang"} {
			if _, err := exec.LookPath(c); err == nil {
				cc = c
				break
			}
		}
	}
	if cc == "" {
		drop("no C compiler found (cc, gcc or clang in PATH, or $CC)")
		return cleanup
	}
	dir, err := os.MkdirTemp("", "udpgate-cecho-")
	if err != nil {
		drop(err.Error())
		return cleanup
	}
	cleanup = func() { os.RemoveAll(dir) }
	src, bin := filepath.Join(dir, "echo.c"), filepath.Join(dir, "echo")
	if err := os.WriteFile(src, cEchoSource, 0o644); err != nil {
		drop(err.Error())
		return cleanup
	}
	if out, err := exec.Command(cc, "-O2", "-pthread", "-o", bin, src).CombinedOutput(); err != nil {
		drop(fmt.Sprintf("%s failed: %v: %s", cc, err, out))
		return cleanup
	}
	os.Setenv(cEchoEnv, bin)
	fmt.Fprintf(log, "bench: C echo compiled with %s\n", cc)
	return cleanup
}

// execCEcho replaces the child with the C echo for variant v; it returns
// only on failure.
func execCEcho(v variant) error {
	bin := os.Getenv(cEchoEnv)
	if bin == "" {
		return fmt.Errorf("variant %s: the harness compiled no C echo (%s unset)", v.Spec, cEchoEnv)
	}
	if runtime.GOOS != "linux" {
		return fmt.Errorf("variant %s: the C echo uses recvmmsg and sendmmsg, Linux only", v.Spec)
	}
	// The same shape as the Go raw echo: batchio's defaults unless the
	// variant sets them.
	sockets := v.Sockets
	if sockets == 0 {
		sockets = runtime.GOMAXPROCS(0)
	}
	batch := v.Batch
	if batch == 0 {
		batch = batchio.DefaultBatchSize
	}
	buffer := v.Buffer
	if buffer == 0 {
		buffer = batchio.DefaultRecvBuffer
	}
	frag := 0
	if v.Frag {
		frag = 1
	}
	maxSec := 600
	if d, err := time.ParseDuration(os.Getenv(maxDurEnv)); err == nil && d > 0 {
		maxSec = int(d/time.Second) + 1
	}
	args := []string{bin, strconv.Itoa(sockets), strconv.Itoa(batch), strconv.Itoa(batchio.DefaultMessageSize),
		strconv.Itoa(buffer), strconv.Itoa(frag), strconv.Itoa(maxSec)}
	return syscall.Exec(bin, args, os.Environ())
}
