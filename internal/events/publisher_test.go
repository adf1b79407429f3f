package events

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/events/eventstest"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/kafkasec"
	"github.com/sluicehq/sluice/internal/kafkatest"
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
