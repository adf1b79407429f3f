package decide

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// clock is a test clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func snapshot() *policy.Snapshot {
	perClient := policy.Rule{ID: "r-client", Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Minute}}
	login := policy.Rule{ID: "r-login", Name: "login", Match: []policy.Match{{Key: "route", Value: "/login"}},
		KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 1, Window: time.Minute}}
	shadow := policy.Rule{ID: "r-shadow", Name: "shadow-global", Shadow: true, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 2, Window: time.Minute}}
	disabled := policy.Rule{ID: "r-off", Name: "off", Enabled: false,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 1, Window: time.Minute}}
	pro := policy.Rule{ID: "r-pro", Name: "pro-per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 100, Window: time.Minute}}
	return &policy.Snapshot{
		Tenant:  policy.Tenant{ID: "t1", Slug: "acme", Name: "Acme", DefaultTier: "free"},
		Version: 7,
		Tiers: []policy.Tier{
			{Name: "free", Rules: []policy.Rule{perClient, login, shadow, disabled}},
			{Name: "pro", Rules: []policy.Rule{pro}},
		},
		Overrides: []policy.Override{
			{Identifier: "vip-*", Tier: "pro"},
			{Identifier: "*@partner.example", RuleID: "r-client", Params: &policy.Params{Algorithm: policy.FixedWindow, Limit: 6, Window: time.Minute}},
			{Identifier: "partner-1", RuleID: "r-client", Params: &policy.Params{Algorithm: policy.FixedWindow, Limit: 5, Window: time.Minute}},
			{Identifier: "expired", Tier: "pro", ExpiresAt: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)},
		},
	}
}

func newDecider(t *testing.T) (*Decider, *Compiled) {
	t.Helper()
	c, err := Compile(snapshot())
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	return New(InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: clk.now}, clk.now), c
}

func check(client string, extra ...policy.Descriptor) Request {
	return Request{Descriptors: append(policy.Descriptors{{Key: "client_id", Value: client}}, extra...)}
}

// admitted counts admitted decisions out of n identical requests.
func admitted(t *testing.T, d *Decider, c *Compiled, req Request, n int) int {
	t.Helper()
	ok := 0
	for range n {
		dec, err := d.Decide(context.Background(), c, req)
		if err != nil {
			t.Fatal(err)
		}
		if dec.Allowed {
			ok++
		}
	}
	return ok
}

func TestDecidePerClientAndMatch(t *testing.T) {
	t.Parallel()
	d, c := newDecider(t)
	if n := admitted(t, d, c, check("alice"), 5); n != 3 {
		t.Fatalf("alice admitted %d of 5, want 3", n)
	}
	if n := admitted(t, d, c, check("bob", policy.Descriptor{Key: "route", Value: "/login"}), 3); n != 1 {
		t.Fatalf("bob on /login admitted %d of 3, want 1 (the login rule)", n)
	}
}

func TestDecideShadowRuleReportsButNeverRejects(t *testing.T) {
	t.Parallel()
	d, c := newDecider(t)
	for i, client := range []string{"a", "b", "c"} {
		dec, err := d.Decide(context.Background(), c, check(client))
		if err != nil || !dec.Allowed {
			t.Fatalf("client %s: %+v, %v", client, dec, err)
		}
		var shadow *RuleResult
		for k := range dec.Rules {
			if dec.Rules[k].Rule.Shadow {
				shadow = &dec.Rules[k]
			}
		}
		if shadow == nil || shadow.Allowed != (i < 2) {
			t.Fatalf("decision %d: shadow result %+v, want would-block from the third", i, shadow)
		}
		if dec.Rules[dec.Deciding].Rule.Shadow {
			t.Fatalf("a shadow rule decided: %+v", dec)
		}
	}
}

