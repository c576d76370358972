package loadgen

import (
	"net/netip"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/msgcfg"
	"github.com/udpgate/udpgate/message"
)

// checkBulk: every bulk message came back once, in order, whole, timed.
func checkBulk(t *testing.T, cfg Config, r RunResult) {
	t.Helper()
	m := r.Total
	if m.BulkSent == 0 || m.BulkDelivered != m.BulkSent || m.BulkOutOfOrder != 0 || m.BulkDuplicated != 0 || r.BulkUnanswered != 0 {
		t.Errorf("bulk: sent %d, delivered %d, out of order %d, duplicated %d, unanswered %d",
			m.BulkSent, m.BulkDelivered, m.BulkOutOfOrder, m.BulkDuplicated, r.BulkUnanswered)
	}
	if m.BulkBytes != m.BulkDelivered*uint64(cfg.BulkSize) {
		t.Errorf("bulk: %d bytes echoed for %d messages of %d", m.BulkBytes, m.BulkDelivered, cfg.BulkSize)
	}
	if r.BulkLatency.N != m.BulkDelivered || r.BulkLatency.P50 <= 0 {
		t.Errorf("bulk latency %+v for %d echoes", r.BulkLatency, m.BulkDelivered)
	}
	// Every client's echoes, each message once: the fewest, the median
	// and the most, in order, the most at most all of them.
	if pc := r.BulkPerClient; pc[2] == 0 || pc[0] > pc[1] || pc[1] > pc[2] || pc[2] > m.BulkDelivered {
		t.Errorf("bulk echoes per client %v of %d delivered", pc, m.BulkDelivered)
	}
}

// TestMessagesBulk: 2 clients each send a 300 KB bulk stream at 2 a
// second beside reliable small messages; both streams come back whole,
// once and in order, counted and timed apart.
func TestMessagesBulk(t *testing.T) {
	const maxSize = 1 << 20
	s := listenMsgEcho(t, conn.Config{Messages: msgcfg.Config(maxSize, 0)})
	cfg := Config{Server: s.Addr(), Mode: ModeData, Clients: 2,
		Messages: MessagesReliable, MessageSize: 100, MessageRate: 50,
		BulkSize: 300_000, BulkRate: 2, MessageConfig: message.Config{MaxMessageSize: maxSize}}
	r := runMessages(t, cfg, time.Second)
	checkReliable(t, r)
	checkBulk(t, cfg, r)
	if want := float64(r.Total.BulkBytes) / r.Ran.Seconds(); r.BulkGoodput() != want || want <= 0 || r.Ran < r.Elapsed {
		t.Errorf("goodput %.0f B/s, want %.0f: %d bytes in %v (window %v)", r.BulkGoodput(), want, r.Total.BulkBytes, r.Ran, r.Elapsed)
	}
	// The small messages are not counted with the bulk ones.
	if r.MessageLatency.N != r.Total.MessagesDelivered || r.Total.MessagesSent < 10 {
		t.Errorf("small messages: %d sent, latency %+v", r.Total.MessagesSent, r.MessageLatency)
	}
}

// TestMessagesBulkAlone: bulk without -messages: only bulk messages go,
// over the message layer; beside unreliable messages, both streams come
// back.
func TestMessagesBulkAlone(t *testing.T) {
	s := listenMsgEcho(t, conn.Config{})
	cfg := Config{Server: s.Addr(), Mode: ModeData, Clients: 3, BulkSize: 20_000, BulkRate: 10}
	r := runMessages(t, cfg, 500*time.Millisecond)
	checkBulk(t, cfg, r)
	if m := r.Total; m.MessagesSent != 0 || m.MessagesDelivered != 0 || r.MessageLatency.N != 0 || m.MessagePackets == 0 {
		t.Errorf("bulk alone: %d small messages sent, %d delivered, %d timed; %d Messages packets",
			m.MessagesSent, m.MessagesDelivered, r.MessageLatency.N, m.MessagePackets)
	}

	cfg = Config{Server: s.Addr(), Mode: ModeData, Clients: 3, Messages: MessagesUnreliable, MessageRate: 50,
		BulkSize: 20_000, BulkRate: 0.5}
	r = runMessages(t, cfg, 300*time.Millisecond)
	checkBulk(t, cfg, r)
	if m := r.Total; m.MessagesDelivered == 0 || m.MessagesDelivered > m.MessagesSent {
		t.Errorf("unreliable beside bulk: sent %d, delivered %d", m.MessagesSent, m.MessagesDelivered)
	}
}

