//go:build race

package csharp_test

const raceEnabled = true
