// Package decisiontest builds decision services for the protocols' tests:
// one tenant (slug acme, version 3) on the in-process engine and a fixed
// clock, and its check key.
package decisiontest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/follower"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// Start is the fixed clock's time: 15 s into a minute, so that a fixed
// window of a minute resets in 45 s.
var Start = time.Date(2026, 11, 22, 10, 0, 15, 0, time.UTC)

// LoginMessage is what Default's login rule tells the clients it rejects.
const LoginMessage = "Too many sign-in attempts: wait a minute, or reset your password at https://example.com/reset"

// Default is the service of a tenant whose free tier allows 3 per minute
// per client and 2 per minute on /login (with LoginMessage), at Start.
func Default(t testing.TB) (decision.Service, string) {
	t.Helper()
	return With(t, []policy.Rule{
		{ID: "r1", Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Minute}},
		{ID: "r2", Name: "login", KeyBy: []string{"client_id"}, Enabled: true, Match: []policy.Match{{Key: "route", Value: "/login"}},
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 2, Window: time.Minute}, Message: LoginMessage},
	})
}

// With is the service of a tenant whose free tier holds rules, with
// overrides, at Start.
func With(t testing.TB, rules []policy.Rule, overrides ...policy.Override) (decision.Service, string) {
	t.Helper()
	return WithTiers(t, []policy.Tier{{Name: "free", Rules: rules}}, overrides...)
}

// WithTiers is With of tiers, the first the default.
func WithTiers(t testing.TB, tiers []policy.Tier, overrides ...policy.Override) (decision.Service, string) {
	t.Helper()
	return OnClock(t, func() time.Time { return Start }, tiers, overrides...)
}

// OnClock is WithTiers on the clock now.
func OnClock(t testing.TB, now func() time.Time, tiers []policy.Tier, overrides ...policy.Override) (decision.Service, string) {
	t.Helper()
	snap := &policy.Snapshot{
		Tenant: policy.Tenant{ID: "t1", Slug: "acme", Name: "Acme", DefaultTier: tiers[0].Name}, Version: 3,
		Tiers: tiers, Overrides: overrides,
	}
	c, err := decide.Compile(snap)
	if err != nil {
		t.Fatal(err)
	}
	keys := follower.NewKeys()
	secret, _ := policy.NewKeySecret(policy.KeyCheck)
	keys.Set(policy.HashKey(secret), c)
	return decision.Service{
		Decider:      decide.New(decide.InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: now}, now),
		Authenticate: keys.Authenticate,
		MaxBodyBytes: 1024,
	}, secret
}
