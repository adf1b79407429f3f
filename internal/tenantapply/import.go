package tenantapply

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/envoyimport"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/tenantfile"
)

// ImportOptions are an import's options.
type ImportOptions struct {
	// Tier is the tier the rules go to; "default" when empty.
	Tier string
	// Prune deletes the tier's rules the plan does not name.
	Prune bool
	// DryRun makes the changes and rolls them back.
	DryRun bool
}

// ImportResult says what an import did, rule by rule.
type ImportResult struct {
	TenantID      string   `json:"tenant_id,omitempty"` // empty: a dry run's tenant to be created
	Tenant        string   `json:"tenant"`              // the slug
	TenantCreated bool     `json:"tenant_created"`
	Tier          string   `json:"tier"`
	Created       []string `json:"created"`
	Updated       []string `json:"updated"`
	Unchanged     []string `json:"unchanged"`         // already as the plan says: not written
	Deleted       []string `json:"deleted,omitempty"` // with Prune
	Version       int64    `json:"config_version"`
	DryRun        bool     `json:"dry_run"`
}

// importTries bounds the reads and applies of an import that other
// changes keep overtaking: each time one is, another change has landed, so
// of fewer than importTries imports at once every one lands.
const importTries = 10

// Import makes plan's rules the rules of a tier of the caller's tenant:
// the operator's the plan's tenant (created if missing), an admin key's
// its own (PermissionDenied when the plan names another). The tenant's
// file is read, the rules put in it (tenantfile.File.Import) and the file
// applied back only over the version it was read at, in one transaction:
// all of it or nothing, never over a change made meanwhile (read again, a
// few times, then Aborted). Importing the same plan twice changes nothing
// the second time.
func Import[S Transactional[S]](ctx context.Context, store S, who Caller, plan *envoyimport.Plan, opt ImportOptions) (ImportResult, error) {
	tier := cmp.Or(opt.Tier, "default")
	if who.Operator && plan.Tenant.Slug == "" {
		return ImportResult{}, &policy.Error{Code: policy.CodeInvalid,
			Message: "the configuration names no tenant: give its slug (sluice import -tenant SLUG), or import with the tenant's admin key",
			Fields:  []policy.FieldError{{Field: "tenant", Description: "required: the configuration names none"}}}
	}
	for try := 1; ; try++ {
		f, version, err := Export(ctx, store, who, plan.Tenant.Slug)
		if policy.ErrorCode(err) == policy.CodeNotFound && who.Operator {
			f, version, err = &tenantfile.File{Tenant: plan.Tenant.Slug, Name: cmp.Or(plan.Tenant.Name, plan.Tenant.Slug), DefaultTier: tier}, 0, nil
		}
		if err != nil {
			return ImportResult{}, err
		}
		if !who.Operator && plan.Tenant.Slug != "" && plan.Tenant.Slug != f.Tenant {
			return ImportResult{}, &policy.Error{Code: policy.CodePermissionDenied,
				Message: fmt.Sprintf("the configuration is for tenant %s, the key for %s", plan.Tenant.Slug, f.Tenant),
				Fields:  []policy.FieldError{{Field: "tenant", Description: "not this key's tenant"}}}
		}
		f.Import(tier, plan.Rules, opt.Prune)
		res, err := Apply(ctx, store, who, f, Options{Prune: opt.Prune, DryRun: opt.DryRun, IfVersion: version})
		if policy.ErrorCode(err) == policy.CodeAborted && try < importTries {
			continue
		}
		if err != nil {
			return ImportResult{}, err
		}
		return imported(res, f.Tenant, tier, plan.Rules), nil
	}
}

// imported sorts the changes of an import's apply into its result.
func imported(res tenantfile.ApplyResult, slug, tier string, rules []policy.Rule) ImportResult {
	out := ImportResult{TenantID: res.TenantID, Tenant: slug, Tier: tier, Version: res.Version, DryRun: res.DryRun,
		Created: []string{}, Updated: []string{}, Unchanged: []string{}}
	changed := map[string]bool{}
	for _, ch := range res.Changes {
		name, inTier := strings.CutPrefix(ch.Name, tier+"/")
		switch {
		case ch.Kind == "tenant" && ch.Op == "create":
			out.TenantCreated = true
		case ch.Kind != "rule" || !inTier:
			continue
		case ch.Op == "create":
			out.Created = append(out.Created, name)
		case ch.Op == "update":
			out.Updated = append(out.Updated, name)
		case ch.Op == "delete":
			out.Deleted = append(out.Deleted, name)
		default:
			continue
		}
		changed[name] = true
	}
	for _, r := range rules {
		if !changed[r.Name] {
			out.Unchanged = append(out.Unchanged, r.Name)
		}
	}
	return out
}

// Export returns the caller's tenant's file and the config version it is
// of: the operator's the tenant of slug, an admin key's its own.
func Export(ctx context.Context, store Reader, who Caller, slug string) (*tenantfile.File, int64, error) {
	var t policy.Tenant
	var version int64
	var err error
	if who.Operator {
		t, version, err = store.GetTenantBySlug(ctx, slug)
	} else {
		t, version, err = store.GetTenant(ctx, who.TenantID)
	}
	if err != nil {
		return nil, 0, err
	}
	f, err := fileOf(ctx, store, t)
	return f, version, err
}

// ExportByID returns the file of the tenant of id and the config version
// it is of.
func ExportByID(ctx context.Context, store Reader, id string) (*tenantfile.File, int64, error) {
	t, version, err := store.GetTenant(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	f, err := fileOf(ctx, store, t)
	return f, version, err
}

func fileOf(ctx context.Context, store Reader, t policy.Tenant) (*tenantfile.File, error) {
	tiers, err := store.ListTiers(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	overrides, err := store.ListOverrides(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	return tenantfile.From(t, tiers, overrides), nil
}
