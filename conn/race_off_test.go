//go:build !race

package conn

const raceEnabled = false
