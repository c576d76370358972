package conn

import "testing"

// onAwaitReady has fn called, until the test ends, each time a packet is
// about to wait for its connection's OnConnect to return (the loop's
// side of the Handler contract, conn.go's awaitReady).
func onAwaitReady(t *testing.T, fn func(*Conn)) {
	awaitReadyHook.Store(&fn)
	t.Cleanup(func() { awaitReadyHook.Store(nil) })
}
