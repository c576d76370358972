package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/defaults"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/internal/testkit/conntest"
	"github.com/udpgate/udpgate/metrics"
	"github.com/udpgate/udpgate/netsim"
)

// counter counts the Data payloads a client receives.
type counter struct {
	conn.NopHandler
	n atomic.Int64
}

func (h *counter) OnPacket(*conn.Conn, []byte) { h.n.Add(1) }

func listen(t testing.TB) *conn.Server {
	t.Helper()
	return conntest.Listen(t, conn.Listen, conn.Config{
		Handler:       conntest.Echo[*conn.Conn, conn.DisconnectReason]{},
		Sockets:       2,
		SweepInterval: 10 * time.Millisecond,
		ChallengeRate: -1, // benchmarks dial many clients from one host
	})
}

func serve(t testing.TB, srv *conn.Server) *metrics.Endpoint {
	t.Helper()
	ep, err := metrics.Listen("127.0.0.1:0", metrics.Handler(metrics.NewRegistry(srv), metrics.HandlerOpts{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := ep.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return ep
}

func dial(t testing.TB, srv *conn.Server, h conn.Handler) *conn.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := conn.Dial(ctx, srv.Addr().String(), conn.Config{Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// scrape fetches and parses the endpoint's /metrics with the Prometheus
// text parser.
func scrape(t testing.TB, ep *metrics.Endpoint) families {
	t.Helper()
	resp, err := http.Get(ep.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

type families map[string]*dto.MetricFamily

// find returns the metric of family name whose labels include the given
// name=value pairs.
func (f families) find(name string, labels ...string) (*dto.Metric, bool) {
	fam, ok := f[name]
	if !ok {
		return nil, false
	}
next:
	for _, m := range fam.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m, true
	}
	return nil, false
}

// value is a counter's or gauge's value; -1 when absent.
func (f families) value(name string, labels ...string) float64 {
	m, ok := f.find(name, labels...)
	if !ok {
		return -1
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return -1
}

// sum adds a family's values over all its label sets.
func (f families) sum(name string) float64 {
	var s float64
	if fam, ok := f[name]; ok {
		for _, m := range fam.Metric {
			s += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return s
}

// TestScrapeRealServer runs clients against a real server, scrapes its
// endpoint over HTTP and checks the counters against the traffic.
func TestScrapeRealServer(t *testing.T) {
	const clients, sends = 3, 5
	srv := listen(t)
	ep := serve(t, srv)

	var got [clients]*counter
	var cls [clients]*conn.Client
	for i := range clients {
		got[i] = &counter{}
		cls[i] = dial(t, srv, got[i])
	}
	for i := range clients {
		for j := range sends {
			if _, err := cls[i].Send(fmt.Appendf(nil, "client %d packet %d", i, j)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range clients {
		conntest.Eventually(t, fmt.Sprintf("client %d's echoes", i), func() bool { return got[i].n.Load() >= sends })
	}

	// One malformed datagram (its last byte is zero: no terminator) from a
	// plain socket.
	raw, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write([]byte{0x42, 0x00}); err != nil {
		t.Fatal(err)
	}

	var f families
	conntest.Eventually(t, "the malformed drop in a scrape", func() bool {
		f = scrape(t, ep)
		return f.value("udpgate_drops_total", "reason", "malformed") >= 1
	})

	checks := []struct {
		name   string
		labels []string
		min    float64
		max    float64 // -1: no upper bound
	}{
		{"udpgate_connections", nil, clients, clients},
		{"udpgate_connections_accepted_total", nil, clients, clients},
		{"udpgate_handshake_received_total", []string{"type", "initial"}, clients, -1},
		{"udpgate_handshake_sent_total", []string{"type", "challenge"}, clients, -1},
		{"udpgate_handshake_received_total", []string{"type", "response"}, clients, -1},
		{"udpgate_handshake_sent_total", []string{"type", "ack"}, clients, -1},
		{"udpgate_handshake_sent_total", []string{"type", "denied"}, 0, 0},
		{"udpgate_denied_total", []string{"reason", "server_full"}, 0, 0},
		{"udpgate_migrations_total", nil, 0, 0},
		{"udpgate_connection_packets_received_total", nil, clients * sends, -1},
		{"udpgate_drops_total", []string{"reason", "malformed"}, 1, 1},
		{"udpgate_received_packets_total", nil, clients*(2+sends) + 1, -1},
		{"udpgate_sent_packets_total", nil, clients * (1 + sends), -1},
		{"udpgate_received_bytes_total", nil, 1, -1},
		{"udpgate_receive_batches_total", nil, 1, -1},
		{"udpgate_kernel_drops_total", nil, 0, 0},
		{"udpgate_disconnects_total", []string{"reason", "timed_out"}, 0, 0},
		{"udpgate_promotions_rejected_total", nil, 0, 0},
		{"udpgate_promotions_running", nil, 0, -1},
		{"go_goroutines", nil, 1, -1},
	}
	for _, c := range checks {
		v := f.value(c.name, c.labels...)
		if v < c.min || (c.max >= 0 && v > c.max) {
			t.Errorf("%s%v = %v, want %v..%v (-1: absent or no bound)", c.name, c.labels, v, c.min, c.max)
		}
	}
	// Totals are the sums of the per-socket series of the same scrape.
	for _, pair := range [][2]string{
		{"udpgate_received_packets_total", "udpgate_socket_received_packets_total"},
		{"udpgate_sent_packets_total", "udpgate_socket_sent_packets_total"},
		{"udpgate_received_bytes_total", "udpgate_socket_received_bytes_total"},
		{"udpgate_receive_batches_total", "udpgate_socket_receive_batches_total"},
	} {
		if tot, sum := f.value(pair[0]), f.sum(pair[1]); tot != sum {
			t.Errorf("%s = %v, but the sockets' %s add up to %v", pair[0], tot, pair[1], sum)
		}
	}
	if n := len(f["udpgate_socket_received_packets_total"].GetMetric()); n != 2 {
		t.Errorf("%d socket series, want 2 (one per socket)", n)
	}
	// Every drop reason is exported from the start, so rate() works on the
	// first occurrence.
	if n := len(f["udpgate_drops_total"].GetMetric()); n != int(protocol.NumDropReasons)-1 {
		t.Errorf("%d drop reasons exported, want %d", n, protocol.NumDropReasons-1)
	}
	if _, ok := f["process_cpu_seconds_total"]; !ok {
		t.Error("process collector missing: no process_cpu_seconds_total")
	}

	// RTT: each client acks the echoes with its next packet, a KeepAlive
	// within a second, so every connection soon has an RTT.
	conntest.Eventually(t, "an RTT for every connection", func() bool {
		f = scrape(t, ep)
		return f.value("udpgate_connection_rtt_sampled") == clients
	})
	// Idle clients ack with KeepAlives, so a sample is up to the 1 s
	// keepalive interval plus scheduling delay.
	median, worst := f.value("udpgate_connection_rtt_seconds", "percentile", "50"), f.value("udpgate_connection_rtt_seconds", "percentile", "100")
	if !(median > 0 && median <= worst && worst <= 2) {
		t.Errorf("RTT median %v s, worst %v s for loopback connections, want 0 < median <= worst <= 2", median, worst)
	}
	if n := len(f["udpgate_connection_rtt_seconds"].GetMetric()); n != len(metrics.RTTPercentiles) {
		t.Errorf("%d RTT percentiles, want %d", n, len(metrics.RTTPercentiles))
	}
	// The types say how to query: no histogram whose buckets could go down.
	for name, typ := range f {
		if strings.HasPrefix(name, "udpgate_") && typ.GetType() == dto.MetricType_HISTOGRAM {
			t.Errorf("%s is a histogram: udpgate exports snapshots as gauges", name)
		}
	}

	// A client that leaves moves the gauges and the disconnect reasons.
	cls[0].Close()
	conntest.Eventually(t, "the closed connection in a scrape", func() bool {
		f = scrape(t, ep)
		return f.value("udpgate_disconnects_total", "reason", "closed") == 1 && f.value("udpgate_connections") == clients-1
	})
}

// TestPprof checks the profiles are served on the endpoint's own mux.
func TestPprof(t *testing.T) {
	ep := serve(t, listen(t))
	for _, c := range []struct{ path, want string }{
		{"/debug/pprof/", "goroutine"},
		{"/debug/pprof/goroutine?debug=1", "goroutine profile"},
		{"/debug/pprof/cmdline", ""},
		{"/debug/pprof/profile?seconds=1", ""},
		{"/", "/metrics"},
	} {
		resp, err := http.Get(ep.URL() + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || len(body) == 0 || !strings.Contains(string(body), c.want) {
			t.Errorf("GET %s: %s, %d bytes, want 200 with %q", c.path, resp.Status, len(body), c.want)
		}
	}
	resp, err := http.Get(ep.URL() + "/nothing")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing: %s, want 404", resp.Status)
	}
}

// TestListenError names the address and the likely cause.
func TestListenError(t *testing.T) {
	ep := serve(t, listen(t))
	_, err := metrics.Listen(ep.Addr().String(), http.NotFoundHandler(), nil)
	if err == nil || !strings.Contains(err.Error(), ep.Addr().String()) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Listen on %s: %v, want an error naming the address and the port in use", ep.Addr(), err)
	}
}

// TestRTTGauges: the RTT gauges describe the connections open now, so
// they go down when a connection leaves, and are NaN with none. It runs on
// the simulated network in virtual time: a client acks the echo of its ping
// in its next keepalive, which on a loaded machine could come late enough
// for real sockets to time out.
func TestRTTGauges(t *testing.T) {
	synctest.Test(t, testRTTGauges)
}

func testRTTGauges(t *testing.T) {
	nw := netsim.New()
	nw.SetLink(netsim.Link{Latency: 5 * time.Millisecond})
	quiet := slog.New(slog.DiscardHandler)
	srv := conntest.Listen(t, conn.Listen, conn.Config{Network: nw, Logger: quiet,
		Handler: conntest.Echo[*conn.Conn, conn.DisconnectReason]{}, SweepInterval: 10 * time.Millisecond})
	dialSim := func() *conn.Client {
		c, err := conn.Dial(context.Background(), srv.Addr().String(), conn.Config{Network: nw, Logger: quiet, Handler: conn.NopHandler{}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(srv))
	gather := func() families {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		f := families{}
		for _, mf := range mfs {
			f[mf.GetName()] = mf
		}
		return f
	}
	f := gather()
	if v := f.value("udpgate_connection_rtt_seconds", "percentile", "50"); !math.IsNaN(v) {
		t.Errorf("median RTT of no connections = %v, want NaN", v)
	}
	if v := f.value("udpgate_connection_rtt_sampled"); v != 0 {
		t.Errorf("rtt_sampled with no connections = %v", v)
	}
	a, b := dialSim(), dialSim()
	for _, c := range []*conn.Client{a, b} {
		if _, err := c.Send([]byte("ping")); err != nil {
			t.Fatal(err)
		}
	}
	// Two keepalive periods: each client's next packet acks the echo.
	time.Sleep(2 * defaults.KeepAlive)
	synctest.Wait()
	if v := gather().value("udpgate_connection_rtt_sampled"); v != 2 {
		t.Fatalf("rtt_sampled = %v with two clients that measured an RTT, want 2", v)
	}
	a.Close()
	time.Sleep(time.Second) // the server hears a's Disconnect after 5 ms
	synctest.Wait()
	if v := gather().value("udpgate_connection_rtt_sampled"); v != 1 {
		t.Fatalf("rtt_sampled = %v once a client left, want 1", v)
	}
	_ = b
}

// TestProbes: /healthz and /readyz answer what their functions say, at
// once (no caching), and are absent when not configured.
func TestProbes(t *testing.T) {
	// The handler runs in this goroutine (ServeHTTP on a recorder).
	var live error
	ready := errors.New("draining: new clients are refused")
	h := metrics.Handler(prometheus.NewRegistry(), metrics.HandlerOpts{
		Live:  func() error { return live },
		Ready: func() error { return ready },
	})
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q, want 200 ok", code, body)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "draining") {
		t.Errorf("/readyz while not ready: %d %q, want 503 with the reason", code, body)
	}
	ready, live = nil, errors.New("receive loop 1 has stopped")
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz once ready: %d, want 200", code)
	}
	if code, body := get("/healthz"); code != 503 || !strings.Contains(body, "loop 1") {
		t.Errorf("/healthz with a stopped loop: %d %q, want 503 with the reason", code, body)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/healthz", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz: %d, want 405", rec.Code)
	}

	bare := metrics.Handler(prometheus.NewRegistry(), metrics.HandlerOpts{NoPprof: true})
	for _, path := range []string{"/healthz", "/readyz", "/debug/pprof/"} {
		rec := httptest.NewRecorder()
		bare.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s without it configured: %d, want 404", path, rec.Code)
		}
	}
}

// TestBuildInfo: one series, value 1, the build in its labels.
func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewBuildInfo("v0.1.0", "go1.26.8", "0b7276d12345"))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "udpgate_build_info" || len(mfs[0].Metric) != 1 {
		t.Fatalf("gathered %v, want one udpgate_build_info series", mfs)
	}
	m := mfs[0].Metric[0]
	got := map[string]string{}
	for _, l := range m.Label {
		got[l.GetName()] = l.GetValue()
	}
	if m.GetGauge().GetValue() != 1 || got["version"] != "v0.1.0" || got["goversion"] != "go1.26.8" || got["revision"] != "0b7276d12345" {
		t.Errorf("udpgate_build_info %v = %v", got, m.GetGauge().GetValue())
	}
	// No revision, no empty label.
	reg = prometheus.NewRegistry()
	reg.MustRegister(metrics.NewBuildInfo("(devel)", "go1.26.8", ""))
	mfs, _ = reg.Gather()
	for _, l := range mfs[0].Metric[0].Label {
		if l.GetName() == "revision" {
			t.Errorf("revision label %q without a revision", l.GetValue())
		}
	}
}

// TestLint runs Prometheus' metric linter (the checks of promtool check
// metrics) over everything a server exports.
func TestLint(t *testing.T) {
	srv := listen(t)
	dial(t, srv, conn.NopHandler{})
	reg := metrics.NewRegistry(srv)
	reg.MustRegister(metrics.NewBuildInfo("v0.1.0", "go1.26.8", "0b7276d12345"))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}
