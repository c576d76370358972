//go:build race

package handshake

// raceEnabled: the race runtime makes crypto/sha1 allocate, so allocation
// tests that sign or verify cookies only run in normal builds.
const raceEnabled = true
