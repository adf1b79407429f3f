package analytics

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
	"github.com/sluicehq/sluice/internal/testkit/logtest"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

// topicOfItsOwn is the Config of a consumer (group g-<topic>) of a topic of
// its own on a one-broker kfake, rolling up into pool.
func topicOfItsOwn(t *testing.T, pool *pgxpool.Pool) Config {
	topic := kafkatest.Topic(t)
	broker := kafkatest.Start(t, 1, []string{topic})
	return Config{Brokers: broker.Addrs(), Topic: topic, Group: "g-" + topic, Store: NewStore(pool, 0)}
}

// Analytics stopped for longer than the topic's retention: Kafka deleted
// events it had not rolled up, and moves the reader past them without a
// word. The consumer says how many are missing (a metric, an error in the
// log) and counts the rest exactly.
func TestEventsDeletedByRetentionAreCountedAsLost(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	cfg := topicOfItsOwn(t, pool)
	cfg.BatchSize, cfg.BatchWait = 100, 20*time.Millisecond
	topic, brokers := cfg.Topic, cfg.Brokers
	event := func() []byte { return delta("t", "r1", t0.Add(30*time.Second), 1, 0, 0, 0) }

	first, stop := startConsumer(t, cfg)
	produce(t, brokers, topic, event(), event(), event(), event(), event()) // offsets 0–4
	waitFor(t, "the first five committed", func() bool { return committed(t, pool, cfg.Group) == 5 })
	stop()
	if n := testutil.ToFloat64(first.lost); n != 0 {
		t.Fatalf("%v lost before any deletion", n)
	}

	produce(t, brokers, topic, event(), event(), event(), event(), event()) // offsets 5–9
	kafkatest.DeleteRecords(t, brokers, topic, 0, 8)                        // retention takes 5–7
	second, _ := startConsumer(t, cfg)
	waitFor(t, "every offset committed", func() bool { return committed(t, pool, cfg.Group) == 10 })
	if n := testutil.ToFloat64(second.lost); n != 3 {
		t.Fatalf("%v events counted as lost, want the 3 deleted", n)
	}
	if got := minuteRow(t, pool, "t", "r1", t0).allowed; got != 7 {
		t.Fatalf("%d allowed rolled up, want 7 (5, then 2 of the last 5)", got)
	}
}

// The consumer prunes minutes past Retention and hours past HourRetention:
// an hour outlives its minutes.
func TestConsumerKeepsHoursLongerThanMinutes(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	cfg := topicOfItsOwn(t, pool)
	cfg.Retention, cfg.HourRetention, cfg.Now = 24*time.Hour, 72*time.Hour, func() time.Time { return t0 }
	b := NewBatch()
	for _, at := range []time.Duration{-100 * time.Hour, -48 * time.Hour, 0} {
		_ = b.Add(delta("t", "r1", t0.Add(at+30*time.Second), 1, 0, 0, 0))
	}
	if err := cfg.Store.Commit(context.Background(), "other", cfg.Topic, 0, -1, 3, b); err != nil {
		t.Fatal(err)
	}
	_, stop := startConsumer(t, cfg)
	defer stop()
	waitFor(t, "the minutes past retention pruned", func() bool {
		return minuteRow(t, pool, "t", "r1", t0.Add(-48*time.Hour)).allowed == 0
	})
	waitFor(t, "the hours past their retention pruned", func() bool {
		return hourRow(t, pool, "t", "r1", t0.Add(-100*time.Hour)).allowed == 0
	})
	if got := hourRow(t, pool, "t", "r1", t0.Add(-48*time.Hour)).allowed; got != 1 {
		t.Errorf("the hour of 48 hours ago holds %d, want 1: kept for 72 hours", got)
	}
	if got := minuteRow(t, pool, "t", "r1", t0).allowed; got != 1 {
		t.Errorf("the current minute holds %d, want 1", got)
	}
}

// The consumer says when its hourly job last succeeded: at once after
// start, and never while the job fails (its database gone).
func TestConsumerSaysWhenItLastMaintainedTheRollups(t *testing.T) {
	t.Parallel()
	for _, healthy := range []bool{true, false} {
		pool := pgtest.Pool(t)
		var logs logtest.Buffer
		cfg := topicOfItsOwn(t, pool)
		cfg.Registerer, cfg.Now, cfg.Logger = prometheus.NewRegistry(), func() time.Time { return t0 }, slog.New(slog.NewTextHandler(&logs, nil))
		if !healthy {
			pool.Close()
		}
		c, stop := startConsumer(t, cfg)
		if healthy {
			waitFor(t, "the job to succeed", func() bool { return testutil.ToFloat64(c.maintained) == float64(t0.Unix()) })
		} else {
			waitFor(t, "the job to fail", func() bool { return strings.Contains(logs.String(), "pruning old analytics rollups failed") })
			if got := testutil.ToFloat64(c.maintained); got != 0 {
				t.Errorf("a failing job says it maintained the rollups at %v", got)
			}
		}
		stop()
	}
}

// A consumer reading a partition more than a batch behind its end sums
// the days only up to an hour before the latest minute it counted there,
// not an hour before now: it would write the rest of such a day's top
// clients twice over (the hours' rows and the day's).
func TestDaysAreSummedBehindAPartitionCatchingUp(t *testing.T) {
	c := NewConsumer(Config{BatchSize: 100})
	b := NewBatch()
	_ = b.Add(rejection("t", "r1", "alice", t0.Add(-30*time.Hour+90*time.Second), false))
	_ = b.Add(delta("t", "r1", t0.Add(-31*time.Hour), 1, 0, 0, 0))
	if got, want := b.Newest(), t0.Add(-30*time.Hour+time.Minute); !got.Equal(want) {
		t.Fatalf("the batch's newest minute %v, want %v", got, want)
	}
	if got := c.summable(t0); !got.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("nothing behind: summable %v, want an hour ago", got)
	}
	c.progress(0, 5000, b.Newest())           // far behind
	c.progress(1, 100, t0.Add(-50*time.Hour)) // within a batch of its end: caught up
	if got, want := c.summable(t0), t0.Add(-31*time.Hour+time.Minute); !got.Equal(want) {
		t.Fatalf("a partition behind: summable %v, want %v", got, want)
	}
	c.progress(0, 0, t0) // caught up
	if got := c.summable(t0); !got.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("caught up again: summable %v, want an hour ago", got)
	}
}

// The consumer sums the days over beside its pruning (not at start, but
// from its next run), up to the one that ended an hour ago.
func TestConsumerSumsTheDaysOver(t *testing.T) {
	t.Parallel()
	day := t0.Truncate(24 * time.Hour)
	pool := poolSummedUntil(t, day.Add(-2*24*time.Hour))
	cfg := topicOfItsOwn(t, pool)
	cfg.PruneEvery, cfg.Now = 10*time.Millisecond, func() time.Time { return t0 }
	_, stop := startConsumer(t, cfg)
	defer stop()
	var until time.Time
	waitFor(t, "the two days over summed", func() bool {
		if err := pool.QueryRow(context.Background(), `SELECT until FROM analytics_top_clients_days`).Scan(&until); err != nil {
			t.Fatal(err)
		}
		return !until.Before(day)
	})
	if !until.Equal(day) {
		t.Fatalf("summed until %v, want %v: the day of now is not over", until, day)
	}
}
