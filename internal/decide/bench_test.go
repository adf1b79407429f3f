package decide

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// A decision in a tier of 1,000 rules, each for one identifier of one
// namespace (Unkey's overrides kept as rules, or imported routes): the
// rule index finds the one a request meets without trying the others.
func BenchmarkDecideAmong1000Rules(b *testing.B) {
	var rules []policy.Rule
	for i := range 1000 {
		rules = append(rules, policy.Rule{ID: fmt.Sprint("r", i), Name: fmt.Sprint("r", i), Enabled: true, KeyBy: []string{"identifier"},
			Match:  []policy.Match{{Key: "namespace", Value: "api"}, {Key: "identifier", Value: fmt.Sprint("user_", i)}},
			Params: policy.Params{Algorithm: policy.SlidingWindow, Limit: 1e9, Window: time.Minute}})
	}
	d, c := benchDecider(b, []policy.Tier{{Name: "d", Rules: rules}}, nil)
	req := Request{Descriptors: policy.Descriptors{{Key: "identifier", Value: "user_999"}, {Key: "namespace", Value: "api"}},
		Limit: &RequestLimit{Requests: 10, Window: time.Minute, Algorithm: policy.SlidingWindow, OverriddenBy: "namespace"}}
	for b.Loop() {
		dec, err := d.Decide(context.Background(), c, req)
		if err != nil || len(dec.Rules) != 1 || dec.Rules[0].Rule.Name != "r999" {
			b.Fatalf("%+v, %v", dec, err)
		}
	}
}

// A decision for a client among 15,000 pattern overrides (a prefix for
// each customer's clients, "cust-42-*", a suffix for each partner's
// domain, "*@p42.example", and a star inside for each service's
// production clients, "svc-42-*-prod"), of which one applies: the pattern
// index finds it without trying the others.
func BenchmarkDecideAmongPatternOverrides(b *testing.B) {
	rules := []policy.Rule{{ID: "r", Name: "per-client", Enabled: true, KeyBy: []string{"client_id"},
		Params: policy.Params{Algorithm: policy.TokenBucket, Limit: 1e9, Window: time.Minute}}}
	var ovs []policy.Override
	for i := range 5000 {
		ovs = append(ovs, policy.Override{Identifier: fmt.Sprint("cust-", i, "-*"), Tier: "pro"},
			policy.Override{Identifier: fmt.Sprint("*@p", i, ".example"), RuleID: "r",
				Params: &policy.Params{Algorithm: policy.TokenBucket, Limit: 5e8, Window: time.Minute}},
			policy.Override{Identifier: fmt.Sprint("svc-", i, "-*-prod"), Tier: "pro"}) // a star inside: under its prefix
	}
	d, c := benchDecider(b, []policy.Tier{{Name: "free", Rules: rules}, {Name: "pro", Rules: []policy.Rule{{ID: "p", Name: "per-client",
		Enabled: true, KeyBy: []string{"client_id"}, Params: policy.Params{Algorithm: policy.TokenBucket, Limit: 1e9, Window: time.Minute}}}}}, ovs)
	for _, tt := range []struct{ client, tier string }{{"cust-4999-api", "pro"}, {"ann@p4999.example", "free"}, {"svc-4999-eu-prod", "pro"}, {"nobody", "free"}} {
		b.Run(tt.client, func(b *testing.B) {
			req := Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: tt.client}}}
			for b.Loop() {
				dec, err := d.Decide(context.Background(), c, req)
				if err != nil || dec.Tier != tt.tier {
					b.Fatalf("%+v, %v", dec, err)
				}
			}
		})
	}
}

// Compiling a tenant of 1,000 rules and 10,000 overrides blocking a
// client on one of them: each finds its rule by id.
func BenchmarkCompileBlockingOverrides(b *testing.B) {
	var rules []policy.Rule
	for i := range 1000 {
		rules = append(rules, policy.Rule{ID: fmt.Sprint("r", i), Name: fmt.Sprint("r", i), Enabled: true, KeyBy: []string{"client_id"},
			Match:  []policy.Match{{Key: "route", Value: fmt.Sprint("/r", i)}},
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 10, Window: time.Minute}})
	}
	var ovs []policy.Override
	for i := range 10000 {
		ovs = append(ovs, policy.Override{Identifier: fmt.Sprint("c", i), RuleID: fmt.Sprint("r", i%1000), Block: true})
	}
	s := &policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "t", DefaultTier: "d"}, Version: 1,
		Tiers: []policy.Tier{{Name: "d", Rules: rules}}, Overrides: ovs}
	for b.Loop() {
		if _, err := Compile(s); err != nil {
			b.Fatal(err)
		}
	}
}

// A decision in a tier of 1,000 rules of route prefixes, as a Kong import
// of a thousand routes makes them (route=/svc-42/*, half also on a method):
// the rule index finds the rules of the request's route by its prefixes.
func BenchmarkDecideAmong1000RoutePrefixes(b *testing.B) {
	var rules []policy.Rule
	for i := range 1000 {
		r := policy.Rule{ID: fmt.Sprint("r", i), Name: fmt.Sprint("r", i), Enabled: true, KeyBy: []string{"client_id"},
			Match:  []policy.Match{{Key: "route", Value: fmt.Sprint("/svc-", i, "/*")}},
			Params: policy.Params{Algorithm: policy.TokenBucket, Limit: 1e9, Window: time.Minute}}
		if i%2 == 0 {
			r.Match = append(r.Match, policy.Match{Key: "method", Value: "GET"})
		}
		rules = append(rules, r)
	}
	d, c := benchDecider(b, []policy.Tier{{Name: "d", Rules: rules}}, nil)
	req := Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: "alice"}, {Key: "route", Value: "/svc-998/orders/42"},
		{Key: "method", Value: "GET"}, {Key: "host", Value: "api.example.com"}}}
	for b.Loop() {
		dec, err := d.Decide(context.Background(), c, req)
		if err != nil || len(dec.Rules) != 1 || dec.Rules[0].Rule.Name != "r998" {
			b.Fatalf("%+v, %v", dec, err)
		}
	}
}

// benchDecider compiles a tenant of tiers (the first its default) and
// overrides, and returns an in-process decider at a fixed time.
func benchDecider(b *testing.B, tiers []policy.Tier, overrides []policy.Override) (*Decider, *Compiled) {
	b.Helper()
	c, err := Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "t", DefaultTier: tiers[0].Name}, Version: 1,
		Tiers: tiers, Overrides: overrides})
	if err != nil {
		b.Fatal(err)
	}
	now := func() time.Time { return time.Unix(1e9, 0) }
	return New(InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: now}, now), c
}
