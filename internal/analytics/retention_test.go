package analytics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/kafkatest"
	"github.com/sluicehq/sluice/internal/pgtest"
)

// Analytics stopped for longer than the topic's retention: Kafka deleted
// events it had not rolled up, and moves the reader past them without a
// word. The consumer says how many are missing (a metric, an error in the
// log) and counts the rest exactly.
func TestEventsDeletedByRetentionAreCountedAsLost(t *testing.T) {
	t.Parallel()
	topic := kafkatest.Topic(t)
	broker := kafkatest.Start(t, 1, []string{topic})
	pool := pgtest.Pool(t)
	cfg := Config{Brokers: broker.Addrs(), Topic: topic, Group: "g-" + topic, Store: NewStore(pool, 0), BatchSize: 100, BatchWait: 20 * time.Millisecond}
	event := func() []byte { return delta("t", "r1", t0.Add(30*time.Second), 1, 0, 0, 0) }

	first, stop := startConsumer(t, cfg)
	produce(t, broker.Addrs(), topic, event(), event(), event(), event(), event()) // offsets 0–4
	waitFor(t, "the first five committed", func() bool { return committed(t, pool, cfg.Group) == 5 })
	stop()
	if n := testutil.ToFloat64(first.lost); n != 0 {
		t.Fatalf("%v lost before any deletion", n)
	}

	produce(t, broker.Addrs(), topic, event(), event(), event(), event(), event()) // offsets 5–9
	kafkatest.DeleteRecords(t, broker.Addrs(), topic, 0, 8)                        // retention takes 5–7
	second, _ := startConsumer(t, cfg)
	waitFor(t, "every offset committed", func() bool { return committed(t, pool, cfg.Group) == 10 })
	if n := testutil.ToFloat64(second.lost); n != 3 {
		t.Fatalf("%v events counted as lost, want the 3 deleted", n)
	}
	if got := minuteRow(t, pool, "t", "r1", t0).allowed; got != 7 {
		t.Fatalf("%d allowed rolled up, want 7 (5, then 2 of the last 5)", got)
	}
}
