package analytics

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"
	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

// Analytics scales by running more consumers of the group: here a second
// joins and then the first leaves while deciders keep producing, so the
// partitions move twice (two rebalances), each consumer resuming a
// partition from the offset and marks the other committed. Every event is
// counted once.
func TestConsumersJoiningAndLeavingCountEachEventOnce(t *testing.T) {
	t.Parallel()
	topic := kafkatest.Topic(t)
	broker := kafkatest.Start(t, 3, []string{topic})
	pool := pgtest.Pool(t)
	cfg := Config{Brokers: broker.Addrs(), Topic: topic, Group: "g-" + topic, Store: NewStore(pool, 0),
		BatchSize: 25, BatchWait: 20 * time.Millisecond}
	const tenants = 6 // keys enough to reach every partition

	// Deciders: each round one delta of 1 allowed per tenant, stamped as
	// its publisher does (a run id per tenant here, its seq rising).
	var (
		wg         sync.WaitGroup
		stopping   = make(chan struct{})
		rounds     int
		produceErr error
	)
	w := &kafka.Writer{Addr: kafka.TCP(broker.Addrs()...), Topic: topic, Balancer: &kafka.Hash{}, BatchTimeout: time.Millisecond,
		RequiredAcks: kafka.RequireAll}
	defer w.Close()
	wg.Go(func() {
		for produceErr == nil {
			select {
			case <-stopping:
				return
			default:
			}
			msgs := make([]kafka.Message, tenants)
			for i := range msgs {
				tenant := fmt.Sprint("t", i)
				msgs[i] = kafka.Message{Key: []byte(tenant), Value: stamped(delta(tenant, "r1", t0.Add(30*time.Second), 1, 0, 0, 0),
					fmt.Sprint("decider-", i), uint64(rounds+1))}
			}
			if produceErr = w.WriteMessages(t.Context(), msgs...); produceErr == nil {
				rounds++
			}
		}
	})
	progress := func(what string) {
		t.Helper()
		from := committed(t, pool, cfg.Group)
		waitFor(t, what, func() bool { return committed(t, pool, cfg.Group) > from+tenants })
	}

	first, stopFirst := startConsumer(t, cfg)
	progress("the first consumer committing")
	second, stopSecond := startConsumer(t, cfg)
	waitFor(t, "the second consumer joining", second.Ready)
	progress("both consumers committing")
	stopFirst()
	progress("the second consumer committing alone")
	close(stopping)
	wg.Wait()
	if produceErr != nil {
		t.Fatalf("produce: %v", produceErr)
	}
	waitFor(t, "every offset committed", func() bool { return committed(t, pool, cfg.Group) == int64(rounds*tenants) })
	for i, c := range []*Consumer{first, second} {
		if n := testutil.ToFloat64(c.events.WithLabelValues("ok")); n == 0 {
			t.Errorf("consumer %d counted no event: the partitions did not move", i+1)
		}
	}
	stopSecond()

	for i := range tenants {
		tenant := fmt.Sprint("t", i)
		if got := minuteRow(t, pool, tenant, "r1", t0).allowed; got != int64(rounds) {
			t.Errorf("%s: %d allowed, want %d (one a round)", tenant, got, rounds)
		}
	}
	checkHours(t, pool)
}
