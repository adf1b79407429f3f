package dataplane

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"golang.org/x/net/http2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/envoyimport"
	"github.com/sluicehq/sluice/internal/envoyrls"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/rlheaders"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// serveRLS serves cfg's grpc-go server on a loopback port and returns a
// stock grpc-go client of its rate limit service.
func serveRLS(t testing.TB, cfg decision.Service) rlsv3.RateLimitServiceClient {
	return rlsv3.NewRateLimitServiceClient(serveGRPC(t, cfg))
}

// serveGRPC serves cfg's grpc-go server on a loopback port and returns a
// connection to it.
func serveGRPC(t testing.TB, cfg decision.Service) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(listenGRPC(t, cfg), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// listenGRPC serves cfg's grpc-go server on a loopback port and returns
// its address.
func listenGRPC(t testing.TB, cfg decision.Service) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewGRPCServer(cfg)
	envoyrls.Register(srv, cfg) // as the decider's assembly does
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

func descriptor(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
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
	if res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || res.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT || res.Statuses[0].LimitRemaining != 1 {
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

// DecisionService on grpc-go, with a stock client: decisions, and errors
// with the same codes and field details as over Connect.
func TestDecisionServiceOnGRPCGo(t *testing.T) {
	t.Parallel()
	cfg, key := testAPI(t)
	client := sluicev1.NewDecisionServiceClient(serveGRPC(t, cfg))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	req := &sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "gina"}}}
	for i := range 4 {
		res, err := client.Check(ctx, req)
		if err != nil || res.Allowed != (i < 3) || res.Rules[0].RuleName != "per-client" {
			t.Fatalf("check %d: %v %v", i, res, err)
		}
	}
	batch, err := client.CheckBatch(ctx, &sluicev1.CheckBatchRequest{Requests: []*sluicev1.CheckRequest{req, {Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "hal"}}}}})
	if err != nil || len(batch.Responses) != 2 || batch.Responses[0].Allowed || !batch.Responses[1].Allowed {
		t.Fatalf("batch %v %v", batch, err)
	}
	_, err = client.Check(ctx, &sluicev1.CheckRequest{Tier: "platinum"})
	if code, fields := grpcFields(err); code != codes.InvalidArgument || len(fields) != 1 || fields[0] != "tier" {
		t.Fatalf("unknown tier: %v, fields %v", err, fields)
	}
	if _, err := client.Check(context.Background(), req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no key: %v", err)
	}
	// A client that compresses its calls is understood.
	if res, err := client.Check(ctx, &sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "ida"}}},
		grpc.UseCompressor("gzip")); err != nil || !res.Allowed {
		t.Fatalf("a gzip-compressed call: %v %v", res, err)
	}
}

// The decider's gRPC server tells each client how many calls one
// connection may have in flight: a bound, not grpc-go's unbounded default.
func TestGRPCServerBoundsStreams(t *testing.T) {
	t.Parallel()
	cfg, _ := testAPI(t)
	conn, err := net.Dial("tcp", listenGRPC(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("first frame %v, want SETTINGS", f)
	}
	if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); !ok || v != maxStreams {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d (sent: %v), want %d", v, ok, maxStreams)
	}
}

