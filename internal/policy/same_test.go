package policy

import (
	"testing"
	"time"
)

// SameAs holds two rules alike when every field is, match conditions in
// any order and an empty list as none; any one field differing tells them
// apart.
func TestRuleSameAs(t *testing.T) {
	base := Rule{ID: "r1", Name: "search", Match: []Match{{Key: "route", Value: "/a"}, {Key: "route", Value: "/b"}}, KeyBy: []string{"client_id"},
		Params: Params{Algorithm: TokenBucket, Limit: 10, Window: time.Minute, Burst: 5}, Enabled: true, Message: "slow down"}
	same := base
	same.Match = []Match{{Key: "route", Value: "/b"}, {Key: "route", Value: "/a"}}
	if !base.SameAs(same) {
		t.Error("match conditions in another order: not the same")
	}
	none, empty := base, base
	none.Replaces, empty.Replaces = nil, []string{}
	if !none.SameAs(empty) {
		t.Error("no replaces and an empty list: not the same")
	}
	for name, edit := range map[string]func(*Rule){
		"id": func(r *Rule) { r.ID = "r2" }, "name": func(r *Rule) { r.Name = "other" },
		"match": func(r *Rule) { r.Match = r.Match[:1] }, "key by": func(r *Rule) { r.KeyBy = nil },
		"params": func(r *Rule) { r.Burst = 6 }, "shadow": func(r *Rule) { r.Shadow = true },
		"failure mode": func(r *Rule) { r.FailureMode = FailClosed }, "enabled": func(r *Rule) { r.Enabled = false },
		"sync": func(r *Rule) { r.Sync = time.Second }, "exact": func(r *Rule) { r.Exact = true },
		"block": func(r *Rule) { r.Block = true }, "replaces": func(r *Rule) { r.Replaces = []string{"x"} },
		"message": func(r *Rule) { r.Message = "" },
	} {
		other := base
		other.Match = append([]Match(nil), base.Match...)
		edit(&other)
		if base.SameAs(other) {
			t.Errorf("a different %s: the same", name)
		}
	}
}

// Overrides are the same but for their ids, to the microsecond of their
// expiry.
func TestOverrideSameAs(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 123456789, time.UTC)
	p := Params{Algorithm: FixedWindow, Limit: 100, Window: time.Hour}
	a := Override{ID: "o1", Identifier: "alice", RuleID: "r1", Params: &p, ExpiresAt: at}
	q := p
	b := Override{ID: "o2", Identifier: "alice", RuleID: "r1", Params: &q, ExpiresAt: at.Truncate(time.Microsecond)}
	if !a.SameAs(b) {
		t.Error("another id, the same expiry to the microsecond: not the same")
	}
	q.Limit = 101
	if a.SameAs(b) {
		t.Error("another limit: the same")
	}
	b.Params = nil
	if a.SameAs(b) {
		t.Error("parameters against none: the same")
	}
}