func TestDecideOverrides(t *testing.T) {
	t.Parallel()
	d, c := newDecider(t)
	if n := admitted(t, d, c, check("vip-9"), 10); n != 10 {
		t.Fatalf("vip-9 (moved to pro) admitted %d of 10", n)
	}
	if n := admitted(t, d, c, check("partner-1"), 7); n != 5 {
		t.Fatalf("partner-1 (limit replaced by 5) admitted %d of 7", n)
	}
	if n := admitted(t, d, c, check("ann@partner.example"), 8); n != 6 {
		t.Fatalf("ann@partner.example (a suffix override: limit 6) admitted %d of 8", n)
	}
	if n := admitted(t, d, c, check("expired"), 5); n != 3 {
		t.Fatalf("an expired override still applies: %d of 5", n)
	}
	req := check("vip-9")
	req.Tier = "free" // an explicit tier wins over the override's
	if n := admitted(t, d, c, req, 5); n != 3 {
		t.Fatalf("explicit tier: %d of 5", n)
	}
}

func TestDecideAnswersTheDenyingRule(t *testing.T) {
	t.Parallel()
	d, c := newDecider(t)
	req := check("carol", policy.Descriptor{Key: "route", Value: "/login"})
	if _, err := d.Decide(context.Background(), c, req); err != nil {
		t.Fatal(err)
	}
	dec, err := d.Decide(context.Background(), c, req)
	if err != nil || dec.Allowed {
		t.Fatalf("second login: %+v, %v", dec, err)
	}
	if got := dec.Rules[dec.Deciding].Rule.Name; got != "login" || dec.Version != 7 {
		t.Fatalf("deciding rule %q at version %d, want login at 7", got, dec.Version)
	}
	// The rejected decision consumed nothing from per-client: 2 remain.
	dec, _ = d.Decide(context.Background(), c, check("carol"))
	if r := dec.Rules[0]; r.Rule.Name != "per-client" || r.Remaining != 1 {
		t.Fatalf("per-client after a rejected decision: %+v", r)
	}
}

func TestDecideRejectsBadInput(t *testing.T) {
	t.Parallel()
	d, c := newDecider(t)
	tests := []struct {
		req   Request
		field string
	}{
		{Request{Cost: -1}, "cost"},
		{Request{Tier: "gold"}, "tier"},
		{Request{Descriptors: policy.Descriptors{{Key: "bad key", Value: "x"}}}, "descriptors[0].key"},
	}
	for _, tt := range tests {
		_, err := d.Decide(context.Background(), c, tt.req)
		var e *policy.Error
		if !errors.As(err, &e) || e.Code != policy.CodeInvalid || len(e.Fields) != 1 || e.Fields[0].Field != tt.field {
			t.Errorf("%+v: %v, want a field error on %s", tt.req, err, tt.field)
		}
	}
	s := snapshot()
	s.Tenant.Status = policy.TenantSuspended
	sc, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Decide(context.Background(), sc, check("a")); !errors.Is(err, policy.ErrPermissionDenied) {
		t.Fatalf("suspended tenant: %v", err)
	}
}

func TestCompileRefusesAnInvalidSnapshot(t *testing.T) {
	t.Parallel()
	s := snapshot()
	s.Tiers[0].Rules[0].Limit = 0
	if _, err := Compile(s); policy.ErrorCode(err) != policy.CodeInvalid {
		t.Fatalf("invalid rule compiled: %v", err)
	}
}

