package events

import (
	"bytes"
	"encoding/binary"
	"math"

	"github.com/segmentio/kafka-go"
)

// Kinds of spool records: a rejection or a delta, and either pinned to a
// partition (a message written before).
const (
	spoolRejection byte = iota
	spoolDelta
	spoolPinnedRejection
	spoolPinnedDelta
)

// spoolRecords encodes messages for the spool: a kind byte, for a pinned
// one its partition as a uvarint, the key's length as a uvarint, the key,
// the value.
func spoolRecords(msgs []kafka.Message) [][]byte {
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		kind := spoolRejection
		if m.Headers != nil {
			kind = spoolDelta
		}
		pn := pinOf(m)
		pinned := pn != nil && pn.partition != unpinned
		if pinned {
			kind += spoolPinnedRejection
		}
		b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(m.Key)+len(m.Value))
		b = append(b, kind)
		if pinned {
			b = binary.AppendUvarint(b, uint64(pn.partition))
		}
		b = binary.AppendUvarint(b, uint64(len(m.Key)))
		b = append(append(b, m.Key...), m.Value...)
		out[i] = b
	}
	return out
}

// messageFromSpool decodes a spoolRecords record; ok is false when it is
// not one.
func messageFromSpool(b []byte) (m kafka.Message, ok bool) {
	if len(b) < 2 || b[0] > spoolPinnedDelta {
		return m, false
	}
	kind := b[0]
	b = b[1:]
	partition := unpinned
	if kind >= spoolPinnedRejection {
		p, w := binary.Uvarint(b)
		if w <= 0 || p > math.MaxInt32 {
			return m, false
		}
		partition, b = int(p), b[w:]
	}
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return m, false
	}
	b = b[w:]
	m.Key, m.Value = bytes.Clone(b[:n]), bytes.Clone(b[n:])
	if kind == spoolDelta || kind == spoolPinnedDelta {
		m.Headers = deltaHeader
	}
	m.WriterData = newPin(partition)
	return m, true
}
