package decide

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
)

// The pattern index finds the overrides a request meets, in the order
// trying each pattern finds them: random prefixes, suffixes, stars inside
// and alone, on two descriptors, some expired, against random requests.
func TestPatternIndexFindsWhatAScanFinds(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(3, 5))
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	keys := []string{"", "ip"} // "": client_id
	parts := []string{"a", "b", "ab", "ba", "", "x"}
	word := func() string {
		s := ""
		for range rnd.IntN(3) {
			s += parts[rnd.IntN(len(parts))]
		}
		return s
	}
	for round := range 200 {
		var ovs []policy.Override
		for range patternsFrom + rnd.IntN(60) {
			id := ""
			switch rnd.IntN(5) {
			case 0:
				id = word() + "*"
			case 1:
				id = "*" + word()
			case 2:
				id = word() + "*" + word()
			case 3:
				id = "*" + word() + "*"
			default:
				id = word() + "z" // exact
			}
			o := policy.Override{Key: keys[rnd.IntN(2)], Identifier: id, Tier: "pro"}
			if rnd.IntN(4) == 0 {
				o.ExpiresAt = now.Add(time.Duration(rnd.IntN(3)-1) * time.Hour)
			}
			ovs = append(ovs, o)
		}
		c, err := Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "t", DefaultTier: "free"}, Version: 1,
			Tiers: []policy.Tier{{Name: "free"}, {Name: "pro"}}, Overrides: ovs})
		if err != nil {
			t.Fatal(err)
		}
		if c.patternIdx == nil && len(c.patterns) >= patternsFrom {
			t.Fatalf("round %d: %d patterns not indexed", round, len(c.patterns))
		}
		for range 50 {
			d := policy.Descriptors{{Key: "client_id", Value: word() + word()}, {Key: "ip", Value: word() + "z"}}
			got := c.overrides(d, func() time.Time { return now }, nil)
			want := scanOverrides(c, d, now)
			if !slices.Equal(got, want) {
				t.Fatalf("round %d, %v: the index finds %v, a scan %v", round, d, identifiers(got), identifiers(want))
			}
		}
	}
}

// scanOverrides is Compiled.overrides trying every pattern.
func scanOverrides(c *Compiled, d policy.Descriptors, now time.Time) []*compiledOverride {
	var out []*compiledOverride
	for _, k := range c.idKeys {
		id, ok := d.Get(k)
		if !ok {
			continue
		}
		for _, o := range c.exact[overrideKey{k, id}] {
			if o.Applies(id, now) {
				out = append(out, o)
			}
		}
		for _, o := range c.patterns {
			if o.IdentifierKey() == k && o.Applies(id, now) {
				out = append(out, o)
			}
		}
	}
	return out
}

func identifiers(ovs []*compiledOverride) []string {
	var out []string
	for _, o := range ovs {
		out = append(out, o.IdentifierKey()+"="+o.Identifier)
	}
	return out
}

// A blocking override of a rule blocks with a copy of that rule, found
// among every tier's; one of a disabled or missing rule blocks nothing.
func TestBlockingOverrideFindsItsRuleInAnyTier(t *testing.T) {
	t.Parallel()
	fw := policy.Params{Algorithm: policy.FixedWindow, Limit: 5, Window: time.Minute}
	c, err := Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "t", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{
			{Name: "free", Rules: []policy.Rule{{ID: "f", Name: "f", Enabled: true, Params: fw}}},
			{Name: "pro", Rules: []policy.Rule{{ID: "p", Name: "p", Enabled: true, Shadow: true, Params: fw},
				{ID: "off", Name: "off", Params: fw}}},
		},
		Overrides: []policy.Override{{Identifier: "eve", RuleID: "p", Block: true}, {Identifier: "mallory", RuleID: "off", Block: true}}})
	if err != nil {
		t.Fatal(err)
	}
	eve := c.exact[overrideKey{"client_id", "eve"}][0].blockRule
	if eve == nil || eve.ID != "p" || !eve.Block || eve.Shadow {
		t.Fatalf("eve's block: %+v, want a blocking, not shadow, copy of p", eve)
	}
	if c.tiers["pro"][0].Block {
		t.Fatal("the block changed the rule itself")
	}
	if m := c.exact[overrideKey{"client_id", "mallory"}][0].blockRule; m != nil {
		t.Fatalf("a block of a disabled rule: %+v", m)
	}
}