// A peek consumes nothing and says whether a request of its cost would be
// admitted, and when at the latest it would be.
func TestPeek(t *testing.T) {
	d, c := newDecider(t)
	peek := func(cost int64) Decision {
		t.Helper()
		req := check("pat")
		req.Peek, req.Cost = true, cost
		dec, err := d.Decide(context.Background(), c, req)
		if err != nil || len(dec.Rules) != 2 || dec.Rules[0].Rule.Name != "per-client" || dec.Rules[1].Rule.Name != "shadow-global" {
			t.Fatalf("peek of %d: %+v %v", cost, dec, err)
		}
		return dec
	}
	if dec := peek(0); !dec.Allowed || dec.Rules[0].Remaining != 3 || dec.Rules[1].Remaining != 2 {
		t.Fatalf("a fresh client's peek: %+v", dec)
	}
	if dec := peek(3); !dec.Allowed {
		t.Fatalf("peek of 3 of 3: %+v", dec)
	}
	if dec := peek(4); dec.Allowed || dec.Rules[0].RetryAfter != limit.Never {
		t.Fatalf("peek of 4, above the limit of 3: %+v", dec)
	}
	if n := admitted(t, d, c, check("pat"), 2); n != 2 {
		t.Fatalf("%d of 2 admitted after peeks", n)
	}
	// The shadow rule (2 a minute for everyone) would reject: reported, not enforced.
	if dec := peek(1); !dec.Allowed || dec.Rules[0].Remaining != 1 || dec.Rules[1].Allowed {
		t.Fatalf("peek of 1 with 1 left: %+v", dec)
	}
	if dec := peek(2); dec.Allowed || dec.Deciding != 0 || dec.Rules[0].RetryAfter != time.Minute {
		t.Fatalf("peek of 2 with 1 left: %+v", dec)
	}
	if n := admitted(t, d, c, check("pat"), 2); n != 1 {
		t.Fatalf("%d of 2 admitted with 1 left", n)
	}
}

// A request's own limit decides it in place of its tier's rules and
// overrides, counted apart from them per all its descriptors' values.
func TestRequestLimit(t *testing.T) {
	d, c := newDecider(t)
	own := func(n int64, extra ...policy.Descriptor) Request {
		r := check("partner-1", extra...) // partner-1 has an override of the per-client rule
		r.Limit = &RequestLimit{Requests: n, Window: time.Minute}
		return r
	}
	login := policy.Descriptor{Key: "route", Value: "/login"} // the login rule allows 1
	if got := admitted(t, d, c, own(2, login), 3); got != 2 {
		t.Fatalf("own limit of 2 on /login: %d of 3 admitted", got)
	}
	dec, err := d.Decide(context.Background(), c, own(2, login))
	if err != nil || len(dec.Rules) != 1 || dec.Rules[0].Rule.ID != "limit/60s/client_id,route" || dec.Rules[0].Limit != 2 || dec.Tier != "free" {
		t.Fatalf("decision %+v %v", dec, err)
	}
	if got := policy.ClientKey(dec.Rules[0].Rule, own(2, login).Descriptors); got != "client_id=partner-1, route=/login" {
		t.Fatalf("client key %q: events would name no one", got)
	}
	if got := admitted(t, d, c, check("partner-1", login), 2); got != 1 {
		t.Fatalf("the tier's rules after own limits: %d of 2 admitted, want the login rule's 1", got)
	}
	if got := admitted(t, d, c, own(2), 3); got != 2 {
		t.Fatalf("own limit without the route: %d of 3 admitted, want its own counter", got)
	}

	bad := own(0)
	bad.Limit.Window = 0
	var pe *policy.Error
	if err := d.Validate(c, bad); !errors.As(err, &pe) || len(pe.Fields) != 2 || pe.Fields[0].Field != "limit.requests" || pe.Fields[1].Field != "limit.window" ||
		pe.Fields[1].Description != "must be whole seconds, from 1s to 366 days" {
		t.Fatalf("invalid own limit: %v", err)
	}
	bad = own(1)
	bad.Limit.Window = 1500 * time.Millisecond
	if err := d.Validate(c, bad); !errors.As(err, &pe) || len(pe.Fields) != 1 || pe.Fields[0].Description != "must be whole seconds, from 1s to 366 days" {
		t.Fatalf("a split second: %v", err)
	}
}

