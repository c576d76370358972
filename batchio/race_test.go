//go:build race

package batchio

const raceEnabled = true
