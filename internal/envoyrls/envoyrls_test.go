package envoyrls_test

import (
	"context"
	"math"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/decision/decisiontest"
	"github.com/sluicehq/sluice/internal/envoyimport"
	"github.com/sluicehq/sluice/internal/envoyrls"
	"github.com/sluicehq/sluice/internal/grpcserve"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/rlheaders"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

var (
	descriptor   = decisiontest.Descriptor
	grpcFields   = decisiontest.GRPCFields
	testAPI      = decisiontest.Default
	apiWith      = decisiontest.With
	loginMessage = decisiontest.LoginMessage
)

// serveRLS serves cfg's rate limit service on a loopback port, on the
// decider's gRPC server, and returns a stock grpc-go client of it.
func serveRLS(t testing.TB, cfg decision.Service) rlsv3.RateLimitServiceClient {
	srv := grpcserve.NewServer(cfg)
	envoyrls.Register(srv, cfg)
	return rlsv3.NewRateLimitServiceClient(decisiontest.ServeGRPC(t, srv))
}

// serveStockRLS is serveRLS on grpc-go's server, where the service
// answers protobuf messages.
func serveStockRLS(t testing.TB, cfg decision.Service) rlsv3.RateLimitServiceClient {
	srv := grpc.NewServer()
	envoyrls.Register(srv, cfg)
	return rlsv3.NewRateLimitServiceClient(decisiontest.ServeGRPC(t, srv))
}

func TestEnvoyRLSWithAStockClient(t *testing.T) {
	t.Parallel()
	cfg, key := testAPI(t)
	client := serveRLS(t, cfg)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)

	// Two descriptors: alice's per-client counter, and alice on /login.
	req := &rlsv3.RateLimitRequest{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		descriptor("client_id", "alice"), descriptor("client_id", "bob", "route", "/login")}}
	res, err := client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.OverallCode != rlsv3.RateLimitResponse_OK || len(res.Statuses) != 2 {
		t.Fatalf("first call: %v", res)
	}
	st := res.Statuses[1] // bob on /login: the login rule (2/min) is the most restrictive
	if st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetName() != "login" || st.CurrentLimit.GetRequestsPerUnit() != 2 ||
		st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.LimitRemaining != 1 {
		t.Fatalf("login status %v", st)
	}
	if got := res.Statuses[0]; got.CurrentLimit.GetName() != "per-client" || got.LimitRemaining != 2 || got.DurationUntilReset.AsDuration() != 45*time.Second {
		t.Fatalf("per-client status %v", got)
	}

	// hits_addend is the cost: bob's second and third /login at once exceed 2.
	req = &rlsv3.RateLimitRequest{Domain: "acme", HitsAddend: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "bob", "route", "/login")}}
	res, err = client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// Over the limit, the status says none remains, as envoyproxy/ratelimit
	// does; the rate limit headers say what the rule has left.
	if res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || res.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT || res.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("over the limit: %v", res)
	}
	if string(res.RawBody) != loginMessage { // Envoy's 429 body
		t.Fatalf("the rejection's body %q, want the login rule's message", res.RawBody)
	}
	headers := map[string]string{}
	for _, h := range res.ResponseHeadersToAdd {
		headers[h.Key] = h.Value
	}
	if headers["X-Ratelimit-Limit"] != "2" || headers["X-Ratelimit-Remaining"] != "1" || headers["Retry-After"] == "" || headers["Ratelimit-Policy"] == "" {
		t.Fatalf("headers %v: want the login rule's", headers)
	}

	// A descriptor's own hits_addend wins over the request's.
	d := descriptor("client_id", "carol")
	d.HitsAddend = wrapperspb.UInt64(3)
	res, err = client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme", HitsAddend: 1, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if err != nil || res.Statuses[0].LimitRemaining != 0 || res.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("per-descriptor hits: %v %v", res, err)
	}

	// A descriptor's hits_addend of 0 asks without consuming: over the
	// limit for carol, who has none left; dave's peeks leave his 3 for the
	// request after them.
	d.HitsAddend = wrapperspb.UInt64(0)
	res, err = client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if err != nil || res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || res.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("carol's peek: %v %v", res, err)
	}
	peek := descriptor("client_id", "dave")
	peek.HitsAddend = wrapperspb.UInt64(0)
	for range 2 {
		res, err = client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme", HitsAddend: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{peek}})
		if err != nil || res.OverallCode != rlsv3.RateLimitResponse_OK || res.Statuses[0].LimitRemaining != 3 {
			t.Fatalf("peek: %v %v", res, err)
		}
	}
	res, err = client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "dave")}})
	if err != nil || res.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("dave's first request after peeks: %v %v", res, err)
	}
}

