package events

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/events/eventstest"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/kafkasec"
	"github.com/sluicehq/sluice/internal/spool"
	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
)

func start(t *testing.T, cfg Config) *Publisher {
	t.Helper()
	p := NewPublisher(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("run: %v", err)
		}
	})
	return p
}

func TestPublishesRejectionsAndDeltas(t *testing.T) {
	t.Parallel()
	topic := kafkatest.Topic(t)
	b := kafkatest.Start(t, 3, []string{topic})
	p := start(t, Config{Brokers: b.Addrs(), Topic: topic, Decider: "d1", FlushInterval: 10 * time.Millisecond, DeltaInterval: 50 * time.Millisecond})
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for range 7 {
		p.Count("t1", "free", "r1", true, false)
	}
	p.Count("t1", "free", "r1", false, false)
	p.Count("t1", "free", "r2", false, true)
	p.Rejected("t1", "free", "r1", "alice", 1, at, false)
	p.Rejected("t2", "pro", "r9", "bob", 3, at, true)

	ta := eventstest.Read(t, b.Addrs(), topic, func(ta *eventstest.Tally) bool {
		return len(ta.Rejections) == 2 && ta.Allowed == 7 && ta.Rejected == 1 && ta.ShadowRejected == 1
	})
	rejections := ta.Rejections
	r := rejections[0]
	if r.TenantId == "t2" {
		r = rejections[1]
	}
	if r.ClientKey != "alice" || r.RuleId != "r1" || r.Decider != "d1" || !r.At.AsTime().Equal(at) || r.Shadow {
		t.Fatalf("rejection %v", r)
	}
}

// With Kafka gone, Rejected never blocks; what overflows is dropped and
// counted; when Kafka returns the buffer drains, and delivered plus
// dropped is exactly what was recorded, the drops reported in deltas.
func TestKafkaOutageDropsAreCountedAndReported(t *testing.T) {
	t.Parallel()
	topic := kafkatest.Topic(t)
	b := kafkatest.Start(t, 1, []string{topic})
	brokers := b.Addrs()
	b.Close()
	p := start(t, Config{Brokers: brokers, Topic: topic, Buffer: 100, FlushInterval: 10 * time.Millisecond,
		DeltaInterval: 50 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	const n = 5000
	at := time.Now()
	for range n {
		p.Rejected("t1", "free", "r1", "c", 1, at, false) // would hang here if it blocked
	}
	// Held: the queue (Buffer) and the batch between failed writes (up to
	// BatchSize, then trimmed to Buffer).
	dropped := p.Stats().Dropped
	if dropped < n-100-1000 || dropped > n {
		t.Fatalf("dropped %d of %d with a buffer of 100", dropped, n)
	}
	// Run keeps trying: failed writes are counted.
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().WriteErrors == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no failed write counted while Kafka is down")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Restart(t)
	ta := eventstest.Read(t, brokers, topic, func(ta *eventstest.Tally) bool {
		return int64(len(ta.Rejections))+p.Stats().Dropped == n && ta.DroppedRejections == p.Stats().Dropped
	})
	delivered := int64(len(ta.Rejections))
	if st := p.Stats(); st.Queued != 0 || st.Sent < delivered {
		t.Fatalf("after the drain: %+v, %d delivered", st, delivered)
	}
}

func BenchmarkRejected(b *testing.B) {
	p := NewPublisher(Config{Brokers: []string{"127.0.0.1:1"}, Topic: "x", Buffer: 1 << 20})
	at := time.Now()
	for b.Loop() {
		p.Rejected("tenant-1", "free", "rule-1", "client-42", 1, at, false)
		select { // keep the queue from filling: this measures the hot path only
		case <-p.queue:
		default:
		}
	}
}

func BenchmarkCount(b *testing.B) {
	p := NewPublisher(Config{Brokers: []string{"127.0.0.1:1"}, Topic: "x"})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p.Count("tenant-1", "free", "rule-1", true, false)
		}
	})
}