// grpcFields is the code of a gRPC error and the fields its BadRequest
// details name.
func grpcFields(err error) (codes.Code, []string) {
	st := status.Convert(err)
	var fields []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, f := range br.FieldViolations {
				fields = append(fields, f.Field)
			}
		}
	}
	return st.Code(), fields
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
	cfg.Decider = decide.NewDecider(decide.Options{Engine: redisengine.New(rc, redisengine.Config{Prefix: prefix, Batch: true, Now: clock}),
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

// A blocked client gets 429 naming the blocking rule, with a limit and
// remaining of 0 and no Retry-After (it never can be admitted); Envoy gets
// OVER_LIMIT with requests_per_unit 0, as envoyproxy/ratelimit answers
// its blocklist entries.
func TestBlockedClient(t *testing.T) {
	t.Parallel()
	blocking := func(t testing.TB) (decision.Service, string) {
		return apiWith(t, []policy.Rule{
			{ID: "r1", Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
				Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Minute}},
			{ID: "r2", Name: "blocklist", Match: []policy.Match{{Key: "client_id", Value: "50.0.0.5"}}, Enabled: true, Block: true,
				Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 1, Window: time.Second}},
		}, policy.Override{Identifier: "scraper-*", Block: true})
	}
	eachServer(t, blocking, func(t *testing.T, srv served, key string) {
		resp, m := post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"50.0.0.5"}}`)
		if resp.StatusCode != 429 {
			t.Fatalf("a blocked client: %d %v", resp.StatusCode, m)
		}
		if v, _ := m["violated_policies"].([]any); len(v) != 1 || v[0] != "blocklist" {
			t.Fatalf("violated policies %v, want [blocklist]", m["violated_policies"])
		}
		if h := resp.Header; h.Get("X-RateLimit-Limit") != "0" || h.Get("X-RateLimit-Remaining") != "0" || h.Get("Retry-After") != "" {
			t.Fatalf("headers %v", h)
		}
		if resp, m := post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"50.0.0.6"}}`); resp.StatusCode != 200 {
			t.Fatalf("another client: %d %v", resp.StatusCode, m)
		}
		resp, m = post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"scraper-3"}}`)
		if v, _ := m["violated_policies"].([]any); resp.StatusCode != 429 || len(v) != 1 || v[0] != "blocked" ||
			resp.Header.Get("RateLimit-Policy") != `"blocked";q=0;w=1` || resp.Header.Get("Retry-After") != "" {
			t.Fatalf("a client blocked by an override: %d %v %v", resp.StatusCode, m, resp.Header)
		}
	})
	cfg, key := blocking(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	res, err := serveRLS(t, cfg).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "50.0.0.5")}})
	if err != nil {
		t.Fatal(err)
	}
	st := res.Statuses[0]
	if res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || st.Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
		st.CurrentLimit.GetName() != "blocklist" || st.CurrentLimit.GetRequestsPerUnit() != 0 || st.LimitRemaining != 0 {
		t.Fatalf("Envoy's answer for a blocked client: %v", res)
	}
	// A client blocked by an override: the rule "blocked", 0 a second.
	res, err = serveRLS(t, cfg).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "scraper-3", "route", "/x")}})
	if err != nil {
		t.Fatal(err)
	}
	if st := res.Statuses[0]; st.Code != rlsv3.RateLimitResponse_OVER_LIMIT || st.CurrentLimit.GetName() != "blocked" ||
		st.CurrentLimit.GetRequestsPerUnit() != 0 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
		t.Fatalf("Envoy's answer for a client blocked by an override: %v", res)
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

// RateLimit-Policy and the Connect answer's quota are each rule's rate,
// its limit per window; X-RateLimit-Limit and limit the most a request can
// find: a token bucket's burst, a leaky bucket's queue (of one here).
func TestPolicyStatesTheRate(t *testing.T) {
	t.Parallel()
	rated := func(t testing.TB) (decision.Service, string) {
		return apiWith(t, []policy.Rule{
			{ID: "r1", Name: "bursty", KeyBy: []string{"client_id"}, Enabled: true,
				Params: policy.Params{Algorithm: policy.TokenBucket, Limit: 10, Burst: 20, Window: time.Minute}},
			{ID: "r2", Name: "queue", KeyBy: []string{"client_id"}, Enabled: true,
				Params: policy.Params{Algorithm: policy.LeakyBucket, Limit: 5, Window: time.Second}}})
	}
	eachServer(t, rated, func(t *testing.T, srv served, key string) {
		resp, m := post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"carol"}}`)
		if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"bursty";q=10;w=60, "queue";q=5;w=1` || resp.Header.Get("X-RateLimit-Limit") != "1" {
			t.Errorf("%d, headers %v (%v)", resp.StatusCode, resp.Header, m)
		}
	})
	cfg, key := rated(t)
	req := connect.NewRequest(&sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "carol"}}})
	req.Header().Set("Authorization", "Bearer "+key)
	res, err := serveConnect(t, cfg).Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Msg.Rules; r[0].GetLimit() != 20 || r[0].GetQuota() != 10 || r[1].GetLimit() != 1 || r[1].GetQuota() != 5 {
		t.Errorf("the Connect answer: %v, want limits 20 and 1, quotas 10 and 5", r)
	}
}

// A client whose override changes a rule's limit and window is told the
// override's, in every answer: RateLimit-Policy, the Connect answer's
// window, Envoy's requests_per_unit and unit. Others are told the rule's.
func TestOverridesLimitAndWindowAreTheOnesAnswered(t *testing.T) {
	t.Parallel()
	overridden := func(t testing.TB) (decision.Service, string) {
		return apiWith(t, []policy.Rule{{ID: "r1", Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Minute}}},
			policy.Override{Identifier: "partner", RuleID: "r1", Params: &policy.Params{Algorithm: policy.FixedWindow, Limit: 50, Window: time.Second}})
	}
	eachServer(t, overridden, func(t *testing.T, srv served, key string) {
		for client, want := range map[string]string{"partner": `"per-client";q=50;w=1`, "alice": `"per-client";q=3;w=60`} {
			resp, m := post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"`+client+`"}}`)
			if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != want {
				t.Errorf("%s: %d, RateLimit-Policy %q, want %q (%v)", client, resp.StatusCode, resp.Header.Get("RateLimit-Policy"), want, m)
			}
		}
	})
	cfg, key := overridden(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	for client, want := range map[string]struct {
		n    uint32
		unit rlsv3.RateLimitResponse_RateLimit_Unit
	}{"partner": {50, rlsv3.RateLimitResponse_RateLimit_SECOND}, "alice": {3, rlsv3.RateLimitResponse_RateLimit_MINUTE}} {
		res, err := serveRLS(t, cfg).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", client)}})
		if err != nil {
			t.Fatal(err)
		}
		if l := res.Statuses[0].CurrentLimit; l.GetRequestsPerUnit() != want.n || l.GetUnit() != want.unit {
			t.Errorf("Envoy's answer for %s: %v, want %d a %v", client, l, want.n, want.unit)
		}
	}
	req := connect.NewRequest(&sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "partner"}}})
	req.Header().Set("Authorization", "Bearer "+key)
	res, err := serveConnect(t, cfg).Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Msg.Rules[0]; r.GetLimit() != 50 || r.GetWindow().AsDuration() != time.Second {
		t.Errorf("the Connect answer for partner: %v, want 50 a second", r)
	}
}
