package message

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/seqwin"
)

// The simulation harness: two endpoints over seqwin.SeqState, a
// seeded lossy, duplicating, reordering network and a 1 ms tick.

const (
	simPayload = 1180
	simStart   = int64(1_795_000_000) * 1e9
)

type simSide struct {
	ep  *Endpoint
	seq seqwin.SeqState
	rep seqwin.AckReport
	// recv collects the messages Next returned, per channel.
	recv    [][][]byte
	sent    int // packets sent
	refused int // packets Check refused
}

type simPacket struct {
	to          int
	at          int64
	seq, ack    uint16
	ackBits     uint64
	payload     []byte
	orderTiebrk int
}

type sim struct {
	t       testing.TB
	rng     *rand.Rand
	now     int64
	s       [2]*simSide
	net     []simPacket
	loss    float64 // drop probability
	dup     float64 // duplicate probability
	jitter  int64   // extra random delay, ns (reorders)
	latency int64
	buf     []byte
	// keep controls whether received messages are copied into recv.
	keep bool
	// onMsg, when set, sees every message delivered.
	onMsg func(to, ch int, msg []byte)
	// drop, when set, drops the packets it returns true for (before the
	// random loss).
	drop func(p simPacket) bool
}

func newSim(t testing.TB, cfg Config, seed uint64) *sim {
	t.Helper()
	sm := &sim{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), now: simStart,
		latency: int64(20 * time.Millisecond), buf: make([]byte, simPayload), keep: true}
	for i := range sm.s {
		l, err := NewLayer(cfg, simPayload)
		if err != nil {
			t.Fatal(err)
		}
		side := &simSide{ep: l.NewEndpoint(), recv: make([][][]byte, len(cfg.Channels))}
		local, remote := uint16(8159), uint16(9264)
		if i == 1 {
			local, remote = remote, local
		}
		side.seq.Init(local, remote, float64(sm.now)/1e9)
		sm.s[i] = side
	}
	return sm
}

func (sm *sim) secs() float64 { return float64(sm.now) / 1e9 }

// sendEachMs sends n messages of size bytes from side 0 on channel ch, one
// each simulated millisecond, then runs idle more milliseconds.
func (sm *sim) sendEachMs(t *testing.T, ch, n, size, idle int) {
	t.Helper()
	for k := range n {
		if err := sm.s[0].ep.Send(ch, simMsg(ch, k, size), sm.now); err != nil {
			t.Fatal(err)
		}
		sm.step(time.Millisecond)
	}
	for range idle {
		sm.step(time.Millisecond)
	}
}

// step advances the clock by dt, delivers due packets and lets both sides
// send what they want to.
func (sm *sim) step(dt time.Duration) {
	sm.now += int64(dt)
	// Deliver in arrival order.
	for {
		best := -1
		for i := range sm.net {
			if sm.net[i].at <= sm.now && (best < 0 || sm.net[i].at < sm.net[best].at) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		p := sm.net[best]
		sm.net = append(sm.net[:best], sm.net[best+1:]...)
		sm.deliver(p)
	}
	for i, side := range sm.s {
		for k := 0; k < 64; k++ {
			ep := side.ep
			if !ep.WantsSend(sm.now) && !ep.AckDue(sm.now) {
				break
			}
			seq, ack, bits, lost, ev := side.seq.Send(sm.secs())
			if ev {
				ep.Evicted(lost.Seq, sm.now)
			}
			n := ep.WritePayload(sm.buf, seq, sm.now)
			ep.PacketSent(sm.now)
			side.sent++
			sm.transmit(simPacket{to: 1 - i, seq: seq, ack: ack, ackBits: bits,
				payload: append([]byte(nil), sm.buf[:n]...)})
		}
	}
}

func (sm *sim) transmit(p simPacket) {
	if sm.drop != nil && sm.drop(p) {
		return
	}
	if sm.rng.Float64() < sm.loss {
		return
	}
	copies := 1
	if sm.rng.Float64() < sm.dup {
		copies = 2
	}
	for range copies {
		q := p
		q.at = sm.now + sm.latency
		if sm.jitter > 0 {
			q.at += sm.rng.Int64N(sm.jitter)
		}
		sm.net = append(sm.net, q)
	}
}

func (sm *sim) deliver(p simPacket) {
	side := sm.s[p.to]
	ep := side.ep
	if len(p.payload) > 0 {
		if r := ep.Check(p.payload); r != DropNone {
			if r != DropOverBudget {
				sm.t.Fatalf("Check of a legitimate packet: %v", r)
			}
			side.refused++
			return
		}
	}
	if side.seq.Receive(p.seq, p.ack, p.ackBits, sm.secs(), &side.rep) != protocol.DropNone {
		return
	}
	for _, d := range side.rep.DeliveredPackets() {
		ep.Acked(d.Seq, sm.now)
	}
	for _, d := range side.rep.LostPackets() {
		ep.Lost(d.Seq, sm.now)
	}
	ep.Acks(p.ack, p.ackBits, sm.now)
	if side.rep.RTTSample >= 0 {
		ep.SetRTT(time.Duration(side.seq.RTT() * 1e9))
	}
	if len(p.payload) > 0 {
		ep.Receive(p.payload, sm.now)
	}
	for {
		ch, msg, ok := ep.Next()
		if !ok {
			break
		}
		if sm.onMsg != nil {
			sm.onMsg(p.to, ch, msg)
		}
		if sm.keep {
			side.recv[ch] = append(side.recv[ch], append([]byte(nil), msg...))
		}
	}
}

// simMsg is message number k of channel ch: an 8-byte header then filler,
// size bytes in all (at least 8).
func simMsg(ch, k, size int) []byte {
	b := make([]byte, max(size, 8))
	binary.LittleEndian.PutUint32(b, uint32(k))
	binary.LittleEndian.PutUint32(b[4:], uint32(ch))
	for i := 8; i < len(b); i++ {
		b[i] = byte(k*31 + i*7 + ch)
	}
	return b
}

func checkSimMsg(t testing.TB, ch int, b []byte) int {
	t.Helper()
	if len(b) < 8 || int(binary.LittleEndian.Uint32(b[4:])) != ch {
		t.Fatalf("channel %d: foreign message % x", ch, b[:min(len(b), 16)])
	}
	k := int(binary.LittleEndian.Uint32(b))
	for i := 8; i < len(b); i++ {
		if b[i] != byte(k*31+i*7+ch) {
			t.Fatalf("channel %d message %d: byte %d corrupt", ch, k, i)
		}
	}
	return k
}
