package regions

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/apiversions"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
	"google.golang.org/protobuf/proto"
)

// A reader keeps the fetch version it sent while the broker serves it,
// moves to the newest both speak when not, and refuses a broker it cannot
// read.
func TestAgreeOnVersions(t *testing.T) {
	serves := func(fetchMin, fetchMax int16) *apiversions.Response {
		return &apiversions.Response{ApiKeys: []apiversions.ApiKeyResponse{
			{ApiKey: int16(protocol.Produce), MinVersion: 0, MaxVersion: 11},
			{ApiKey: int16(protocol.Fetch), MinVersion: fetchMin, MaxVersion: fetchMax},
			{ApiKey: int16(protocol.ListOffsets), MinVersion: 1, MaxVersion: 9},
		}}
	}
	for _, c := range []struct {
		name             string
		res              *apiversions.Response
		sent, want, list int16
	}{
		{"the sent version served", serves(0, 16), 4, 4, 5},
		{"a newer broker", serves(12, 17), 4, 0, 0},
		{"an older fetch dropped", serves(7, 16), 4, 11, 5},
		{"the newest kept", serves(4, 11), 11, 11, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := agree(c.res, c.sent)
			if c.want == 0 {
				if err == nil {
					t.Fatalf("agreed on %v with a broker it cannot read", v)
				}
				return
			}
			if err != nil || v[protocol.Fetch] != c.want || v[protocol.ListOffsets] != c.list {
				t.Fatalf("agreed on %v, %v; want fetch v%d, list offsets v%d", v, err, c.want, c.list)
			}
		})
	}
}

// A reader whose region's topic no longer holds its start (retention went
// past it) reads from the first record kept.
func TestReaderStartsAtTheFirstKeptRecord(t *testing.T) {
	t.Parallel()
	east := kafkatest.Start(t, 1, []string{DefaultTopic})
	west := kafkatest.Start(t, 1, []string{DefaultTopic})
	start := time.Now().Truncate(time.Hour)
	ws, we := start.UnixMicro(), start.Add(time.Hour).UnixMicro()
	w := &kafka.Writer{Addr: kafka.TCP(east.Addrs()...), Topic: DefaultTopic, BatchTimeout: time.Millisecond}
	defer w.Close()
	for n := range int64(5) {
		b, err := proto.Marshal(&sluicev1.GlobalCounts{Region: "east", Instance: "east-1", SentUs: time.Now().UnixMicro(),
			Counts: []*sluicev1.GlobalCount{{Key: "k", WindowStartUs: ws, WindowEndUs: we, Count: n + 1}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteMessages(context.Background(), kafka.Message{Value: b}); err != nil {
			t.Fatal(err)
		}
	}
	kafkatest.DeleteRecords(t, east.Addrs(), DefaultTopic, 0, 3)

	r, err := Start(Config{Region: "west", Brokers: map[string][]string{"east": east.Addrs(), "west": west.Addrs()}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	deadline := time.Now().Add(10 * time.Second)
	for r.Table().Spent("k", ws, 0, 0, 100, time.Now()) != 5 {
		if time.Now().After(deadline) {
			t.Fatalf("west sees %d of east's 5", r.Table().Spent("k", ws, 0, 0, 100, time.Now()))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
