// Package events publishes deciders' decision events to Kafka: a rejection
// event per rejected (or shadow would-reject) rule, and periodic per-rule
// counter deltas. Publishing never blocks or slows a decision.
package events

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
)

// Config configures a Publisher.
type Config struct {
	Brokers []string
	Topic   string
	// Transport connects to the brokers (TLS, SASL: internal/kafkasec);
	// nil is kafka-go's default, plaintext.
	Transport kafka.RoundTripper
	// Decider names this decider in its events.
	Decider string
	// Buffer is how many rejection events wait for Kafka (slow or down)
	// before new ones are dropped, counted and reported; 0 means 65,536.
	Buffer int
	// BatchSize caps one write; 0 means 1,000.
	BatchSize int
	// FlushInterval is the longest an event waits for its batch; 0 means 100ms.
	FlushInterval time.Duration
	// DeltaInterval is how often counter deltas are sent; 0 means 10s.
	DeltaInterval time.Duration
	// WriteTimeout bounds one write to Kafka; 0 means 5s.
	WriteTimeout time.Duration
	Logger       *slog.Logger
	Now          func() time.Time
}

// Publisher sends decision events. Rejected and Count are safe for
// concurrent use, never block and do not allocate; Run does the sending.
type Publisher struct {
	cfg     Config
	w       *kafka.Writer
	queue   chan rejection
	mu      sync.RWMutex
	rules   map[ruleKey]*counts
	dropped map[string]*atomic.Int64 // per tenant, since the last delta
	since   time.Time

	totalDropped atomic.Int64
	sent         atomic.Int64
	failed       atomic.Int64
	failing      int // consecutive failed writes; Run's own
}

type rejection struct {
	tenant, tier, rule, client string
	cost, at                   int64 // at: µs
	shadow                     bool
}

type ruleKey struct{ tenant, tier, rule string }

type counts struct{ allowed, rejected, shadow atomic.Int64 }

// NewPublisher returns a Publisher; Run sends.
func NewPublisher(cfg Config) *Publisher {
	if cfg.Buffer <= 0 {
		cfg.Buffer = 1 << 16
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1000
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = 100 * time.Millisecond
	}
	if cfg.DeltaInterval <= 0 {
		cfg.DeltaInterval = 10 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Publisher{
		cfg: cfg,
		w: &kafka.Writer{Addr: kafka.TCP(cfg.Brokers...), Topic: cfg.Topic, Balancer: &kafka.Hash{}, Transport: cfg.Transport,
			BatchSize: cfg.BatchSize, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll,
			MaxAttempts: 2, WriteBackoffMin: 10 * time.Millisecond, WriteBackoffMax: 100 * time.Millisecond},
		queue:   make(chan rejection, cfg.Buffer),
		rules:   map[ruleKey]*counts{},
		dropped: map[string]*atomic.Int64{},
		since:   cfg.Now(),
	}
}

// Rejected records a rejection (or, with shadow, a would-reject) of rule
// for the client key at time at. When the buffer is full the event is
// dropped and counted.
func (p *Publisher) Rejected(tenant, tier, rule, client string, cost int64, at time.Time, shadow bool) {
	select {
	case p.queue <- rejection{tenant, tier, rule, client, cost, at.UnixMicro(), shadow}:
	default:
		p.totalDropped.Add(1)
		p.tenantDropped(tenant).Add(1)
	}
}

// Count records one decision of rule: allowed, rejected, or a shadow rule's
// would-reject.
func (p *Publisher) Count(tenant, tier, rule string, allowed, shadow bool) {
	c := p.counts(ruleKey{tenant, tier, rule})
	switch {
	case shadow && !allowed:
		c.shadow.Add(1)
	case allowed:
		c.allowed.Add(1)
	default:
		c.rejected.Add(1)
	}
}

func (p *Publisher) counts(k ruleKey) *counts { return getOrCreate(&p.mu, p.rules, k) }

func (p *Publisher) tenantDropped(tenant string) *atomic.Int64 {
	return getOrCreate(&p.mu, p.dropped, tenant)
}

// getOrCreate returns m[k], creating it under mu's write lock the first
// time; later calls take only the read lock.
func getOrCreate[K comparable, V any](mu *sync.RWMutex, m map[K]*V, k K) *V {
	mu.RLock()
	v := m[k]
	mu.RUnlock()
	if v != nil {
		return v
	}
	mu.Lock()
	defer mu.Unlock()
	if v = m[k]; v == nil {
		v = new(V)
		m[k] = v
	}
	return v
}

// Stats are the publisher's totals since it started, and what waits now.
type Stats struct {
	// Sent counts the messages Kafka took: rejection events and deltas.
	Sent int64
	// Dropped counts the rejection events dropped at the buffer's bound.
	Dropped int64
	// WriteErrors counts the writes to Kafka that failed (and were retried).
	WriteErrors int64
	// Queued is how many rejection events wait in the buffer for Run.
	Queued int
}

// Stats returns the totals, for metrics.
func (p *Publisher) Stats() Stats {
	return Stats{Sent: p.sent.Load(), Dropped: p.totalDropped.Load(), WriteErrors: p.failed.Load(), Queued: len(p.queue)}
}

// Run sends events until ctx ends, then makes a last attempt with what it
// holds. While Kafka cannot be reached, it keeps its batch and retries;
// decisions go on, and what overflows the buffer is dropped and reported.
func (p *Publisher) Run(ctx context.Context) error {
	flush := time.NewTicker(p.cfg.FlushInterval)
	defer flush.Stop()
	delta := time.NewTicker(p.cfg.DeltaInterval)
	defer delta.Stop()
	var batch []kafka.Message
	for {
		select {
		case r := <-p.queue:
			batch = append(batch, p.rejectionMessage(r))
			if len(batch) >= p.cfg.BatchSize {
				batch = p.write(ctx, batch)
			}
		case <-flush.C:
			batch = p.write(ctx, batch)
		case <-delta.C:
			batch = p.write(ctx, append(batch, p.deltas()...))
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.Background(), p.cfg.WriteTimeout)
			defer cancel()
			p.write(last, append(batch, p.deltas()...))
			return p.w.Close()
		}
	}
}

