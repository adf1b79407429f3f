package checkapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/follower"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

func TestDecisionServiceOverConnectAndGRPC(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]connect.ClientOption{"connect": nil, "grpc": {connect.WithGRPC()}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			snap := &policy.Snapshot{Tenant: policy.Tenant{ID: "t1", Slug: "acme", Name: "Acme", DefaultTier: "free"}, Version: 9,
				Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{{ID: "r1", Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
					Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 2, Window: time.Hour}}}}}}
			c, err := decide.Compile(snap)
			if err != nil {
				t.Fatal(err)
			}
			keys := follower.NewKeys()
			secret, _ := policy.NewKeySecret(policy.KeyCheck)
			keys.Set(policy.HashKey(secret), c)
			now := func() time.Time { return time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC) }
			path, h := NewDecisionService(decision.Service{Decider: decide.New(decide.InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: now}, now),
				Authenticate: keys.Authenticate})
			mux := http.NewServeMux()
			mux.Handle(path, h)
			srv := httptest.NewUnstartedServer(mux)
			srv.EnableHTTP2 = true
			srv.StartTLS()
			defer srv.Close()
			client := sluicev1connect.NewDecisionServiceClient(srv.Client(), srv.URL, opts...)
			check := func(key string, m *sluicev1.CheckRequest) (*sluicev1.CheckResponse, error) {
				req := connect.NewRequest(m)
				req.Header().Set("Authorization", "Bearer "+key)
				res, err := client.Check(context.Background(), req)
				if err != nil {
					return nil, err
				}
				return res.Msg, nil
			}
			alice := &sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "alice"}}}
			var allowed []bool
			for range 3 {
				res, err := check(secret, alice)
				if err != nil {
					t.Fatal(err)
				}
				allowed = append(allowed, res.Allowed)
				if res.ConfigVersion != 9 || res.Rules[0].RuleName != "per-client" {
					t.Fatalf("response %v", res)
				}
			}
			if allowed[0] != true || allowed[1] != true || allowed[2] != false {
				t.Fatalf("allowed %v, want [true true false]", allowed)
			}
			res, _ := check(secret, alice)
			if r := res.Rules[0]; r.RetryAfter == nil || r.Remaining != 0 || r.Limit != 2 {
				t.Fatalf("rejected rule status %v", r)
			}
			// A peek consumes nothing: carol still has both after two.
			carol := []*sluicev1.Descriptor{{Key: "client_id", Value: "carol"}}
			for range 2 {
				if res, err := check(secret, &sluicev1.CheckRequest{Descriptors: carol, Peek: true}); err != nil || !res.Allowed || res.Rules[0].Remaining != 2 {
					t.Fatalf("peek: %v %v", res, err)
				}
			}
			if res, err := check(secret, &sluicev1.CheckRequest{Descriptors: carol}); err != nil || res.Rules[0].Remaining != 1 {
				t.Fatalf("check after peeks: %v %v", res, err)
			}
			if _, err := check("sk_check_wrong", alice); connect.CodeOf(err) != connect.CodeUnauthenticated {
				t.Fatalf("wrong key: %v", err)
			}
			if _, err := check(secret, &sluicev1.CheckRequest{Cost: -1}); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("negative cost: %v", err)
			}
			// How a leased request went comes with its release alone, and
			// must be an outcome Sluice knows.
			if _, err := check(secret, &sluicev1.CheckRequest{Descriptors: carol, Latency: durationpb.New(time.Millisecond)}); !slices.Equal(fieldsOf(t, err), []string{"latency"}) {
				t.Fatalf("a latency without release: %v", err)
			}
			if _, err := check(secret, &sluicev1.CheckRequest{Descriptors: carol, Lease: "x", Release: true, Outcome: "fine"}); !slices.Equal(fieldsOf(t, err), []string{"outcome"}) {
				t.Fatalf("an unknown outcome: %v", err)
			}
			if res, err := check(secret, &sluicev1.CheckRequest{Descriptors: carol, Lease: "x", Release: true, Latency: durationpb.New(12 * time.Millisecond), Outcome: "dropped"}); err != nil || !res.Allowed {
				t.Fatalf("a release with its latency and outcome: %v %v", res, err)
			}
			// A key given twice is the caller's mistake, refused as POST
			// /v1/check refuses a member twice: not a value picked for it.
			twice := []*sluicev1.Descriptor{{Key: "client_id", Value: "erin"}, {Key: "route", Value: "/"}, {Key: "client_id", Value: "frank"}}
			if _, err := check(secret, &sluicev1.CheckRequest{Descriptors: twice}); !slices.Equal(fieldsOf(t, err), []string{"descriptors[2].key"}) {
				t.Fatalf("a key twice: %v", err)
			}
			dup := connect.NewRequest(&sluicev1.CheckBatchRequest{Requests: []*sluicev1.CheckRequest{{Descriptors: carol}, {Descriptors: twice}}})
			dup.Header().Set("Authorization", "Bearer "+secret)
			if _, err := client.CheckBatch(context.Background(), dup); !slices.Equal(fieldsOf(t, err), []string{"requests[1].descriptors[2].key"}) {
				t.Fatalf("a key twice in a batch: %v", err)
			}
			reset := connect.NewRequest(&sluicev1.ResetRequest{Descriptors: twice})
			reset.Header().Set("Authorization", "Bearer "+secret)
			if _, err := client.Reset(context.Background(), reset); !slices.Equal(fieldsOf(t, err), []string{"descriptors[2].key"}) {
				t.Fatalf("a key twice in a reset: %v", err)
			}
			batch := connect.NewRequest(&sluicev1.CheckBatchRequest{Requests: []*sluicev1.CheckRequest{
				{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "bob"}}},
				{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "bob"}}, Cost: 2},
			}})
			batch.Header().Set("Authorization", "Bearer "+secret)
			br, err := client.CheckBatch(context.Background(), batch)
			// The checks of a batch are decided at once, in no set order:
			// whichever of bob's comes first takes the limit of 2.
			if err != nil || len(br.Msg.Responses) != 2 || br.Msg.Responses[0].Allowed == br.Msg.Responses[1].Allowed {
				t.Fatalf("batch: %v %v", br, err)
			}
			if name == "connect" {
				// Connect-JSON: a misspelt field is refused, not dropped
				// (a cost of 5 silently charged as 1).
				req, _ := http.NewRequest("POST", srv.URL+path+"Check", strings.NewReader(`{"descriptors":[{"key":"client_id","value":"dave"}],"cots":5}`))
				req.Header.Set("Authorization", "Bearer "+secret)
				req.Header.Set("Content-Type", "application/json")
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "cots") {
					t.Fatalf("a misspelt field: %d %s", resp.StatusCode, body)
				}
			}
		})
	}
}
