package kafkatest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// kafka-go, the client Sluice uses, writes to and reads from kfake.
func TestKafkaGoRoundTrip(t *testing.T) {
	t.Parallel()
	topic := Topic(t)
	b := Start(t, 3, []string{topic})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	w := &kafka.Writer{Addr: kafka.TCP(b.Addrs()...), Topic: topic, Balancer: &kafka.Hash{}, BatchTimeout: time.Millisecond}
	defer w.Close()
	const n = 50
	for i := range n {
		if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(fmt.Sprintf("tenant-%d", i%5)), Value: []byte{byte(i)}}); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	seen := make(map[byte]bool)
	Consume(t, b.Addrs(), topic, func(m kafka.Message) bool {
		if seen[m.Value[0]] {
			t.Fatalf("message %d read twice", m.Value[0])
		}
		seen[m.Value[0]] = true
		return len(seen) == n
	})
}

func TestRestartKeepsDataWithDataDir(t *testing.T) {
	t.Parallel()
	topic := Topic(t)
	b := Start(t, 1, []string{topic}, kfake.DataDir(t.TempDir()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := &kafka.Writer{Addr: kafka.TCP(b.Addrs()...), Topic: topic, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("kept")}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	b.Restart(t)
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: b.Addrs(), Topic: topic, Partition: 0, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil || string(m.Value) != "kept" {
		t.Fatalf("after restart: %q, %v", m.Value, err)
	}
}
