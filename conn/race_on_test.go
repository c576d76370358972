//go:build race

package conn

// raceEnabled: the race runtime allocates in places normal builds do not,
// so allocation tests only run without -race.
const raceEnabled = true
