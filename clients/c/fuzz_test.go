package cclient_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFuzzReceive runs the libFuzzer driver test/fuzz.c over the client's
// receive path (handshake packets, connection packets, message entries,
// sealed proofs) for $FUZZTIME_C (default 5s; scripts/test.sh sets 60s),
// built with AddressSanitizer and UndefinedBehaviorSanitizer. A crash, a
// sanitizer report or an allocation after create fails the test.
func TestFuzzReceive(t *testing.T) {
	t.Parallel()
	d := 5 * time.Second
	if s := os.Getenv("FUZZTIME_C"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatalf("FUZZTIME_C=%q: %v (want a Go duration such as 60s)", s, err)
		}
	}
	prog := program(t, "fuzz", fuzzer)
	corpus := t.TempDir()
	// Seeds: the message vectors as payloads of a connected client's
	// packets, and a few handshake shapes.
	seeds := []string{
		"01" + "01" + "21" + "0300" + "0000000568656c6c6f0103706f73",
		"01" + "01" + "2f" + "0300" + "20010000000200046672616720020001000200046d656e74020700017301",
		"01" + "81" + "10" + "0300" + "000000056868686868",
		"00" + "00" + "30" + "a4018200018201810000000000",
		"02" + "00" + "14" + "15d4c3b2a10000000000000000000000000000000001",
	}
	for i, s := range seeds {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(corpus, fmt.Sprintf("seed%d", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+2*time.Minute)
	defer cancel()
	secs := int(d.Seconds())
	if secs < 1 {
		secs = 1
	}
	cmd := exec.CommandContext(ctx, prog, fmt.Sprintf("-max_total_time=%d", secs), "-rss_limit_mb=2048",
		"-artifact_prefix="+t.TempDir()+"/", corpus)
	out, err := cmd.CombinedOutput()
	tail := string(out)
	if i := strings.LastIndex(tail, "\n#"); len(tail) > 4000 && i > 0 {
		tail = tail[len(tail)-4000:]
	}
	if err != nil {
		t.Fatalf("fuzz driver: %v\n%s", err, tail)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Logf("%s", lines[len(lines)-1])
}
