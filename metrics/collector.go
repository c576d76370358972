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

	// The server's counters: conn.Stats's tagged fields (statsFields).
	fields []statsField
	descs  []*prometheus.Desc // each metric once, in the fields' order

	rttPercentile, rttSampled *prometheus.Desc
	pctLabels                 []string

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
	c.fields, c.descs = statsFields(d)
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
	for _, d := range c.descs {
		ch <- d
	}
	ch <- c.rttPercentile
	ch <- c.rttSampled
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
	collectStats(ch, c.fields, &st)

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
