package metrics_test

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/udpgate/udpgate/conn"
)

// BenchmarkPerPacket measures what one echoed Data packet costs with the
// metrics endpoint off and on (scraped every 100 ms, ten times a typical
// Prometheus rate). By design scraping reads counters the receive loops
// publish anyway, so the two must differ by noise only.
//
// One op is one packet echoed by an in-process server (conn.Listen on
// loopback, echo application) to in-process clients that keep a window of
// packets in flight. ns/op is wall time per echo; cpu-ns/op is the
// process's CPU time (user+system, clients included) per echo. Compare the
// two sub-benchmarks interleaved, so drift of the machine hits both alike:
//
//	go test -c -o /tmp/metrics.test ./metrics/
//	for i in 1 2 3 4 5 6 7 8; do for m in off on; do
//	  /tmp/metrics.test -test.run '^$' -test.bench "PerPacket/metrics=$m\$" -test.benchtime 200000x
//	done; done | tee /tmp/perpacket.txt
//	go run golang.org/x/perf/cmd/benchstat@latest -col /metrics /tmp/perpacket.txt
func BenchmarkPerPacket(b *testing.B) {
	b.Run("metrics=off", func(b *testing.B) { benchEcho(b, false) })
	b.Run("metrics=on", func(b *testing.B) { benchEcho(b, true) })
}

const (
	benchClients = 4
	benchWindow  = 32 // packets in flight per client
	benchPayload = 32 // bytes of Data, a small game update
)

// windowed is a client handler that frees a window slot per echo.
type windowed struct {
	conn.NopHandler
	slots chan struct{}
	total *atomic.Int64
}

func (h *windowed) OnPacket(*conn.Conn, []byte) {
	h.total.Add(1)
	select {
	case <-h.slots:
	default:
	}
}

func benchEcho(b *testing.B, withMetrics bool) {
	srv := listen(b)
	stopScrape := func() {}
	if withMetrics {
		ep := serve(b, srv)
		stopScrape = scrapeEvery(b, ep.URL()+"/metrics", 100*time.Millisecond)
	}
	var echoed atomic.Int64
	hs := make([]*windowed, benchClients)
	cls := make([]*conn.Client, benchClients)
	for i := range hs {
		hs[i] = &windowed{slots: make(chan struct{}, benchWindow), total: &echoed}
		cls[i] = dial(b, srv, hs[i])
	}
	payload := make([]byte, benchPayload)
	target := int64(b.N)
	deadline := time.Now().Add(2 * time.Minute)

	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	var wg sync.WaitGroup
	for i := range cls {
		wg.Go(func() {
			h, c := hs[i], cls[i]
			stall := time.NewTimer(time.Hour)
			defer stall.Stop()
			for echoed.Load() < target && time.Now().Before(deadline) {
				select {
				case h.slots <- struct{}{}:
				default:
					// The window is full: wait for an echo, and if none
					// comes (loss), open the window again.
					stall.Reset(50 * time.Millisecond)
					select {
					case h.slots <- struct{}{}:
					case <-stall.C:
						for len(h.slots) > 0 {
							<-h.slots
						}
						continue
					}
				}
				if _, err := c.Send(payload); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	var ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	stopScrape()
	if echoed.Load() < target {
		b.Fatalf("only %d of %d packets echoed in 2 minutes", echoed.Load(), target)
	}
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// scrapeEvery fetches url every interval until the returned stop is
// called; a failed scrape fails the benchmark.
func scrapeEvery(b *testing.B, url string, every time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var scrapes atomic.Int64
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			resp, err := http.Get(url)
			if err != nil {
				b.Error(err)
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Errorf("scrape: %s %v", resp.Status, err)
				return
			}
			scrapes.Add(1)
		}
	})
	start := time.Now()
	return func() {
		close(done)
		wg.Wait()
		if d := time.Since(start); d > 3*every && scrapes.Load() == 0 {
			b.Errorf("no scrape in %v", d)
		}
	}
}

// BenchmarkScrape measures one scrape of /metrics over HTTP (server
// counters, Go runtime and process collectors, text encoding), with a few
// connections: the whole cost metrics add, paid per scrape, not per packet.
func BenchmarkScrape(b *testing.B) {
	srv := listen(b)
	ep := serve(b, srv)
	for range 4 {
		dial(b, srv, conn.NopHandler{})
	}
	url := ep.URL() + "/metrics"
	b.ReportAllocs()
	for b.Loop() {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