// TestMessagesBulkRefused: a bulk stream faster than the clients' send
// rate fills the bulk channel's queue: the messages that do not fit are
// skipped and counted, each once (no retry loop), and those sent still
// all come back.
func TestMessagesBulkRefused(t *testing.T) {
	const clients, rate, size = 2, 50, 20_000
	// The server's largest message is the clients' (docs/protocol.md §3.7).
	s := listenMsgEcho(t, conn.Config{Messages: msgcfg.Config(size, 0)})
	// 1 MB/s offered per client against 200 kB/s sent; the queue holds
	// 128 KiB (2 × 64 KiB, as the largest message is smaller).
	cfg := Config{Server: s.Addr(), Mode: ModeData, Clients: clients, BulkSize: size, BulkRate: rate,
		MessageConfig: message.Config{MaxMessageSize: size, SendRate: 200_000}}
	window := 500 * time.Millisecond
	r := runMessages(t, cfg, window)
	checkBulk(t, cfg, r)
	m := r.Total
	if m.BulkRefused == 0 {
		t.Errorf("no bulk message refused at 5 times the send rate (%d sent)", m.BulkSent)
	}
	// Attempts follow the rate: the run lasts the window (the drain sends
	// nothing new), and each worker's first message goes at once. A
	// retry loop would make thousands.
	if most := uint64(2*rate*clients*window.Seconds()) + 2*clients; m.BulkSent+m.BulkRefused > most {
		t.Errorf("%d bulk sends tried (%d refused) in %v, more than %d at %d a second per client",
			m.BulkSent+m.BulkRefused, m.BulkRefused, r.Elapsed, most, rate)
	}
}

// TestMessagesBulkLargest: a bulk message of the largest size the
// message layer allows (message.MaxMessageSizeLimit, 8 MiB) goes to a
// server allowing it and comes back whole.
func TestMessagesBulkLargest(t *testing.T) {
	const size = message.MaxMessageSizeLimit
	// A faster send rate on both sides than the default 4 MiB/s keeps the
	// test short: 8 MiB each way.
	const sendRate = 32 << 20
	s := listenMsgEcho(t, conn.Config{Messages: msgcfg.Config(size, sendRate)})
	// At 0.01 a second only the first message, sent at once, goes.
	cfg := Config{Server: s.Addr(), Mode: ModeData, Clients: 1, BulkSize: size, BulkRate: 0.01,
		MessageConfig: message.Config{MaxMessageSize: size, SendRate: sendRate},
		// The drain ends with the echo; this bounds it on a busy machine.
		MessageDrain: time.Minute}
	r := runMessages(t, cfg, 100*time.Millisecond)
	checkBulk(t, cfg, r)
	if r.Total.BulkSent != 1 {
		t.Errorf("%d bulk messages sent, want 1", r.Total.BulkSent)
	}
}

