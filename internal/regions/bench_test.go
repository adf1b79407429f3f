package regions_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/regions"
	"github.com/sluicehq/sluice/internal/testkit/cputest"
	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
)

// BenchmarkReplication is what a global rule's replication adds to a
// decision, and how soon the other region sees it: east admits b.N
// decisions over 10,000 counters of one window; each also asks what west
// spent, as a decision does. Its metrics: bytes written to Kafka per
// decision; CPU per decision of the replicators and the in-process Kafka
// together (an upper bound of the decider's share); and the time from
// east's admission of a fresh counter to west's view of it, and from the
// return of a link cut for a second to west's view of what east admitted
// during the cut, per publishing interval and one-way latency between the
// regions.
func BenchmarkReplication(b *testing.B) {
	for _, interval := range []time.Duration{100 * time.Millisecond, regions.DefaultInterval, 400 * time.Millisecond} {
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
	p := startDelayProxy(b, ek.Addrs()[0], latency)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == ek.Addrs()[0] {
			addr = p.Addr()
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	east, err := regions.Start(regions.Config{Region: "east", Brokers: brokers, Interval: interval})
	if err != nil {
		b.Fatal(err)
	}
	defer east.Close()
	west, err := regions.Start(regions.Config{Region: "west", Brokers: brokers, Interval: interval, Dial: dial})
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
	cpu := cputest.ProcessCPU()
	b.ResetTimer()
	for i := range b.N {
		k := keys[i%len(keys)]
		east.Table().Spent(k, ws, 0, 0, 1_000_000, time.Now())
		east.Table().Admitted(k, ws, we, 1)
	}
	b.StopTimer()
	// The decisions published, then fresh counters' way to the west: the
	// mean of a few, as each falls somewhere in its publishing interval.
	const probes = 5
	var seen time.Duration
	probe := ""
	for i := range probes {
		time.Sleep(rand.N(interval)) // not in step with the publishing
		probe = "probe-" + strconv.Itoa(i)
		east.Table().Admitted(probe, ws, we, 1)
		at := time.Now()
		for west.Table().Spent(probe, ws, 0, 0, 1_000_000, time.Now()) == 0 {
			time.Sleep(time.Millisecond)
		}
		seen += time.Since(at) / probes
	}
	// A cut of a second, east admitting through it.
	p.Cut()
	east.Table().Admitted(probe, ws, we, 1)
	time.Sleep(time.Second)
	p.Restore()
	at := time.Now()
	for west.Table().Spent(probe, ws, 0, 0, 1_000_000, time.Now()) < 2 {
		time.Sleep(time.Millisecond)
	}
	again := time.Since(at)
	b.ReportMetric(float64(east.SentBytes()-sent)/float64(b.N), "bytes/decision")
	b.ReportMetric(float64((cputest.ProcessCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/decision")
	b.ReportMetric(float64(seen.Microseconds())/1000, "ms-to-the-other-region")
	b.ReportMetric(float64(again.Microseconds())/1000, "ms-to-converge-after-a-cut")
}
