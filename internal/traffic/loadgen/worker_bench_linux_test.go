package loadgen

import (
	"net/netip"
	"testing"
	"unsafe"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seqwin"
	"github.com/udpgate/udpgate/internal/wire"
	"golang.org/x/sys/unix"
)

// benchWorker makes a worker with no socket, for timing the generator's own
// per-packet work (the part that is not system calls).
func benchWorker(b *testing.B, mode Mode, clients int) *worker {
	cfg, err := Config{Server: netip.MustParseAddrPort("127.0.0.1:7777"), Mode: mode, Clients: clients, Sockets: 1}.withDefaults()
	if err != nil {
		b.Fatal(err)
	}
	g := &Generator{cfg: cfg}
	g.src = newSourceRange(cfg.FirstSource, cfg.SourcesUsed())
	return newWorker(g, 0, nil)
}

// deliver places p in receive slot 0 as if the server had sent it to
// client j.
func deliver(w *worker, j int, p []byte) {
	rx := w.rx
	n := copy(rx.slots, p)
	rx.hdrs[0].Len = uint32(n)
	rx.hdrs[0].Hdr.Flags = 0
	rx.names[0].Addr = w.serverAddr
	pp := (*[2]byte)(unsafe.Pointer(&rx.names[0].Port))
	pp[0], pp[1] = byte(w.serverPort>>8), byte(w.serverPort)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&rx.ctrl[0]))
	h.Level, h.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
	h.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
	rx.hdrs[0].Hdr.SetControllen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
	pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&rx.ctrl[unix.CmsgLen(0)]))
	pi.Addr = w.g.src.addr4(j)
}

// roundTrip makes client j send one Data packet at now and the worker take
// the reply echo makes of it (the server's side, in the test) as if it
// came back 500 µs later.
func roundTrip(w *worker, j int, now int64, echo func(j int, p []byte, now int64) []byte) {
	p := w.buildConn(j, now, protocol.KindData)
	w.inflight[j]++
	w.out++
	w.tx.n = 0
	deliver(w, j, echo(j, p, now))
	w.answer(0, now+500, true)
}

// BenchmarkClientData is the generator's cost for one Data round trip of a
// client among 1000, without the system calls: build and encode the
// request (SeqState.Send, EncodeConn), then map the answer to its client
// (IP_PKTINFO), decode it, run SeqState.Receive and record the latency. The
// answer is encoded per iteration by a mirror of the server's SeqState,
// which this figure includes (about 20 ns).
func BenchmarkClientData(b *testing.B) {
	const clients = 1000
	w := benchWorker(b, ModeData, clients)
	servers := make([]seqwin.SeqState, clients)
	for j := range clients {
		var ck cookie.Cookie
		ck[0], ck[2], ck[4] = byte(j), byte(j>>8), byte(j*7)
		s, c := cookie.Sequences(&ck)
		w.seqs[j].Init(c, s, 0)
		servers[j].Init(s, c, 0)
		w.ids[j] = connID{tag: cookie.SessionTag(&ck), clientID: 1}
		w.state[j] = stConnected
	}
	reply := make([]byte, 128)
	var h protocol.ConnHeader
	// The server's echo.
	echo := func(j int, p []byte, now int64) []byte {
		payload, _ := wire.DecodeConn(w.cfg.Magic, p, &h)
		seq, ack, bits, _, _ := servers[j].Send(seconds(now))
		rh := protocol.ConnHeader{ClientID: 1, Tag: w.ids[j].tag, Seq: seq, Ack: ack, AckBits: bits, Kind: protocol.KindData}
		return reply[:wire.EncodeConn(reply, w.cfg.Magic, &rh, payload)]
	}
	b.ReportAllocs()
	j := 0
	now := int64(1)
	for b.Loop() {
		now += 1000
		roundTrip(w, j, now, echo)
		if j++; j == clients {
			j = 0
		}
	}
	if w.ctr.loc[cReplies] == 0 || w.ctr.loc[cUnexpected] != 0 {
		b.Fatalf("answers %d, unexpected %d", w.ctr.loc[cReplies], w.ctr.loc[cUnexpected])
	}
}

// BenchmarkClientInitial is the generator's cost for one Initial→Challenge
// exchange without system calls: queue the template, then map and decode
// the Challenge.
func BenchmarkClientInitial(b *testing.B) {
	const clients = 1000
	w := benchWorker(b, ModeInitial, clients)
	ch := protocol.Handshake{MinVersion: 3, CurVersion: 4, Type: protocol.TypeChallenge, SecretID: 1, Timestamp: 1e9, RandomLen: 12}
	pkt := make([]byte, 128)
	pkt = pkt[:wire.EncodeHandshake(pkt, w.cfg.Magic, &ch)]
	b.ReportAllocs()
	j := 0
	for b.Loop() {
		w.tx.add(w.template, w.g.src.addr4(j))
		w.inflight[j]++
		w.out++
		w.tx.n = 0
		deliver(w, j, pkt)
		w.answer(0, 1000, true)
		if j++; j == clients {
			j = 0
		}
	}
	if w.ctr.loc[cReplies] == 0 || w.ctr.loc[cUnexpected] != 0 {
		b.Fatalf("answers %d, unexpected %d", w.ctr.loc[cReplies], w.ctr.loc[cUnexpected])
	}
}
