package analytics

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
)

// benchEvents returns n encoded events like a busy system's: 50 tenants,
// 5 rules each, rejections from 10,000 clients of Zipf-distributed
// activity (a few clients cause most rejections), one event in 20 a
// counter delta, one in 10 a shadow rejection, times within one minute (a
// batch at 100k events/s spans a tenth of a second), from three deciders
// (producers), each numbering its own.
func benchEvents(n int) [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	clients := rand.NewZipf(rng, 1.1, 1, 9_999)
	out := make([][]byte, n)
	for i := range out {
		tenant := fmt.Sprint("tenant-", rng.IntN(50))
		rule := fmt.Sprint("rule-", rng.IntN(5))
		at := t0.Add(time.Duration(rng.IntN(60)) * time.Second)
		if i%20 == 0 {
			out[i] = delta(tenant, rule, at, 1000, 50, 5, 0)
		} else {
			out[i] = rejection(tenant, rule, fmt.Sprint("client-", clients.Uint64()), at, i%10 == 1)
		}
		out[i] = stamped(out[i], fmt.Sprint("decider-", i%3), uint64(i/3+1))
	}
	return out
}

// BenchmarkIngest measures decoding, rolling up and committing events to
// PostgreSQL in batches of DefaultBatchSize, offsets
// included: the analytics ingest rate without Kafka. The events are of
// the current day (today) or, late, of a day whose top clients were
// summed (summed-day: every top client is written to its day's sums too).
func BenchmarkIngest(b *testing.B) {
	for _, late := range []bool{false, true} {
		name := "today"
		if late {
			name = "summed-day"
		}
		b.Run(name, func(b *testing.B) {
			const batch = DefaultBatchSize
			pool := poolFor(b)
			sumDaysUntil(b, pool, late)
			s := NewStore(pool, 0)
			evs := benchEvents(batch)
			ctx := context.Background()
			from := int64(-1)
			b.ResetTimer()
			start := time.Now()
			for done := 0; done < b.N; done += batch {
				bt := NewBatch()
				for _, v := range evs[:min(batch, b.N-done)] {
					if err := bt.Add(v); err != nil {
						b.Fatal(err)
					}
				}
				next := max(from, 0) + int64(bt.Events)
				if err := s.Commit(ctx, "bench", "events", 0, from, next, bt); err != nil {
					b.Fatal(err)
				}
				from = next
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		})
	}
}

// sumDaysUntil marks the top clients' days summed until the end of the
// day of the benchmarks' events (summed true) or its start.
func sumDaysUntil(b *testing.B, pool *pgxpool.Pool, summed bool) {
	until := t0.Truncate(24 * time.Hour)
	if summed {
		until = until.Add(24 * time.Hour)
	}
	summedUntil(b, pool, until)
}

// BenchmarkConsume measures the whole consumer: events read from a kfake
// topic of 1 and of 3 partitions, rolled up and committed: what one
// consumer takes, and whether its partitions' number moves it.
func BenchmarkConsume(b *testing.B) {
	for _, partitions := range []int32{1, 3} {
		b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) { benchConsume(b, partitions) })
	}
}

func benchConsume(b *testing.B, partitions int32) {
	topic := kafkatestTopic(b)
	brokers := kafkatest.Start(b, partitions, []string{topic}).Addrs()
	pool := poolFor(b)
	sumDaysUntil(b, pool, false)
	// Every event its own: the same events again would be resends, which
	// the consumer skips (their deciders' sequence numbers were counted).
	evs := benchEvents(b.N)
	for done := 0; done < b.N; done += 20_000 {
		produceB(b, brokers, topic, evs[done:min(done+20_000, b.N)])
	}
	b.ResetTimer()
	start := time.Now()
	c := NewConsumer(Config{Brokers: brokers, Topic: topic, Group: "bench", Store: NewStore(pool, 0),
		Now: func() time.Time { return t0 }}) // the events are of the current day
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT coalesce(sum(next_offset), 0) FROM analytics_offsets`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		if n >= int64(b.N) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("consumed %d of %d", n, b.N)
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	<-done
	if ok := testutil.ToFloat64(c.events.WithLabelValues("ok")); ok != float64(b.N) {
		b.Fatalf("%.0f of %d events rolled up", ok, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
}

// BenchmarkPrune times the hourly pruning job on 30 days of a busy
// tenant's minute rollups (15 tiers × rules every minute, 648,000 rows):
// each op deletes the next hour past the retention, as the job does each
// hour.
func BenchmarkPrune(b *testing.B) {
	pool := poolFor(b)
	ctx := context.Background()
	start := t0.Add(-30 * 24 * time.Hour)
	for _, q := range []string{
		// Seeded without the trigger that sums minutes into hours: seconds,
		// not a minute.
		`ALTER TABLE analytics_minute DISABLE TRIGGER analytics_minute_to_hour`,
		`INSERT INTO analytics_minute (tenant_id, minute, tier, rule_id, allowed)
		SELECT 't', m, 'tier-' || r % 3, 'rule-' || r, 1
		FROM generate_series($1::timestamptz, $2::timestamptz, interval '1 minute') m, generate_series(1, 15) r`,
		`ALTER TABLE analytics_minute ENABLE TRIGGER analytics_minute_to_hour`,
		`VACUUM ANALYZE analytics_minute`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = []any{start, t0}
		}
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			b.Fatal(err)
		}
	}
	s := NewStore(pool, 0)
	before := start
	var rows int64
	for b.Loop() {
		before = before.Add(time.Hour) // past the seeded month: nothing left to delete
		n, err := s.Prune(ctx, before, before)
		if err != nil {
			b.Fatal(err)
		}
		rows += n
	}
	b.ReportMetric(float64(rows)/float64(b.N), "rows/op")
}
