package checkapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/events"
	"github.com/sluicehq/sluice/internal/events/eventstest"
	"github.com/sluicehq/sluice/internal/follower"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
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
	keys := follower.NewKeys()
	secret, _ := policy.NewKeySecret(policy.KeyCheck)
	keys.Set(policy.HashKey(secret), c)
	srv := httptest.NewServer(handler(decision.Service{Authenticate: keys.Authenticate, Events: pub,
		Decider: decide.New(decide.InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: time.Now}, time.Now)}))
	defer srv.Close()
	// A peek is no request: it is counted nowhere (counted, alice's
	// allowed would reach 3).
	for _, body := range []string{`{"descriptors":{"client_id":"alice"},"peek":true}`, "", "", ""} {
		if body == "" {
			body = `{"descriptors":{"client_id":"alice"}}`
		}
		req, _ := http.NewRequest("POST", srv.URL+"/v1/check", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	ta := eventstest.Read(t, b.Addrs(), topic, func(ta *eventstest.Tally) bool {
		return len(ta.Rejections) == 1 && ta.Allowed == 2 && ta.Rejected == 1
	})
	rej := ta.Rejections[0]
	if rej.TenantId != "t1" || rej.Tier != "free" || rej.RuleId != "r1" || rej.ClientKey != "alice" || rej.Cost != 1 {
		t.Fatalf("rejection event %v", rej)
	}
}
