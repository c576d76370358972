// Package metrics exports a conn.Server's counters to Prometheus and serves
// them, with net/http/pprof, on an operator's HTTP address.
//
// Nothing here runs per packet. The server already keeps its counters in
// per-loop fields that it publishes once per receive batch (conn.Stats);
// the Collector reads those snapshots when Prometheus scrapes and turns them
// into constant metrics. So a server with metrics on does the same work per
// datagram as one with metrics off, and a scrape costs one Stats call, one
// SocketStats call and a bounded walk of the connections for the RTT
// gauges.
//
// Every counter only grows while the process runs, so rate() and
// increase() hold. What is a state of the moment (connections open, the RTT
// of the connections open) is a gauge.
package metrics

import (
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/message"
)

// Namespace prefixes every metric the Collector emits.
const Namespace = "udpgate"

// RTTSampleLimit bounds the connections whose RTT one scrape reads. Each
// read takes the connection's lock for a few nanoseconds while the walk
// holds a shard's lock (lookups by the receive loops never wait for it;
// connection inserts into that shard do), so a scrape of a full server
// costs about a millisecond instead of growing without bound.
// udpgate_connection_rtt_sampled says how many connections were sampled;
// shards are filled by a seeded address hash, so the sample is not biased
// to any address range.
const RTTSampleLimit = 20_000

// RTTPercentiles label udpgate_connection_rtt_seconds: the median, the
// tail, and 100, the slowest connection. (The label is not called quantile:
// Prometheus reserves that name for summaries, which are cumulative.)
var RTTPercentiles = []float64{50, 90, 99, 100}

var _ prometheus.Collector = (*Collector)(nil)

// Collector is a prometheus.Collector reading a conn.Server at scrape time.
// It keeps no state between scrapes (only a recycled buffer), so
// concurrent scrapes are safe.
type Collector struct {
	srv *conn.Server

	// The sockets' counters, by index in socketCounters: the totals over
	// the sockets, and the series per socket (label socket; nil where
	// there is none).
	sockTotals, sockSeries []*prometheus.Desc

	// Protocol.
	drops, hsIn, hsOut, denied, migrations, connIn *prometheus.Desc
	connections, accepted, disconnects             *prometheus.Desc
	promoRunning, promoQueued, promoRejected       *prometheus.Desc
	promoPanics                                    *prometheus.Desc
	overload, overloadChanges, connless            *prometheus.Desc
	proofs                                         *prometheus.Desc
	messageDrops, messageHeld                      *prometheus.Desc
	rttPercentile, rttSampled                      *prometheus.Desc

	// Label values, made once.
	dropLabels []string // index: conn.DropReason
	typeLabels []string // index: protocol.PacketType
	pctLabels  []string

	// samples recycles the RTT buffer of a scrape.
	samples sync.Pool
}

// socketCounters are the sockets' counters: each is exported as a total
// over the sockets (udpgate_NAME) and, where sockHelp is set, as a series
// per socket (udpgate_socket_NAME, label socket), both from the same
// snapshot, so within one scrape the total is the sum of the series.
var socketCounters = []struct {
	name, help, sockHelp string
	value                func(*conn.SocketStats) uint64
}{
	{"received_packets_total", "Datagrams received by the server's sockets, truncated ones included.",
		"Datagrams received, by socket (one SO_REUSEPORT socket per receive loop).", func(s *conn.SocketStats) uint64 { return s.RxPackets }},
	{"received_bytes_total", "Bytes of the datagrams received.",
		"Bytes received, by socket.", func(s *conn.SocketStats) uint64 { return s.RxBytes }},
	{"receive_batches_total", "Receive calls (recvmmsg) that returned datagrams; rate(received_packets_total) / rate(receive_batches_total) is the recent batch fill.",
		"Receive calls that returned datagrams, by socket.", func(s *conn.SocketStats) uint64 { return s.RxBatches }},
	{"received_truncated_total", "Datagrams larger than a receive slot (dropped as too_large).",
		"", func(s *conn.SocketStats) uint64 { return s.RxTruncated }},
	{"receive_errors_total", "Receive errors that were retried (e.g. a pending ICMP error).",
		"", func(s *conn.SocketStats) uint64 { return s.RxErrors }},
	{"kernel_drops_total", "Datagrams the kernel dropped because a socket's receive buffer was full (SO_MEMINFO, read at scrape time).",
		"Datagrams the kernel dropped for a full receive buffer, by socket.", func(s *conn.SocketStats) uint64 { return s.RxDrops }},
	{"sent_packets_total", "Datagrams handed to the kernel.",
		"Datagrams sent, by socket.", func(s *conn.SocketStats) uint64 { return s.TxPackets }},
	{"sent_bytes_total", "Bytes of the datagrams sent.",
		"Bytes sent, by socket.", func(s *conn.SocketStats) uint64 { return s.TxBytes }},
	{"send_calls_total", "Send calls (sendmmsg); sent_packets_total / send_calls_total is the send batch.",
		"", func(s *conn.SocketStats) uint64 { return s.TxCalls }},
	{"send_errors_total", "Datagrams not sent because of an error particular to them (no route, firewall...).",
		"", func(s *conn.SocketStats) uint64 { return s.TxErrors }},
	{"send_partial_total", "Send calls that sent only part of their batch.",
		"", func(s *conn.SocketStats) uint64 { return s.TxPartial }},
	{"send_waits_total", "Times a sender waited for a socket to become writable.",
		"", func(s *conn.SocketStats) uint64 { return s.TxWaits }},
	{"send_queue_waits_total", "Writes (promotion replies, application sends) that waited for a full socket queue.",
		"", func(s *conn.SocketStats) uint64 { return s.QueueWaits }},
}