// The publisher reaches a broker that asks for TLS and SASL through the
// transport internal/kafkasec builds.
func TestPublishesOverTLSWithSASL(t *testing.T) {
	t.Parallel()
	topic := kafkatest.Topic(t)
	b, caFile := kafkatest.StartSecure(t, 1, []string{topic}, "SCRAM-SHA-256", "decider", "pw")
	sec := &kafkasec.Config{CAFile: caFile, SASL: "scram-sha-256", Username: "decider", Password: "pw"}
	tr, err := sec.Transport()
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, Config{Brokers: b.Addrs(), Topic: topic, Transport: tr, Decider: "d1", FlushInterval: 10 * time.Millisecond})
	p.Rejected("t1", "free", "r1", "alice", 1, time.Now(), false)

	dialer, err := sec.Dialer()
	if err != nil {
		t.Fatal(err)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: b.Addrs(), Topic: topic, Partition: 0, Dialer: dialer, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ev sluicev1.Event
	if err := proto.Unmarshal(m.Value, &ev); err != nil || ev.GetRejection().GetClientKey() != "alice" {
		t.Fatalf("event %v, %v", &ev, err)
	}
}

// Rejections queued when Run's context ends go out in its last attempt:
// Run starts here on a context already done, with every event still in
// the queue, so a select that let ctx.Done win would lose them.
func TestQueuedRejectionsAreSentAtTheEnd(t *testing.T) {
	t.Parallel()
	topic := kafkatest.Topic(t)
	b := kafkatest.Start(t, 1, []string{topic})
	p := NewPublisher(Config{Brokers: b.Addrs(), Topic: topic, Decider: "d1", FlushInterval: time.Hour, DeltaInterval: time.Hour})
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	const n = 20
	for range n {
		p.Rejected("t1", "free", "r1", "alice", 1, at, false)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	if st := p.Stats(); st.Sent != n || st.Queued != 0 {
		t.Fatalf("sent %d, %d still queued; want all %d sent", st.Sent, st.Queued, n)
	}
	eventstest.Read(t, b.Addrs(), topic, func(ta *eventstest.Tally) bool { return len(ta.Rejections) == n })
}

// runUntilStopped runs p and returns what stops it and waits for Run's end.
func runUntilStopped(t *testing.T, p *Publisher) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-errc; err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// With a spool, an outage longer than the buffer and a decider restart in
// the middle of it lose nothing: the first publisher spools its rejections
// and, at shutdown, its last counts; the next one, started on the same
// directory once Kafka is back, delivers all of them, once.
func TestSpoolKeepsEventsThroughAnOutageAndARestart(t *testing.T) {
	t.Parallel()
	topic := kafkatest.Topic(t)
	b := kafkatest.Start(t, 1, []string{topic})
	brokers := b.Addrs()
	b.Close()
	dir := t.TempDir()
	sp := eventstest.Spool(t, dir)
	cfg := Config{Brokers: brokers, Topic: topic, Buffer: 100, FlushInterval: 10 * time.Millisecond,
		DeltaInterval: time.Hour, WriteTimeout: 200 * time.Millisecond, Spool: sp}
	first := NewPublisher(cfg)
	stop := runUntilStopped(t, first)
	const n = 3000
	at := time.Now()
	for i := range n {
		// Paced to the buffer: what is tested is the outage outlasting it.
		waitFor(t, "room in the buffer", func() bool { return first.Stats().Queued < 100 })
		first.Rejected("t1", "free", "r1", fmt.Sprint("c", i), 1, at, false)
	}
	for range 7 {
		first.Count("t1", "free", "r1", true, false)
	}
	waitFor(t, "the rejections spooled", func() bool { return first.Stats().Spooled == n })
	stop()
	if st := first.Stats(); st.Dropped != 0 || st.Sent != 0 || st.Spooled != n+1 {
		t.Fatalf("first publisher at shutdown: %+v, want %d spooled (and its delta)", st, n+1)
	}

	b.Restart(t)
	cfg.Spool = eventstest.Spool(t, dir)
	second := start(t, cfg)
	ta := eventstest.Read(t, brokers, topic, func(ta *eventstest.Tally) bool {
		return len(ta.Rejections) >= n && ta.Allowed >= 7
	})
	seen := map[string]bool{}
	for _, r := range ta.Rejections {
		if seen[r.ClientKey] {
			t.Fatalf("rejection of %s delivered twice", r.ClientKey)
		}
		seen[r.ClientKey] = true
	}
	if len(ta.Rejections) != n || ta.Allowed != 7 || ta.DroppedRejections != 0 {
		t.Fatalf("delivered %d rejections, %d allowed, %d dropped; want %d, 7, 0", len(ta.Rejections), ta.Allowed, ta.DroppedRejections, n)
	}
	waitFor(t, "the spool emptied", func() bool { return second.Stats().Spooled == 0 })
}

// A full spool falls back to the buffer: what neither holds is dropped,
// counted and reported, and delivered plus dropped is what was recorded.
func TestFullSpoolDropsAreCounted(t *testing.T) {
	t.Parallel()
	topic := kafkatest.Topic(t)
	b := kafkatest.Start(t, 1, []string{topic})
	brokers := b.Addrs()
	b.Close()
	sp, err := spool.Open(t.TempDir(), 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, Config{Brokers: brokers, Topic: topic, Buffer: 100, FlushInterval: 10 * time.Millisecond,
		DeltaInterval: 50 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, Spool: sp})
	const n = 5000
	at := time.Now()
	for range n {
		waitFor(t, "room in the buffer", func() bool { return p.Stats().Queued < 100 })
		p.Rejected("t1", "free", "r1", "c", 1, at, false)
	}
	waitFor(t, "drops", func() bool { return p.Stats().Dropped > 0 })
	if st := p.Stats(); st.SpoolBytes > 64<<10 || st.Spooled == 0 {
		t.Fatalf("spool past its bound or unused: %+v", st)
	}
	b.Restart(t)
	ta := eventstest.Read(t, brokers, topic, func(ta *eventstest.Tally) bool {
		return int64(len(ta.Rejections))+p.Stats().Dropped == n && ta.DroppedRejections == p.Stats().Dropped
	})
	if int64(len(ta.Rejections)) > n-p.Stats().Dropped {
		t.Fatalf("%d delivered, %d dropped, of %d", len(ta.Rejections), p.Stats().Dropped, n)
	}
}

// A spool record decodes to the message it was made from, with its pin;
// anything else is refused or decoded without a panic.
func FuzzMessageFromSpool(f *testing.F) {
	f.Add([]byte("tenant"), []byte("value"), true, int32(-1))
	f.Add([]byte{}, []byte{}, false, int32(5))
	f.Fuzz(func(t *testing.T, key, value []byte, delta bool, partition int32) {
		messageFromSpool(append([]byte{0}, key...)) // arbitrary bytes
		messageFromSpool(value)
		m := kafka.Message{Key: key, Value: value, WriterData: newPin(max(int(partition), unpinned))}
		if delta {
			m.Headers = deltaHeader
		}
		got, ok := messageFromSpool(spoolRecords([]kafka.Message{m})[0])
		if !ok || !bytes.Equal(got.Key, key) || !bytes.Equal(got.Value, value) || (got.Headers != nil) != delta || pinOf(got).partition != pinOf(m).partition {
			t.Fatalf("round trip of %q/%q/%v/%d: %+v, %v", key, value, delta, partition, got, ok)
		}
	})
}

// Through writes that Kafka refuses for a partition while it takes the
// others', with the spool or without, the publisher delivers every event
// and never an event to a partition for the first time after a later one
// of its own (a higher seq): the order analytics' marks rely on to tell a
// resent event from a new one.
func TestRefusedWritesKeepEachPartitionInOrder(t *testing.T) {
	t.Parallel()
	for _, spooled := range []bool{false, true} {
		t.Run(fmt.Sprint("spool=", spooled), func(t *testing.T) {
			t.Parallel()
			topic := kafkatest.Topic(t)
			b := kafkatest.Start(t, 3, []string{topic})
			// An outage first (every produce request refused), then of
			// every four requests the second and third: some batches fail
			// at both of kafka-go's attempts, some at one, and the other
			// partitions' go through.
			var produces atomic.Int32
			var outage atomic.Bool
			outage.Store(true)
			b.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
				b.KeepControl()
				if n := produces.Add(1); !outage.Load() && n%4 != 2 && n%4 != 3 {
					return nil, nil, false
				}
				return kafkatest.Refused(kr), nil, true
			})
			cfg := Config{Brokers: b.Addrs(), Topic: topic, BatchSize: 50, FlushInterval: 10 * time.Millisecond, DeltaInterval: time.Hour, RetryPause: 20 * time.Millisecond}
			if spooled {
				sp, err := spool.Open(t.TempDir(), 0)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Spool = sp
			}
			p := NewPublisher(cfg)
			stop := runUntilStopped(t, p)
			const n = 600
			at := time.Now()
			for i := range n {
				waitFor(t, "room in the buffer", func() bool { return p.Stats().Queued < 1000 })
				p.Rejected(fmt.Sprint("t", i%5), "free", "r1", fmt.Sprint("c", i), 1, at, false)
				if i%50 == 49 {
					// Held through a failed write in the outage, and after
					// it, through a few produce requests: the spool's
					// segments go while new events reach it.
					requests := produces.Load()
					waitFor(t, "produce requests", func() bool { return produces.Load() > requests+4 })
				}
				if i == n/2 {
					outage.Store(false)
				}
			}
			waitFor(t, "every event sent", func() bool { st := p.Stats(); return st.Sent >= n && st.Queued == 0 && st.Spooled == 0 })
			stop()
			if p.Stats().WriteErrors == 0 {
				t.Fatal("no write failed")
			}

			delivered := map[uint64]bool{}
			for partition, end := range kafkatest.EndOffsets(t, b.Addrs(), topic, 3) {
				last := uint64(0)
				for _, m := range kafkatest.ReadPartition(t, b.Addrs(), topic, partition, end) {
					var ev sluicev1.Event
					if err := proto.Unmarshal(m.Value, &ev); err != nil {
						t.Fatal(err)
					}
					if delivered[ev.Seq] {
						continue // resent
					}
					if ev.Seq <= last {
						t.Fatalf("partition %d: event %d first delivered after event %d", partition, ev.Seq, last)
					}
					delivered[ev.Seq], last = true, ev.Seq
				}
			}
			if len(delivered) != n {
				t.Fatalf("%d distinct events delivered, want %d", len(delivered), n)
			}
		})
	}
}

