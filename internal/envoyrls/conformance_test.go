package envoyrls_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/envoyimport"
	"github.com/sluicehq/sluice/internal/follower"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// A conformance suite is one file of testdata/conformance: the
// configuration of one of envoyproxy/ratelimit's tests, and the calls its
// tests make with the answers they expect, written down as data.
type conformanceSuite struct {
	Upstream string   `yaml:"upstream"` // the upstream tests and files it stands for
	Configs  []string `yaml:"configs"`  // envoyproxy/ratelimit configurations, merged as MERGE_DOMAIN_CONFIG
	// Refused lists the fields the import names when it refuses the
	// configuration, as envoyproxy/ratelimit refuses to load it.
	Refused []string `yaml:"refused"`
	// QuotaMode is envoyproxy/ratelimit's QUOTA_MODE (the decider's
	// -quota-mode).
	QuotaMode bool `yaml:"quota_mode"`
	// Notes are what the import must say of the configuration, each a
	// part of one of its notes.
	Notes []string          `yaml:"notes"`
	Cases []conformanceCase `yaml:"cases"`
}

// A case is a sequence of calls on fresh counters.
type conformanceCase struct {
	Name     string `yaml:"name"`
	Upstream string `yaml:"upstream"` // the upstream test (and assertion) it reproduces
	// Differs, when set, says why Sluice answers otherwise than upstream
	// on purpose (docs/migrating.md says so too); the calls then hold
	// Sluice's answers.
	Differs string            `yaml:"differs"`
	Calls   []conformanceCall `yaml:"calls"`
}

// A call is one ShouldRateLimit, sent Times times (1 when 0).
type conformanceCall struct {
	Domain string `yaml:"domain"` // default: the configuration's
	// Send lists the descriptors, each "key=value,key=value", and
	// optionally ";hits=N" (the descriptor's own hits_addend).
	Send  []string `yaml:"send"`
	Hits  uint32   `yaml:"hits"` // the request's hits_addend
	Times int      `yaml:"times"`
	// Code is the overall code; by default OVER_LIMIT when a status is.
	Code string `yaml:"code"`
	// Statuses are each descriptor's: "CODE", "CODE unlimited" or "CODE
	// N/UNIT[xM] REMAINING[..LAST]" and optionally " name=NAME"; a
	// remaining of FIRST..LAST steps evenly over the Times calls.
	Statuses []string `yaml:"statuses"`
	Error    string   `yaml:"error"` // a gRPC code, when the call is refused
}

// Every case of envoyproxy/ratelimit's config, integration and service
// tests written down in testdata/conformance answers through `sluice
// import` and Sluice's Envoy rate limit service, on Redis, as upstream's
// tests expect: the overall code, and each descriptor's code, limit and
// remaining. A configuration upstream refuses is refused, naming the
// field. Where Sluice means to differ, the case says why.
func TestConformanceWithEnvoyRatelimit(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "conformance", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no conformance suites: %v", err)
	}
	cases := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var s conformanceSuite
		dec := yaml.NewDecoder(strings.NewReader(string(data)))
		dec.KnownFields(true)
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		cases += max(1, len(s.Cases))
		// Each suite runs on the decider's server, which reads and writes
		// the wire form itself, and on grpc-go's, which builds messages.
		for _, stock := range []bool{false, true} {
			name := strings.TrimSuffix(filepath.Base(file), ".yaml")
			if stock {
				name += "/grpc-go"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				runSuite(t, s, stock)
			})
		}
	}
	t.Logf("%d suites, %d cases", len(files), cases)
}

