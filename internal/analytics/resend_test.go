package analytics

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/events"
	"github.com/sluicehq/sluice/internal/events/eventstest"
	"github.com/sluicehq/sluice/internal/kafkatest"
	"github.com/sluicehq/sluice/internal/pgtest"
)

// A write Kafka takes but answers only after the publisher gave up on it
// is sent again: the topic holds those events twice, and analytics counts
// them once.
func TestEventsResentAfterATimedOutWriteCountOnce(t *testing.T) {
	t.Parallel()
	topic := kafkatest.Topic(t)
	broker := kafkatest.Start(t, 3, []string{topic})
	pool := pgtest.Pool(t)

	// The first produce request sleeps in the broker until the publisher
	// has counted its write as failed, then the broker appends it.
	release := make(chan struct{})
	var held atomic.Bool
	broker.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if held.CompareAndSwap(false, true) {
			broker.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	p := events.NewPublisher(events.Config{Brokers: broker.Addrs(), Topic: topic, Decider: "d1",
		FlushInterval: 10 * time.Millisecond, DeltaInterval: 50 * time.Millisecond, WriteTimeout: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	for range 5 {
		p.Rejected("t1", "free", "r1", "alice", 1, t0, false)
	}
	for range 7 {
		p.Count("t1", "free", "r1", true, false)
	}
	waitFor(t, "the held write to time out", func() bool { return p.Stats().WriteErrors > 0 })
	close(release)
	waitFor(t, "every event sent", func() bool { st := p.Stats(); return st.Sent >= 6 && st.Queued == 0 })
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}

	var total int64
	for _, n := range kafkatest.EndOffsets(t, broker.Addrs(), topic, 3) {
		total += n
	}
	ta := eventstest.Read(t, broker.Addrs(), topic, func(ta *eventstest.Tally) bool { return ta.Messages == total })
	if ta.Duplicates == 0 {
		t.Fatalf("the topic holds no event twice (%d messages): the held write was not resent", total)
	}
	if len(ta.Rejections) != 5 || ta.Allowed != 7 {
		t.Fatalf("distinct events: %d rejections, %d allowed; want 5 and 7", len(ta.Rejections), ta.Allowed)
	}

	cfg := Config{Brokers: broker.Addrs(), Topic: topic, Group: "g-" + topic, Store: NewStore(pool, 0), BatchWait: 20 * time.Millisecond}
	stop := runConsumer(t, cfg)
	waitFor(t, "every offset committed", func() bool { return committed(t, pool, cfg.Group) == total })
	stop()
	var got minuteCounts
	for _, m := range []time.Time{t0, time.Now().Truncate(time.Minute), time.Now().Truncate(time.Minute).Add(-time.Minute)} {
		c := minuteRow(t, pool, "t1", "r1", m)
		got.allowed += c.allowed
		got.rejectionEvents += c.rejectionEvents
	}
	if got.allowed != 7 || got.rejectionEvents != 5 {
		t.Fatalf("rolled up %d allowed and %d rejection events, want 7 and 5 (%d messages, %d of them resent)",
			got.allowed, got.rejectionEvents, total, ta.Duplicates)
	}
}
