// Package events publishes deciders' decision events to Kafka: a rejection
// event per rejected (or shadow would-reject) rule, and periodic per-rule
// counter deltas. Publishing never blocks or slows a decision.
package events

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/spool"
)

// Config configures a Publisher.
type Config struct {
	Brokers []string
	Topic   string
	// Transport connects to the brokers (TLS, SASL: internal/kafkasec);
	// nil is kafka-go's default, plaintext.
	Transport kafka.RoundTripper
	// Decider names this decider in its events, Region its region.
	Decider, Region string
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
	// RetryPause is how long the spool waits after a write that Kafka did
	// not wholly take before it is sent again; 0 means 1s.
	RetryPause time.Duration
	// CheckpointInterval is how often, with a Spool, the counts held in
	// memory are written beside it, for the next run to send should this
	// one be killed outright (see checkpoint.go); 0 means 1s.
	CheckpointInterval time.Duration
	// Spool, when set, keeps on disk what Kafka did not take (a failed
	// write, or the last flush at shutdown) instead of holding it in memory
	// up to Buffer: an outage longer than the buffer, or a restart within
	// one, then loses nothing until the spool's own bound. What an earlier
	// process left there is sent first. The Publisher owns it from then on
	// and closes it when Run ends.
	Spool  *spool.Spool
	Logger *slog.Logger
	Now    func() time.Time
}

