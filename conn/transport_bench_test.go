package conn

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/udpgate/udpgate/batchio"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

// replaySock is a transport whose Recv fills the batch with fresh Data
// packets from established clients and whose Send only counts: a loop over
// it does all of its user-space work per batch and no system call.
type replaySock struct {
	fill func(b *batchio.Batch) int
	sent int
}

func (r *replaySock) Recv(b *batchio.Batch) (int, error)   { return r.fill(b), nil }
func (r *replaySock) Send(_ *batchio.Batch, n int) error   { r.sent += n; return nil }
func (r *replaySock) WriteTo([]byte, netip.AddrPort) error { r.sent++; return nil }
func (r *replaySock) Class() batchio.Class                 { return batchio.ClassAll }
func (r *replaySock) Stats() batchio.Stats                 { return batchio.Stats{} }

// BenchmarkLoopTransport prices the transport interface: a loop's full
// round per batch of 64 echoed Data packets (Recv, the fast path, the
// handlers' echoes, Send), with the transport called through the interface
// as the loop does (iface), and through the concrete type (direct). The
// difference is two indirect calls per batch.
func BenchmarkLoopTransport(b *testing.B) {
	for _, mode := range []string{"direct", "iface"} {
		b.Run(fmt.Sprintf("via=%s", mode), func(b *testing.B) { benchLoopTransport(b, mode == "iface") })
	}
}

func benchLoopTransport(b *testing.B, iface bool) {
	const nconns, batch = 1000, 64
	s := listenBench(b, nconns)
	now := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	rs := &replaySock{}
	clients := benchConns(b, s, rs, nconns, now, rng)
	payload := make([]byte, 32)
	rs.fill = func(rb *batchio.Batch) int {
		for i := range batch {
			cl := &clients[rng.IntN(nconns)]
			m := &rb.Msgs[i]
			m.N = wire.EncodeConn(m.Buf, s.st.magic, &cl.hdr, payload)
			m.Addr = cl.addr
			cl.hdr.Seq = (cl.hdr.Seq + 1) % protocol.SeqModulus
			cl.hdr.Ack = (cl.hdr.Ack + 1) % protocol.SeqModulus
			cl.hdr.AckBits = ^uint64(0)
		}
		return batch
	}
	l := newLoop(s, 0, rs, batch, seconds(now))
	b.ReportAllocs()
	b.ResetTimer()
	if iface {
		for done := 0; done < b.N; done += batch {
			n, _ := l.sock.Recv(l.rb)
			l.batch(n, now) // Send through l.sock
			now = now.Add(time.Millisecond)
		}
	} else {
		for done := 0; done < b.N; done += batch {
			n, _ := rs.Recv(l.rb)
			l.process(n, now)
			_ = rs.Send(l.sb, l.out)
			l.out = 0
			l.handOff()
			l.cnt.publish()
			now = now.Add(time.Millisecond)
		}
	}
	b.StopTimer()
	if got := l.cnt.local[cConnIn]; got < uint64(b.N) {
		b.Fatalf("only %d of %d packets accepted", got, b.N)
	}
	if rs.sent < b.N {
		b.Fatalf("only %d of %d echoes sent", rs.sent, b.N)
	}
}
