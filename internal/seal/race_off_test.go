//go:build !race

package seal

const raceEnabled = false
