package metrics_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/udpgate/udpgate/metrics"
)

// BenchmarkGather splits a scrape's cost: the server's collector alone,
// and the whole registry (plus the Go runtime and process collectors),
// without HTTP. cpu-ns/op counts every thread, the garbage collector's
// included.
func BenchmarkGather(b *testing.B) {
	srv := listen(b)
	only := prometheus.NewRegistry()
	only.MustRegister(metrics.NewCollector(srv))
	for _, c := range []struct {
		name string
		g    prometheus.Gatherer
	}{{"udpgate", only}, {"registry", metrics.NewRegistry(srv)}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				if _, err := c.g.Gather(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
