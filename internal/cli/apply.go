package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
	"github.com/sluicehq/sluice/internal/tenantfile"
)

// Change is one write an apply makes (or, dry, would make).
type Change struct {
	Op   string `json:"op"`   // create, update, reorder or delete
	Kind string `json:"kind"` // tenant, tier, rule or override
	Name string `json:"name"` // the tenant's slug, the tier, tier/rule, or the override's identifier and what it does
}

func (c Change) String() string { return c.Op + " " + c.Kind + " " + c.Name }

// ApplyResult says what an apply did.
type ApplyResult struct {
	TenantID string   `json:"tenant_id,omitempty"` // empty: the admin key's own tenant
	DryRun   bool     `json:"dry_run"`
	Changes  []Change `json:"changes"`
	// Skipped says what the file holds that the key may not apply: with a
	// tenant admin key, the tenant's own fields (name, default tier,
	// shadow).
	Skipped string `json:"skipped,omitempty"`
}

// Export returns the file of a tenant: with the operator key the tenant
// of slug, with an admin key the key's own (slug is then only the file's
// name for it, the tenant service being the operator's).
func (c *Client) Export(ctx context.Context, slug string) (*tenantfile.File, error) {
	tenant, err := c.findTenant(ctx, slug)
	if err != nil {
		return nil, err
	}
	t := policy.Tenant{Slug: slug}
	if tenant != nil {
		t = protoconv.TenantFromProto(tenant)
	} else if c.operator {
		return nil, fmt.Errorf("no tenant %q", slug)
	}
	tiers, overrides, err := c.state(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	return tenantfile.From(t, tiers, overrides), nil
}

// state returns a tenant's tiers (rules in order) and overrides.
func (c *Client) state(ctx context.Context, tenantID string) ([]policy.Tier, []policy.Override, error) {
	tl, err := c.tiers.ListTiers(ctx, request(c, &sluicev1.ListTiersRequest{TenantId: tenantID}))
	if err != nil {
		return nil, nil, err
	}
	ol, err := c.overrides.ListOverrides(ctx, request(c, &sluicev1.ListOverridesRequest{TenantId: tenantID}))
	if err != nil {
		return nil, nil, err
	}
	var tiers []policy.Tier
	for _, t := range tl.Msg.Tiers {
		tier := policy.Tier{ID: t.Id, Name: t.Name}
		for _, r := range t.Rules {
			tier.Rules = append(tier.Rules, protoconv.RuleFromProto(r))
		}
		tiers = append(tiers, tier)
	}
	var overrides []policy.Override
	for _, o := range ol.Msg.Overrides {
		overrides = append(overrides, protoconv.OverrideFromProto(o))
	}
	return tiers, overrides, nil
}

// findTenant returns the tenant of slug (nil when there is none) with the
// operator key, and nil with an admin key, whose calls act in its own
// tenant; it records which of the two the key is.
func (c *Client) findTenant(ctx context.Context, slug string) (*sluicev1.Tenant, error) {
	list, err := c.tenants.ListTenants(ctx, request(c, &sluicev1.ListTenantsRequest{}))
	switch {
	case connect.CodeOf(err) == connect.CodePermissionDenied:
		c.operator = false
		return nil, nil
	case err != nil:
		return nil, err
	}
	c.operator = true
	for _, t := range list.Msg.Tenants {
		if t.Slug == slug {
			return t, nil
		}
	}
	return nil, nil
}

// Apply makes the tenant of f match it: with the operator key the tenant
// of f's slug (created if missing), with an admin key the key's own. Tiers
// and rules the file names are created, or updated where they differ, and
// each tier's rules put in the file's order; overrides the file names are
// created, or replaced where they differ. With prune, what the file does
// not name goes: rules, tiers and overrides, so that the tenant becomes
// the file. Nothing is written when nothing differs (no new config
// version), and with dryRun nothing is written at all: the result lists
// what would be. The file is validated whole first (tenantfile.Parse);
// a write the control plane refuses stops the apply with that write named,
// the writes before it made.
func (c *Client) Apply(ctx context.Context, f *tenantfile.File, prune, dryRun bool) (ApplyResult, error) {
	res := ApplyResult{DryRun: dryRun}
	note := func(op, kind, name string) { res.Changes = append(res.Changes, Change{Op: op, Kind: kind, Name: name}) }
	tenant, err := c.findTenant(ctx, f.Tenant)
	if err != nil {
		return res, err
	}
	want := f.TenantPolicy()
	if !c.operator {
		res.Skipped = "the tenant's name, default tier and shadow mode: they need the operator key"
	}
	var tiers []policy.Tier
	var overrides []policy.Override
	switch {
	case c.operator && tenant == nil:
		note("create", "tenant", f.Tenant)
		if !dryRun {
			created, err := c.tenants.CreateTenant(ctx, request(c, &sluicev1.CreateTenantRequest{Tenant: protoconv.TenantToProto(want, 0)}))
			if err != nil {
				return res, fmt.Errorf("create tenant %s: %w", f.Tenant, err)
			}
			tenant = created.Msg.Tenant
		}
	}
	if tenant != nil {
		res.TenantID = tenant.Id
	}
	if tenant != nil || !c.operator {
		if tiers, overrides, err = c.state(ctx, res.TenantID); err != nil {
			return res, err
		}
	}

	// Tiers and their rules.
	ruleIDs := map[string]string{} // tier/rule → id, for the overrides
	named := map[string]bool{}     // tier and tier/rule the file names
	for _, ft := range f.Tiers {
		named[ft.Name] = true
		desired, _ := ft.Policy() // validated by Parse
		var tier *policy.Tier
		for i := range tiers {
			if tiers[i].Name == ft.Name {
				tier = &tiers[i]
			}
		}
		if tier == nil {
			note("create", "tier", ft.Name)
			tiers = append(tiers, policy.Tier{Name: ft.Name})
			tier = &tiers[len(tiers)-1]
			if !dryRun {
				created, err := c.tiers.CreateTier(ctx, request(c, &sluicev1.CreateTierRequest{TenantId: res.TenantID, Name: ft.Name}))
				if err != nil {
					return res, fmt.Errorf("create tier %s: %w", ft.Name, err)
				}
				tier.ID = created.Msg.Tier.Id
				tier.Rules = nil // a new tier's own rules (none, or a seeded default) are in its answer
				for _, r := range created.Msg.Tier.Rules {
					tier.Rules = append(tier.Rules, protoconv.RuleFromProto(r))
				}
			}
		}
		ids := map[string]string{} // the tier's rules' ids by name
		var actual []string        // the tier's rule names in order, new ones last
		for _, r := range tier.Rules {
			ids[r.Name] = r.ID
			actual = append(actual, r.Name)
		}
		var order []string // the file's rules, then the tier's others
		for _, r := range desired.Rules {
			ref := ft.Name + "/" + r.Name
			named[ref] = true
			order = append(order, r.Name)
			id, ok := ids[r.Name]
			if !ok {
				note("create", "rule", ref)
				actual = append(actual, r.Name)
				if dryRun {
					continue
				}
				created, err := c.rules.CreateRule(ctx, request(c, &sluicev1.CreateRuleRequest{TenantId: res.TenantID, TierId: tier.ID, Rule: protoconv.RuleToProto(r)}))
				if err != nil {
					return res, fmt.Errorf("create rule %s: %w", ref, err)
				}
				ids[r.Name], ruleIDs[ref] = created.Msg.Rule.Id, created.Msg.Rule.Id
				continue
			}
			ruleIDs[ref] = id
			old := tier.Rules[slices.IndexFunc(tier.Rules, func(o policy.Rule) bool { return o.Name == r.Name })]
			if r.ID = id; sameRule(r, old) {
				continue
			}
			note("update", "rule", ref)
			if !dryRun {
				if _, err := c.rules.UpdateRule(ctx, request(c, &sluicev1.UpdateRuleRequest{TenantId: res.TenantID, Rule: protoconv.RuleToProto(r)})); err != nil {
					return res, fmt.Errorf("update rule %s: %w", ref, err)
				}
			}
		}
		for _, name := range actual {
			if !slices.Contains(order, name) {
				order = append(order, name) // kept (or pruned below) after the file's
			}
		}
		if slices.Equal(actual, order) {
			continue
		}
		note("reorder", "rule", ft.Name)
		if dryRun {
			continue
		}
		all := make([]string, len(order))
		for i, name := range order {
			all[i] = ids[name]
		}
		if _, err := c.rules.ReorderRules(ctx, request(c, &sluicev1.ReorderRulesRequest{TenantId: res.TenantID, TierId: tier.ID, RuleIds: all})); err != nil {
			return res, fmt.Errorf("reorder the rules of %s: %w", ft.Name, err)
		}
	}

	// The tenant's own fields, once its tiers are there.
	if c.operator && tenant != nil {
		have := protoconv.TenantFromProto(tenant)
		if have.Name != want.Name || have.Shadow != want.Shadow || have.DefaultTier != want.DefaultTier && want.DefaultTier != "" {
			note("update", "tenant", f.Tenant)
			if !dryRun {
				want.ID, want.Status = have.ID, have.Status
				if want.DefaultTier == "" {
					want.DefaultTier = have.DefaultTier
				}
				if _, err := c.tenants.UpdateTenant(ctx, request(c, &sluicev1.UpdateTenantRequest{Tenant: protoconv.TenantToProto(want, 0)})); err != nil {
					return res, fmt.Errorf("update tenant %s: %w", f.Tenant, err)
				}
			}
		}
	}

	// Overrides: one slot per (descriptor, identifier, rule, block), as the
	// schema's unique indexes say; a slot whose override differs is
	// replaced.
	keep := make([]bool, len(overrides))
	for _, fo := range f.Overrides {
		o, _ := fo.Policy(ruleIDs[fo.Rule])
		o.Key = o.IdentifierKey()
		name := overrideName(fo)
		found := false
		for i, old := range overrides {
			// (A rule created by a dry run has no id: no slot holds it.)
			if keep[i] || !sameSlot(o, old) || fo.Rule != "" && o.RuleID == "" {
				continue
			}
			if sameOverride(o, old) {
				keep[i], found = true, true
				break
			}
			note("delete", "override", name+" (replaced)")
			keep[i] = true // gone now, not pruned again
			if !dryRun {
				if err := c.deleteOverride(ctx, res.TenantID, old.ID); err != nil {
					return res, fmt.Errorf("replace override %s: %w", name, err)
				}
			}
		}
		if found {
			continue
		}
		note("create", "override", name)
		if !dryRun {
			if _, err := c.overrides.CreateOverride(ctx, request(c, &sluicev1.CreateOverrideRequest{TenantId: res.TenantID, Override: protoconv.OverrideToProto(o)})); err != nil {
				return res, fmt.Errorf("create override %s: %w", name, err)
			}
		}
	}
	if !prune {
		return res, nil
	}

	// Prune: overrides, then rules, then tiers (whose deletion takes
	// their rules and overrides along).
	for i, old := range overrides {
		if keep[i] {
			continue
		}
		note("delete", "override", old.Identifier)
		if !dryRun {
			if err := c.deleteOverride(ctx, res.TenantID, old.ID); err != nil {
				return res, fmt.Errorf("delete override %s: %w", old.Identifier, err)
			}
		}
	}
	for _, tier := range tiers {
		if !named[tier.Name] {
			note("delete", "tier", tier.Name)
			if !dryRun {
				if _, err := c.tiers.DeleteTier(ctx, request(c, &sluicev1.DeleteTierRequest{TenantId: res.TenantID, TierId: tier.ID})); err != nil {
					return res, fmt.Errorf("delete tier %s: %w", tier.Name, err)
				}
			}
			continue
		}
		for _, r := range tier.Rules {
			if ref := tier.Name + "/" + r.Name; !named[ref] {
				note("delete", "rule", ref)
				if !dryRun {
					if _, err := c.rules.DeleteRule(ctx, request(c, &sluicev1.DeleteRuleRequest{TenantId: res.TenantID, RuleId: r.ID})); err != nil {
						return res, fmt.Errorf("delete rule %s: %w", ref, err)
					}
				}
			}
		}
	}
	return res, nil
}

func (c *Client) deleteOverride(ctx context.Context, tenantID, id string) error {
	_, err := c.overrides.DeleteOverride(ctx, request(c, &sluicev1.DeleteOverrideRequest{TenantId: tenantID, OverrideId: id}))
	if connect.CodeOf(err) == connect.CodeNotFound {
		return nil // expired and swept, or deleted meanwhile
	}
	return err
}

// sameRule reports whether rule a, as the file says it, is b as the
// control plane holds it: match conditions in any order.
func sameRule(a, b policy.Rule) bool {
	pa, pb := protoconv.RuleToProto(a), protoconv.RuleToProto(b)
	for _, p := range []*sluicev1.Rule{pa, pb} {
		slices.SortFunc(p.Match, func(x, y *sluicev1.Match) int { return strings.Compare(x.Key+"\x00"+x.Value, y.Key+"\x00"+y.Value) })
	}
	return proto.Equal(pa, pb)
}

// sameSlot reports whether a and b hold the same place, which the schema
// lets one override hold.
func sameSlot(a, b policy.Override) bool {
	return a.IdentifierKey() == b.IdentifierKey() && a.Identifier == b.Identifier && a.Block == b.Block && a.RuleID == b.RuleID
}

// sameOverride reports whether a is b but for its id, expiries equal to
// the microsecond (PostgreSQL's precision).
func sameOverride(a, b policy.Override) bool {
	pa, pb := protoconv.OverrideToProto(a), protoconv.OverrideToProto(b)
	pa.Id, pb.Id, pa.ExpiresAt, pb.ExpiresAt = "", "", nil, nil
	return proto.Equal(pa, pb) && a.ExpiresAt.Truncate(time.Microsecond).Equal(b.ExpiresAt.Truncate(time.Microsecond))
}

// overrideName describes an override for a change list: "alice on
// free/per-client", "bigco-* to pro", "mallory blocked".
func overrideName(o tenantfile.Override) string {
	name := o.Identifier
	if o.DescriptorKey != "" {
		name = o.DescriptorKey + "=" + name
	}
	switch {
	case o.Block && o.Rule != "":
		return name + " blocked on " + o.Rule
	case o.Block:
		return name + " blocked"
	case o.Tier != "":
		return name + " to " + o.Tier
	}
	return name + " on " + o.Rule
}
