package analytics

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/events"
	"github.com/sluicehq/sluice/internal/events/eventstest"
	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
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
	p, stop := runPublisher(t, events.Config{Brokers: broker.Addrs(), Topic: topic, Decider: "d1",
		FlushInterval: 10 * time.Millisecond, DeltaInterval: 50 * time.Millisecond, WriteTimeout: time.Second})
	for range 5 {
		p.Rejected("t1", "free", "r1", "alice", 1, t0, false)
	}
	for range 7 {
		p.Count("t1", "free", "r1", true, false)
	}
	waitFor(t, "the held write to time out", func() bool { return p.Stats().WriteErrors > 0 })
	close(release)
	waitFor(t, "every event sent", func() bool { st := p.Stats(); return st.Sent >= 6 && st.Queued == 0 })
	stop()

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
	stop = runConsumer(t, cfg)
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

// A write Kafka takes but answers too late is sent again where it went
// the first time, even after the topic gained partitions that its
// tenant's key now hashes to: the resent events meet analytics' marks of
// their first partition, and count once. Here the resend comes from the
// spool of the decider's next run, whose writer sees the new partitions
// from its start.
func TestEventsResentAfterPartitionsWereAddedCountOnce(t *testing.T) {
	t.Parallel()
	topic := kafkatest.Topic(t)
	broker := kafkatest.Start(t, 1, []string{topic})
	pool := pgtest.Pool(t)
	tenant := "t1"
	for i := 2; (&kafka.Hash{}).Balance(kafka.Message{Key: []byte(tenant)}, 0, 1, 2, 3) == 0; i++ {
		tenant = fmt.Sprint("t", i) // one whose events go elsewhere than partition 0 of 4
	}

	// The first produce request sleeps in the broker until the publisher
	// has counted its write as failed, then the broker appends it; the
	// next are refused until the topic has grown.
	release := make(chan struct{})
	var held, open atomic.Bool
	broker.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		broker.KeepControl()
		if held.CompareAndSwap(false, true) {
			broker.SleepControl(func() { <-release })
			return nil, nil, false
		}
		if !open.Load() {
			return kafkatest.Refused(kr), nil, true
		}
		return nil, nil, false
	})
	dir := t.TempDir()
	cfg := events.Config{Brokers: broker.Addrs(), Topic: topic, Decider: "d1", FlushInterval: 10 * time.Millisecond,
		DeltaInterval: time.Hour, WriteTimeout: 500 * time.Millisecond, RetryPause: 20 * time.Millisecond}
	cfg.Spool = eventstest.Spool(t, dir)
	p, stop := runPublisher(t, cfg)
	for range 5 {
		p.Rejected(tenant, "free", "r1", "alice", 1, t0, false)
	}
	waitFor(t, "the held write to time out", func() bool { return p.Stats().WriteErrors > 0 })
	close(release)
	// (Its events: the five, unless a flush came between them.)
	waitFor(t, "the held write appended", func() bool { return kafkatest.EndOffsets(t, broker.Addrs(), topic, 1)[0] > 0 })
	first := kafkatest.EndOffsets(t, broker.Addrs(), topic, 1)[0]
	stop()

	kafkatest.AddPartitions(t, broker.Addrs(), topic, 4)
	open.Store(true)
	cfg.Spool = eventstest.Spool(t, dir)
	cfg.Transport = &kafka.Transport{} // not kafka-go's default, whose cache of the topic's partitions outlives a writer
	if n := cfg.Spool.Stats().Records; n != 5 {
		t.Fatalf("the spool holds %d events, want the 5 of the write that timed out", n)
	}
	p, stop = runPublisher(t, cfg)
	waitFor(t, "the spool sent", func() bool { return p.Stats().Spooled == 0 })
	stop()
	// The held write's events go again to partition 0, where they first
	// went; events a flush put in a later write, which the broker refused,
	// were never appended and go where the tenant hashes now.
	ends := kafkatest.EndOffsets(t, broker.Addrs(), topic, 4)
	var total int64
	for _, n := range ends {
		total += n
	}
	if ends[0] != 2*first || total != first+5 {
		t.Fatalf("the partitions' end offsets %v, want %d in partition 0 (the %d of the held write, and again) and %d in all",
			ends, 2*first, first, first+5)
	}

	acfg := Config{Brokers: broker.Addrs(), Topic: topic, Group: "g-" + topic, Store: NewStore(pool, 0), BatchWait: 20 * time.Millisecond}
	stopConsumer := runConsumer(t, acfg)
	waitFor(t, "every offset committed", func() bool { return committed(t, pool, acfg.Group) == first+5 })
	stopConsumer()
	if got := minuteRow(t, pool, tenant, "r1", t0).rejectionEvents; got != 5 {
		t.Fatalf("rolled up %d rejection events, want 5", got)
	}
}

// runPublisher runs a publisher on cfg until stop, which waits for its
// last attempt.
func runPublisher(t *testing.T, cfg events.Config) (p *events.Publisher, stop func()) {
	t.Helper()
	p = events.NewPublisher(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return p, func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
}
