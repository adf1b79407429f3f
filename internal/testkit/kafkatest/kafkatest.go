// Package kafkatest runs an in-process Kafka-protocol broker (kfake) per
// test, so tests talk Kafka over real sockets without an installed broker.
package kafkatest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/testkit/tlstest"
)

// Broker is a kfake cluster owned by one test.
type Broker struct {
	*kfake.Cluster
	opts  []kfake.Opt
	addrs []string // kept: a closed cluster cannot be asked
}

// Addrs returns the brokers' host:port addresses, for kafka-go's Brokers.
// They stay valid across Close and Restart.
func (b *Broker) Addrs() []string { return b.addrs }

// Start runs a one-broker kfake cluster with topics created (with
// partitions partitions each), closed when the test ends. Extra options,
// such as kfake.DataDir for a broker that survives restarts, are passed on.
func Start(t testing.TB, partitions int32, topics []string, opts ...kfake.Opt) *Broker {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...)}, opts...)
	b := &Broker{opts: opts}
	b.start(t, opts)
	return b
}

func (b *Broker) start(t testing.TB, opts []kfake.Opt) {
	t.Helper()
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kafkatest: start kfake: %v", err)
	}
	b.Cluster = c
	b.addrs = c.ListenAddrs()
	t.Cleanup(c.Close)
}

// Restart closes the broker (if it is not closed already) and starts it
// again on the same port, as a broker restart would; with kfake.DataDir its
// data survives.
func (b *Broker) Restart(t testing.TB) {
	t.Helper()
	var port int
	addr := b.addrs[0]
	if _, err := fmt.Sscanf(addr[strings.LastIndexByte(addr, ':')+1:], "%d", &port); err != nil {
		t.Fatalf("kafkatest: broker address %q: %v", addr, err)
	}
	b.Close()
	b.start(t, append(b.opts, kfake.Ports(port)))
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// Topic returns a topic (or group) name unique to this test run of t.
func Topic(t testing.TB) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return fmt.Sprintf("%.80s-%s", unsafeChars.ReplaceAllString(t.Name(), "-"), hex.EncodeToString(r[:]))
}

// Consume reads topic from its start, in a consumer group of its own,
// giving each message to each until it returns true; it fails t when a
// read fails or 30 s pass first.
func Consume(t testing.TB, brokers []string, topic string, each func(kafka.Message) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, GroupID: Topic(t), MaxWait: 50 * time.Millisecond})
	defer r.Close()
	for n := 0; ; n++ {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("kafkatest: reading %s after %d messages: %v", topic, n, err)
		}
		if each(m) {
			return
		}
	}
}

// EndOffsets returns the end offset of each of topic's partitions, by
// partition: how many messages each holds.
func EndOffsets(t testing.TB, brokers []string, topic string, partitions int) []int64 {
	t.Helper()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for p := range partitions {
		req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(p))
	}
	res, err := c.ListOffsets(context.Background(), req)
	if err != nil {
		t.Fatalf("kafkatest: end offsets of %s: %v", topic, err)
	}
	out := make([]int64, partitions)
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			t.Fatalf("kafkatest: end offset of %s/%d: %v", topic, po.Partition, po.Error)
		}
		out[po.Partition] = po.LastOffset
	}
	return out
}

// WaitStableGroup waits until consumer group holds members members that
// have all joined its current generation (the group Stable): a member
// killed while its join is pending would otherwise be put in the
// generation and never leave it, as kfake keeps it. It fails t after 30 s.
func WaitStableGroup(t testing.TB, brokers []string, group string, members int) {
	t.Helper()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		res, err := c.DescribeGroups(context.Background(), &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
		if err != nil || len(res.Groups) != 1 {
			last = fmt.Sprint(err)
			continue
		}
		g := res.Groups[0]
		if g.GroupState == "Stable" && len(g.Members) == members {
			return
		}
		last = fmt.Sprintf("%s with %d members", g.GroupState, len(g.Members))
	}
	t.Fatalf("kafkatest: group %s never stable with %d members (last: %s)", group, members, last)
}

// ReadPartition returns the first n messages of one partition of topic, in
// offset order; it fails t when a read fails or 30 s pass first.
func ReadPartition(t testing.TB, brokers []string, topic string, partition int, n int64) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: partition, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	var out []kafka.Message
	for int64(len(out)) < n {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("kafkatest: reading %s/%d after %d messages: %v", topic, partition, len(out), err)
		}
		out = append(out, m)
	}
	return out
}

// DeleteRecords deletes the records of topic's partition before offset,
// as the topic's retention would once they are old enough.
func DeleteRecords(t testing.TB, brokers []string, topic string, partition int32, before int64) {
	t.Helper()
	req := kmsg.NewPtrDeleteRecordsRequest()
	req.TimeoutMillis = 10_000
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition, rp.Offset = partition, before
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := adminRequest(t, brokers, "delete records", req.RequestWith)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("kafkatest: delete records: %+v", resp.Topics)
	}
}

// AddPartitions grows topic to total partitions, as an operator's
// kafka-topics --alter --partitions does.
func AddPartitions(t testing.TB, brokers []string, topic string, total int32) {
	t.Helper()
	req := kmsg.NewPtrCreatePartitionsRequest()
	req.TimeoutMillis = 10_000
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = topic, total
	req.Topics = append(req.Topics, rt)
	resp := adminRequest(t, brokers, "create partitions", req.RequestWith)
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("kafkatest: create partitions: %+v", resp.Topics)
	}
}

// adminRequest sends one admin request (send, a request's RequestWith) to
// brokers through a client of its own, within 10 s, and returns the
// answer; what fails, fails the test, named by what.
func adminRequest[Resp any](t testing.TB, brokers []string, what string, send func(context.Context, kmsg.Requestor) (Resp, error)) Resp {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := send(ctx, cl)
	if err != nil {
		t.Fatalf("kafkatest: %s: %v", what, err)
	}
	return resp
}

// Refused answers a produce request (in a kfake control function) as a
// broker that is not the leader of any of its partitions: nothing is
// appended, and a producer tries again.
func Refused(kr kmsg.Request) kmsg.Response {
	req := kr.(*kmsg.ProduceRequest)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	resp.Version = req.Version
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, kerr.NotLeaderForPartition.Code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// StartSecure is Start with a broker that asks for TLS (its certificate
// signed by a fresh CA, whose PEM file it returns) and SASL with mechanism
// (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512) for user and password.
func StartSecure(t testing.TB, partitions int32, topics []string, mechanism, user, password string, opts ...kfake.Opt) (b *Broker, caFile string) {
	t.Helper()
	ca := tlstest.NewCA(t)
	certPEM, keyPEM := ca.Server(t, 1)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "kafka-ca.pem")
	tlstest.Write(t, caFile, ca.PEM, 0)
	opts = append([]kfake.Opt{kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pair}}), kfake.EnableSASL(),
		kfake.Superuser(mechanism, user, password)}, opts...)
	return Start(t, partitions, topics, opts...), caFile
}
