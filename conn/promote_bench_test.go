package conn

import (
	"encoding/binary"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/procstat"
	"github.com/udpgate/udpgate/internal/wire"
)

// BenchmarkPromoteParallel measures how promotions scale with cores: every
// goroutine is a promotion worker promoting batches of promotionBatch
// fresh clients (admission, the connection's set-up, its timers, the Acks
// built and handed to a transport that only counts them, OnConnect), each
// client from its own IP, consecutive clients from different /24s, so the
// default address limits count them as in the field and workers meet as
// a storm from many networks makes them meet. Run it with -cpu 1,2,4 and a fixed
// -benchtime (each promotion keeps its connection: about 1 KiB of heap):
//
//	go test -run '^$' -bench PromoteParallel -cpu 1,2,4 -benchtime 200000x -count 5 ./conn/
//
// promotions/s is the whole server's rate (ns/op is wall time per
// promotion, all goroutines together); cpu-ns/promotion and util say
// what it cost and how much of the cores it had.
func BenchmarkPromoteParallel(b *testing.B) {
	// Housekeeping does not tick during the run (SweepInterval), so the
	// work measured is the promotions' alone, and its instruction count
	// under callgrind does not depend on how long the run takes.
	s, err := Listen("127.0.0.1:0", Config{Sockets: 1, MaxClients: 1 << 30,
		KeepAlive: time.Hour, Timeout: 2 * time.Hour, SweepInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	now := s.st.Now()
	ts := seconds(now)
	to := benchReplyTo(b, s, now)
	var next atomic.Uint64
	var made atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, _ := procstat.Process(os.Getpid())
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		w := newPromoBatch()
		w.sock = &replaySock{}
		for pb.Next() {
			i := next.Add(1)
			// Clients from many networks, in no order: consecutive
			// clients are in different /24s (an odd multiplier permutes
			// the 24 bits), as a storm's promotions interleave.
			ip := uint32(i*0x9e3779b1) & 0xffffff
			var p promotion
			p.addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, byte(ip >> 16), byte(ip >> 8), byte(ip)}), uint16(1024+i%60000))
			binary.LittleEndian.PutUint64(p.cookie[:], i*0x9e3779b97f4a7c15)
			binary.LittleEndian.PutUint64(p.cookie[8:], i)
			p.to = to
			p.ts = ts
			w.items = append(w.items, p)
			if len(w.items) == promotionBatch {
				s.promoteBatch(w)
			}
		}
		if len(w.items) > 0 {
			s.promoteBatch(w)
		}
		made.Add(int64(w.sock.(*replaySock).sent))
	})
	el := time.Since(start)
	cpu1, _ := procstat.Process(os.Getpid())
	b.StopTimer()
	if got := made.Load(); got != int64(b.N) {
		b.Fatalf("%d Acks for %d promotions", got, b.N)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "promotions/s")
	// The process's CPU time (the promotions, the collector) per
	// promotion, and how much of its GOMAXPROCS cores the run had: on a
	// machine other work shares, util well under 1 says the wall-clock
	// rate measured the machine as much as the code.
	if cpu := cpu1.Sched - cpu0.Sched; cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/promotion")
		b.ReportMetric(cpu.Seconds()/el.Seconds()/float64(runtime.GOMAXPROCS(0)), "util")
	}
}

// benchReplyTo is what a Response of the handshake's usual shape (ClientID
// 1, 16 bytes of RandomData) lets the server's replies to it carry: the
// loop's decision on an Initial of that shape.
func benchReplyTo(b testing.TB, s *Server, now time.Time) handshake.ReplyTo {
	l := newLoop(s, 0, s.socks[0], 1, seconds(now))
	h := protocol.Handshake{Type: protocol.TypeInitial, ClientID: 1, MinVersion: protocol.MinHandshakeVersion,
		CurVersion: protocol.CurHandshakeVersion, NetworkVersion: s.st.NetworkVersion, RandomLen: 16}
	pkt := make([]byte, handshake.MaxReplyLen)
	pkt = pkt[:wire.EncodeHandshake(pkt, s.st.magic, &h)]
	var d handshake.Decision
	var peer handshake.Peer
	l.fp.Handle(&d, netip.MustParseAddrPort("127.0.0.1:4000"), pkt, seconds(now), &peer, make([]byte, handshake.MaxReplyLen))
	if d.Action != handshake.ActReply || d.To.ClientID != 1 {
		b.Fatalf("the Initial got %+v", d)
	}
	return d.To
}