// Publisher sends decision events. Rejected and Count are safe for
// concurrent use, never block and do not allocate; Run does the sending.
type Publisher struct {
	cfg   Config
	w     *kafka.Writer
	queue chan rejection
	mu    sync.RWMutex
	rules map[ruleKey]*counts
	// retired are the counts of rules that went a delta interval without
	// one, taken out of rules so that rules holds only the rules in use —
	// not every rule ID a decider ever saw (tenants' rules deleted since,
	// and the request limits callers vary, which name a rule each): a
	// Count that found one just before may still add to it, so the next
	// deltas takes what it holds once more before it goes.
	retired map[ruleKey]*counts      // Run's own (deltas, checkpoint)
	dropped map[string]*atomic.Int64 // per tenant, since the last delta
	since   time.Time

	totalDropped atomic.Int64
	sent         atomic.Int64
	failed       atomic.Int64
	spoolDropped atomic.Int64
	producer     string    // this run's id in its events
	seq          uint64    // the last event's number; Run's own
	failing      int       // consecutive failed writes; Run's own
	nextDrain    time.Time // Run's own: no attempt to send the spool before
	spoolFull    bool      // Run's own: the spool refused an append; logged once
	// Run's own: a checkpoint with something in it is on disk; the last
	// write of one failed (logged once).
	checkpointed, checkpointFailed bool
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
	if cfg.RetryPause <= 0 {
		cfg.RetryPause = time.Second
	}
	if cfg.CheckpointInterval <= 0 {
		cfg.CheckpointInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Publisher{
		cfg: cfg,
		w: &kafka.Writer{Addr: kafka.TCP(cfg.Brokers...), Topic: cfg.Topic, Balancer: &pinning{}, Transport: cfg.Transport,
			BatchSize: cfg.BatchSize, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll,
			MaxAttempts: 2, WriteBackoffMin: 10 * time.Millisecond, WriteBackoffMax: 100 * time.Millisecond},
		queue:    make(chan rejection, cfg.Buffer),
		rules:    map[ruleKey]*counts{},
		retired:  map[ruleKey]*counts{},
		dropped:  map[string]*atomic.Int64{},
		since:    cfg.Now(),
		producer: newProducerID(),
	}
}

// newProducerID returns a random id for one run of a publisher: 64 bits,
// so that no two runs of any deciders share one.
func newProducerID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// stamp marshals ev as this publisher's next event.
func (p *Publisher) stamp(ev *sluicev1.Event) []byte {
	p.seq++
	ev.Producer, ev.Seq = p.producer, p.seq
	b, _ := proto.Marshal(ev) // marshalling a well-formed message cannot fail
	return b
}

// OpenSpool opens the spool in dir for Config.Spool, bounded to maxBytes.
// A directory another process holds leaves the publisher without a spool,
// with a warning, rather than the decider without a start.
func OpenSpool(ctx context.Context, logger *slog.Logger, dir string, maxBytes int64) (*spool.Spool, error) {
	sp, err := spool.Open(dir, maxBytes)
	if errors.Is(err, spool.ErrLocked) {
		logger.WarnContext(ctx, "events: the spool is held by another process; running without one", "dir", dir)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	if st := sp.Stats(); st.Records > 0 {
		logger.InfoContext(ctx, "events: sending what an earlier run spooled", "events", st.Records, "dir", dir)
	}
	return sp, nil
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
	// Spooled and SpoolBytes are what waits on disk for Kafka (Config.Spool).
	Spooled, SpoolBytes int64
	// SpoolCorrupt counts spooled messages that could not be read back
	// (damaged on disk) and were skipped.
	SpoolCorrupt int64
}

// Stats returns the totals, for metrics.
func (p *Publisher) Stats() Stats {
	st := Stats{Sent: p.sent.Load(), Dropped: p.totalDropped.Load(), WriteErrors: p.failed.Load(), Queued: len(p.queue),
		SpoolCorrupt: p.spoolDropped.Load()}
	if p.cfg.Spool != nil {
		sp := p.cfg.Spool.Stats()
		st.Spooled, st.SpoolBytes = sp.Records, sp.Bytes
	}
	return st
}

// Run sends events until ctx ends, then makes a last attempt with what it
// holds. While Kafka cannot be reached, it keeps its batch (in the spool
// when there is one) and retries; decisions go on, and what overflows the
// buffer is dropped and reported.
func (p *Publisher) Run(ctx context.Context) error {
	flush := time.NewTicker(p.cfg.FlushInterval)
	defer flush.Stop()
	delta := time.NewTicker(p.cfg.DeltaInterval)
	defer delta.Stop()
	ckpt := time.NewTicker(p.cfg.CheckpointInterval)
	defer ckpt.Stop()
	batch := p.recoverCheckpoint() // an earlier run's counts, first
	p.checkpoint(batch)
	for {
		select {
		case r := <-p.queue:
			batch = append(batch, p.rejectionMessage(r))
			if len(batch) >= p.cfg.BatchSize {
				batch = p.send(ctx, batch)
			}
		case <-flush.C:
			batch = p.send(ctx, batch)
		case <-ckpt.C:
			p.checkpoint(batch)
		case <-delta.C:
			batch = append(batch, p.deltas()...)
			p.checkpoint(batch) // the deltas taken are on disk before they are sent
			batch = p.send(ctx, batch)
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.Background(), p.cfg.WriteTimeout)
			defer cancel()
			p.nextDrain = time.Time{}
			// What Rejected queued before the end goes too: select
			// picks among ready cases at random, so ctx.Done can win
			// over a queue that still holds events.
			for n := len(p.queue); n > 0; n-- {
				batch = append(batch, p.rejectionMessage(<-p.queue))
			}
			batch = append(batch, p.deltas()...)
			p.checkpoint(batch)
			p.checkpoint(p.send(last, batch)) // what is left: none, unless the spool refused it
			err := p.w.Close()
			if p.cfg.Spool != nil {
				err = errors.Join(err, p.cfg.Spool.Close())
			}
			return err
		}
	}
}

// spoolDrainSegments bounds the segments one send takes from the spool, so
// that Run goes back to the buffer between them.
const spoolDrainSegments = 4

// send writes batch and returns what is left to hold in memory. While the
// spool holds messages, it sends those first (so that what Kafka gets
// stays in order) and appends batch to the spool until it is empty; after
// a failed attempt it waits RetryPause before the next.
func (p *Publisher) send(ctx context.Context, batch []kafka.Message) []kafka.Message {
	sp := p.cfg.Spool
	if sp != nil && sp.Stats().Records > 0 && !p.drain(ctx) {
		return p.spill(ctx, batch)
	}
	rest := p.write(ctx, batch)
	if sp != nil && len(rest) > 0 {
		p.nextDrain = time.Now().Add(p.cfg.RetryPause)
		return p.spill(ctx, rest)
	}
	return p.trim(rest)
}

// drain sends up to spoolDrainSegments segments of the spool, and reports
// whether it is empty.
func (p *Publisher) drain(ctx context.Context) bool {
	if time.Now().Before(p.nextDrain) {
		return false
	}
	sp := p.cfg.Spool
	for range spoolDrainSegments {
		seq, records, ok, err := sp.Oldest()
		if err != nil {
			p.cfg.Logger.ErrorContext(ctx, "events: reading the spool", "err", err)
			p.nextDrain = time.Now().Add(p.cfg.RetryPause)
			return false
		}
		if !ok {
			return true
		}
		msgs := make([]kafka.Message, 0, len(records))
		corrupt := int64(0)
		for _, r := range records {
			m, ok := messageFromSpool(r)
			if !ok {
				corrupt++
				continue
			}
			msgs = append(msgs, m)
		}
		// What Kafka did not take stays at the spool's front, in order
		// (write returns it so), to go first again after a pause: nothing
		// reaches a partition after what follows it.
		rest := p.write(ctx, msgs)
		if len(rest) == len(msgs) && len(msgs) > 0 {
			p.nextDrain = time.Now().Add(p.cfg.RetryPause)
			return false
		}
		if err := sp.Replace(seq, spoolRecords(rest)); err != nil {
			// The segment stays whole: what Kafka took comes again, and
			// analytics skips it by its (producer, seq).
			p.cfg.Logger.ErrorContext(ctx, "events: rewriting a sent spool segment", "err", err)
			p.nextDrain = time.Now().Add(p.cfg.RetryPause)
			return false
		}
		p.spoolDropped.Add(corrupt)
		if len(rest) > 0 {
			p.nextDrain = time.Now().Add(p.cfg.RetryPause)
			return false
		}
	}
	return sp.Stats().Records == 0
}

// spill appends batch to the spool and returns what is left to hold in
// memory: nothing, unless the spool refuses it (full, or a disk error).
func (p *Publisher) spill(ctx context.Context, batch []kafka.Message) []kafka.Message {
	if len(batch) == 0 {
		return batch
	}
	if err := p.cfg.Spool.Append(spoolRecords(batch)); err != nil {
		if !p.spoolFull {
			p.spoolFull = true
			p.cfg.Logger.WarnContext(ctx, "events: the spool refused events; holding them in memory up to the buffer", "err", err)
		}
		return p.trim(batch)
	}
	p.spoolFull = false
	return batch[:0]
}

// trim drops the oldest rejections of batch past the buffer size, counted
// per tenant; deltas are kept: they carry the counts.
func (p *Publisher) trim(batch []kafka.Message) []kafka.Message {
	for len(batch) > p.cfg.Buffer && batch[0].Headers == nil { // rejections have no headers
		p.countDropped(batch[:1])
		batch = batch[1:]
	}
	return batch
}

func (p *Publisher) countDropped(msgs []kafka.Message) {
	for _, m := range msgs {
		if m.Headers == nil {
			p.totalDropped.Add(1)
			p.tenantDropped(string(m.Key)).Add(1)
		}
	}
}

// chunkBytes bounds one WriteMessages call's bytes well under kafka-go's
// batch bound (1 MiB), so that with at most BatchSize messages each
// partition's share of a call goes out as one produce request: no call
// delivers a partition's later messages and fails its earlier ones.
const chunkBytes = 512 << 10

// write sends batch, in order, in chunks of at most BatchSize messages and
// chunkBytes, and returns what Kafka did not take: nothing on success, else
// from the first chunk that failed, the messages it failed (all of them, or
// those a partial write names) and every later one, in order.
func (p *Publisher) write(ctx context.Context, batch []kafka.Message) []kafka.Message {
	for start := 0; start < len(batch); {
		end, size := start, 0
		for end < len(batch) && end-start < p.cfg.BatchSize {
			n := len(batch[end].Key) + len(batch[end].Value) + 64 // 64: headers and framing, generously
			if end > start && size+n > chunkBytes {
				break
			}
			size += n
			end++
		}
		if failed := p.writeChunk(ctx, batch[start:end]); len(failed) > 0 {
			return append(failed[:len(failed):len(failed)], batch[end:]...)
		}
		start = end
	}
	return batch[:0]
}

// writeChunk writes chunk in one call and returns what Kafka did not
// take: nothing, the whole chunk, or the messages a partial write names.
func (p *Publisher) writeChunk(ctx context.Context, chunk []kafka.Message) []kafka.Message {
	wctx, cancel := context.WithTimeout(ctx, p.cfg.WriteTimeout)
	defer cancel()
	if err := p.w.WriteMessages(wctx, chunk...); err != nil {
		p.failed.Add(1)
		if p.failing++; p.failing == 1 { // once per outage, not once per flush interval
			p.cfg.Logger.WarnContext(ctx, "events: Kafka write failed; keeping the batch and retrying", "err", err, "events", len(chunk))
		}
		var partial kafka.WriteErrors
		if errors.As(err, &partial) && len(partial) == len(chunk) {
			var rest []kafka.Message
			for i, e := range partial {
				if e != nil {
					rest = append(rest, chunk[i])
				}
			}
			p.sent.Add(int64(len(chunk) - len(rest)))
			return rest
		}
		return chunk
	}
	if p.failing > 0 {
		p.cfg.Logger.InfoContext(ctx, "events: Kafka writes resumed", "failed_writes", p.failing, "dropped_total", p.totalDropped.Load())
		p.failing = 0
	}
	p.sent.Add(int64(len(chunk)))
	return nil
}

var deltaHeader = []kafka.Header{{Key: "type", Value: []byte("delta")}}

func (p *Publisher) rejectionMessage(r rejection) kafka.Message {
	b := p.stamp(&sluicev1.Event{Kind: &sluicev1.Event_Rejection{Rejection: &sluicev1.Rejection{
		TenantId: r.tenant, Tier: r.tier, RuleId: r.rule, ClientKey: r.client, Cost: r.cost,
		At: timestamppb.New(time.UnixMicro(r.at)), Decider: p.cfg.Decider, Region: p.cfg.Region, Shadow: r.shadow}}})
	return kafka.Message{Key: []byte(r.tenant), Value: b, WriterData: newPin(unpinned)}
}

// deltaMessage stamps d, tenant's counts from from to to, as this
// publisher's next event.
func (p *Publisher) deltaMessage(tenant string, d *sluicev1.CounterDelta, from, to *timestamppb.Timestamp) kafka.Message {
	d.TenantId, d.From, d.To, d.Decider, d.Region = tenant, from, to, p.cfg.Decider, p.cfg.Region
	b := p.stamp(&sluicev1.Event{Kind: &sluicev1.Event_Delta{Delta: d}})
	return kafka.Message{Key: []byte(tenant), Value: b, Headers: deltaHeader, WriterData: newPin(unpinned)}
}

// deltas takes the counts since the last deltas, one message per rule
// with any, plus one per tenant that dropped rejections.
func (p *Publisher) deltas() []kafka.Message {
	now := p.cfg.Now()
	from, to := timestamppb.New(p.since), timestamppb.New(now)
	p.since = now
	var out []kafka.Message
	add := func(tenant string, d *sluicev1.CounterDelta) { out = append(out, p.deltaMessage(tenant, d, from, to)) }
	take := func(k ruleKey, c *counts) bool {
		a, r, s := c.allowed.Swap(0), c.rejected.Swap(0), c.shadow.Swap(0)
		if a+r+s > 0 {
			add(k.tenant, &sluicev1.CounterDelta{Tier: k.tier, RuleId: k.rule, Allowed: a, Rejected: r, ShadowRejected: s})
		}
		return a+r+s > 0
	}
	for k, c := range p.retired { // Run's own, as deltas is
		take(k, c)
	}
	clear(p.retired)
	var idle []ruleKey
	p.mu.RLock()
	for k, c := range p.rules {
		if !take(k, c) {
			idle = append(idle, k)
		}
	}
	for tenant, d := range p.dropped {
		if n := d.Swap(0); n > 0 {
			add(tenant, &sluicev1.CounterDelta{DroppedRejections: n})
		}
	}
	p.mu.RUnlock()
	if len(idle) > 0 { // a Count waits only while these go
		p.mu.Lock()
		for _, k := range idle {
			p.retired[k] = p.rules[k]
			delete(p.rules, k)
		}
		p.mu.Unlock()
	}
	return out
}
