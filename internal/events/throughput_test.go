package events

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
)

// BenchmarkPublishPerPartition is one decider's publisher sending
// rejections to a topic of one partition (kfake, in this process, on the
// same cores): the events/s one partition takes from one publisher, with
// the publisher's batching and acknowledgements as deciders run them.
func BenchmarkPublishPerPartition(b *testing.B) {
	topic := kafkatest.Topic(b)
	broker := kafkatest.Start(b, 1, []string{topic})
	p := NewPublisher(Config{Brokers: broker.Addrs(), Topic: topic, Buffer: b.N + 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	clients := make([]string, 10_000)
	for i := range clients {
		clients[i] = fmt.Sprint("client-", i)
	}
	at := time.Now()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		p.Rejected("tenant-1", "free", "rule-1", clients[i%len(clients)], 1, at, false)
	}
	for deadline := time.Now().Add(5 * time.Minute); p.Stats().Sent < int64(b.N); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("sent %d of %d: %+v", p.Stats().Sent, b.N, p.Stats())
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	<-done
	if st := p.Stats(); st.Dropped != 0 {
		b.Fatalf("dropped %d", st.Dropped)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
}