// NewCollector returns a Collector for srv. Register it with a
// prometheus.Registry (NewRegistry does).
func NewCollector(srv *conn.Server) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(Namespace+"_"+name, help, labels, nil)
	}
	c := &Collector{
		srv: srv,

		drops:       d("drops_total", "Datagrams the server dropped, by reason (conn.DropReason).", "reason"),
		hsIn:        d("handshake_received_total", "Handshake packets received, by type.", "type"),
		hsOut:       d("handshake_sent_total", "Handshake packets sent, by type, from the receive loops and the promotion workers (acks of new connections, denials).", "type"),
		denied:      d("denied_total", "Proven clients answered Denied, by reason: server_full (max-clients, or draining), refused (the application), address_limit (max-clients-per-ip or -prefix).", "reason"),
		migrations:  d("migrations_total", "Connections moved to a new client address (RestartResponse)."),
		connIn:      d("connection_packets_received_total", "Connection packets accepted for connections (Data, KeepAlive, Disconnect)."),
		connections: d("connections", "Connections open now."),
		accepted:    d("connections_accepted_total", "Connections created by the handshake."),
		disconnects: d("disconnects_total", "Connections ended, by reason (timed_out counts timeouts).", "reason"),

		promoRunning:  d("promotions_running", "Promotion workers busy now."),
		promoQueued:   d("promotions_queued", "Proven clients waiting for a promotion worker now."),
		promoRejected: d("promotions_rejected_total", "Proven clients the promotion pool had no room for (they retry their Response)."),
		promoPanics:   d("promotion_panics_total", "Promotion workers that panicked (a bug in an Accept or OnConnect hook)."),

		overload:        d("overload_level", "Overload control level: 0 normal, 1 burst (no RestartHandshake/VersionUpgrade), 2 flood and 3 severe (Challenge replies capped per socket)."),
		overloadChanges: d("overload_level_changes_total", "Overload level changes."),
		connless:        d("connectionless_received_total", "Datagrams from addresses that hold no connection (handshakes, strays, attacks): what overload control watches."),

		proofs:       d("token_proofs_total", "Sealed mode: connect tokens proven (connections admitted)."),
		messageDrops: d("message_drops_total", "Message entries and Messages packets the message layer dropped, by reason (message.DropReason; over_budget packets are left unacknowledged and resent).", "reason"),
		messageHeld:  d("message_receive_held_bytes", "Bytes held now for out-of-order and partly reassembled messages, over all connections (bounded by the messages receive budget)."),

		rttPercentile: d("connection_rtt_seconds", "Smoothed RTT of the connections open now, by percentile over them (100: the slowest), read at scrape time from at most "+strconv.Itoa(RTTSampleLimit)+" connections; NaN when none has measured an RTT.", "percentile"),
		rttSampled:    d("connection_rtt_sampled", "Connections open now that udpgate_connection_rtt_seconds describes: those that measured an RTT, at most "+strconv.Itoa(RTTSampleLimit)+"."),
	}
	for _, m := range socketCounters {
		c.sockTotals = append(c.sockTotals, d(m.name, m.help))
		var series *prometheus.Desc
		if m.sockHelp != "" {
			series = d("socket_"+m.name, m.sockHelp, "socket")
		}
		c.sockSeries = append(c.sockSeries, series)
	}
	c.dropLabels = make([]string, protocol.NumDropReasons)
	for r := range c.dropLabels {
		c.dropLabels[r] = conn.DropReason(r).String()
	}
	var st conn.Stats
	c.typeLabels = make([]string, len(st.HandshakeIn))
	for t := range c.typeLabels {
		c.typeLabels[t] = protocol.PacketType(t).String()
	}
	for _, p := range RTTPercentiles {
		c.pctLabels = append(c.pctLabels, strconv.FormatFloat(p, 'g', -1, 64))
	}
	return c
}

