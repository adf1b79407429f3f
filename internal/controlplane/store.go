package controlplane

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/envoyimport"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/reports"
	"github.com/sluicehq/sluice/internal/tenantapply"
	"github.com/sluicehq/sluice/internal/tenantfile"
)

// The control plane keeps its configuration in a Store (pgstore.Store is
// the one it ships with). Each part below is what one group of calls
// uses; a change returns the tenant's new config version, and records an
// audit row, in one transaction.

// Tenants are the tenants and their config versions.
type Tenants interface {
	CreateTenant(ctx context.Context, actor policy.Actor, t policy.Tenant) (policy.Tenant, error)
	GetTenant(ctx context.Context, id string) (policy.Tenant, int64, error)
	GetTenantBySlug(ctx context.Context, slug string) (policy.Tenant, int64, error)
	PageTenants(ctx context.Context, prefix, after string, limit int) ([]policy.VersionedTenant, string, error)
	UpdateTenant(ctx context.Context, actor policy.Actor, t policy.Tenant, ifMatch string) (int64, error)
	DeleteTenant(ctx context.Context, actor policy.Actor, id string) error
}

// Tiers are a tenant's tiers.
type Tiers interface {
	CreateTier(ctx context.Context, actor policy.Actor, tenantID, name string) (policy.Tier, int64, error)
	ListTiers(ctx context.Context, tenantID string) ([]policy.Tier, error)
	RenameTier(ctx context.Context, actor policy.Actor, tenantID, tierID, name string) (int64, error)
	DeleteTier(ctx context.Context, actor policy.Actor, tenantID, tierID string) (int64, error)
}

// Rules are a tier's rules, in order.
type Rules interface {
	ListRules(ctx context.Context, tenantID, tierID string) ([]policy.Rule, error)
	CreateRule(ctx context.Context, actor policy.Actor, tenantID, tierID string, r policy.Rule) (policy.Rule, int64, error)
	UpdateRule(ctx context.Context, actor policy.Actor, tenantID string, r policy.Rule, ifMatch string) (int64, error)
	DeleteRule(ctx context.Context, actor policy.Actor, tenantID, ruleID string) (int64, error)
	ReorderRules(ctx context.Context, actor policy.Actor, tenantID, tierID string, ids []string) (int64, error)
}

// Overrides are a tenant's per-client overrides.
type Overrides interface {
	CreateOverride(ctx context.Context, actor policy.Actor, tenantID string, o policy.Override) (policy.Override, int64, error)
	UpdateOverride(ctx context.Context, actor policy.Actor, tenantID string, o policy.Override, ifMatch string) (int64, error)
	PageOverrides(ctx context.Context, tenantID, prefix string, after *policy.OverrideCursor, limit int) ([]policy.Override, *policy.OverrideCursor, error)
	DeleteOverride(ctx context.Context, actor policy.Actor, tenantID, id string) (int64, error)
}

// Keys are the tenants' API keys, stored hashed.
type Keys interface {
	CreateExpiringKey(ctx context.Context, actor policy.Actor, tenantID string, kind policy.KeyKind, name string, expires time.Time) (string, policy.APIKey, error)
	RotateKey(ctx context.Context, actor policy.Actor, tenantID, keyID string, grace time.Duration) (string, policy.APIKey, policy.APIKey, error)
	PageKeys(ctx context.Context, tenantID string, revoked bool, after *policy.KeyCursor, limit int) ([]policy.APIKey, *policy.KeyCursor, error)
	RevokeKey(ctx context.Context, actor policy.Actor, tenantID, keyID string) (int64, error)
	KeyByHash(ctx context.Context, hash [32]byte) (policy.APIKey, error)
	TouchCheckKeys(ctx context.Context, hashes [][]byte) error
}

// Audit is the log of changes.
type Audit interface {
	ListAudit(ctx context.Context, tenantID string, before int64, limit int, resourceID string) ([]policy.AuditEntry, error)
}

// Configs are what the deciders pull: each tenant's snapshot and version,
// and the deciders' own reports.
type Configs interface {
	Snapshot(ctx context.Context, tenantID string) (*policy.Snapshot, []policy.CheckKey, error)
	TenantVersions(ctx context.Context) (versions, stamps map[string]int64, err error)
	RaiseVersions(ctx context.Context, actor policy.Actor, held map[string]int64) (map[string]int64, error)
	RecordDecider(ctx context.Context, name string, versions map[string]int64, health policy.DeciderHealth) error
	ListDeciders(ctx context.Context) ([]policy.DeciderStatus, error)
	LiveDeciders(ctx context.Context, window time.Duration) (int, error)
}

// Store is every part the control plane's calls use.
type Store interface {
	Tenants
	Tiers
	Rules
	Overrides
	Keys
	Audit
	Configs
}

// Watcher streams config versions to the deciders' watches: each version
// committed after since, in order per tenant, until ctx ends or emit
// fails; policy.ErrWatchBehind when the watcher fell behind
// (pgstore.Hub: one LISTEN for every watch).
type Watcher interface {
	Watch(ctx context.Context, since map[string]int64, emit func(policy.Version) error) error
}

// TenantFiles apply, import and export tenant files in the store's
// transactions (tenantapply.Files).
type TenantFiles interface {
	Apply(ctx context.Context, who tenantapply.Caller, f *tenantfile.File, opt tenantapply.Options) (tenantfile.ApplyResult, error)
	ApplyAll(ctx context.Context, who tenantapply.Caller, files []*tenantfile.File, opt tenantapply.Options) ([]tenantfile.ApplyResult, error)
	Import(ctx context.Context, who tenantapply.Caller, plan *envoyimport.Plan, opt tenantapply.ImportOptions) (tenantapply.ImportResult, error)
	ExportByID(ctx context.Context, id string) (*tenantfile.File, int64, error)
}

// Reports answer the report service from the analytics rollups
// (reports.Store).
type Reports interface {
	Timeseries(ctx context.Context, tenant string, r reports.Range, step time.Duration, rule, tier string) ([]reports.Point, error)
	TopClients(ctx context.Context, tenant string, r reports.Range, rule string, limit int) ([]reports.TopClient, error)
	Breakdown(ctx context.Context, tenant string, r reports.Range, by reports.By) ([]reports.Row, error)
}
