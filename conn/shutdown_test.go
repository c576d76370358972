package conn

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/udpgate/udpgate/netsim"
)

// blockingApp holds its first OnPacket until release is closed.
type blockingApp struct {
	NopHandler
	entered, release chan struct{}
}

func (h blockingApp) OnPacket(*Conn, []byte) {
	select {
	case h.entered <- struct{}{}:
		<-h.release
	default:
	}
}

// Server.Shutdown tells a connection whose handler the receive loop is
// running at that moment: its Disconnects once went into the loop's send
// batch, which the loop sent only after the handler returned, into sockets
// Shutdown had closed by then, and the client learned nothing until its
// timeout (the cause of cmd/server's rare TestNoDrain and
// TestDrainSecondSignal failures, found by the C# binding's tests).
func TestShutdownTellsAConnectionInItsHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netsim.New()
		nw.SetLink(netsim.Link{Latency: 5 * time.Millisecond})
		h := blockingApp{entered: make(chan struct{}), release: make(chan struct{})}
		srv := simListen(t, nw, Config{Handler: h})
		cli, err := simDial(t, nw, Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Send([]byte("hold")); err != nil {
			t.Fatal(err)
		}
		<-h.entered
		done := make(chan error, 1)
		go func() { done <- srv.Shutdown(context.Background()) }()
		select {
		case <-cli.Done():
		case <-time.After(time.Second):
			t.Error("the client heard no Disconnect within a second of Shutdown")
		}
		var de *DisconnectedError
		if err := cli.Err(); !errors.As(err, &de) || de.Reason != ReasonShutdown || !de.Remote {
			t.Errorf("the client ended with %v, want the server's shutdown", err)
		}
		close(h.release)
		if err := <-done; err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
}
