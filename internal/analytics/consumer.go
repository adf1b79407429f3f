package analytics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/sluicehq/sluice/internal/prune"
)

// DefaultBatchSize is the most events a consumer commits at once. A
// consumer that keeps up commits what BatchWait gathers, fewer; one
// behind takes this many at a time, and the larger its batches, the
// fewer times a busy client's top-clients row is rewritten per event
// (most of a commit's work): BenchmarkConsume 78-87k events/s in batches
// of 10,000, 160k at 25,000, 164-238k at 50,000, 191-229k at 100,000.
// Reading one allocates about a kilobyte an event (BenchmarkIngest), most
// of it garbage at once.
const DefaultBatchSize = 50_000

// Config configures a Consumer.
type Config struct {
	Brokers []string
	Topic   string
	// Dialer connects to the brokers (TLS, SASL: internal/kafkasec); nil
	// is kafka-go's default, plaintext.
	Dialer *kafka.Dialer
	// Group is the consumer group; empty means "sluice-analytics".
	Group string
	Store *Store
	// BatchSize caps the events of one transaction; 0 means
	// DefaultBatchSize.
	BatchSize int
	// BatchWait is the longest a read event waits for its commit; 0 means 200ms.
	BatchWait time.Duration
	// Retention is how long minute rollups and top clients' hours are kept; 0
	// means 30 days.
	Retention time.Duration
	// HourRetention is how long hourly rollups and top clients' days are
	// kept, at least Retention; 0 means 400 days (reports.MaxRange).
	// Reports of what is older than Retention count whole hours, and whole
	// days of top clients.
	HourRetention time.Duration
	// PruneEvery is how often old rollups are pruned; 0 means 1 hour.
	PruneEvery time.Duration
	// Registerer receives the consumer's metrics; nil registers none.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	Now        func() time.Time
}

// Consumer reads the decision-events topic as a member of a consumer group
// and commits each batch's rollups with its partition offset in one
// PostgreSQL transaction; the offsets in PostgreSQL, not Kafka's, say where
// reading resumes.
type Consumer struct {
	cfg    Config
	ready  atomic.Bool
	events *prometheus.CounterVec
	batch  prometheus.Histogram
	lag    *prometheus.GaugeVec
	fenced prometheus.Counter
	lost   prometheus.Counter
	// maintained is when the hourly job (pruning, summing days) last
	// succeeded.
	maintained prometheus.Gauge

	mu sync.Mutex
	// behind holds, of each partition being read more than a batch behind
	// its end, the latest minute its last commit counted in.
	behind map[int]time.Time
}

// NewConsumer returns a Consumer; Run consumes.
func NewConsumer(cfg Config) *Consumer {
	if cfg.Group == "" {
		cfg.Group = "sluice-analytics"
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.BatchWait <= 0 {
		cfg.BatchWait = 200 * time.Millisecond
	}
	if cfg.Retention <= 0 {
		cfg.Retention = 30 * 24 * time.Hour
	}
	if cfg.HourRetention <= 0 {
		cfg.HourRetention = DefaultHourRetention
	}
	cfg.HourRetention = max(cfg.HourRetention, cfg.Retention)
	if cfg.PruneEvery <= 0 {
		cfg.PruneEvery = time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Consumer{
		cfg: cfg,
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_analytics_events_total",
			Help: "Events read, by result: ok (committed to the rollups), invalid, duplicate (resent by a decider, counted before)."}, []string{"result"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_analytics_batch_events",
			Help: "Events per committed batch.", Buckets: prometheus.ExponentialBuckets(1, 4, 9)}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_analytics_lag",
			Help: "Messages behind the end of each assigned partition."}, []string{"partition"}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_analytics_fenced_total",
			Help: "Batches discarded because another consumer had committed the partition."}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_analytics_lost_total",
			Help: "Events Kafka no longer held when analytics came to them (the topic's retention passed while they waited): missing from the rollups."}),
		maintained: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_analytics_maintained_timestamp_seconds",
			Help: "When the hourly job last pruned the rollups past their retention and summed the top clients of the days over (Unix time); 0 before it first did."}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(c.events, c.batch, c.lag, c.fenced, c.lost, c.maintained)
	}
	return c
}

