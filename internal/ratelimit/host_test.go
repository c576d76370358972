package ratelimit

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
)

// Issue 12 items 5 and 6: the keys of the per-IP and per-network budgets,
// and the one budget all of a server's receive loops share.

// TestLimiterKeys: which sources share a bucket under each LimitKey.
func TestLimiterKeys(t *testing.T) {
	p := netip.MustParseAddrPort
	for _, tc := range []struct {
		by     LimitKey
		a, b   netip.AddrPort
		shared bool
	}{
		{PerSource, p("192.0.2.1:1000"), p("192.0.2.1:1001"), false},
		{PerIP, p("192.0.2.1:1000"), p("192.0.2.1:1001"), true},
		{PerIP, p("192.0.2.1:1000"), p("[::ffff:192.0.2.1]:1001"), true},
		{PerIP, p("192.0.2.1:1000"), p("192.0.2.2:1000"), false},
		{PerPrefix, p("192.0.2.1:1000"), p("192.0.2.254:9"), true},
		{PerPrefix, p("192.0.2.1:1000"), p("[::ffff:192.0.2.77]:9"), true},
		{PerPrefix, p("192.0.2.1:1000"), p("192.0.3.1:1000"), false},
		{PerIP, p("[2001:db8::1]:1"), p("[2001:db8::1]:2"), true},
		{PerIP, p("[2001:db8::1]:1"), p("[2001:db8::2]:1"), false},
		{PerPrefix, p("[2001:db8:0:1::1]:1"), p("[2001:db8:0:1:ffff::2]:2"), true},
		{PerPrefix, p("[2001:db8:0:1::1]:1"), p("[2001:db8:0:2::1]:1"), false},
	} {
		l := NewLimiter(tc.by, 0, Limit{Rate: 1, Burst: 1}, rlKey)
		l.Allow(tc.a, rlTime)
		if shared := !l.Allow(tc.b, rlTime); shared != tc.shared {
			t.Errorf("by %d: %v and %v share a bucket: %v, want %v", tc.by, tc.a, tc.b, shared, tc.shared)
		}
	}
}

// TestSharedBucketConcurrent: loops spending at once never overspend (run
// with -race too).
func TestSharedBucketConcurrent(t *testing.T) {
	b := NewSharedBucket(Limit{Rate: 1, Burst: 512}, rlTime)
	var got atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				if b.Allow(rlTime) {
					got.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got.Load() != 512 {
		t.Fatalf("%d tokens spent, want 512", got.Load())
	}
	if !b.Allow(rlTime+1) || b.Allow(rlTime+1) {
		t.Fatal("refill of one token per second")
	}
	if u := NewSharedBucket(Limit{Rate: -1}, rlTime); !u.Allow(rlTime) {
		t.Fatal("unlimited shared bucket refused")
	}
}