// write sends batch and returns what is left to send: nothing on success,
// else the batch, trimmed to the buffer size (oldest rejections dropped and
// counted; deltas are kept: they carry the counts).
func (p *Publisher) write(ctx context.Context, batch []kafka.Message) []kafka.Message {
	if len(batch) == 0 {
		return batch
	}
	wctx, cancel := context.WithTimeout(ctx, p.cfg.WriteTimeout)
	defer cancel()
	if err := p.w.WriteMessages(wctx, batch...); err != nil {
		p.failed.Add(1)
		if p.failing++; p.failing == 1 { // once per outage, not once per flush interval
			p.cfg.Logger.WarnContext(ctx, "events: Kafka write failed; keeping the batch and retrying", "err", err, "events", len(batch))
		}
		for len(batch) > p.cfg.Buffer && batch[0].Headers == nil { // rejections have no headers
			p.totalDropped.Add(1)
			p.tenantDropped(string(batch[0].Key)).Add(1)
			batch = batch[1:]
		}
		return batch
	}
	if p.failing > 0 {
		p.cfg.Logger.InfoContext(ctx, "events: Kafka writes resumed", "failed_writes", p.failing, "dropped_total", p.totalDropped.Load())
		p.failing = 0
	}
	p.sent.Add(int64(len(batch)))
	return batch[:0]
}

var deltaHeader = []kafka.Header{{Key: "type", Value: []byte("delta")}}

func (p *Publisher) rejectionMessage(r rejection) kafka.Message {
	ev := &sluicev1.Event{Kind: &sluicev1.Event_Rejection{Rejection: &sluicev1.Rejection{
		TenantId: r.tenant, Tier: r.tier, RuleId: r.rule, ClientKey: r.client, Cost: r.cost,
		At: timestamppb.New(time.UnixMicro(r.at)), Decider: p.cfg.Decider, Shadow: r.shadow}}}
	b, _ := proto.Marshal(ev) // marshalling a well-formed message cannot fail
	return kafka.Message{Key: []byte(r.tenant), Value: b}
}

// deltas takes the counts since the last deltas, one message per rule
// with any, plus one per tenant that dropped rejections.
func (p *Publisher) deltas() []kafka.Message {
	now := p.cfg.Now()
	from, to := timestamppb.New(p.since), timestamppb.New(now)
	p.since = now
	var out []kafka.Message
	add := func(tenant string, d *sluicev1.CounterDelta) {
		d.TenantId, d.From, d.To, d.Decider = tenant, from, to, p.cfg.Decider
		b, _ := proto.Marshal(&sluicev1.Event{Kind: &sluicev1.Event_Delta{Delta: d}})
		out = append(out, kafka.Message{Key: []byte(tenant), Value: b, Headers: deltaHeader})
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	for k, c := range p.rules {
		a, r, s := c.allowed.Swap(0), c.rejected.Swap(0), c.shadow.Swap(0)
		if a+r+s > 0 {
			add(k.tenant, &sluicev1.CounterDelta{Tier: k.tier, RuleId: k.rule, Allowed: a, Rejected: r, ShadowRejected: s})
		}
	}
	for tenant, d := range p.dropped {
		if n := d.Swap(0); n > 0 {
			add(tenant, &sluicev1.CounterDelta{DroppedRejections: n})
		}
	}
	return out
}