// Ready reports whether the consumer has joined its group.
func (c *Consumer) Ready() bool { return c.ready.Load() }

// Run consumes until ctx ends. It rejoins the group after a rebalance or a
// broker outage, and prunes old rollups on the side.
func (c *Consumer) Run(ctx context.Context) error {
	go c.pruneLoop(ctx)
	group, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID: c.cfg.Group, Brokers: c.cfg.Brokers, Topics: []string{c.cfg.Topic}, Dialer: c.cfg.Dialer,
		HeartbeatInterval: time.Second, SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second,
		JoinGroupBackoff: 500 * time.Millisecond, WatchPartitionChanges: true, PartitionWatchInterval: 5 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("analytics: consumer group: %w", err)
	}
	defer group.Close()
	for {
		gen, err := group.Next(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			c.ready.Store(false)
			c.cfg.Logger.WarnContext(ctx, "analytics: joining the consumer group failed; retrying", "err", err)
			continue // Next backs off by itself (JoinGroupBackoff)
		}
		c.ready.Store(true)
		for _, a := range gen.Assignments[c.cfg.Topic] {
			gen.Start(func(gctx context.Context) { c.consumePartition(gctx, a.ID) })
		}
	}
}

// consumePartition reads one partition from its committed offset and
// commits batch after batch until the generation ends.
func (c *Consumer) consumePartition(ctx context.Context, partition int) {
	label := strconv.Itoa(partition)
	defer c.lag.DeleteLabelValues(label)
	defer c.progress(partition, 0, time.Time{})
	for ctx.Err() == nil {
		err := c.consumeFromStored(ctx, partition, label)
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, ErrFenced) {
			c.cfg.Logger.WarnContext(ctx, "analytics: partition consumer failed; resuming from the committed offset",
				"partition", partition, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// progress records where reading partition stands after a commit: lag
// messages behind its end, the latest minute counted newest. Past a
// batch behind, summable holds back the days it has yet to finish.
func (c *Consumer) progress(partition int, lag int64, newest time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if lag <= int64(c.cfg.BatchSize) || newest.IsZero() {
		delete(c.behind, partition)
		return
	}
	if c.behind == nil {
		c.behind = map[int]time.Time{}
	}
	c.behind[partition] = newest
}

// summable is the time before which the days over are summed (SumDays):
// an hour before now, when few of their events are still on their way,
// or before the latest minute counted of the partition furthest behind,
// so that a consumer catching up does not write the top clients of days
// summed already (which costs it twice: the hours' rows and the days').
func (c *Consumer) summable(now time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := now
	for _, newest := range c.behind {
		if newest.Before(t) {
			t = newest
		}
	}
	return t.Add(-time.Hour)
}

// consumeFromStored reads a partition from the offset stored in
// PostgreSQL, returning on the first error.
func (c *Consumer) consumeFromStored(ctx context.Context, partition int, label string) error {
	stored, err := c.cfg.Store.Offset(ctx, c.cfg.Group, c.cfg.Topic, partition)
	if err != nil {
		return err
	}
	marks, err := c.cfg.Store.Marks(ctx, c.cfg.Group, c.cfg.Topic, partition)
	if err != nil {
		return err
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: c.cfg.Brokers, Topic: c.cfg.Topic, Partition: partition, Dialer: c.cfg.Dialer,
		MinBytes: 1, MaxBytes: 8 << 20, MaxWait: c.cfg.BatchWait, ReadBackoffMin: 50 * time.Millisecond,
		ReadBackoffMax: time.Second})
	defer r.Close()
	start := kafka.FirstOffset
	if stored >= 0 {
		start = stored
	}
	if err := r.SetOffset(start); err != nil {
		return fmt.Errorf("analytics: seek: %w", err)
	}
	from := stored
	for {
		b, next, lost, err := c.readBatch(ctx, r, marks, from)
		if err != nil {
			return err
		}
		if lost > 0 {
			// Kafka moves a reader past what it deleted without a word.
			c.lost.Add(float64(lost))
			c.cfg.Logger.ErrorContext(ctx, "analytics: Kafka no longer holds events it had not rolled up (the topic's retention passed while they waited): they are missing from the rollups",
				"partition", partition, "events", lost, "from_offset", from)
		}
		if err := c.cfg.Store.Commit(ctx, c.cfg.Group, c.cfg.Topic, partition, from, next, b); err != nil {
			if errors.Is(err, ErrFenced) {
				c.fenced.Inc()
			}
			return err
		}
		from, marks = next, b.Marks()
		c.events.WithLabelValues("ok").Add(float64(b.Events))
		c.events.WithLabelValues("invalid").Add(float64(b.Invalid))
		c.events.WithLabelValues("duplicate").Add(float64(b.Duplicates))
		c.batch.Observe(float64(b.Events + b.Invalid + b.Duplicates))
		lag := r.Lag()
		c.lag.WithLabelValues(label).Set(float64(lag))
		c.progress(partition, lag, b.Newest())
	}
}

// readBatch reads until BatchSize events or BatchWait after the first,
// returning the batch (after marks), the offset after its last message and
// how many offsets from from (-1: not known) on it found no message at:
// deleted by the topic's retention before they were read. It blocks until
// at least one message arrives.
func (c *Consumer) readBatch(ctx context.Context, r *kafka.Reader, marks Marks, from int64) (b *Batch, next, lost int64, err error) {
	b = NewBatchAfter(marks)
	m, err := r.FetchMessage(ctx)
	if err != nil {
		return nil, 0, 0, err
	}
	if from >= 0 && m.Offset > from {
		lost = m.Offset - from
	}
	c.add(b, m)
	next = m.Offset + 1
	wctx, cancel := context.WithTimeout(ctx, c.cfg.BatchWait)
	defer cancel()
	for b.Events+b.Invalid+b.Duplicates < c.cfg.BatchSize {
		m, err := r.FetchMessage(wctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, 0, 0, ctx.Err()
			}
			break // the wait is over; commit what we have
		}
		lost += max(m.Offset-next, 0)
		c.add(b, m)
		next = m.Offset + 1
	}
	return b, next, lost, nil
}

func (c *Consumer) add(b *Batch, m kafka.Message) {
	if err := b.Add(m.Value); err != nil {
		c.cfg.Logger.Warn("analytics: skipping a malformed event", "partition", m.Partition, "offset", m.Offset, "err", err)
	}
}

func (c *Consumer) pruneLoop(ctx context.Context) {
	longer := c.cfg.HourRetention - c.cfg.Retention
	started := false
	job := func(ctx context.Context, before time.Time) (int64, error) {
		n, err := c.cfg.Store.Prune(ctx, before, before.Add(-longer))
		// Not at start: how far behind the partitions are is known once
		// they have committed (see summable).
		var days int
		var serr error
		if started {
			days, serr = c.cfg.Store.SumDays(ctx, c.summable(before.Add(c.cfg.Retention)))
		}
		started = true
		if days > 0 {
			c.cfg.Logger.InfoContext(ctx, "summed the top clients of the days over", "days", days)
		}
		if err == nil && serr == nil {
			c.maintained.Set(float64(c.cfg.Now().Unix()))
		}
		return n, errors.Join(err, serr)
	}
	prune.Loop(ctx, job, c.cfg.Retention, c.cfg.PruneEvery, c.cfg.Now, c.cfg.Logger, "old analytics rollups")
}
