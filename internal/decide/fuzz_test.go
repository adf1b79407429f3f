package decide

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
)

// FuzzSnapshot feeds a decider whatever a config snapshot may decode to
// (from the control plane, or a damaged last-known-good file on disk): a
// snapshot Compile accepts never makes a decision panic, and every answer
// keeps to its rules (remaining within the limit, a rejection naming the
// rule that denied, no retry-after on an admitted decision); one Compile
// refuses is refused with an error, never a panic.
func FuzzSnapshot(f *testing.F) {
	seed, err := proto.Marshal(protoconv.SnapshotToProto(snapshot(), []policy.CheckKey{{Hash: policy.HashKey("sk_check")}}))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed, "alice", "/login", uint8(1))
	f.Add(seed, "vip-9", "", uint8(4))
	f.Add(seed, "partner-1", "/x", uint8(0))
	f.Add([]byte{}, "", "", uint8(1))
	// A tenant large enough for the rule and pattern indexes: a tier of
	// route prefixes, suffixes and inner patterns, and pattern overrides.
	big := snapshot()
	for i := range indexFrom + 4 {
		route := []string{fmt.Sprint("/r", i, "/*"), fmt.Sprint("*/r", i), fmt.Sprint("/r*", i, "*"), fmt.Sprint("/r", i)}[i%4]
		big.Tiers[0].Rules = append(big.Tiers[0].Rules, policy.Rule{ID: fmt.Sprint("big", i), Name: fmt.Sprint("big", i), Enabled: true,
			Match: []policy.Match{{Key: "route", Value: route}}, KeyBy: []string{"client_id"},
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: int64(1 + i), Window: time.Minute}})
		big.Overrides = append(big.Overrides, policy.Override{Identifier: []string{fmt.Sprint("c", i, "-*"), fmt.Sprint("*@d", i), fmt.Sprint("x*", i, "*")}[i%3], Tier: "pro"})
	}
	if seed, err = proto.Marshal(protoconv.SnapshotToProto(big, nil)); err != nil {
		f.Fatal(err)
	}
	f.Add(seed, "c7-x", "/r8/orders", uint8(1))
	f.Add(seed, "ann@d4", "/api/r5", uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, client, route string, cost uint8) {
		var p sluicev1.Snapshot
		if proto.Unmarshal(b, &p) != nil {
			return
		}
		snap, _ := protoconv.SnapshotFromProto(&p)
		c, err := Compile(snap)
		if err != nil {
			return
		}
		clk := &clock{t: time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)}
		d := New(InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: clk.now}, clk.now)
		req := Request{Cost: int64(cost), Descriptors: policy.Descriptors{{Key: "client_id", Value: client}, {Key: "route", Value: route}}}
		for i := range 3 {
			if d.Validate(c, req) != nil {
				return
			}
			dec, err := d.Decide(context.Background(), c, req)
			if err != nil {
				t.Fatalf("decision %d: %v", i, err)
			}
			for _, r := range dec.Rules {
				if r.Remaining < 0 || r.Remaining > r.Limit && r.Limit > 0 {
					t.Fatalf("rule %s: remaining %d of %d", r.Rule.Name, r.Remaining, r.Limit)
				}
			}
			if !dec.Allowed && (dec.Deciding < 0 || dec.Deciding >= len(dec.Rules)) {
				t.Fatalf("a rejection without its rule: %+v", dec)
			}
			if dec.Allowed && dec.Deciding >= 0 && dec.Rules[dec.Deciding].RetryAfter > 0 {
				t.Fatalf("an admitted decision with a retry-after: %+v", dec)
			}
			clk.t = clk.t.Add(time.Second)
		}
	})
}

// Compile refuses a snapshot whose rules do not each have an id of their
// own (counters are keyed by it: two rules of one id counted each request
// twice on one counter, as FuzzSnapshot found), or whose tenant has none.
func TestCompileRefusesSharedRuleIDs(t *testing.T) {
	t.Parallel()
	for name, edit := range map[string]func(*policy.Snapshot){
		"a rule without id":      func(s *policy.Snapshot) { s.Tiers[0].Rules[0].ID = "" },
		"one id in one tier":     func(s *policy.Snapshot) { s.Tiers[0].Rules[1].ID = s.Tiers[0].Rules[0].ID },
		"one id in two tiers":    func(s *policy.Snapshot) { s.Tiers[1].Rules[0].ID = s.Tiers[0].Rules[0].ID },
		"a disabled rule's id":   func(s *policy.Snapshot) { s.Tiers[1].Rules[0].ID = s.Tiers[0].Rules[3].ID },
		"a tenant without an id": func(s *policy.Snapshot) { s.Tenant.ID = "" },
	} {
		s := snapshot()
		edit(s)
		if _, err := Compile(s); err == nil {
			t.Errorf("%s: compiled", name)
		}
	}
	if _, err := Compile(snapshot()); err != nil {
		t.Fatal(err)
	}
}
