package congestion

import "time"

// DefaultRTT is the round trip assumed before the first sample.
const DefaultRTT = int64(100 * time.Millisecond)

// RTTStats is a smoothed round trip and its mean deviation, folded in as
// RFC 6298 does (quic-go's utils.RTTStats): the first sample sets both,
// later ones move them by 1/8 and 1/4. The zero value assumes DefaultRTT
// until a sample arrives. 17 bytes, no pointers.
type RTTStats struct {
	smoothed, meanDev int64 // ns
	sampled           bool
}

// Update folds in sample s (ns); samples ≤ 0 are ignored.
func (r *RTTStats) Update(s int64) {
	if s <= 0 {
		return
	}
	if !r.sampled {
		r.sampled, r.smoothed, r.meanDev = true, s, s/2
		return
	}
	d := r.smoothed - s
	if d < 0 {
		d = -d
	}
	r.meanDev += (d - r.meanDev) / 4
	r.smoothed += (s - r.smoothed) / 8
}

// Smoothed is the smoothed round trip in ns (DefaultRTT before a sample).
func (r *RTTStats) Smoothed() int64 {
	if !r.sampled {
		return DefaultRTT
	}
	return r.smoothed
}

// MeanDev is the round trip's mean deviation in ns (half of DefaultRTT
// before a sample).
func (r *RTTStats) MeanDev() int64 {
	if !r.sampled {
		return DefaultRTT / 2
	}
	return r.meanDev
}

// RTO is the retransmission timeout: smoothed + max(2 × deviation, 2 ms).
func (r *RTTStats) RTO() int64 {
	return r.Smoothed() + max(2*r.MeanDev(), int64(2*time.Millisecond))
}
