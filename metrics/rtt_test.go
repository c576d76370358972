package metrics

import (
	"math"
	"testing"
)

func TestNearestRank(t *testing.T) {
	ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		samples []float64
		p, want float64
	}{
		{ten, 50, 5}, {ten, 90, 9}, {ten, 99, 10}, {ten, 100, 10}, {ten, 1, 1}, {ten, 0, 1},
		{[]float64{0.25}, 50, 0.25}, {[]float64{0.25}, 100, 0.25},
		{[]float64{1, 2}, 50, 1}, {[]float64{1, 2}, 51, 2},
	} {
		if got := nearestRank(c.samples, c.p); got != c.want {
			t.Errorf("nearestRank(%v, %v) = %v, want %v", c.samples, c.p, got, c.want)
		}
	}
	if got := nearestRank(nil, 50); !math.IsNaN(got) {
		t.Errorf("nearestRank(nil) = %v, want NaN", got)
	}
}
