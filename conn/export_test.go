package conn

// onAwaitReady has fn called each time a packet for one of s's
// connections is about to wait for its OnConnect to return (the loop's
// side of the Handler contract, conn.go's awaitReady).
func onAwaitReady(s *Server, fn func(*Conn)) { s.awaitingReady.Store(&fn) }
