// Package tenantapply makes a tenant match its tenant file
// (internal/tenantfile) in one transaction of the control plane's store:
// all of the file's changes in one config version, or none of them.
package tenantapply

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/tenantfile"
)

// Caller is who applies: the operator, in the tenant the file names, or a
// tenant admin key, in its own tenant only.
type Caller struct {
	Actor    policy.Actor
	Operator bool
	TenantID string // an admin key's tenant
}

// Options are an apply's options.
type Options struct {
	// Prune deletes what the file does not name.
	Prune bool
	// DryRun makes the changes and rolls them back.
	DryRun bool
	// IfVersion, when not 0, refuses the apply (policy.CodeAborted) unless
	// the tenant is at this config version: a file read, changed and
	// applied back is not applied over a change made meanwhile.
	IfVersion int64
}

// Apply makes the caller's tenant match f, valid (tenantfile.Parse), in one
// transaction of store: tiers and rules the file names created, or updated
// where they differ, each tier's rules in the file's order; overrides
// created, or replaced where they differ; with Prune, the rules, tiers and
// overrides the file does not name deleted, so that the tenant becomes the
// file. The operator's apply creates a missing tenant and sets its name,
// default tier and shadow mode. Nothing is written when nothing differs
// (no new config version); all changes are one version. With DryRun every
// change is made and rolled back, so the result is what the apply would
// do, errors included. A change the store refuses fails the apply whole,
// the error naming it.
func Apply[S Transactional[S]](ctx context.Context, store S, who Caller, f *tenantfile.File, opt Options) (tenantfile.ApplyResult, error) {
	res, _, err := apply(ctx, store, who, []*tenantfile.File{f}, opt)
	if err != nil {
		return tenantfile.ApplyResult{}, err
	}
	return res[0], nil
}

// MaxFiles bounds the files of one ApplyAll.
const MaxFiles = 1000

// ApplyAll applies files, each of another tenant, as Apply does each, all
// in one transaction of store: every tenant comes to match its file, or
// nothing is written. Each tenant's changes are one config version of its
// own. The results are in the order of files; an error names the file by
// its index (files[1]: its message prefixed, its fields nested under
// files[1]). Options.IfVersion, which is of one tenant, is refused.
func ApplyAll[S Transactional[S]](ctx context.Context, store S, who Caller, files []*tenantfile.File, opt Options) ([]tenantfile.ApplyResult, error) {
	if err := CheckCount(len(files)); err != nil {
		return nil, err
	}
	if opt.IfVersion != 0 {
		return nil, &policy.Error{Code: policy.CodeInvalid, Message: "if_version is of one tenant", Fields: []policy.FieldError{{Field: "if_version", Description: "only when applying one file"}}}
	}
	first := map[string]int{}
	for i, f := range files {
		if j, ok := first[f.Tenant]; ok {
			return nil, &policy.Error{Code: policy.CodeInvalid, Message: fmt.Sprintf("files[%d] and files[%d] are both of tenant %s", j, i, f.Tenant),
				Fields: []policy.FieldError{{Field: fmt.Sprintf("files[%d].tenant", i), Description: fmt.Sprintf("also files[%d]'s: one file per tenant", j)}}}
		}
		first[f.Tenant] = i
	}
	res, failed, err := apply(ctx, store, who, files, opt)
	if err != nil && failed >= 0 {
		err = policy.Within(err, fmt.Sprintf("files[%d]", failed), fmt.Sprintf("files[%d] (tenant %s)", failed, files[failed].Tenant))
	}
	return res, err
}

// CheckCount refuses a set of n files that ApplyAll would refuse for its
// size alone, so that a caller need not read them first.
func CheckCount(n int) error {
	switch {
	case n == 0:
		return &policy.Error{Code: policy.CodeInvalid, Message: "no tenant file", Fields: []policy.FieldError{{Field: "files", Description: "at least one"}}}
	case n > MaxFiles:
		return &policy.Error{Code: policy.CodeInvalid, Message: fmt.Sprintf("%d tenant files", n), Fields: []policy.FieldError{{Field: "files", Description: fmt.Sprintf("at most %d", MaxFiles)}}}
	}
	return nil
}

