package regions

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
)

// fetchWait is how long a fetch waits at the broker for a message.
const fetchWait = time.Second

// read merges region's topic into the table, from its start: counts only
// grow, so reading it again is harmless.
//
// It fetches on one connection to the partition's leader. When the link
// fails it dials that leader again, straight, seeking where it stopped
// without asking: a link that returns is read again after two round trips
// (the connection's version handshake, then a fetch). kafka-go's Reader
// looks the leader up and checks the offsets again first, about seven
// round trips: a second more through a link of 80 ms. The leader is looked
// up again only when the broker says it no longer leads.
func (r *Replicator) read(ctx context.Context, region string, brokers []string) {
	dialer := r.cfg.Dialer
	if dialer == nil {
		dialer = kafka.DefaultDialer
	}
	// Messages are merged beside the fetches, as they come: the next fetch
	// waits at the broker while the last one's counts are merged.
	msgs := make(chan kafka.Message, 1024)
	merged := make(chan struct{})
	go func() {
		defer close(merged)
		for m := range msgs {
			r.merge(region, m)
		}
	}()
	defer func() { close(msgs); <-merged }()
	var (
		part    *kafka.Partition      // the partition and its leader, once looked up
		next    int64            = -1 // the next offset; -1: the topic's first
		backoff time.Duration
		failing bool
	)
	for ctx.Err() == nil {
		fetched, err := r.readOnce(ctx, dialer, brokers, &part, &next, msgs)
		if ctx.Err() != nil {
			return
		}
		if fetched { // it read until now: the link failed just now
			backoff, failing = 0, false
		}
		var kerr kafka.Error
		if errors.As(err, &kerr) {
			switch kerr {
			case kafka.OffsetOutOfRange: // retention went past it: from the first kept
				next = -1
			case kafka.NotLeaderForPartition, kafka.UnknownTopicOrPartition, kafka.LeaderNotAvailable:
				part = nil
			}
		}
		if !failing {
			r.cfg.Logger.Warn("global counts: reading a region's topic; retrying", "region", region, "err", err)
			failing = true
		}
		backoff = min(max(2*backoff, 10*time.Millisecond), r.cfg.Interval)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// readOnce connects to the partition's leader and sends what it fetches to
// msgs until the connection fails, returning why, and whether any fetch came
// back first.
func (r *Replicator) readOnce(ctx context.Context, dialer *kafka.Dialer, brokers []string, part **kafka.Partition, next *int64, msgs chan<- kafka.Message) (fetched bool, err error) {
	if *part == nil {
		for _, b := range brokers {
			var p kafka.Partition
			if p, err = dialer.LookupPartition(ctx, "tcp", b, r.cfg.Topic, 0); err == nil {
				*part = &p
				break
			}
		}
		if *part == nil {
			return false, err
		}
	}
	conn, err := dialer.DialPartition(ctx, "tcp", "", **part)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if *next < 0 {
		if *next, err = conn.Seek(0, kafka.SeekStart); err != nil {
			return false, err
		}
	} else if _, err := conn.Seek(*next, kafka.SeekAbsolute|kafka.SeekDontCheck); err != nil {
		return false, err
	}
	for {
		// The fetch waits at the broker until the deadline (kafka-go takes
		// its wait from it), then reads the batch.
		_ = conn.SetReadDeadline(time.Now().Add(fetchWait))
		batch := conn.ReadBatchWith(kafka.ReadBatchConfig{MinBytes: 1, MaxBytes: 8 << 20})
		for {
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			msg, err := batch.ReadMessage()
			if err != nil {
				break
			}
			*next = msg.Offset + 1
			select {
			case msgs <- msg:
			case <-ctx.Done():
				return fetched, ctx.Err()
			}
		}
		if err := batch.Close(); err != nil && !errors.Is(err, io.EOF) {
			return fetched, err
		}
		fetched = true
	}
}

// merge takes in one message of region's topic.
func (r *Replicator) merge(region string, msg kafka.Message) {
	var m sluicev1.GlobalCounts
	if err := proto.Unmarshal(msg.Value, &m); err != nil || m.GetRegion() != region {
		r.cfg.Logger.Warn("global counts: a message not of its region's, skipped", "region", region, "offset", msg.Offset)
		return
	}
	counts := make([]count, len(m.GetCounts()))
	for i, c := range m.GetCounts() {
		counts[i] = count{key: c.GetKey(), start: c.GetWindowStartUs(), end: c.GetWindowEndUs(), n: c.GetCount(), interval: c.GetMeterIntervalUs()}
	}
	r.table.merge(region, m.GetInstance(), m.GetSentUs(), counts)
}
