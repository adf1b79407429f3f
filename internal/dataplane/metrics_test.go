package dataplane

import (
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
			b.ReportAllocs()
			for b.Loop() {
				m.observe("acme", false, dec, nil, time.Millisecond)
			}
		})
	}
}
