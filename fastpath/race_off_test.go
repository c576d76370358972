//go:build !race

package fastpath

const raceEnabled = false
