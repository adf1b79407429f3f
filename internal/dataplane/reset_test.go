package dataplane

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/decision/decisiontest"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/httpport/httpporttest"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// twoDeciders returns two deciders' configs of one tenant (testAPI's),
// each with its deny cache, on one Redis prefix, each following the
// other's resets, and the tenant's check key.
func twoDeciders(t *testing.T) ([2]decision.Service, string) {
	t.Helper()
	rc, prefix := redistest.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	base, key := testAPI(t)
	var cfgs [2]decision.Service
	for i := range cfgs {
		eng := redisengine.New(rc, redisengine.Config{Prefix: prefix, Batch: true})
		t.Cleanup(eng.Close)
		dec := decide.NewDecider(decide.Options{Counters: eng, DenyCacheSize: 100, Budget: time.Second})
		ready := make(chan struct{})
		go eng.WatchResets(ctx, dec.Forget, slog.Default(), ready)
		<-ready
		cfgs[i] = base
		cfgs[i].Decider = dec
	}
	return cfgs, key
}

// A reset through one decider's POST /v1/reset resets the counters for
// every decider on the same Redis: the client's next request is admitted
// on each, deny caches included, while other clients keep their counts.
// Bad resets are refused as bad checks are.
func TestResetAcrossDeciders(t *testing.T) {
	t.Parallel()
	for _, kind := range httpporttest.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfgs, key := twoDeciders(t)
			a, b := serve(t, kind, cfgs[0], handler(cfgs[0])), serve(t, kind, cfgs[1], handler(cfgs[1]))
			login := `{"descriptors":{"client_id":"alice","route":"/login"}}`
			for _, srv := range []served{a, b, a, b} { // the login rule: 2 a minute
				post(t, srv, "/v1/check", key, login)
			}
			for i, srv := range []served{a, b} { // rejected, and remembered in each deny cache
				if resp, _ := post(t, srv, "/v1/check", key, login); resp.StatusCode != 429 {
					t.Fatalf("decider %d: alice's 5th login %d, want 429", i, resp.StatusCode)
				}
			}
			post(t, a, "/v1/check", key, `{"descriptors":{"client_id":"bob","route":"/login"}}`)
			post(t, a, "/v1/check", key, `{"descriptors":{"client_id":"bob","route":"/login"}}`)

			resp, m := post(t, a, "/v1/reset", key, login)
			if resp.StatusCode != 200 || len(m["reset"].([]any)) != 2 {
				t.Fatalf("reset: %d %v, want both rules alice's login meets", resp.StatusCode, m)
			}
			if resp, m := post(t, a, "/v1/check", key, login); resp.StatusCode != 200 {
				t.Fatalf("alice on the decider that reset: %d %v", resp.StatusCode, m)
			}
			// The other decider hears of it within moments.
			deadline := time.Now().Add(10 * time.Second)
			for {
				resp, _ := post(t, b, "/v1/check", key, login)
				if resp.StatusCode == 200 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the other decider still rejects alice after the reset")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if resp, _ := post(t, b, "/v1/check", key, `{"descriptors":{"client_id":"bob","route":"/login"}}`); resp.StatusCode != 429 {
				t.Fatalf("bob after alice's reset: %d, want still 429", resp.StatusCode)
			}

			for _, tc := range []struct {
				name, key, body string
				status          int
				detail          string // what the problem's detail starts with
			}{
				{"no key", "", login, 401, ""},
				{"unknown field", key, `{"cost":1}`, 400, "the body is not a valid reset: "},
				{"unknown tier", key, `{"tier":"gold"}`, 400, ""},
				{"bad descriptor", key, `{"descriptors":{"no spaces":"x"}}`, 400, ""},
			} {
				resp, m := post(t, a, "/v1/reset", tc.key, tc.body)
				if detail, _ := m["detail"].(string); resp.StatusCode != tc.status || !strings.HasPrefix(detail, tc.detail) {
					t.Errorf("%s: %d %v, want %d %q…", tc.name, resp.StatusCode, m, tc.status, tc.detail)
				}
			}
		})
	}
}

// DecisionService.Reset over gRPC: the rules reset by id and name, and
// the client admitted again; a call without the check key is refused.
func TestResetOverGRPC(t *testing.T) {
	t.Parallel()
	cfgs, key := twoDeciders(t)
	reg := prometheus.NewRegistry()
	cfgs[0].Metrics = decision.NewMetrics(reg, cfgs[0].Decider)
	client := sluicev1.NewDecisionServiceClient(dialGRPC(t, cfgs[0]))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	alice := &sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "alice"}}}
	for range 4 { // per-client: 3 a minute
		if _, err := client.Check(ctx, alice); err != nil {
			t.Fatal(err)
		}
	}
	res, err := client.Reset(ctx, &sluicev1.ResetRequest{Descriptors: alice.Descriptors})
	if err != nil || len(res.Rules) != 1 || res.Rules[0].RuleId != "r1" || res.Rules[0].RuleName != "per-client" {
		t.Fatalf("reset: %v, %v", res, err)
	}
	if ans, err := client.Check(ctx, alice); err != nil || !ans.Allowed || ans.Rules[0].Remaining != 2 {
		t.Fatalf("alice after her reset: %v, %v", ans, err)
	}
	if _, err := client.Reset(context.Background(), &sluicev1.ResetRequest{Descriptors: alice.Descriptors}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a reset without the key: %v", err)
	}
	if _, err := client.Reset(ctx, &sluicev1.ResetRequest{Tier: "gold"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a reset in an unknown tier: %v", err)
	}
	for outcome, want := range map[string]float64{"reset": 1, "error": 1} {
		if got := decisiontest.Counted(reg, "sluice_resets_total", "tenant", "acme", "outcome", outcome); got != want {
			t.Errorf("resets %s: %v, want %v", outcome, got, want)
		}
	}
}