func runSuite(t *testing.T, s conformanceSuite, stock bool) {
	t.Logf("upstream: %s", s.Upstream)
	var plan *envoyimport.Plan
	var err error
	for _, c := range s.Configs {
		p, e := envoyimport.Parse(strings.NewReader(c))
		switch {
		case e != nil:
			err = e
		case plan == nil:
			plan = p
		default:
			err = plan.Merge(p)
		}
		if err != nil {
			break
		}
	}
	if len(s.Refused) > 0 {
		var pe *policy.Error
		if !errors.As(err, &pe) {
			t.Fatalf("imported (err %v), want refused naming %v", err, s.Refused)
		}
		var fields []string
		for _, f := range pe.Fields {
			fields = append(fields, f.Field)
		}
		for _, want := range s.Refused {
			if !slices.Contains(fields, want) {
				t.Errorf("refused naming %v (%v), want %q among them", fields, pe, want)
			}
		}
		return
	}
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	for _, n := range s.Notes {
		if !slices.ContainsFunc(plan.Notes, func(got string) bool { return strings.Contains(got, n) }) {
			t.Errorf("the import's notes %q say nothing of %q", plan.Notes, n)
		}
	}
	for _, c := range s.Cases {
		t.Run(c.Name, func(t *testing.T) {
			if c.Upstream != "" {
				t.Logf("upstream: %s", c.Upstream)
			}
			if c.Differs != "" {
				t.Logf("Sluice differs: %s", c.Differs)
			}
			client, key := conformanceService(t, plan, s.QuotaMode, stock)
			ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
			for i, call := range c.Calls {
				times := max(1, call.Times)
				for n := range times {
					checkCall(t, ctx, client, plan.Tenant.Name, call, n, times, fmt.Sprintf("call %d (%d of %d)", i, n+1, times))
				}
			}
		})
	}
}

// conformanceService serves plan's rules on fresh Redis counters at a
// fixed time, 15 s into a minute, and returns a client and the check key.
func conformanceService(t *testing.T, plan *envoyimport.Plan, quotaMode, stock bool) (rlsv3.RateLimitServiceClient, string) {
	rules := slices.Clone(plan.Rules)
	for i := range rules {
		rules[i].ID = fmt.Sprint("r", i)
	}
	c, err := decide.Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t1", Slug: plan.Tenant.Slug, Name: plan.Tenant.Name, DefaultTier: "default"},
		Version: 1, Tiers: []policy.Tier{{Name: "default", Rules: rules}}})
	if err != nil {
		t.Fatal(err)
	}
	keys := follower.NewKeys()
	secret, _ := policy.NewKeySecret(policy.KeyCheck)
	keys.Set(policy.HashKey(secret), c)
	rc, prefix := redistest.Client(t)
	clock := func() time.Time { return time.Date(2026, 11, 22, 10, 0, 15, 0, time.UTC) }
	cfg := decision.Service{Authenticate: keys.Authenticate, QuotaMode: quotaMode,
		Decider: decide.NewDecider(decide.Options{Counters: redisengine.New(rc, redisengine.Config{Prefix: prefix, Batch: true, Now: clock}),
			DenyCacheSize: 1024, Budget: time.Second, Now: clock})}
	if stock {
		return serveStockRLS(t, cfg), secret
	}
	return serveRLS(t, cfg), secret
}

