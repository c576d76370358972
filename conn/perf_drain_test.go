package conn

import (
	"fmt"
	"sync"
	"testing"

	"github.com/udpgate/udpgate/internal/protocol"
)

// blockingConnect is a Handler whose first OnConnect blocks until release
// is closed; entered is closed once it has begun.
type blockingConnect struct {
	NopHandler
	once             sync.Once
	entered, release chan struct{}
}

func (h *blockingConnect) OnConnect(*Conn) {
	first := false
	h.once.Do(func() { first = true })
	if first {
		close(h.entered)
		<-h.release
	}
}

// A drain task blocked in OnConnect must not hold up the clients queued
// behind it: with more than a batch waiting the queue gets another task, and
// every later client is Acked while the first OnConnect still blocks. (Any
// change to when drain tasks start, issue 21, must keep this.)
func TestDrainBlockedOnConnectGetsAnotherTask(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		h := &blockingConnect{entered: make(chan struct{}), release: make(chan struct{})}
		s := n.listen(Config{Sockets: 1, PromotionWorkers: 4, Handler: h,
			MaxClientsPerIP: -1, MaxClientsPerPrefix: -1, ChallengeRate: -1})
		defer close(h.release)
		first := n.peer(s, "127.0.0.1:0")
		first.connect()
		<-h.entered

		const m = promotionBatch + 44
		peers := make([]*rawPeer, m)
		resps := make([][]byte, m)
		for i := range peers {
			peers[i] = n.peer(s, fmt.Sprintf("127.0.%d.%d:0", 1+i/200, 2+i%200))
			resps[i] = peers[i].response(peers[i].challenge())
		}
		for i, p := range peers {
			p.send(resps[i])
		}
		for _, p := range peers {
			p.expect(protocol.TypeAck)
		}
		if got := s.Len(); got != m+1 {
			t.Fatalf("%d connections, want %d", got, m+1)
		}
		if st := s.Stats(); st.PromotionRejected != 0 {
			t.Fatalf("promotion refused %d clients", st.PromotionRejected)
		}
	})
}