func TestBulkConfig(t *testing.T) {
	srv := netip.MustParseAddrPort("127.0.0.1:7777")
	three := message.Config{Channels: msgcfg.Channels()[:3]}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Server: srv, Mode: ModeEcho, Clients: 1, BulkSize: 1000}, "mode data"},
		{Config{Server: srv, Mode: ModeData, Clients: 1, BulkSize: 8}, "at least 16"},
		{Config{Server: srv, Mode: ModeData, Clients: 1, BulkSize: -1}, "negative BulkSize"},
		{Config{Server: srv, Mode: ModeData, Clients: 1, BulkSize: 1000, BulkRate: -1}, "BulkRate"},
		{Config{Server: srv, Mode: ModeData, Clients: 1, BulkSize: message.DefaultMaxMessageSize + 1}, "raise it"},
		{Config{Server: srv, Mode: ModeData, Clients: 1, BulkSize: 1000, MessageConfig: three}, "no reliable-ordered channel 3"},
	} {
		if _, err := c.cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error saying %q", c.cfg, err, c.want)
		}
	}
	c, err := Config{Server: srv, Mode: ModeData, Clients: 1, BulkSize: message.MaxMessageSizeLimit,
		MessageConfig: message.Config{MaxMessageSize: message.MaxMessageSizeLimit}}.withDefaults()
	if err != nil || c.BulkRate != DefaultBulkRate || c.Messages != MessagesOff || !c.messages() ||
		len(c.MessageConfig.Channels) != msgcfg.NumChannels || c.MessageDrain <= DefaultMessageDrain {
		t.Errorf("bulk defaults %+v, %v", c, err)
	}
	// Without bulk, the drain is as before.
	c, err = Config{Server: srv, Mode: ModeData, Clients: 1, Messages: MessagesReliable}.withDefaults()
	if err != nil || c.MessageDrain != DefaultMessageDrain || c.BulkSize != 0 || c.BulkRate != 0 {
		t.Errorf("message defaults %+v, %v", c, err)
	}
}

// TestClientBulkAllocs: a bulk message's round trip costs the generator
// no allocation, one that fits a packet and one of fragments alike. The
// message layer allocates each message it reassembles from fragments
// (message.Endpoint.Next), once on the mirror's side and once on the
// client's: a fragmented round trip may cost those two, no more.
func TestClientBulkAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race runtime allocates")
	}
	// Reassembled messages are garbage at once; without the collector the
	// message layer's pools are not emptied under the count.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for _, c := range []struct {
		size int
		most float64
	}{{200, 0}, {2000, 2}} {
		p := newMsgPairWith(t, Config{Messages: MessagesReliable, MessageSize: 100, BulkSize: c.size})
		b := p.w.msg.bulk
		for range 200 {
			p.roundTripOn(t, b)
			p.roundTrip(t)
		}
		allocs := testing.AllocsPerRun(1000, func() { p.roundTripOn(t, b) })
		l := p.w.ctr.loc
		if allocs > c.most || l[cBulkDelivered] != l[cBulkSent] || l[cBulkDelivered] < 1000 || l[cBulkOutOfOrder] != 0 ||
			l[cMsgDelivered] != l[cMsgSent] || l[cBulkBytes] != l[cBulkDelivered]*uint64(c.size) {
			t.Errorf("%d-byte bulk messages: %v allocations per round trip (at most %v); bulk sent %d, delivered %d, out of order %d, %d bytes; small sent %d, delivered %d",
				c.size, allocs, c.most, l[cBulkSent], l[cBulkDelivered], l[cBulkOutOfOrder], l[cBulkBytes], l[cMsgSent], l[cMsgDelivered])
		}
	}
}

// TestBulkBurstBound: a client with a large bulk message queued, and a
// send rate that would let it all go, sends at most msgMaxBurst packets
// at a time, so the other clients of its worker get their turns.
func TestBulkBurstBound(t *testing.T) {
	p := newMsgPairWith(t, Config{BulkSize: 300_000,
		MessageConfig: message.Config{MaxMessageSize: 1 << 20, SendRate: 1 << 30}})
	w := p.w
	if !w.msgSendOne(w.msg.bulk, 0, p.now) {
		t.Fatal("bulk message refused")
	}
	// The congestion window (10 packets at first) or the burst bound,
	// whichever is smaller, stops the client; the rest waits.
	queued := w.msg.eps[0].Stats().Queued[msgcfg.Bulk]
	if n := w.ctr.loc[cMsgPackets]; n < 1 || n > msgMaxBurst || w.tx.n != int(n) || queued == 0 {
		t.Errorf("%d packets sent (%d in the batch) for a 300 KB message, %d bytes still queued: want 1 to %d and more waiting", n, w.tx.n, queued, msgMaxBurst)
	}
}
