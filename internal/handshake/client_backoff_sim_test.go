package handshake_test

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/udpgate/udpgate/cookie"
	"github.com/udpgate/udpgate/internal/handshake"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/wire"
)

// The handshake over a simulated lossy path: ClientHandshakes and a
// handshake.Server (the decision core of udpgate's receive loop, with its
// default reply budgets) exchange real packets through a link that loses
// and delays them with a seeded random source, in virtual time. No sockets,
// no sleeps, deterministic: the same seed gives the same distribution.

// simPath is one scenario.
type simPath struct {
	name     string
	clients  int
	stagger  float64 // seconds between client starts
	oneWay   float64 // base one-way delay, seconds
	jitter   float64 // plus uniform [0, jitter)
	loss     float64 // per datagram, each direction
	oneIP    bool    // every client behind one address (a NAT), else one /24 each
	seed     uint64
	resendAt float64 // ClientConfig.ResendFirst: 0 the new default, 1 the old fixed 1 s
}

// simResult is what a scenario measured.
type simResult struct {
	connect    []float64 // connect times of the clients that connected, sorted
	failed     int
	packets    int // handshake packets the clients sent
	initials   int
	challenges int // Challenges the server sent
	drops      map[protocol.DropReason]int
	// mostInSecond: the most handshake packets one client sent within any
	// one second.
	mostInSecond int
}

func (r *simResult) pct(q float64) float64 {
	if len(r.connect) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(r.connect)))) - 1
	return r.connect[max(i, 0)]
}

func (r *simResult) String() string {
	ms := func(s float64) string { return fmt.Sprintf("%4.0f ms", 1000*s) }
	n := len(r.connect) + r.failed
	slow := 0
	for _, c := range r.connect {
		if c >= 1 {
			slow++
		}
	}
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  max %s  ≥1 s %3d/%d  failed %d  pkts/client %.2f  Challenges/client %.2f  most in 1 s %d  rate_limited %d",
		ms(r.pct(0.5)), ms(r.pct(0.9)), ms(r.pct(0.99)), ms(r.pct(1)), slow, n, r.failed,
		float64(r.packets)/float64(n), float64(r.challenges)/float64(n), r.mostInSecond, r.drops[protocol.DropRateLimited])
}

type simEvent struct {
	at     float64
	seq    int // ties in time go in scheduling order
	kind   uint8
	client int
	pkt    []byte
}

const (
	simToServer = iota
	simToClient
	simTimer
)

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// simulate runs p's handshakes to their end and measures them.
func simulate(t testing.TB, p simPath) *simResult {
	t.Helper()
	rng := rand.New(rand.NewPCG(p.seed, 0x5eed))
	t0 := 1_700_000_000.0
	secrets, err := cookie.NewSecrets(t0, rand.NewChaCha8([32]byte{byte(p.seed)}))
	if err != nil {
		t.Fatal(err)
	}
	srv := handshake.NewServer(handshake.ServerConfig{NetworkVersion: 7}, secrets, p.seed+1, t0)

	type client struct {
		hs      handshake.ClientHandshake
		addr    netip.AddrPort
		start   float64
		timerAt float64
		sent    []float64
		done    bool
	}
	cs := make([]client, p.clients)
	byAddr := make(map[netip.AddrPort]int, p.clients)
	peers := make(map[netip.AddrPort]*handshake.Peer, p.clients)
	var q simQueue
	seq := 0
	push := func(e simEvent) {
		e.seq = seq
		seq++
		heap.Push(&q, e)
	}
	link := func(kind uint8, j int, now float64, pkt []byte) {
		if rng.Float64() < p.loss {
			return
		}
		push(simEvent{at: now + p.oneWay + p.jitter*rng.Float64(), kind: kind, client: j, pkt: slices.Clone(pkt)})
	}
	res := &simResult{drops: map[protocol.DropReason]int{}}
	out := make([]byte, handshake.MaxClientPacketLen)
	var in protocol.Handshake
	clientSent := func(j int, now float64, pkt []byte) {
		c := &cs[j]
		c.sent = append(c.sent, now)
		res.packets++
		if wire.DecodeHandshake(wire.Magic{}, pkt, &in) == protocol.DropNone && in.Type == protocol.TypeInitial {
			res.initials++
		}
		link(simToServer, j, now, pkt)
	}
	event := func(j int, now float64, ev handshake.ClientEvent) {
		c := &cs[j]
		switch ev {
		case handshake.EventNone:
			return
		case handshake.EventConnected:
			res.connect = append(res.connect, now-c.start)
		default:
			res.failed++
		}
		c.done = true
	}
	rearm := func(j int) {
		c := &cs[j]
		if d := c.hs.NextDeadline(); !c.done && !math.IsInf(d, 1) && d != c.timerAt {
			c.timerAt = d
			push(simEvent{at: d, kind: simTimer, client: j})
		}
	}
	for j := range cs {
		c := &cs[j]
		if p.oneIP {
			c.addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, 7}), uint16(20000+j))
		} else {
			c.addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(j >> 8), byte(j), 1}), 40000)
		}
		byAddr[c.addr] = j
		c.hs = handshake.NewClientHandshake(handshake.ClientConfig{
			ClientID: uint8(j), NetworkVersion: 7, ResendFirst: p.resendAt,
		}, p.seed<<20+uint64(j)+1)
		c.start = t0 + float64(j)*p.stagger
		c.timerAt = math.NaN()
		push(simEvent{at: c.start, kind: simTimer, client: j, pkt: []byte{}}) // the start
	}

	var d handshake.Decision
	reply := make([]byte, handshake.MaxReplyLen)
	rnd := wire.NewRand(p.seed + 2)
	for q.Len() > 0 {
		e := heap.Pop(&q).(simEvent)
		now := e.at
		c := &cs[e.client]
		switch e.kind {
		case simTimer:
			if c.done {
				continue
			}
			if e.pkt != nil { // the start
				c.hs.Start(now)
			} else if now != c.timerAt {
				continue // superseded
			}
			c.timerAt = math.NaN()
			n, ev := c.hs.Poll(now, out)
			if n > 0 {
				clientSent(e.client, now, out[:n])
			}
			event(e.client, now, ev)
			rearm(e.client)
		case simToClient:
			if c.done {
				continue
			}
			n, ev, _ := c.hs.Receive(now, e.pkt, out)
			if n > 0 {
				clientSent(e.client, now, out[:n])
			}
			event(e.client, now, ev)
			rearm(e.client)
		case simToServer:
			peer := peers[c.addr]
			if peer == nil {
				peer = &handshake.Peer{}
			}
			srv.Handle(&d, c.addr, e.pkt, now, peer, reply)
			switch d.Action {
			case handshake.ActReply:
				if d.Reply == protocol.TypeChallenge {
					res.challenges++
				}
				link(simToClient, byAddr[c.addr], now, reply[:d.ReplyLen])
			case handshake.ActPromote:
				// What conn's promotion does for a new address: make the
				// connection, answer with its Ack.
				peers[c.addr] = &handshake.Peer{Known: true, ClientID: d.To.ClientID, Cookie: d.Cookie}
				m := srv.Config().BuildAck(reply, &d.To, &d.Cookie, &rnd)
				link(simToClient, byAddr[c.addr], now, reply[:m])
			case handshake.ActDrop:
				res.drops[d.Drop]++
			default:
				t.Fatalf("server action %v", d.Action)
			}
		}
	}
	slices.Sort(res.connect)
	for j := range cs {
		if !cs[j].done {
			t.Fatalf("client %d never ended", j)
		}
		s := cs[j].sent
		for i := range s {
			n := 0
			for _, u := range s[i:] {
				if u < s[i]+1 {
					n++
				}
			}
			res.mostInSecond = max(res.mostInSecond, n)
		}
	}
	return res
}

