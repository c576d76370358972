//go:build race

package cookie

// The race detector's instrumentation allocates in crypto/sha1, so allocation
// counts are only checked without it.
func init() { raceEnabled = true }
