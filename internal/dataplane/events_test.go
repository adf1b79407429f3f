package dataplane

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/events"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/kafkatest"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// Decisions through the API become events on Kafka: one rejection event per
// rejection, and counter deltas that add up to every decision.
func TestDecisionsArePublished(t *testing.T) {
	t.Parallel()
	topic := kafkatest.Topic(t)
	b := kafkatest.Start(t, 1, []string{topic})
	pub := events.NewPublisher(events.Config{Brokers: b.Addrs(), Topic: topic, Decider: "d", FlushInterval: 10 * time.Millisecond, DeltaInterval: 30 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = pub.Run(ctx) }()

	c, err := decide.Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t1", Slug: "acme", Name: "Acme", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{{ID: "r1", Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 2, Window: time.Hour}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	keys := NewKeys()
	secret, _ := policy.NewKeySecret(policy.KeyCheck)
	keys.Set(policy.HashKey(secret), c)
	srv := httptest.NewServer(NewHTTPHandler(HTTPConfig{Authenticate: keys.Authenticate, Events: pub,
		Decider: decide.New(decide.LocalEngine{Engine: limit.NewEngine(limit.EngineConfig{}), Now: time.Now}, time.Now)}))
	defer srv.Close()
	for range 3 {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/check", strings.NewReader(`{"descriptors":{"client_id":"alice"}}`))
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: b.Addrs(), Topic: topic, GroupID: kafkatest.Topic(t), MaxWait: 50 * time.Millisecond})
	defer r.Close()
	var rejections, allowed, rejected int64
	var rej *sluicev1.Rejection
	for rejections != 1 || allowed != 2 || rejected != 1 {
		m, err := r.ReadMessage(rctx)
		if err != nil {
			t.Fatalf("after %d rejections, %d allowed, %d rejected: %v", rejections, allowed, rejected, err)
		}
		var ev sluicev1.Event
		if err := proto.Unmarshal(m.Value, &ev); err != nil {
			t.Fatal(err)
		}
		switch k := ev.Kind.(type) {
		case *sluicev1.Event_Rejection:
			rejections++
			rej = k.Rejection
		case *sluicev1.Event_Delta:
			allowed += k.Delta.Allowed
			rejected += k.Delta.Rejected
		}
	}
	if rej.TenantId != "t1" || rej.Tier != "free" || rej.RuleId != "r1" || rej.ClientKey != "alice" || rej.Cost != 1 {
		t.Fatalf("rejection event %v", rej)
	}
}