// Of a tier's exact rules that match a request only the most specific
// counts; rules that are not exact count as ever beside it.
func TestMostSpecificExactRule(t *testing.T) {
	fixed := func(n int64) policy.Params {
		return policy.Params{Algorithm: policy.FixedWindow, Limit: n, Window: time.Minute}
	}
	c, err := Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "T", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{
			{ID: "default", Name: "default", Exact: true, Enabled: true, Match: []policy.Match{{Key: "ip", Value: "*"}}, KeyBy: []string{"ip"}, Params: fixed(1)},
			{ID: "vip", Name: "vip", Exact: true, Enabled: true, Match: []policy.Match{{Key: "ip", Value: "10.0.0.1"}}, Params: fixed(5)},
			{ID: "global", Name: "global", Enabled: true, Params: fixed(4)},
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	d := New(InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: clk.now}, clk.now)
	ip := func(v string) Request { return Request{Descriptors: policy.Descriptors{{Key: "ip", Value: v}}} }
	dec, err := d.Decide(context.Background(), c, ip("10.0.0.1"))
	if err != nil || len(dec.Rules) != 2 || dec.Rules[0].Rule.ID != "vip" || dec.Rules[1].Rule.ID != "global" {
		t.Fatalf("decision %+v %v: want vip and global", dec, err)
	}
	if got := admitted(t, d, c, ip("10.0.0.1"), 5); got != 3 {
		t.Fatalf("10.0.0.1: %d of 5 more admitted, want global's 3 left", got)
	}
	c2, _ := Compile(&policy.Snapshot{Tenant: c.Tenant, Version: 2, Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{
		{ID: "default", Name: "default", Exact: true, Enabled: true, Match: []policy.Match{{Key: "ip", Value: "*"}}, KeyBy: []string{"ip"}, Params: fixed(1)},
		{ID: "vip", Name: "vip", Exact: true, Enabled: true, Match: []policy.Match{{Key: "ip", Value: "10.0.0.1"}}, Params: fixed(5)},
	}}}})
	if got := admitted(t, d, c2, ip("10.0.0.2"), 3); got != 1 {
		t.Fatalf("10.0.0.2: %d of 3 admitted, want the default's 1", got)
	}
}

// A blocking rule rejects every request it applies to without asking the
// engine or counting any rule; a shadow block reports what it would
// reject while the other rules count as ever; lifting the block restores
// the rule's limit, with nothing counted meanwhile.
func TestBlockRules(t *testing.T) {
	t.Parallel()
	d, eng, _ := countingDecider(Options{})
	perClient := policy.Rule{ID: "pc", Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 2, Window: time.Minute}}
	bad := policy.Rule{ID: "bad", Name: "blocklist", Match: []policy.Match{{Key: "client_id", Value: "bad-*"}}, Enabled: true, Block: true,
		Params: policy.Params{Algorithm: policy.TokenBucket, Limit: 3, Window: time.Minute}}
	maybe := policy.Rule{ID: "maybe", Name: "maybe-block", Match: []policy.Match{{Key: "route", Value: "/beta"}}, Enabled: true, Block: true, Shadow: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 5, Window: time.Minute}}
	compile := func(version int64, rules ...policy.Rule) *Compiled {
		t.Helper()
		c, err := Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "T", DefaultTier: "free"}, Version: version,
			Tiers: []policy.Tier{{Name: "free", Rules: rules}}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := compile(1, perClient, bad, maybe)
	decide := func(c *Compiled, req Request) Decision { t.Helper(); return mustDecide(t, d, c, req) }

	for range 3 {
		dec := decide(c, check("bad-1"))
		if dec.Allowed || len(dec.Rules) != 1 || dec.Deciding != 0 {
			t.Fatalf("a blocked client: %+v", dec)
		}
		if r := dec.Rules[0]; r.Rule.ID != "bad" || r.Limit != 0 || r.Remaining != 0 || r.RetryAfter != limit.Never || r.Key == "" {
			t.Fatalf("the block's answer: %+v", r)
		}
	}
	if dec := decide(c, Request{Descriptors: check("bad-1").Descriptors, Peek: true}); dec.Allowed {
		t.Fatal("a peek at a blocked client admitted")
	}
	if n := eng.calls.Load(); n != 0 {
		t.Fatalf("blocked requests reached the engine %d times", n)
	}

	// The shadow block would reject every /beta request, rejects none, and
	// counts nothing of its own: the per-client rule decides.
	for i := range 3 {
		dec := decide(c, check("alice", policy.Descriptor{Key: "route", Value: "/beta"}))
		if dec.Allowed != (i < 2) || dec.Rules[dec.Deciding].Rule.ID != "pc" {
			t.Fatalf("/beta request %d: %+v", i, dec)
		}
		for _, r := range dec.Rules {
			if r.Rule.ID == "maybe" && (r.Allowed || r.Limit != 0 || r.RetryAfter != limit.Never) {
				t.Fatalf("/beta request %d: the shadow block's answer %+v", i, r)
			}
		}
	}

	// Lifted: the rule's own limit applies, from a counter the block left
	// untouched, and per-client counts from the start too.
	bad.Block = false
	c = compile(2, perClient, bad, maybe)
	if n := admitted(t, d, c, check("bad-1"), 4); n != 2 {
		t.Fatalf("bad-1 once unblocked: %d of 4 admitted, want the per-client 2", n)
	}
	if dec := decide(c, check("bad-1")); dec.Allowed {
		t.Fatalf("bad-1 past its limits: %+v", dec)
	}
}

