package decision

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// BenchmarkObserve is what recording one decision of two rules costs the
// decision path, with the per-rule counts and without.
func BenchmarkObserve(b *testing.B) {
	r1, r2 := &policy.Rule{Name: "per-client"}, &policy.Rule{Name: "global"}
	dec := decide.Decision{Allowed: true, Tier: "free", Rules: []decide.RuleResult{
		{Rule: r1, Result: limit.Result{Allowed: true, Limit: 100, Remaining: 3}},
		{Rule: r2, Result: limit.Result{Allowed: true, Limit: 1000, Remaining: 900}}}}
	for _, perRule := range []bool{false, true} {
		b.Run(map[bool]string{false: "decisions", true: "per-rule"}[perRule], func(b *testing.B) {
			m := NewMetrics(prometheus.NewRegistry(), nil) // the decider is read only when scraped
			m.PerRule(perRule)
			c := &decide.Compiled{Tenant: policy.Tenant{Slug: "acme"}}
			b.ReportAllocs()
			for b.Loop() {
				m.observe(c, false, dec, nil, time.Millisecond)
			}
		})
	}
}

// A decider's metrics follow its configuration: when a change takes a
// rule or a tier away, the syncer tells the metrics, which drop their
// series; a tenant removed takes all its series along; what remains, and
// other tenants, stay counted.
func TestMetricsForgetWhatTheConfigurationDropped(t *testing.T) {
	t.Parallel()
	m := NewMetrics(prometheus.NewRegistry(), nil)
	reg := prometheus.NewRegistry() // the counters alone: the breaker gauge would read the decider
	reg.MustRegister(m.decisions, m.rules)
	rule := func(id, name string) policy.Rule {
		return policy.Rule{ID: id, Name: name, KeyBy: []string{"client_id"}, Enabled: true,
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 5, Window: time.Minute}}
	}
	acme := &policy.Snapshot{Tenant: policy.Tenant{ID: "t1", Slug: "acme", Name: "Acme", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{rule("r1", "per-client"), rule("r2", "login")}},
			{Name: "pro", Rules: []policy.Rule{rule("r3", "per-client")}}}}
	shop := &policy.Snapshot{Tenant: policy.Tenant{ID: "t2", Slug: "shop", Name: "Shop", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{rule("r4", "per-client")}}}}
	compile := func(s *policy.Snapshot) *decide.Compiled {
		c, err := decide.Compile(s)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	acmeConfig, shopConfig := compile(acme), compile(shop)
	observe := func(c *decide.Compiled, tier string, rules ...string) {
		dec := decide.Decision{Allowed: true, Tier: tier}
		for _, name := range rules {
			dec.Rules = append(dec.Rules, decide.RuleResult{Rule: &policy.Rule{Name: name}, Result: limit.Result{Allowed: true, Limit: 10, Remaining: 1}})
		}
		m.observe(c, false, dec, nil, time.Millisecond)
	}
	observe(acmeConfig, "free", "per-client", "login")
	observe(acmeConfig, "pro", "per-client")
	observe(shopConfig, "free", "per-client")
	series := func() []string {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range families {
			for _, metric := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range metric.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				out = append(out, strings.TrimRight(labels["tenant"]+"/"+labels["tier"]+"/"+labels["rule"], "/"))
			}
		}
		slices.Sort(out)
		return out
	}
	want := []string{"acme", "acme/free/login", "acme/free/per-client", "acme/pro/per-client", "shop", "shop/free/per-client"}
	if got := series(); !slices.Equal(got, want) {
		t.Fatalf("series %q, want %q", got, want)
	}

	// The login rule and the pro tier go.
	next := *acme
	next.Version, next.Tiers = 2, []policy.Tier{{Name: "free", Rules: []policy.Rule{rule("r1", "per-client")}}}
	nextConfig := compile(&next)
	m.Forget(acmeConfig, nextConfig) // as the config follower tells it
	want = []string{"acme", "acme/free/per-client", "shop", "shop/free/per-client"}
	if got := series(); !slices.Equal(got, want) {
		t.Fatalf("after the rule and tier went: %q, want %q", got, want)
	}

	// The tenant goes.
	m.Forget(nextConfig, nil)
	want = []string{"shop", "shop/free/per-client"}
	if got := series(); !slices.Equal(got, want) {
		t.Fatalf("after the tenant went: %q, want %q", got, want)
	}

	// A new tenant takes the slug: it is counted afresh, not into the
	// series dropped.
	again := *acme
	again.Tenant.ID, again.Version = "t3", 1
	observe(compile(&again), "free", "per-client")
	want = []string{"acme", "acme/free/per-client", "shop", "shop/free/per-client"}
	if got := series(); !slices.Equal(got, want) {
		t.Fatalf("after a new tenant took the slug: %q, want %q", got, want)
	}
}
