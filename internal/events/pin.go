package events

import (
	"slices"

	"github.com/segmentio/kafka-go"
)

// A pin holds the partition a message was first given, so that a message
// sent again goes where it went before, even after the topic gained
// partitions: analytics tells a resent event from a new one by the marks
// of its partition, and would count one resent to another partition
// twice. Each message carries its own in its WriterData, which kafka-go
// copies with the message and leaves to its writer.
type pin struct{ partition int }

// unpinned is a message's pin before its first write.
const unpinned = -1

// pinOf returns m's pin, or nil for a message that has none.
func pinOf(m kafka.Message) *pin {
	p, _ := m.WriterData.(*pin)
	return p
}

// newPin returns the pin of a message to partition, or of one not yet
// written (unpinned).
func newPin(partition int) *pin { return &pin{partition} }

// pinning is the publisher's kafka.Balancer: a message keeps the
// partition of its pin while the topic has it; else it goes by its key's
// hash, as kafka.Hash sends it (the partition of a tenant), and is pinned
// there.
type pinning struct{ hash kafka.Hash }

func (b *pinning) Balance(m kafka.Message, partitions ...int) int {
	p := pinOf(m)
	if p != nil && p.partition != unpinned && slices.Contains(partitions, p.partition) {
		return p.partition
	}
	partition := b.hash.Balance(m, partitions...)
	if p != nil {
		p.partition = partition
	}
	return partition
}
