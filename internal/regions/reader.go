package regions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/apiversions"
	"github.com/segmentio/kafka-go/protocol/fetch"
	"github.com/segmentio/kafka-go/protocol/listoffsets"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
)

const (
	// fetchWait is how long a fetch waits at the broker for a message.
	fetchWait = time.Second
	// fetchBytes bounds one fetch's answer.
	fetchBytes = 8 << 20
	// redialMax bounds the pause between two attempts to reach a region:
	// a link that returns is found again within it.
	redialMax = 20 * time.Millisecond
	clientID  = "sluice-regions"
)

// Fetch versions the reader speaks: from 4 (record batches, which every
// broker from Kafka 0.11 to 4 serves) to kafka-go's newest.
const minFetch, maxFetch = 4, 11

// read merges region's topic into the table, from its start: counts only
// grow, so reading it again is harmless.
//
// It fetches on one connection to the partition's leader, and when the
// link fails it connects again at once, without looking anything up: the
// connection's first fetch goes out beside its version request, so a link
// that returns is read again after one round trip. kafka-go's Conn asks
// for the versions and then fetches, two round trips; its Reader looks
// the leader up and checks the offsets again first, about seven: a second
// more through a link of 80 ms. The leader is looked up again only when
// the broker says it no longer leads.
func (r *Replicator) read(ctx context.Context, region string, brokers []string) {
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
	f := &fetcher{topic: r.cfg.Topic, brokers: brokers, dial: r.cfg.Dial, next: -1, version: minFetch}
	var (
		backoff time.Duration
		failing bool
	)
	for ctx.Err() == nil {
		fetched, err := f.run(ctx, msgs)
		if ctx.Err() != nil {
			return
		}
		if fetched { // it read until now: the link failed just now
			backoff, failing = 0, false
		}
		var kerr kafka.Error
		if errors.As(err, &kerr) {
			switch kerr {
			case kafka.NotLeaderForPartition, kafka.UnknownTopicOrPartition, kafka.LeaderNotAvailable:
				f.leader = ""
			}
		}
		if !failing {
			r.cfg.Logger.Warn("global counts: reading a region's topic; retrying", "region", region, "err", err)
			failing = true
		}
		backoff = min(max(2*backoff, time.Millisecond), redialMax)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// fetcher reads partition 0 of a region's topic, one connection at a time.
type fetcher struct {
	topic   string
	brokers []string
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	leader  string // the partition's leader, once looked up
	next    int64  // the next offset; -1: the topic's first
	version int16  // the Fetch version the broker last agreed to
}

// run connects to the partition's leader and sends what it fetches to msgs
// until the connection fails, returning why, and whether any fetch came
// back first.
func (f *fetcher) run(ctx context.Context, msgs chan<- kafka.Message) (fetched bool, err error) {
	if f.leader == "" {
		if f.leader, err = f.lookup(ctx); err != nil {
			return false, err
		}
	}
	nc, err := f.dialContext(ctx, "tcp", f.leader)
	if err != nil {
		return false, err
	}
	pc := protocol.NewConn(nc, clientID)
	defer pc.Close()
	stop := context.AfterFunc(ctx, func() { pc.Close() })
	defer stop()

	// The version request and the first fetch go out together; the broker
	// answers them in order.
	_ = pc.SetDeadline(time.Now().Add(fetchWait + 10*time.Second))
	req := f.request()
	if err := protocol.WriteRequest(pc, 0, 1, clientID, &apiversions.Request{}); err != nil {
		return false, err
	}
	sent := f.version
	if err := protocol.WriteRequest(pc, sent, 2, clientID, req); err != nil {
		return false, err
	}
	_, m, err := protocol.ReadResponse(pc, protocol.ApiVersions, 0)
	if err != nil {
		return false, err
	}
	versions, err := agree(m.(*apiversions.Response), sent)
	if err != nil {
		return false, err
	}
	if versions[protocol.Fetch] != sent { // it will not answer that fetch
		f.version = versions[protocol.Fetch]
		return false, fmt.Errorf("regions: the broker serves fetch v%d, not v%d; asking again", f.version, sent)
	}
	pc.SetVersions(versions)
	if _, m, err = protocol.ReadResponse(pc, protocol.Fetch, sent); err != nil {
		return false, err
	}
	for {
		err := f.take(ctx, m.(*fetch.Response), msgs)
		if errors.Is(err, kafka.OffsetOutOfRange) { // retention went past it: from the first kept
			f.next, err = f.first(pc)
		}
		if err != nil {
			return fetched, err
		}
		fetched = true
		_ = pc.SetDeadline(time.Now().Add(fetchWait + 10*time.Second))
		if m, err = pc.RoundTrip(f.request()); err != nil {
			return fetched, err
		}
	}
}

// request is a fetch from f.next (0 for the topic's first: the broker
// answers out of range when that is gone).
func (f *fetcher) request() *fetch.Request {
	return &fetch.Request{ReplicaID: -1, MaxWaitTime: int32(fetchWait.Milliseconds()), MinBytes: 1, MaxBytes: fetchBytes,
		SessionEpoch: -1, Topics: []fetch.RequestTopic{{Topic: f.topic, Partitions: []fetch.RequestPartition{{
			CurrentLeaderEpoch: -1, FetchOffset: max(f.next, 0), LogStartOffset: -1, PartitionMaxBytes: fetchBytes}}}}}
}

// take sends a fetch's messages from f.next on to msgs.
func (f *fetcher) take(ctx context.Context, res *fetch.Response, msgs chan<- kafka.Message) error {
	if res.ErrorCode != 0 {
		return kafka.Error(res.ErrorCode)
	}
	for _, t := range res.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				return kafka.Error(p.ErrorCode)
			}
			if p.RecordSet.Records == nil {
				continue
			}
			for {
				rec, err := p.RecordSet.Records.ReadRecord()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return err
				}
				value, err := protocol.ReadAll(rec.Value)
				if err != nil {
					return err
				}
				if rec.Offset < f.next { // a batch starts where it starts, before the offset asked
					continue
				}
				f.next = rec.Offset + 1
				select {
				case msgs <- kafka.Message{Offset: rec.Offset, Value: value}:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
	}
	return nil
}

// first asks the broker for the partition's first kept offset.
func (f *fetcher) first(pc *protocol.Conn) (int64, error) {
	m, err := pc.RoundTrip(&listoffsets.Request{ReplicaID: -1, Topics: []listoffsets.RequestTopic{{Topic: f.topic,
		Partitions: []listoffsets.RequestPartition{{CurrentLeaderEpoch: -1, Timestamp: -2}}}}})
	if err != nil {
		return 0, err
	}
	res := m.(*listoffsets.Response)
	if len(res.Topics) != 1 || len(res.Topics[0].Partitions) != 1 {
		return 0, errors.New("regions: no offset in the broker's answer")
	}
	p := res.Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		return 0, kafka.Error(p.ErrorCode)
	}
	return p.Offset, nil
}