// apply makes each tenant match its file in one transaction, the tenants
// taken in the order of their slugs so that two applies locking the same
// tenants cannot deadlock. It tries again once when a tenant's creation
// lost a race with another's. On an error, failed is the index of the file
// it was met in (-1: none, the transaction's own).
func apply[S Transactional[S]](ctx context.Context, store S, who Caller, files []*tenantfile.File, opt Options) (_ []tenantfile.ApplyResult, failed int, err error) {
	order := make([]int, len(files))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(files[a].Tenant, files[b].Tenant) })
	results := make([]tenantfile.ApplyResult, len(files))
	for range 2 {
		lost := false // a tenant's creation lost a race with another's
		failed = -1
		err = store.Atomically(ctx, !opt.DryRun, func(s S) error {
			for _, i := range order {
				a := &applier{s: s, who: who, f: files[i], opt: opt}
				err := a.apply(ctx)
				results[i], lost = a.res, a.lost
				if err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		if !lost {
			break
		}
	}
	if err != nil {
		return nil, failed, err
	}
	for i := range results {
		results[i].DryRun = opt.DryRun
	}
	return results, -1, nil
}

type applier struct {
	s    Changes
	who  Caller
	f    *tenantfile.File
	opt  Options
	res  tenantfile.ApplyResult
	lost bool // creating the tenant met another's creation of it
}

func (a *applier) note(op, kind, name string) {
	a.res.Changes = append(a.res.Changes, tenantfile.Change{Op: op, Kind: kind, Name: name})
}

// refused returns err of a change, its message prefixed with what the
// change is, its code kept.
func refused(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if pe, ok := errors.AsType[*policy.Error](err); ok {
		return &policy.Error{Code: pe.Code, Message: what + ": " + pe.Message, Fields: pe.Fields}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// operatorOnly names what want changes of tenant that only the operator
// may (its name, default tier and shadow mode), or is "" when it changes
// none of them.
func operatorOnly(tenant, want policy.Tenant) string {
	var fields []string
	if want.Name != tenant.Name {
		fields = append(fields, "name")
	}
	if want.DefaultTier != "" && want.DefaultTier != tenant.DefaultTier {
		fields = append(fields, "default tier")
	}
	if want.Shadow != tenant.Shadow {
		fields = append(fields, "shadow mode")
	}
	if len(fields) == 0 {
		return ""
	}
	return "the tenant's " + strings.Join(fields, ", ") + ": only the operator key changes them"
}

func (a *applier) apply(ctx context.Context) error {
	s, f, actor := a.s, a.f, a.who.Actor
	want := f.TenantPolicy()

	// The tenant, locked until the end: what is read below stays current.
	var tenant policy.Tenant
	var err error
	created := false
	if a.who.Operator {
		tenant, a.res.Version, err = s.GetTenantBySlug(ctx, f.Tenant)
		if policy.ErrorCode(err) == policy.CodeNotFound {
			a.note("create", "tenant", f.Tenant)
			created = true
			if tenant, err = s.CreateTenant(ctx, actor, want); err != nil {
				a.lost = policy.ErrorCode(err) == policy.CodeConflict
				return refused(err, "create tenant %s", f.Tenant)
			}
		}
	} else {
		tenant, a.res.Version, err = s.GetTenant(ctx, a.who.TenantID)
		if err == nil && tenant.Slug != f.Tenant {
			return &policy.Error{Code: policy.CodePermissionDenied, Message: fmt.Sprintf("the file is for tenant %s, the key for %s", f.Tenant, tenant.Slug),
				Fields: []policy.FieldError{{Field: "tenant", Description: "not this key's tenant"}}}
		}
	}
	if err != nil {
		return err
	}
	if err := s.LockTenant(ctx, tenant.ID); err != nil {
		return err
	}
	if a.opt.IfVersion != 0 && created {
		return policy.Errorf(policy.CodeAborted, "tenant %s does not exist (any more): read it again", f.Tenant)
	}
	if !created {
		// Read again under the lock: the tenant and version the changes
		// start from.
		if tenant, a.res.Version, err = s.GetTenant(ctx, tenant.ID); err != nil {
			return err
		}
		if a.opt.IfVersion != 0 && a.res.Version != a.opt.IfVersion {
			return policy.Errorf(policy.CodeAborted, "tenant %s is at config version %d, not %d: another change came first; read it again", f.Tenant, a.res.Version, a.opt.IfVersion)
		}
	}
	if !created || !a.opt.DryRun {
		a.res.TenantID = tenant.ID
	}
	tiers, err := s.ListTiers(ctx, tenant.ID)
	if err != nil {
		return err
	}
	overrides, err := s.ListOverrides(ctx, tenant.ID)
	if err != nil {
		return err
	}

	ruleIDs, inFile, err := a.tiers(ctx, tenant.ID, tiers)
	if err != nil {
		return err
	}

	// The tenant's own fields, once its tiers are there.
	if a.who.Operator {
		if tenant.Name != want.Name || tenant.Shadow != want.Shadow || tenant.DefaultTier != want.DefaultTier && want.DefaultTier != "" {
			a.note("update", "tenant", f.Tenant)
			want.ID, want.Status = tenant.ID, tenant.Status
			if want.DefaultTier == "" {
				want.DefaultTier = tenant.DefaultTier
			}
			if _, err := s.UpdateTenant(ctx, actor, want, ""); err != nil {
				return refused(err, "update tenant %s", f.Tenant)
			}
			tenant.DefaultTier = want.DefaultTier
		}
	} else {
		a.res.Skipped = operatorOnly(tenant, want)
	}

	keep, err := a.overrides(ctx, tenant.ID, overrides, ruleIDs)
	if err != nil {
		return err
	}
	if a.opt.Prune {
		if err := a.prune(ctx, tenant, tiers, overrides, keep, inFile); err != nil {
			return err
		}
	}
	if !a.opt.DryRun && len(a.res.Changes) > 0 {
		if _, a.res.Version, err = s.GetTenant(ctx, tenant.ID); err != nil {
			return err
		}
	}
	return nil
}

// tiers creates and updates the file's tiers and rules in the tenant,
// whose tiers are tiers, and orders each tier's rules. It returns the ids
// of the file's rules by "tier/rule", and the names of the tiers and
// "tier/rule"s the file holds.
func (a *applier) tiers(ctx context.Context, tenantID string, tiers []policy.Tier) (map[string]string, map[string]bool, error) {
	s, actor := a.s, a.who.Actor
	ruleIDs := map[string]string{}
	inFile := map[string]bool{}
	for _, ft := range a.f.Tiers {
		inFile[ft.Name] = true
		desired, _ := ft.Policy() // validated by Parse
		i := slices.IndexFunc(tiers, func(t policy.Tier) bool { return t.Name == ft.Name })
		var tier policy.Tier
		if i >= 0 {
			tier = tiers[i]
		} else {
			a.note("create", "tier", ft.Name)
			var err error
			if tier, _, err = s.CreateTier(ctx, actor, tenantID, ft.Name); err != nil {
				return nil, nil, refused(err, "create tier %s", ft.Name)
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
			inFile[ref] = true
			order = append(order, r.Name)
			id, ok := ids[r.Name]
			if !ok {
				a.note("create", "rule", ref)
				created, _, err := s.CreateRule(ctx, actor, tenantID, tier.ID, r)
				if err != nil {
					return nil, nil, refused(err, "create rule %s", ref)
				}
				ids[r.Name], ruleIDs[ref] = created.ID, created.ID
				actual = append(actual, r.Name)
				continue
			}
			ruleIDs[ref] = id
			old := tier.Rules[slices.IndexFunc(tier.Rules, func(o policy.Rule) bool { return o.Name == r.Name })]
			if r.ID = id; sameRule(r, old) {
				continue
			}
			a.note("update", "rule", ref)
			if _, err := s.UpdateRule(ctx, actor, tenantID, r, ""); err != nil {
				return nil, nil, refused(err, "update rule %s", ref)
			}
		}
		for _, name := range actual {
			if !slices.Contains(order, name) {
				order = append(order, name) // kept (or pruned) after the file's
			}
		}
		if slices.Equal(actual, order) {
			continue
		}
		a.note("reorder", "rule", ft.Name)
		all := make([]string, len(order))
		for i, name := range order {
			all[i] = ids[name]
		}
		if _, err := s.ReorderRules(ctx, actor, tenantID, tier.ID, all); err != nil {
			return nil, nil, refused(err, "reorder the rules of %s", ft.Name)
		}
	}
	return ruleIDs, inFile, nil
}

// overrides creates the file's overrides in the tenant, whose overrides
// are overrides: one slot per (descriptor, identifier, rule, block), as the
// schema's unique indexes say, and a slot whose override differs is
// replaced. It returns which of overrides the file keeps.
func (a *applier) overrides(ctx context.Context, tenantID string, overrides []policy.Override, ruleIDs map[string]string) ([]bool, error) {
	s, actor := a.s, a.who.Actor
	keep := make([]bool, len(overrides))
	for _, fo := range a.f.Overrides {
		o, _ := fo.Policy(ruleIDs[fo.Rule])
		o.Key = o.IdentifierKey()
		name := overrideName(fo)
		found := false
		for i, old := range overrides {
			if keep[i] || !sameSlot(o, old) {
				continue
			}
			if sameOverride(o, old) {
				keep[i], found = true, true
				break
			}
			a.note("delete", "override", name+" (replaced)")
			keep[i] = true // gone now, not pruned again
			if _, err := s.DeleteOverride(ctx, actor, tenantID, old.ID); err != nil {
				return nil, refused(err, "replace override %s", name)
			}
		}
		if found || (!o.ExpiresAt.IsZero() && !time.Now().Before(o.ExpiresAt)) {
			continue // there, or expired: nothing to enforce, and the store refuses it
		}
		a.note("create", "override", name)
		if _, _, err := s.CreateOverride(ctx, actor, tenantID, o); err != nil {
			return nil, refused(err, "create override %s", name)
		}
	}
	return keep, nil
}

// prune deletes what the file does not name: overrides, then rules, then
// tiers (whose deletion takes their rules and overrides along). The
// tenant's default tier stays unless the file makes another the default.
func (a *applier) prune(ctx context.Context, tenant policy.Tenant, tiers []policy.Tier, overrides []policy.Override, keep []bool, inFile map[string]bool) error {
	s, actor := a.s, a.who.Actor
	for i, old := range overrides {
		if keep[i] {
			continue
		}
		a.note("delete", "override", old.Identifier)
		if _, err := s.DeleteOverride(ctx, actor, tenant.ID, old.ID); err != nil {
			return refused(err, "delete override %s", old.Identifier)
		}
	}
	for _, tier := range tiers {
		if !inFile[tier.Name] {
			if tier.Name == tenant.DefaultTier {
				return &policy.Error{Code: policy.CodeInvalid, Message: fmt.Sprintf("-prune would delete tier %s, the tenant's default", tier.Name),
					Fields: []policy.FieldError{{Field: "default_tier", Description: fmt.Sprintf("the tenant's default tier %s is not in this file: add it, or name another default (with the operator key)", tier.Name)}}}
			}
			a.note("delete", "tier", tier.Name)
			if _, err := s.DeleteTier(ctx, actor, tenant.ID, tier.ID); err != nil {
				return refused(err, "delete tier %s", tier.Name)
			}
			continue
		}
		for _, r := range tier.Rules {
			if ref := tier.Name + "/" + r.Name; !inFile[ref] {
				a.note("delete", "rule", ref)
				if _, err := s.DeleteRule(ctx, actor, tenant.ID, r.ID); err != nil {
					return refused(err, "delete rule %s", ref)
				}
			}
		}
	}
	return nil
}

// sameRule reports whether rule a, as the file says it, is b as the store
// holds it: match conditions in any order.
func sameRule(a, b policy.Rule) bool { return a.SameAs(b) }

// sameSlot reports whether a and b hold the same place, which the schema
// lets one override hold.
func sameSlot(a, b policy.Override) bool {
	return a.IdentifierKey() == b.IdentifierKey() && a.Identifier == b.Identifier && a.Block == b.Block && a.RuleID == b.RuleID
}

// sameOverride reports whether a is b but for its id, expiries equal to
// the microsecond (PostgreSQL's precision).
func sameOverride(a, b policy.Override) bool { return a.SameAs(b) }

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