// checkCall sends call (the n-th of times) and checks its answer.
func checkCall(t *testing.T, ctx context.Context, client rlsv3.RateLimitServiceClient, domain string, call conformanceCall, n, times int, what string) {
	t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: call.Hits}
	if call.Domain != "" {
		req.Domain = call.Domain
	}
	for _, s := range call.Send {
		entries, hits, _ := strings.Cut(s, ";hits=")
		d := &ratelimitv3.RateLimitDescriptor{}
		for _, kv := range strings.Split(entries, ",") {
			k, v, _ := strings.Cut(kv, "=")
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		if hits != "" {
			h, err := strconv.ParseUint(hits, 10, 64)
			if err != nil {
				t.Fatalf("%s: hits %q", what, hits)
			}
			d.HitsAddend = wrapperspb.UInt64(h)
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	res, err := client.ShouldRateLimit(ctx, req)
	if call.Error != "" {
		if got := status.Code(err).String(); got != call.Error {
			t.Fatalf("%s %v: error %v, want %s", what, call.Send, err, call.Error)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s %v: %v", what, call.Send, err)
	}
	if len(res.Statuses) != len(call.Statuses) {
		t.Fatalf("%s %v: %d statuses, want %d", what, call.Send, len(res.Statuses), len(call.Statuses))
	}
	over := false
	for i, spec := range call.Statuses {
		want := parseStatus(t, spec, n, times)
		over = over || want.Code == rlsv3.RateLimitResponse_OVER_LIMIT
		got := res.Statuses[i]
		if got.Code != want.Code || got.LimitRemaining != want.LimitRemaining || !sameLimit(got.CurrentLimit, want.CurrentLimit) {
			t.Errorf("%s %v: descriptor %d answered %s, want %q", what, call.Send, i, statusString(got), spec)
		}
	}
	code := call.Code
	if code == "" {
		code = map[bool]string{false: "OK", true: "OVER_LIMIT"}[over]
	}
	if res.OverallCode.String() != code {
		t.Errorf("%s %v: overall %s, want %s", what, call.Send, res.OverallCode, code)
	}
}

// parseStatus reads a status as the conformance files write it, for the
// n-th call of times.
func parseStatus(t *testing.T, spec string, n, times int) *rlsv3.RateLimitResponse_DescriptorStatus {
	t.Helper()
	f := strings.Fields(spec)
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_Code(rlsv3.RateLimitResponse_Code_value[f[0]])}
	if f[0] != "OK" && f[0] != "OVER_LIMIT" {
		t.Fatalf("status %q: code", spec)
	}
	switch {
	case len(f) == 1:
		return st
	case f[1] == "unlimited":
		st.LimitRemaining = math.MaxUint32
		return st
	case len(f) < 3:
		t.Fatalf("status %q: want CODE N/UNIT REMAINING", spec)
	}
	rate, unit, _ := strings.Cut(f[1], "/")
	unit, mult, _ := strings.Cut(unit, "x")
	rpu, err := strconv.ParseUint(rate, 10, 32)
	u, ok := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(unit)]
	if err != nil || !ok {
		t.Fatalf("status %q: limit", spec)
	}
	st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: uint32(rpu), Unit: rlsv3.RateLimitResponse_RateLimit_Unit(u)}
	if mult != "" {
		m, _ := strconv.ParseUint(mult, 10, 32)
		st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(uint32(m))
	}
	first, last, steps := f[2], f[2], false
	if a, b, ok := strings.Cut(f[2], ".."); ok {
		first, last, steps = a, b, true
	}
	lo, err1 := strconv.ParseInt(first, 10, 64)
	hi, err2 := strconv.ParseInt(last, 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("status %q: remaining", spec)
	}
	rem := lo
	if steps && times > 1 {
		rem = lo + (hi-lo)*int64(n)/int64(times-1)
	}
	st.LimitRemaining = uint32(rem)
	for _, extra := range f[3:] {
		if name, ok := strings.CutPrefix(extra, "name="); ok {
			st.CurrentLimit.Name = name
		}
	}
	return st
}

// sameLimit compares limits; a name is compared only where the case
// states one (Sluice names every limit: see docs/migrating.md).
func sameLimit(got, want *rlsv3.RateLimitResponse_RateLimit) bool {
	if got == nil || want == nil {
		return got == nil && want == nil
	}
	return got.RequestsPerUnit == want.RequestsPerUnit && got.Unit == want.Unit &&
		got.GetUnitMultiplier().GetValue() == want.GetUnitMultiplier().GetValue() && (want.Name == "" || got.Name == want.Name)
}

func statusString(s *rlsv3.RateLimitResponse_DescriptorStatus) string {
	if s.CurrentLimit == nil {
		return fmt.Sprintf("%s (no limit) remaining %d", s.Code, s.LimitRemaining)
	}
	return fmt.Sprintf("%s %d/%s x%d name=%q remaining %d", s.Code, s.CurrentLimit.RequestsPerUnit, s.CurrentLimit.Unit,
		s.CurrentLimit.GetUnitMultiplier().GetValue(), s.CurrentLimit.Name, s.LimitRemaining)
}
