package conn

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"

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

// Without an Accept hook a queue runs one drain task while promotions run
// at CPU speed, but a task blocked in OnConnect must not hold up the
// clients queued behind it: once no batch was taken for drainStall, the
// queue gets another task, and every later client is Acked while the first
// OnConnect still blocks.
func TestDrainBlockedOnConnectGetsAnotherTask(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		h := &blockingConnect{entered: make(chan struct{}), release: make(chan struct{})}
		s := n.listen(Config{Sockets: 1, PromotionWorkers: 4, Handler: h,
			MaxClientsPerIP: -1, MaxClientsPerPrefix: -1, ChallengeRate: -1})
		defer close(h.release)
		first := n.peer(s, "127.0.0.1:0")
		first.connect()
		<-h.entered
		// The one task has been in OnConnect for longer than drainStall.
		advance(2 * drainStall)

		// More than a batch waits, so the queue asks for another task.
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

// While its loop is behind, a queue without an Accept hook runs one drain
// task: a second would take the core the loop needs. Once the loop has
// caught up, the queue gets another task for its backlog as before. The
// first task stays in OnConnect throughout, so the connections made tell
// whether a second one ran.
func TestDrainTasksWhileLoopBehind(t *testing.T) {
	onSim(t, func(t *testing.T, n *testNet) {
		h := &blockingConnect{entered: make(chan struct{}), release: make(chan struct{})}
		s := n.listen(Config{Sockets: 1, PromotionWorkers: 8, Handler: h,
			MaxClientsPerIP: -1, MaxClientsPerPrefix: -1})
		defer close(h.release)
		q := &promoQueue{sock: s.socks[0]}
		next := 0
		clients := func(k int) []promotion {
			ps := make([]promotion, k)
			for i := range ps {
				next++
				ps[i].addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(next >> 16), byte(next >> 8), byte(next)}), 4000)
				binary.LittleEndian.PutUint64(ps[i].cookie[:], uint64(next))
				ps[i].to.ClientID = 1
				ps[i].ts = seconds(s.st.Now())
			}
			return ps
		}
		now := s.st.Now() // the bubble's clock stands still: no task stalls
		s.enqueue(q, clients(1), now, true)
		<-h.entered
		s.enqueue(q, clients(2*promotionBatch), now, true)
		synctest.Wait()
		if got := s.Len(); got != 1 {
			t.Fatalf("%d connections while the loop is behind, want the first task's 1", got)
		}
		s.enqueue(q, clients(1), now, false)
		synctest.Wait()
		if got, want := s.Len(), 2*promotionBatch+2; got != want {
			t.Fatalf("%d connections once the loop caught up, want %d", got, want)
		}
	})
}