// agree picks the versions the reader speaks from those the broker serves:
// fetch v fetch when it serves it, else the newest both speak.
func agree(res *apiversions.Response, fetchVersion int16) (map[protocol.ApiKey]int16, error) {
	if res.ErrorCode != 0 {
		return nil, kafka.Error(res.ErrorCode)
	}
	want := map[protocol.ApiKey][2]int16{protocol.Fetch: {minFetch, maxFetch}, protocol.ListOffsets: {1, 5}}
	versions := map[protocol.ApiKey]int16{}
	for _, k := range res.ApiKeys {
		key := protocol.ApiKey(k.ApiKey)
		w, ok := want[key]
		switch {
		case !ok || k.MaxVersion < w[0] || k.MinVersion > w[1]:
		case key == protocol.Fetch && k.MinVersion <= fetchVersion && fetchVersion <= k.MaxVersion:
			versions[key] = fetchVersion
		default:
			versions[key] = min(k.MaxVersion, w[1])
		}
	}
	for k, w := range want {
		if _, ok := versions[k]; !ok {
			return nil, fmt.Errorf("regions: the broker serves no %s version from v%d to v%d", k, w[0], w[1])
		}
	}
	return versions, nil
}

// lookup finds the partition's leader through any of the brokers.
func (f *fetcher) lookup(ctx context.Context) (leader string, err error) {
	d := &kafka.Dialer{Timeout: 10 * time.Second, DialFunc: f.dialContext}
	for _, b := range f.brokers {
		var p kafka.Partition
		if p, err = d.LookupPartition(ctx, "tcp", b, f.topic, 0); err == nil {
			return net.JoinHostPort(p.Leader.Host, strconv.Itoa(p.Leader.Port)), nil
		}
	}
	return "", err
}

func (f *fetcher) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if f.dial != nil {
		return f.dial(ctx, network, addr)
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	return d.DialContext(ctx, network, addr)
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