// The counts of a rule that went a delta interval without one leave the
// publisher (a decider sees rule IDs without end: callers' own limits
// name one each, however they vary them), after one more delta for what
// a Count that found them just before added: none is lost.
func TestIdleRulesCountsAreDropped(t *testing.T) {
	t.Parallel()
	p := NewPublisher(Config{Brokers: []string{"127.0.0.1:1"}, Topic: "t"})
	allowed := func(msgs []kafka.Message) map[string]int64 {
		t.Helper()
		got := map[string]int64{}
		for _, m := range msgs {
			var ev sluicev1.Event
			if err := proto.Unmarshal(m.Value, &ev); err != nil {
				t.Fatal(err)
			}
			got[ev.GetDelta().GetRuleId()] += ev.GetDelta().GetAllowed()
		}
		return got
	}
	for i := range 1000 {
		p.Count("t1", "free", fmt.Sprintf("limit/%ds/client_id", i+1), true, false)
	}
	p.Count("t1", "free", "busy", true, false)
	if got := allowed(p.deltas()); len(got) != 1001 || got["busy"] != 1 {
		t.Fatalf("first deltas: %d rules", len(got))
	}
	late := p.counts(ruleKey{"t1", "free", "limit/1s/client_id"}) // a Count that found it before it went
	p.Count("t1", "free", "busy", true, false)
	if got := allowed(p.deltas()); len(got) != 1 || got["busy"] != 1 {
		t.Fatalf("second deltas: %v, want busy's alone", got)
	}
	if len(p.rules) != 1 || len(p.retired) != 1000 {
		t.Fatalf("%d rules kept, %d retired; want busy's alone kept, the 1000 idle ones retired", len(p.rules), len(p.retired))
	}
	late.allowed.Add(1)
	if got := allowed(p.deltas()); len(got) != 1 || got["limit/1s/client_id"] != 1 {
		t.Fatalf("third deltas: %v, want the late count of limit/1s/client_id", got)
	}
	if len(p.rules) != 0 || len(p.retired) != 1 {
		t.Fatalf("%d rules kept, %d retired after the third; want none, and busy's retired", len(p.rules), len(p.retired))
	}
}