// Describe sends every metric's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.sockTotals {
		ch <- d
	}
	for _, d := range c.sockSeries {
		if d != nil {
			ch <- d
		}
	}
	for _, d := range []*prometheus.Desc{
		c.drops, c.hsIn, c.hsOut, c.denied, c.migrations, c.connIn,
		c.connections, c.accepted, c.disconnects,
		c.promoRunning, c.promoQueued, c.promoRejected, c.promoPanics,
		c.overload, c.overloadChanges, c.connless,
		c.proofs,
		c.messageDrops, c.messageHeld,
		c.rttPercentile, c.rttSampled,
	} {
		ch <- d
	}
}

// Collect reads the server's counters and sends them as constant metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}

	// Sockets: the totals are summed from the same per-socket snapshot, so
	// within one scrape they always equal the sum of the socket series.
	socks := c.srv.SocketStats()
	sockLabels := make([]string, len(socks))
	for i := range socks {
		sockLabels[i] = strconv.Itoa(i)
	}
	for m, sc := range socketCounters {
		var tot uint64
		for i := range socks {
			v := sc.value(&socks[i])
			tot += v
			if c.sockSeries[m] != nil {
				counter(c.sockSeries[m], v, sockLabels[i])
			}
		}
		counter(c.sockTotals[m], tot)
	}

	st := c.srv.Stats()
	for r := 1; r < len(st.Drops); r++ { // 0 is DropNone
		counter(c.drops, st.Drops[r], c.dropLabels[r])
	}
	for t := range st.HandshakeIn {
		counter(c.hsIn, st.HandshakeIn[t], c.typeLabels[t])
		out := st.HandshakeOut[t]
		// The receive loops count what they send; the promotion workers
		// send the Acks of new connections and every Denied.
		switch protocol.PacketType(t) {
		case protocol.TypeAck:
			out += st.PromotionAcks
		case protocol.TypeDenied:
			out += st.DeniedFull + st.DeniedRefused + st.DeniedAddressLimit
		}
		counter(c.hsOut, out, c.typeLabels[t])
	}
	counter(c.denied, st.DeniedFull, "server_full")
	counter(c.denied, st.DeniedRefused, "refused")
	counter(c.denied, st.DeniedAddressLimit, "address_limit")
	counter(c.migrations, st.Migrations)
	counter(c.connIn, st.ConnPacketsIn)
	gauge(c.connections, float64(st.Connections))
	counter(c.accepted, st.Accepted)
	// Reasons 1..4 end connections; the sealed mode's refusals (5..9)
	// refuse proofs, which are counted as drops by reason instead.
	for r := conn.ReasonClosed; r <= conn.ReasonReplaced; r++ {
		counter(c.disconnects, st.Disconnects[r], r.Label())
	}
	gauge(c.promoRunning, float64(st.PromotionsRunning))
	gauge(c.promoQueued, float64(st.PromotionsQueued))
	counter(c.promoRejected, st.PromotionRejected)
	counter(c.promoPanics, st.PromotionPanics)
	gauge(c.overload, float64(st.OverloadLevel))
	counter(c.overloadChanges, st.OverloadChanges)
	counter(c.connless, st.Connectionless)
	counter(c.proofs, st.Proofs)
	for r := 1; r < len(st.MessageDrops); r++ { // 0 is DropNone
		counter(c.messageDrops, st.MessageDrops[r], message.DropReason(r).Label())
	}
	gauge(c.messageHeld, float64(st.MessageHeld))

	c.collectRTT(gauge)
}

// collectRTT reads the smoothed RTT of at most RTTSampleLimit connections
// and sends their percentiles. Connections without a measured RTT (no ack
// yet) are left out rather than counted as 0.
func (c *Collector) collectRTT(gauge func(*prometheus.Desc, float64, ...string)) {
	bp, _ := c.samples.Get().(*[]float64)
	if bp == nil {
		bp = new([]float64)
	}
	samples := (*bp)[:0]
	seen := 0
	c.srv.Range(func(cn *conn.Conn) bool {
		seen++
		if rtt := cn.RTT(); rtt > 0 {
			samples = append(samples, rtt.Seconds())
		}
		return seen < RTTSampleLimit
	})
	slices.Sort(samples)
	n := len(samples)
	for i, p := range RTTPercentiles {
		gauge(c.rttPercentile, nearestRank(samples, p), c.pctLabels[i])
	}
	gauge(c.rttSampled, float64(n))
	*bp = samples
	c.samples.Put(bp)
}

// nearestRank is the p-th percentile of sorted samples: the smallest sample
// with at least p% of the samples at or below it; NaN for no samples.
func nearestRank(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	return sorted[max(0, int(math.Ceil(p/100*float64(len(sorted))))-1)]
}
