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
	c, err := Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "t", DefaultTier: "d"}, Version: 1,
		Tiers: []policy.Tier{{Name: "d", Rules: rules}}})
	if err != nil {
		b.Fatal(err)
	}
	now := func() time.Time { return time.Unix(1e9, 0) }
	d := New(LocalEngine{Engine: limit.NewEngine(limit.EngineConfig{}), Now: now}, now)
	req := Request{Descriptors: policy.Descriptors{{Key: "identifier", Value: "user_999"}, {Key: "namespace", Value: "api"}},
		Limit: &RequestLimit{Requests: 10, Window: time.Minute, Algorithm: policy.SlidingWindow, OverriddenBy: "namespace"}}
	for b.Loop() {
		dec, err := d.Decide(context.Background(), c, req)
		if err != nil || len(dec.Rules) != 1 || dec.Rules[0].Rule.Name != "r999" {
			b.Fatalf("%+v, %v", dec, err)
		}
	}
}
