package regions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
)

// DefaultTopic is the topic each region's deciders publish their global
// counts to, in their region's Kafka.
const DefaultTopic = "sluice.global-counts"

// DefaultInterval is how often a decider publishes its global counts. It
// is about a round trip between distant regions: a reader that lost its
// link reads again one round trip after the link returns, so the regions'
// counts agree again within two intervals. A shorter interval narrows the
// overshoot (see docs/scaling.md) and costs more messages.
const DefaultInterval = 200 * time.Millisecond

// Config is one decider's part in a deployment of several regions.
type Config struct {
	// Region is this decider's region.
	Region string
	// Brokers are each region's Kafka brokers, this region's included:
	// the decider publishes to its own and reads the others'.
	Brokers map[string][]string
	// Topic is the global-counts topic of every region (DefaultTopic).
	Topic string
	// Interval is how often the decider publishes what it admitted, and
	// says it is alive when it admitted nothing (0: DefaultInterval).
	Interval time.Duration
	// Silence is how long a region may go unheard before the Assumption
	// stands in for its traffic (0: 10 intervals).
	Silence time.Duration
	Assume  Assumption
	// Share is AssumeShare's share of a limit, from 0 to 1.
	Share float64
	// Apply charges the other regions' admissions on meters (token buckets
	// and GCRA of scope global) into this region's Redis, each rise once
	// whichever decider sends it (redisengine's ChargeRemote); nil charges
	// nothing.
	Apply func(context.Context, []Charge) error
	// Dial connects to the other regions' brokers (nil: a net.Dialer).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Transport writes this region's topic (nil: kafka-go's default).
	Transport kafka.RoundTripper
	Logger    *slog.Logger
	Now       func() time.Time
}

// maxCounts bounds the counts of one message.
const maxCounts = 2000

// Replicator publishes this decider's admissions of global rules and
// reads the other regions', into its Table.
type Replicator struct {
	cfg      Config
	instance string
	table    *Table
	w        *kafka.Writer
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	sent     atomic.Int64 // bytes of the messages written
}

// SentBytes is how many bytes of messages the replicator has written.
func (r *Replicator) SentBytes() int64 { return r.sent.Load() }

// Start starts replication: a writer to this region's topic and a reader
// of each other region's.
func Start(cfg Config) (*Replicator, error) {
	if cfg.Region == "" {
		return nil, errors.New("regions: no region")
	}
	if len(cfg.Brokers[cfg.Region]) == 0 {
		return nil, fmt.Errorf("regions: no Kafka brokers for this region, %q", cfg.Region)
	}
	if cfg.Topic == "" {
		cfg.Topic = DefaultTopic
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Silence <= 0 {
		cfg.Silence = 10 * cfg.Interval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	ctx, cancel := context.WithCancel(context.Background())
	r := &Replicator{cfg: cfg, instance: cfg.Region + "-" + hex.EncodeToString(id[:]), cancel: cancel,
		table: newTable(cfg.Region, slices.Collect(maps.Keys(cfg.Brokers)), cfg.Silence, cfg.Assume, cfg.Share, cfg.Now()),
		w: &kafka.Writer{Addr: kafka.TCP(cfg.Brokers[cfg.Region]...), Topic: cfg.Topic, Transport: cfg.Transport,
			BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireOne, AllowAutoTopicCreation: true,
			MaxAttempts: 2, WriteBackoffMin: 10 * time.Millisecond, WriteBackoffMax: 100 * time.Millisecond}}
	r.wg.Go(func() { r.publish(ctx.Done()) })
	for region, brokers := range cfg.Brokers {
		if region != cfg.Region {
			r.wg.Go(func() { r.read(ctx, region, brokers) })
		}
	}
	return r, nil
}

// Table is the replicator's view of the regions' counts.
func (r *Replicator) Table() *Table { return r.table }

// Close publishes what is left and stops.
func (r *Replicator) Close() error {
	r.cancel()
	r.wg.Wait()
	return r.w.Close()
}

// publish sends the decider's raised counts every interval, and once more
// as it stops.
func (r *Replicator) publish(stop <-chan struct{}) {
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			r.send()
			return
		case <-tick.C:
			r.send()
		}
	}
}

// send publishes the counts raised since the last send, or an empty
// message that says the decider is alive. Counts a failed write leaves
// out go with the next send.
func (r *Replicator) send() {
	r.charge()
	now := r.cfg.Now().UnixMicro()
	counts := r.table.takeOwn(now)
	r.table.expire(now)
	var msgs []kafka.Message
	for from := 0; from == 0 || from < len(counts); from += maxCounts {
		m := &sluicev1.GlobalCounts{Region: r.cfg.Region, Instance: r.instance, SentUs: now}
		for _, c := range counts[from:min(from+maxCounts, len(counts))] {
			m.Counts = append(m.Counts, &sluicev1.GlobalCount{Key: c.key, WindowStartUs: c.start, WindowEndUs: c.end, Count: c.n, MeterIntervalUs: c.interval})
		}
		b, err := proto.Marshal(m)
		if err != nil {
			r.cfg.Logger.Error("global counts: encoding", "err", err)
			return
		}
		msgs = append(msgs, kafka.Message{Key: []byte(r.instance), Value: b})
	}
	wctx, cancel := context.WithTimeout(context.Background(), 2*r.cfg.Interval+time.Second)
	defer cancel()
	if err := r.w.WriteMessages(wctx, msgs...); err != nil {
		r.table.raise(counts)
		r.cfg.Logger.Warn("global counts: publishing; they go with the next interval", "region", r.cfg.Region, "err", err)
		return
	}
	for _, m := range msgs {
		r.sent.Add(int64(len(m.Key) + len(m.Value)))
	}
}

// charge applies the other regions' risen meter counts (Config.Apply).
func (r *Replicator) charge() {
	if r.cfg.Apply == nil {
		return
	}
	charges := r.table.takeCharges(r.cfg.Now().UnixMicro())
	if len(charges) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*r.cfg.Interval+time.Second)
	defer cancel()
	if err := r.cfg.Apply(ctx, charges); err != nil {
		r.table.owe(charges)
		r.cfg.Logger.Warn("global counts: charging the other regions' admissions; tried again next interval", "err", err)
	}
}