// TestClientBackoffLossyConnect measures connect times over a path losing
// 5 % of datagrams each way (the report: 11 of 48 connects took 1–3 s):
// the old schedule (a resend every 1 s) against the backoff (100 ms, or 3
// round trips, doubling to 1 s). Run with -v for the distributions.
func TestClientBackoffLossyConnect(t *testing.T) {
	base := simPath{clients: 2000, stagger: 0.005, oneWay: 0.025, jitter: 0.01, loss: 0.05, seed: 1}
	scenarios := []simPath{}
	add := func(name string, p simPath) {
		for _, first := range []float64{1, 0} {
			p.name = name
			p.resendAt = first
			scenarios = append(scenarios, p)
		}
	}
	add("5 % loss each way, rtt 50–70 ms, 2000 clients", base)
	p := base
	p.clients, p.stagger, p.seed = 200, 0.05, 2
	add("5 % loss each way, rtt 50–70 ms, 200 clients", p)
	p = base
	p.loss = 0
	add("no loss, rtt 50–70 ms", p)
	p = base
	p.oneWay, p.jitter = 0.15, 0.05
	add("5 % loss each way, rtt 300–400 ms", p)
	p = base
	p.oneWay, p.jitter, p.loss, p.clients = 0.9, 0.1, 0.05, 500
	add("5 % loss each way, rtt 1.8–2.0 s", p)
	p = base
	p.clients, p.stagger, p.oneIP = 400, 0.0025, true
	add("5 % loss, 400 clients behind one NAT in 1 s (per-IP budget 64/s, burst 128)", p)

	results := make([]*simResult, len(scenarios))
	var log strings.Builder
	for i, s := range scenarios {
		results[i] = simulate(t, s)
		if i%2 == 0 {
			fmt.Fprintf(&log, "\n%s:\n", s.name)
		}
		sched := "old (1 s)    "
		if s.resendAt == 0 {
			sched = "new (backoff)"
		}
		fmt.Fprintf(&log, "  %s %v\n", sched, results[i])
	}
	t.Log(log.String())

	for i := 0; i < len(scenarios); i += 2 {
		old, nu := results[i], results[i+1]
		name := scenarios[i].name
		if !scenarios[i].oneIP && (old.failed != 0 || nu.failed != 0) {
			t.Errorf("%s: failed connects: old %d, new %d", name, old.failed, nu.failed)
		}
		if nu.mostInSecond > 6 {
			t.Errorf("%s: a client sent %d packets in one second", name, nu.mostInSecond)
		}
		if !scenarios[i].oneIP && nu.drops[protocol.DropRateLimited] != 0 {
			t.Errorf("%s: %d rate-limited drops", name, nu.drops[protocol.DropRateLimited])
		}
	}
	// The improvement, 5 % loss, 2000 clients: the old schedule's p99 is a
	// whole resend interval, the new one's well under half a second.
	old, nu := results[0], results[1]
	if !(old.pct(0.99) >= 1) || !(nu.pct(0.99) <= 0.5) || !(nu.pct(0.9) < old.pct(0.9)) {
		t.Errorf("p99 old %.3f s, new %.3f s; p90 old %.3f s, new %.3f s", old.pct(0.99), nu.pct(0.99), old.pct(0.9), nu.pct(0.9))
	}
	// Without loss nothing changes but a little insurance: the median is
	// one and a half round trips either way.
	old, nu = results[4], results[5]
	if math.Abs(nu.pct(0.5)-old.pct(0.5)) > 0.01 {
		t.Errorf("no loss: p50 old %.3f s, new %.3f s", old.pct(0.5), nu.pct(0.5))
	}
}