// A blocking override rejects its clients' every request without asking
// the engine, by a rule of its own named "blocked", until it expires; one
// with a rule_id blocks that rule's requests only, answering as that rule.
func TestBlockingOverrides(t *testing.T) {
	t.Parallel()
	d, eng, clk := countingDecider(Options{})
	snap := snapshot()
	snap.Overrides = append(snap.Overrides,
		policy.Override{Identifier: "abuser-*", Block: true, ExpiresAt: clk.t.Add(time.Hour)},
		policy.Override{Identifier: "eve", RuleID: "r-login", Block: true},
		policy.Override{Identifier: "eve", RuleID: "r-login", Params: &policy.Params{Algorithm: policy.FixedWindow, Limit: 100, Window: time.Minute}})
	c, err := Compile(snap)
	if err != nil {
		t.Fatal(err)
	}
	decide := func(req Request) Decision { t.Helper(); return mustDecide(t, d, c, req) }
	dec := decide(check("abuser-7", policy.Descriptor{Key: "route", Value: "/login"}))
	if dec.Allowed || len(dec.Rules) != 1 || dec.Deciding != 0 {
		t.Fatalf("a blocked client: %+v", dec)
	}
	if r := dec.Rules[0]; r.Rule.Name != "blocked" || r.Rule.ID != "block/client_id=abuser-*" || r.RetryAfter != limit.Never ||
		policy.ClientKey(r.Rule, check("abuser-7").Descriptors) != "abuser-7" {
		t.Fatalf("the block's answer: %+v, rule %+v", r, r.Rule)
	}
	if n := eng.calls.Load(); n != 0 {
		t.Fatalf("a blocked client's request reached the engine %d times", n)
	}
	// Eve: blocked on /login (the block wins over her raised limit there),
	// admitted elsewhere.
	dec = decide(check("eve", policy.Descriptor{Key: "route", Value: "/login"}))
	if dec.Allowed || dec.Rules[dec.Deciding].Rule.ID != "r-login" || !dec.Rules[dec.Deciding].Rule.Block {
		t.Fatalf("eve on /login: %+v", dec)
	}
	if dec := decide(check("eve")); !dec.Allowed {
		t.Fatalf("eve elsewhere: %+v", dec)
	}
	if dec := decide(check("abuser")); !dec.Allowed { // "abuser-*" needs the dash
		t.Fatalf("a client the prefix misses: %+v", dec)
	}
	clk.t = clk.t.Add(time.Hour)
	if dec := decide(check("abuser-7")); !dec.Allowed {
		t.Fatalf("once the block expired: %+v", dec)
	}
	// A block names no tier and no params.
	for _, o := range []policy.Override{
		{Identifier: "x", Block: true, Tier: "pro"},
		{Identifier: "x", Block: true, RuleID: "r-login", Params: &policy.Params{Algorithm: policy.FixedWindow, Limit: 1, Window: time.Second}},
	} {
		if err := o.Validate(); policy.ErrorCode(err) != policy.CodeInvalid {
			t.Errorf("override %+v: %v", o, err)
		}
	}
}

