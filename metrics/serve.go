package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof" // also registers on http.DefaultServeMux, which nothing here serves
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/udpgate/udpgate/conn"
)

// NewRegistry returns a private registry holding srv's Collector and the Go
// runtime and process collectors. Private rather than
// prometheus.DefaultRegisterer, so a program embedding a server keeps its
// own metrics apart, and tests can run several servers in one process.
func NewRegistry(srv *conn.Server) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		NewCollector(srv),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// NewBuildInfo returns the udpgate_build_info metric: always 1, with the
// build's version, Go version and, when known, VCS revision as labels, so
// a query can join any series with the build that produced it.
func NewBuildInfo(version, goVersion, revision string) prometheus.Collector {
	labels := prometheus.Labels{"version": version, "goversion": goVersion}
	if revision != "" {
		labels["revision"] = revision
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace:   Namespace,
		Name:        "build_info",
		Help:        "Always 1; the labels say which build of udpgate runs.",
		ConstLabels: labels,
	})
	g.Set(1)
	return g
}

// HandlerOpts configure Handler.
type HandlerOpts struct {
	// Logger receives errors of collection (nil discards them).
	Logger *slog.Logger
	// Live and Ready answer /healthz and /readyz: 200 "ok" when they
	// return nil, else 503 with the error. For a server, Live fails when a
	// receive loop has stopped (restart the process), Ready also while it
	// does not take new clients (draining), so a load balancer or
	// Kubernetes sends new players elsewhere. A nil function leaves its
	// path unserved.
	Live, Ready func() error
	// NoPprof leaves /debug/pprof/ out, for an address other hosts can
	// reach (pprof shows the command line and memory).
	NoPprof bool
}

// Handler serves g at /metrics, the health probes of o, and the runtime
// profiles of net/http/pprof under /debug/pprof/, on a mux of its own:
// nothing registered on http.DefaultServeMux by other packages is exposed.
func Handler(g prometheus.Gatherer, o HandlerOpts) http.Handler {
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog: errorLog{logger},
		// Serve what could be collected: a scrape with a gap is more use
		// to an operator than an HTTP 500.
		ErrorHandling: promhttp.ContinueOnError,
		// Each scrape walks up to RTTSampleLimit connections; a handful of
		// concurrent scrapers is plenty.
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	index := `<li><a href="/metrics">/metrics</a> (Prometheus)</li>` + "\n"
	if o.Live != nil {
		mux.Handle("GET /healthz", probe(o.Live))
		index += `<li><a href="/healthz">/healthz</a> (liveness)</li>` + "\n"
	}
	if o.Ready != nil {
		mux.Handle("GET /readyz", probe(o.Ready))
		index += `<li><a href="/readyz">/readyz</a> (readiness)</li>` + "\n"
	}
	if !o.NoPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index) // heap, goroutine, allocs, block, mutex...
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		index += `<li><a href="/debug/pprof/">/debug/pprof/</a> (profiles)</li>` + "\n"
	}
	page := "<html><body><h1>udpgate</h1><ul>\n" + index + "</ul></body></html>\n"
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, page)
	})
	return mux
}

// probe answers a health check: 200 "ok", or 503 and the reason. GET
// covers HEAD too.
func probe(check func() error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := check(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, err.Error()+"\n")
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
}

// errorLog adapts slog to promhttp's Logger.
type errorLog struct{ l *slog.Logger }

func (e errorLog) Println(v ...any) { e.l.Warn("metrics: " + fmt.Sprint(v...)) }

// Endpoint is a running HTTP server for Handler.
type Endpoint struct {
	ln   net.Listener
	hs   *http.Server
	done chan struct{}
}

// Listen serves h on the TCP address addr ("127.0.0.1:9100"; port 0 picks
// a free one, see Addr) until Shutdown. logger receives serving errors (nil
// discards them).
func Listen(addr string, h http.Handler, logger *slog.Logger) (*Endpoint, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: cannot listen on %q: %w (is the port in use, or the address not one of this host's?)", addr, err)
	}
	e := &Endpoint{
		ln: ln,
		hs: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       2 * time.Minute,
			// No WriteTimeout: a CPU profile or trace answers only after
			// its ?seconds=, and pprof refuses durations longer than a
			// write timeout.
			ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(e.done)
		if err := e.hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics endpoint stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return e, nil
}

// Addr is the address the endpoint listens on, with the chosen port.
func (e *Endpoint) Addr() net.Addr { return e.ln.Addr() }

// URL is the endpoint's base URL, e.g. "http://127.0.0.1:9100".
func (e *Endpoint) URL() string { return "http://" + e.ln.Addr().String() }

// Shutdown stops accepting scrapes and waits, until ctx is done, for those
// in flight (a running CPU profile included); then it closes them.
func (e *Endpoint) Shutdown(ctx context.Context) error {
	err := e.hs.Shutdown(ctx)
	if err != nil {
		_ = e.hs.Close()
	}
	<-e.done
	return err
}

// Close stops the endpoint at once.
func (e *Endpoint) Close() error {
	err := e.hs.Close()
	<-e.done
	return err
}
