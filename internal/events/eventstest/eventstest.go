// Package eventstest reads decision events back from a topic, for tests of
// what deciders publish.
package eventstest

import (
	"testing"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/spool"
	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
)

// Spool opens a publisher's spool in dir, unbounded, and closes it when
// the test ends (again, where the publisher's Run closed it).
func Spool(t testing.TB, dir string) *spool.Spool {
	t.Helper()
	sp, err := spool.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sp.Close() })
	return sp
}

// Tally is what a run of decision events adds up to.
type Tally struct {
	Rejections []*sluicev1.Rejection
	// The counter deltas' sums.
	Allowed, Rejected, ShadowRejected, DroppedRejections int64
	// Messages counts the messages read, events of either kind;
	// Duplicates those of them skipped as a resent event (the same producer
	// and seq again), as analytics skips them.
	Messages, Duplicates int64

	seen map[event]bool
}

type event struct {
	producer string
	seq      uint64
}

// Add counts m's event, unless it counted the same one before. It fails t
// when m is not an event, or is not keyed by its tenant (the publisher's
// partition key).
func (ta *Tally) Add(t testing.TB, m kafka.Message) {
	t.Helper()
	var ev sluicev1.Event
	if err := proto.Unmarshal(m.Value, &ev); err != nil {
		t.Fatalf("eventstest: message %d: %v", m.Offset, err)
	}
	ta.Messages++
	if ev.Producer != "" {
		if ta.seen == nil {
			ta.seen = map[event]bool{}
		}
		e := event{ev.Producer, ev.Seq}
		if ta.seen[e] {
			ta.Duplicates++
			return
		}
		ta.seen[e] = true
	}
	var tenant string
	switch k := ev.Kind.(type) {
	case *sluicev1.Event_Rejection:
		ta.Rejections = append(ta.Rejections, k.Rejection)
		tenant = k.Rejection.TenantId
	case *sluicev1.Event_Delta:
		ta.Allowed += k.Delta.Allowed
		ta.Rejected += k.Delta.Rejected
		ta.ShadowRejected += k.Delta.ShadowRejected
		ta.DroppedRejections += k.Delta.DroppedRejections
		tenant = k.Delta.TenantId
	default:
		t.Fatalf("eventstest: message %d holds no event", m.Offset)
	}
	if string(m.Key) != tenant {
		t.Fatalf("eventstest: message %d keyed %q, for tenant %q", m.Offset, m.Key, tenant)
	}
}

// Read consumes topic from its start (kafkatest.Consume) until done says
// the tally is complete, and returns it.
func Read(t testing.TB, brokers []string, topic string, done func(*Tally) bool) *Tally {
	t.Helper()
	ta := &Tally{}
	kafkatest.Consume(t, brokers, topic, func(m kafka.Message) bool {
		ta.Add(t, m)
		return done(ta)
	})
	return ta
}
