package regions_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/sluicehq/sluice/internal/regions"
	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
)

// BenchmarkReplication is what a global rule's replication adds to a
// decision, and how soon the other region sees it: east admits b.N
// decisions over 10,000 counters of one window; each also asks what west
// spent, as a decision does. Its metrics: bytes written to Kafka per
// decision; CPU per decision of the replicators and the in-process Kafka
// together (an upper bound of the decider's share); and the time from
// east's admission of a fresh counter to west's view of it, per
// publishing interval and one-way latency between the regions.
func BenchmarkReplication(b *testing.B) {
	for _, interval := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond} {
		for _, latency := range []time.Duration{0, 80 * time.Millisecond} {
			b.Run(fmt.Sprintf("interval=%v/latency=%v", interval, latency), func(b *testing.B) {
				benchReplication(b, interval, latency)
			})
		}
	}
}

func benchReplication(b *testing.B, interval, latency time.Duration) {
	ek := kafkatest.Start(b, 1, []string{regions.DefaultTopic})
	wk := kafkatest.Start(b, 1, []string{regions.DefaultTopic})
	brokers := map[string][]string{"east": ek.Addrs(), "west": wk.Addrs()}
	var dialer *kafka.Dialer
	if latency > 0 {
		p := startDelayProxy(b, ek.Addrs()[0], latency)
		dialer = &kafka.Dialer{Timeout: 5 * time.Second, DialFunc: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == ek.Addrs()[0] {
				addr = p.Addr()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}
	}
	east, err := regions.Start(regions.Config{Region: "east", Brokers: brokers, Interval: interval})
	if err != nil {
		b.Fatal(err)
	}
	defer east.Close()
	west, err := regions.Start(regions.Config{Region: "west", Brokers: brokers, Interval: interval, Dialer: dialer})
	if err != nil {
		b.Fatal(err)
	}
	defer west.Close()
	for len(west.Table().Unheard()) > 0 || len(east.Table().Unheard()) > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "t1:g:user-" + strconv.Itoa(i)
	}
	start := time.Now().Truncate(time.Hour)
	ws, we := start.UnixMicro(), start.Add(time.Hour).UnixMicro()
	sent := east.SentBytes()
	cpu := cpuTime()
	b.ResetTimer()
	for i := range b.N {
		k := keys[i%len(keys)]
		east.Table().Spent(k, ws, 0, 0, 1_000_000, time.Now())
		east.Table().Admitted(k, ws, we, 1)
	}
	b.StopTimer()
	// The decisions published, then a fresh counter's way to the west.
	probe := "probe"
	east.Table().Admitted(probe, ws, we, 1)
	at := time.Now()
	for west.Table().Spent(probe, ws, 0, 0, 1_000_000, time.Now()) == 0 {
		time.Sleep(time.Millisecond)
	}
	seen := time.Since(at)
	b.ReportMetric(float64(east.SentBytes()-sent)/float64(b.N), "bytes/decision")
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/decision")
	b.ReportMetric(float64(seen.Microseconds())/1000, "ms-to-the-other-region")
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
