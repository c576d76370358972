package loadgen

import (
	"math/bits"
	"time"
)

// Histogram counts durations in log-linear buckets (as HdrHistogram does):
// values below 16 ns exactly, above that 16 buckets per power of two, so a
// quantile is within 1/16 (6 %) of the true value. It is a fixed 8 KiB
// array: recording is an index computation and an increment, with no
// allocation, cheap enough for every reply. Not safe for concurrent use;
// each worker records into its own and the results are merged.
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	max    int64
}

const (
	histSubBits = 4
	histSub     = 1 << histSubBits
	histBuckets = (64 - histSubBits + 1) * histSub
)

// bucket returns v's bucket: v itself below histSub, else the power of two
// and the top histSubBits bits below the leading one.
func bucket(v uint64) int {
	if v < histSub {
		return int(v)
	}
	e := bits.Len64(v) - histSubBits - 1 // v>>e is in [histSub, 2·histSub)
	return (e+1)*histSub + int(v>>uint(e)) - histSub
}

// bucketMid returns the middle of bucket i's value range.
func bucketMid(i int) int64 {
	if i < histSub {
		return int64(i)
	}
	e := i/histSub - 1
	lo := uint64(histSub+i%histSub) << uint(e)
	return int64(lo + (uint64(1)<<uint(e))/2)
}

// Record adds one duration; negative ones count as 0.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	h.counts[bucket(uint64(v))]++
	h.n++
	h.max = max(h.max, v)
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// Reset empties h.
func (h *Histogram) Reset() { *h = Histogram{} }

// Quantile returns the q-quantile (0 ≤ q ≤ 1) as the middle of its bucket,
// never above the largest value recorded; 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	// The rank-th smallest value, 1-based, rounded up: q = 0.5 of 4 values
	// is the 2nd.
	rank := uint64(q*float64(h.n) + 0.999999)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(bucketMid(i), h.max))
		}
	}
	return time.Duration(h.max)
}

// Quantiles summarises a Histogram.
type Quantiles struct {
	N                        uint64
	P50, P90, P99, P999, Max time.Duration
}

// Summary returns h's usual quantiles.
func (h *Histogram) Summary() Quantiles {
	return Quantiles{N: h.n, P50: h.Quantile(0.5), P90: h.Quantile(0.9), P99: h.Quantile(0.99), P999: h.Quantile(0.999), Max: time.Duration(h.max)}
}