// An unlimited descriptor (a shadow rule of policy.MaxLimit, as
// envoyproxy/ratelimit's unlimited is imported) answers OK with no limit
// and 4294967295 remaining; a shadow_mode limit answers OK with its limit
// and what remains, 0 once over, as envoyproxy/ratelimit answers both.
func TestEnvoyRLSUnlimitedAndShadowAnswers(t *testing.T) {
	t.Parallel()
	cfg, key := apiWith(t, []policy.Rule{
		{ID: "u", Name: "unlimited", KeyBy: []string{"client_id"}, Match: []policy.Match{{Key: "route", Value: "/free"}}, Shadow: true, Enabled: true,
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: policy.MaxLimit, Window: time.Second}},
		{ID: "s", Name: "shadowed", KeyBy: []string{"client_id"}, Match: []policy.Match{{Key: "route", Value: "/shadow"}}, Shadow: true, Enabled: true,
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 2, Window: time.Minute}},
	})
	client := serveRLS(t, cfg)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	res, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		descriptor("client_id", "alice", "route", "/free")}})
	if st := res.GetStatuses(); err != nil || len(st) != 1 || st[0].Code != rlsv3.RateLimitResponse_OK || st[0].CurrentLimit != nil || st[0].LimitRemaining != math.MaxUint32 {
		t.Fatalf("unlimited: %v %v, want OK, no limit, 4294967295 remaining", res, err)
	}
	for i, want := range []uint32{1, 0, 0} {
		res, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			descriptor("client_id", "alice", "route", "/shadow")}})
		st := res.GetStatuses()
		if err != nil || res.OverallCode != rlsv3.RateLimitResponse_OK || len(st) != 1 || st[0].Code != rlsv3.RateLimitResponse_OK ||
			st[0].CurrentLimit.GetName() != "shadowed" || st[0].CurrentLimit.GetRequestsPerUnit() != 2 || st[0].LimitRemaining != want {
			t.Fatalf("shadow request %d: %v %v, want OK with the limit of 2 and %d remaining", i+1, res, err, want)
		}
	}
}

