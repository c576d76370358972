//go:build race

package seal

// raceEnabled: the race runtime changes what allocates, so allocation tests
// run only in normal builds (scripts/test.sh runs both).
const raceEnabled = true
