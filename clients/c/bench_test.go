package cclient_test

import (
	"fmt"
	"strconv"
	"testing"
)

// BenchmarkThroughput: one C client, on one thread, sends 200,000 reliable
// messages of 16 bytes to the Go server over loopback and receives their
// echoes (issue 30, target 4). msgs/s is each way: the messages sent, and
// as many received, per second of wall time (the Go server's time
// included); msgs/client-cpu-s the same per second of the C process's CPU
// time (user and system).
//
//	go test ./clients/c -run '^$' -bench Throughput -benchtime 3x
func BenchmarkThroughput(b *testing.B) {
	for _, ch := range []int{0, 1} {
		b.Run(fmt.Sprintf("channel=%d", ch), func(b *testing.B) {
			prog := program(b, "bench", plain)
			_, addr, _, _ := startServer(b, setup{loss: -1})
			var total, perCPU float64
			for i := 0; i < b.N; i++ {
				out := runC(b, prog, addr.String(), "200000", "16", strconv.Itoa(ch))
				var rate, cpu float64
				if _, err := fmt.Sscanf(out, "cpu %f s (the whole process, one thread)\nrate %f", &cpu, &rate); err != nil {
					b.Fatalf("bench: %v\n%s", err, out)
				}
				total += rate
				perCPU += 200000 / cpu
				b.Log(out)
			}
			b.ReportMetric(total/float64(b.N), "msgs/s")
			b.ReportMetric(perCPU/float64(b.N), "msgs/client-cpu-s")
		})
	}
}