func TestEnvoyRLSRefusesWrongCallers(t *testing.T) {
	t.Parallel()
	cfg, key := testAPI(t)
	client := serveRLS(t, cfg)
	ok := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	for name, tc := range map[string]struct {
		ctx  context.Context
		req  *rlsv3.RateLimitRequest
		want codes.Code
	}{
		"no key":         {context.Background(), &rlsv3.RateLimitRequest{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "a")}}, codes.Unauthenticated},
		"wrong key":      {metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer sk_check_nope"), &rlsv3.RateLimitRequest{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "a")}}, codes.Unauthenticated},
		"other domain":   {ok, &rlsv3.RateLimitRequest{Domain: "globex", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "a")}}, codes.PermissionDenied},
		"no descriptors": {ok, &rlsv3.RateLimitRequest{Domain: "acme"}, codes.InvalidArgument},
	} {
		if _, err := client.ShouldRateLimit(tc.ctx, tc.req); status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

// Envoy's per-descriptor limit decides its descriptor alone, in place of
// the tenant's rules, as envoyproxy/ratelimit does: a fixed window counted
// in Redis per the values of all the descriptor's entries.
func TestEnvoyRLSDescriptorLimits(t *testing.T) {
	t.Parallel()
	cfg, key := testAPI(t)
	rc, prefix := redistest.Client(t)
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 22, 10, 0, 15, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	cfg.Decider = decide.NewDecider(decide.Options{Counters: redisengine.New(rc, redisengine.Config{Prefix: prefix, Batch: true, Now: clock}),
		DenyCacheSize: 1024, Budget: time.Second, Now: clock})
	client := serveRLS(t, cfg)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	limited := func(n uint32, unit typev3.RateLimitUnit, kv ...string) *ratelimitv3.RateLimitDescriptor {
		d := descriptor(kv...)
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
		return d
	}
	ask := func(d *ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse_DescriptorStatus {
		t.Helper()
		res, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		if (res.OverallCode == rlsv3.RateLimitResponse_OK) != (res.Statuses[0].Code == rlsv3.RateLimitResponse_OK) {
			t.Fatalf("overall %v, status %v", res.OverallCode, res.Statuses[0].Code)
		}
		return res.Statuses[0]
	}
	ok := func(st *rlsv3.RateLimitResponse_DescriptorStatus) bool { return st.Code == rlsv3.RateLimitResponse_OK }

	// 5 a minute for erin, where the tenant's rule allows 3.
	for i := range 5 {
		st := ask(limited(5, typev3.RateLimitUnit_MINUTE, "client_id", "erin"))
		if !ok(st) || st.LimitRemaining != uint32(4-i) || st.CurrentLimit.GetRequestsPerUnit() != 5 ||
			st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.CurrentLimit.GetName() != "limit/60s/client_id" ||
			st.DurationUntilReset.AsDuration() != 45*time.Second {
			t.Fatalf("erin's request %d under her own limit: %v", i, st)
		}
	}
	if st := ask(limited(5, typev3.RateLimitUnit_MINUTE, "client_id", "erin")); ok(st) {
		t.Fatalf("erin's sixth: %v, want OVER_LIMIT", st)
	}
	// The tenant's rules count apart and are untouched.
	if st := ask(descriptor("client_id", "erin")); !ok(st) || st.CurrentLimit.GetName() != "per-client" || st.LimitRemaining != 2 {
		t.Fatalf("erin under the tenant's rules: %v", st)
	}
	// A limit raised mid-window keeps the count, as in envoyproxy/ratelimit,
	// and the rejection before it is not remembered against it.
	if st := ask(limited(6, typev3.RateLimitUnit_MINUTE, "client_id", "erin")); !ok(st) || st.LimitRemaining != 0 {
		t.Fatalf("erin under a raised limit: %v", st)
	}
	if st := ask(limited(6, typev3.RateLimitUnit_MINUTE, "client_id", "erin")); ok(st) {
		t.Fatalf("erin over the raised limit: %v", st)
	}
	// Counters are per the entries' keys and values, in order, duplicate
	// keys included.
	for _, kv := range [][]string{{"user", "erin"}, {"h", "a", "h", "b"}, {"h", "a", "h", "c"}, {"h", "b", "h", "a"}} {
		if st := ask(limited(1, typev3.RateLimitUnit_MINUTE, kv...)); !ok(st) {
			t.Fatalf("%v: first request %v, want its own counter", kv, st)
		}
	}
	if st := ask(limited(1, typev3.RateLimitUnit_MINUTE, "h", "a", "h", "b")); ok(st) {
		t.Fatalf("second request of h=a,h=b: %v", st)
	}
	// unit_multiplier: a window of 30 seconds.
	thirty := limited(1, typev3.RateLimitUnit_SECOND, "ip", "10.0.0.1")
	thirty.Limit.UnitMultiplier = wrapperspb.UInt32(30)
	if st := ask(thirty); !ok(st) || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND ||
		st.CurrentLimit.GetUnitMultiplier().GetValue() != 30 || st.DurationUntilReset.AsDuration() != 15*time.Second {
		t.Fatalf("30 s window: %v", st)
	}
	if st := ask(thirty); ok(st) {
		t.Fatalf("second request in the 30 s window: %v", st)
	}
	now.Add(int64(15 * time.Second))
	if st := ask(thirty); !ok(st) {
		t.Fatalf("first request of the next 30 s window: %v", st)
	}

	// Invalid limits are refused with their fields, the whole request
	// uncounted.
	bad := func(mod func(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride), want string) {
		t.Helper()
		d := limited(1, typev3.RateLimitUnit_MINUTE, "client_id", "fay")
		mod(d.Limit)
		_, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			limited(1, typev3.RateLimitUnit_MINUTE, "client_id", "gil"), d}})
		if code, fields := grpcFields(err); code != codes.InvalidArgument || !slices.Equal(fields, []string{"descriptors[1]." + want}) {
			t.Fatalf("%s: %v, fields %v", want, err, fields)
		}
	}
	bad(func(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) { o.Unit = typev3.RateLimitUnit_UNKNOWN }, "limit.unit")
	bad(func(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) { o.Unit = 42 }, "limit.unit")
	bad(func(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) { o.RequestsPerUnit = 0 }, "limit.requests_per_unit")
	bad(func(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) {
		o.RequestsPerUnit = policy.MaxLimit + 1
	}, "limit.requests_per_unit")
	bad(func(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) { o.UnitMultiplier = wrapperspb.UInt32(0) }, "limit.unit_multiplier")
	bad(func(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) {
		o.Unit, o.UnitMultiplier = typev3.RateLimitUnit_YEAR, wrapperspb.UInt32(2)
	}, "limit.unit_multiplier")
	if st := ask(limited(1, typev3.RateLimitUnit_MINUTE, "client_id", "gil")); !ok(st) {
		t.Fatalf("gil after refused requests: %v, want his first", st)
	}
}

