package loadgen

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestHistogramBuckets(t *testing.T) {
	// Every value falls in a bucket whose middle is within 1/16 of it, and
	// buckets are monotonic.
	prev := -1
	for _, v := range []uint64{0, 1, 15, 16, 17, 31, 32, 33, 1000, 123456, 1 << 40, 1<<63 - 1} {
		b := bucket(v)
		if b < prev || b >= histBuckets {
			t.Fatalf("bucket(%d) = %d after %d", v, b, prev)
		}
		prev = b
		mid := float64(bucketMid(b))
		if d := mid - float64(v); d > float64(v)/16+1 || -d > float64(v)/16+1 {
			t.Errorf("value %d: bucket %d middle %v", v, b, mid)
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 {
		t.Fatal("empty histogram")
	}
	r := rand.New(rand.NewPCG(1, 2))
	var vals []time.Duration
	for range 100000 {
		v := time.Duration(r.ExpFloat64() * float64(200*time.Microsecond))
		vals = append(vals, v)
		h.Record(v)
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99} {
		want := vals[int(q*float64(len(vals)))-1]
		got := h.Quantile(q)
		if diff := float64(got-want) / float64(want); diff > 0.07 || diff < -0.07 {
			t.Errorf("q%v = %v, want %v ± 7%%", q, got, want)
		}
	}
	var other Histogram
	other.Record(time.Hour)
	h.Merge(&other)
	if h.Count() != 100001 || h.Quantile(1) != time.Hour || h.Summary().Max != time.Hour {
		t.Errorf("after merge: n %d, max %v", h.Count(), h.Quantile(1))
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	var h Histogram
	d := time.Duration(1)
	b.ReportAllocs()
	for b.Loop() {
		h.Record(d)
		d = d*7 + 13&(1<<30-1)
	}
}
