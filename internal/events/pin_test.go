package events

import (
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/sluicehq/sluice/internal/events/eventstest"
)

// A message goes where its tenant's key hashes the first time and stays
// there when the topic grows, unless its partition is gone; a message
// without a pin goes by its key every time.
func TestPinnedMessagesKeepTheirPartition(t *testing.T) {
	t.Parallel()
	var b pinning
	key := []byte("t1")
	for i := 2; (&kafka.Hash{}).Balance(kafka.Message{Key: key}, 0, 1, 2, 3) == 0; i++ {
		key = []byte{'t', byte('0' + i)}
	}
	grown := (&kafka.Hash{}).Balance(kafka.Message{Key: key}, 0, 1, 2, 3)
	m := kafka.Message{Key: key, WriterData: newPin(unpinned)}
	if got := b.Balance(m, 0); got != 0 || pinOf(m).partition != 0 {
		t.Fatalf("first write to one partition: %d, pinned to %d", got, pinOf(m).partition)
	}
	if got := b.Balance(m, 0, 1, 2, 3); got != 0 {
		t.Fatalf("written again after the topic grew: partition %d, want 0 where it went first", got)
	}
	if got := b.Balance(kafka.Message{Key: key}, 0, 1, 2, 3); got != grown {
		t.Fatalf("a message without a pin: partition %d, want its key's %d", got, grown)
	}
	gone := kafka.Message{Key: key, WriterData: newPin(7)}
	if got := b.Balance(gone, 0, 1, 2, 3); got != grown || pinOf(gone).partition != grown {
		t.Fatalf("pinned to a partition the topic lacks: %d, pinned to %d; want its key's %d", got, pinOf(gone).partition, grown)
	}
}

// A pinned message's partition outlives the process: in its spool record,
// and in a checkpoint of a pending delta.
func TestPinsAreKeptOnDisk(t *testing.T) {
	t.Parallel()
	for _, m := range []kafka.Message{
		{Key: []byte("t1"), Value: []byte("v"), WriterData: newPin(3)},
		{Key: []byte("t1"), Value: []byte("v"), Headers: deltaHeader, WriterData: newPin(2)},
		{Key: []byte("t1"), Value: []byte("v"), WriterData: newPin(unpinned)},
	} {
		got, ok := messageFromSpool(spoolRecords([]kafka.Message{m})[0])
		if !ok || pinOf(got).partition != pinOf(m).partition || (got.Headers == nil) != (m.Headers == nil) {
			t.Fatalf("spool round trip of a message pinned to %d: %+v pinned to %d, %v", pinOf(m).partition, got, pinOf(got).partition, ok)
		}
	}
	// A record of an earlier release, without a pin.
	if got, ok := messageFromSpool([]byte{spoolDelta, 2, 't', '1', 'v'}); !ok || pinOf(got).partition != unpinned || got.Headers == nil || string(got.Value) != "v" {
		t.Fatalf("an earlier release's record: %+v, %v", got, ok)
	}

	dir := t.TempDir()
	p := NewPublisher(Config{Spool: eventstest.Spool(t, dir)})
	p.checkpoint([]kafka.Message{{Key: []byte("t1"), Value: []byte("d"), Headers: deltaHeader, WriterData: newPin(2)}})
	if err := p.cfg.Spool.Close(); err != nil {
		t.Fatal(err)
	}
	next := NewPublisher(Config{Spool: eventstest.Spool(t, dir)})
	got := next.recoverCheckpoint()
	if len(got) != 1 || pinOf(got[0]).partition != 2 || string(got[0].Value) != "d" {
		t.Fatalf("a checkpointed delta pinned to 2: %+v", got)
	}
}
