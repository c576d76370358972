//go:build race

package conn

// raceBuild: the loop's touch pass reads connection state without its lock
// (a prefetch whose values are discarded); race builds skip that read so the
// detector reports only real races.
const raceBuild = true