// envoyproxy/ratelimit's "replaces" (its README's example 7, imported): in
// a call whose descriptors meet both limits, the replacing one applies and
// the replaced one is neither counted nor checked; alone, the replaced one
// applies as ever.
func TestEnvoyRLSReplaces(t *testing.T) {
	t.Parallel()
	plan, err := envoyimport.Parse(strings.NewReader(`
domain: acme
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: second}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{name: specific_limit}]
          requests_per_unit: 10
          unit: second
`))
	if err != nil {
		t.Fatal(err)
	}
	for i := range plan.Rules {
		plan.Rules[i].ID = fmt.Sprint("r", i)
	}
	cfg, key := apiWith(t, plan.Rules)
	client := serveRLS(t, cfg)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	both := []*ratelimitv3.RateLimitDescriptor{descriptor("key_1", "value_1", "user", "bkthomps"), descriptor("key_2", "value_2", "user", "bkthomps")}
	ask := func(ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		res, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme", Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for i := range 10 {
		res := ask(both...)
		if res.OverallCode != rlsv3.RateLimitResponse_OK || res.Statuses[0].CurrentLimit != nil || res.Statuses[1].LimitRemaining != uint32(9-i) {
			t.Fatalf("call %d with both descriptors: %v", i, res)
		}
	}
	if res := ask(both...); res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the 11th call with both: %v, want the 10 a second of the replacing limit", res)
	}
	for i := range 6 { // the replaced limit, alone, untouched by the calls above
		res := ask(both[0])
		if want := i < 5; (res.OverallCode == rlsv3.RateLimitResponse_OK) != want || res.Statuses[0].CurrentLimit.GetName() != "specific_limit" {
			t.Fatalf("call %d with the first descriptor alone: %v", i, res)
		}
	}
}

// Envoy adds the headers of the decider's style: X-RateLimit-* alone here.
func TestEnvoyRLSAddsTheConfiguredHeaders(t *testing.T) {
	t.Parallel()
	cfg, key := testAPI(t)
	cfg.Headers = rlheaders.X
	client := serveRLS(t, cfg)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	res, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "dave")}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range res.ResponseHeadersToAdd {
		got = append(got, h.Key+": "+h.Value)
	}
	if want := []string{"X-Ratelimit-Limit: 3", "X-Ratelimit-Remaining: 2", "X-Ratelimit-Reset: 45"}; !slices.Equal(got, want) {
		t.Fatalf("headers %q, want %q", got, want)
	}
}
