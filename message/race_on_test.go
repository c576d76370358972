//go:build race

package message

// raceEnabled: the race runtime allocates, so allocation tests skip.
const raceEnabled = true