// A rule that applies replaces the rules it names: they are neither
// counted nor checked for that request (or for the requests of Replaced);
// where it does not apply they count as ever. A rule cannot replace
// itself.
func TestReplaces(t *testing.T) {
	t.Parallel()
	general := policy.Rule{ID: "g", Name: "general", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 2, Window: time.Minute}}
	search := policy.Rule{ID: "s", Name: "search", KeyBy: []string{"client_id"}, Enabled: true, Replaces: []string{"general"},
		Match:  []policy.Match{{Key: "route", Value: "/search"}},
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 5, Window: time.Minute}}
	c, err := Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "T", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{general, search}}}})
	if err != nil || !c.HasReplaces() {
		t.Fatalf("compile: %v, replaces %v", err, c.HasReplaces())
	}
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	d := New(InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: clk.now}, clk.now)
	searching := check("ann", policy.Descriptor{Key: "route", Value: "/search"})
	if got := d.Replacing(c, searching); !slices.Equal(got, []string{"general"}) {
		t.Fatalf("Replacing: %v", got)
	}
	if n := admitted(t, d, c, searching, 7); n != 5 {
		t.Fatalf("/search: %d of 7 admitted, want search's 5 (general replaced)", n)
	}
	if n := admitted(t, d, c, check("ann"), 3); n != 2 {
		t.Fatalf("elsewhere: %d of 3 admitted, want general's 2, untouched by /search", n)
	}
	// Replaced by another request of the call: general is out.
	if n := admitted(t, d, c, Request{Descriptors: check("bo").Descriptors, Replaced: map[string]bool{"general": true}}, 3); n != 3 {
		t.Fatalf("general replaced by the call: %d of 3 admitted, want all (no rule left)", n)
	}
	self := search
	self.Replaces = []string{"search"}
	if err := self.Validate(); policy.ErrorCode(err) != policy.CodeInvalid {
		t.Fatalf("a rule replacing itself: %v", err)
	}
}

// With every rule in shadow (ShadowAll, a decider's -shadow-mode) nothing
// is rejected, not even a blocked client or a request's own limit, and
// every rule still reports what it would have done.
func TestShadowAllRejectsNothing(t *testing.T) {
	t.Parallel()
	c, err := Compile(&policy.Snapshot{
		Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "T", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{{ID: "r", Name: "one", KeyBy: []string{"client_id"}, Enabled: true,
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 1, Window: time.Hour}}}}},
		Overrides: []policy.Override{{ID: "o", Identifier: "bad", Block: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	c.ShadowAll()
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	d := New(InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: clk.now}, clk.now)
	// wouldBlock reports whether some rule would have rejected.
	decide := func(req Request) (allowed, wouldBlock bool) {
		t.Helper()
		dec, err := d.Decide(context.Background(), c, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range dec.Rules {
			if !r.Rule.Shadow {
				t.Fatalf("rule %s not in shadow", r.Rule.Name)
			}
			wouldBlock = wouldBlock || !r.Allowed
		}
		return dec.Allowed, wouldBlock
	}
	for i, want := range []bool{false, true, true} {
		if ok, would := decide(check("alice")); !ok || would != want {
			t.Fatalf("alice's check %d: allowed %v, would block %v; want allowed, %v", i+1, ok, would, want)
		}
	}
	if ok, would := decide(check("bad")); !ok || !would {
		t.Fatalf("a blocked client: allowed %v, would block %v; want allowed, would block", ok, would)
	}
	own := check("carol")
	own.Limit = &RequestLimit{Requests: 1, Window: time.Minute}
	for i, want := range []bool{false, true} {
		if ok, would := decide(own); !ok || would != want {
			t.Fatalf("a request's own limit, check %d: allowed %v, would block %v; want allowed, %v", i+1, ok, would, want)
		}
	}
}

// A request's own limit may name its algorithm: a token bucket refills as
// time passes where a fixed window waits for the next window, and each
// algorithm counts apart from the others.
func TestRequestLimitAlgorithms(t *testing.T) {
	c, err := Compile(snapshot())
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)} // a window's start
	d := New(InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: clk.now}, clk.now)
	own := func(alg policy.Algorithm) Request {
		r := check("ann")
		r.Limit = &RequestLimit{Requests: 2, Window: time.Minute, Algorithm: alg}
		return r
	}
	for _, alg := range []policy.Algorithm{policy.AlgorithmUnspecified, policy.TokenBucket, policy.GCRA, policy.SlidingWindow} {
		if got := admitted(t, d, c, own(alg), 3); got != 2 {
			t.Fatalf("%v: %d of 3 admitted, want 2", alg, got)
		}
	}
	if got := admitted(t, d, c, own(policy.FixedWindow), 1); got != 0 {
		t.Fatal("an explicit fixed window is the default one, whose 2 are taken: it admitted more")
	}
	clk.t = clk.t.Add(30 * time.Second) // half a window: a bucket has refilled one request, the window none
	if tb, fw := admitted(t, d, c, own(policy.TokenBucket), 2), admitted(t, d, c, own(policy.FixedWindow), 1); tb != 1 || fw != 0 {
		t.Fatalf("half a window on: token bucket admitted %d (want 1), fixed window %d (want 0)", tb, fw)
	}
	dec, err := d.Decide(context.Background(), c, own(policy.GCRA))
	if err != nil || dec.Rules[0].Rule.ID != "limit/gcra/60s/client_id" || dec.Rules[0].Limit != 2 {
		t.Fatalf("GCRA's decision: %+v %v", dec, err)
	}
	var pe *policy.Error
	if err := d.Validate(c, own(policy.Concurrency)); !errors.As(err, &pe) || len(pe.Fields) != 1 || pe.Fields[0].Field != "limit.algorithm" {
		t.Fatalf("a concurrency limit of the request's own: %v", err)
	}
}

