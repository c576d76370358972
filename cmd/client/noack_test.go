package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestNoAckBounds: the attack is bounded in count and time and stays on
// loopback: out-of-range settings and other hosts are usage errors.
func TestNoAckBounds(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-clients", "0"}, "-clients 0 is out of range"},
		{[]string{"-clients", "2001"}, "-clients 2001 is out of range"},
		{[]string{"-duration", "3m"}, "-duration 3m0s is out of range"},
		{[]string{"-duration", "0s"}, "-duration 0s is out of range"},
		{[]string{"-size", "8"}, "-size 8 is out of range"},
		{[]string{"-server", "192.0.2.1:7777"}, "not a loopback address"},
		{[]string{"-server", "[::1]:7777"}, "IPv4 loopback"},
	} {
		var out, errOut bytes.Buffer
		if code := run(append([]string{"noack"}, c.args...), nil, &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%q: exit %d, %q; want %d and %q", c.args, code, errOut.String(), exitUsage, c.want)
		}
	}
}

func TestNoAckBucket(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int
	}{{0, 0}, {9 * time.Millisecond, 0}, {10 * time.Millisecond, 1}, {99 * time.Millisecond, 9}, {100 * time.Millisecond, 10},
		{time.Second, 19}, {time.Hour, noackBuckets - 1}} {
		if got := noackBucket(c.d); got != c.want {
			t.Errorf("bucket(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}