// A rule with several values of one match key is one limit over them all:
// one counter, whichever value a request has.
func TestOneRuleOverSeveralValues(t *testing.T) {
	t.Parallel()
	users := policy.Rule{ID: "u", Name: "users", KeyBy: []string{"client_id"}, Enabled: true,
		Match:  []policy.Match{{Key: "route", Value: "/v1/users*"}, {Key: "route", Value: "/v2/users*"}},
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 4, Window: time.Minute}}
	c, err := Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "T", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{users}}}})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	d := New(InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: clk.now}, clk.now)
	v1, v2 := check("ann", policy.Descriptor{Key: "route", Value: "/v1/users/7"}), check("ann", policy.Descriptor{Key: "route", Value: "/v2/users"})
	if n := admitted(t, d, c, v1, 3) + admitted(t, d, c, v2, 3); n != 4 {
		t.Fatalf("%d of 6 admitted over /v1/users and /v2/users, want the one limit of 4", n)
	}
	if n := admitted(t, d, c, check("ann", policy.Descriptor{Key: "route", Value: "/v3/users"}), 2); n != 2 {
		t.Fatalf("/v3/users: %d of 2 admitted, want both (no rule applies)", n)
	}
}

// A request without a rule's key-by descriptor is not counted by that
// rule, on any API (they all decide here), rather than share one counter
// with every other such request; the rules it carries the keys of still
// apply.
func TestRequestWithoutAKeyByDescriptorSkipsTheRule(t *testing.T) {
	t.Parallel()
	d, c := newDecider(t)
	for i := range 5 { // per-client (3) would have rejected the 4th
		dec, err := d.Decide(context.Background(), c, Request{Descriptors: policy.Descriptors{{Key: "route", Value: "/x"}}})
		if err != nil || !dec.Allowed {
			t.Fatalf("check %d without client_id: %+v %v", i, dec, err)
		}
		for _, r := range dec.Rules {
			if r.Rule.Name == "per-client" {
				t.Fatalf("check %d without client_id was counted by per-client: %+v", i, dec.Rules)
			}
		}
		if len(dec.Rules) != 1 || dec.Rules[0].Rule.Name != "shadow-global" {
			t.Fatalf("check %d: rules %+v, want the global shadow rule alone", i, dec.Rules)
		}
	}
}
