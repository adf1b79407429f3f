package tenantapply

import (
	"context"

	"github.com/sluicehq/sluice/internal/envoyimport"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/tenantfile"
)

// Reader is what an export reads of a store.
type Reader interface {
	GetTenant(ctx context.Context, id string) (policy.Tenant, int64, error)
	GetTenantBySlug(ctx context.Context, slug string) (policy.Tenant, int64, error)
	ListTiers(ctx context.Context, tenantID string) ([]policy.Tier, error)
	ListOverrides(ctx context.Context, tenantID string) ([]policy.Override, error)
}

// Changes are what an apply reads and changes of a store, within one of
// its transactions.
type Changes interface {
	Reader
	// LockTenant holds the tenant's row until the transaction ends.
	LockTenant(ctx context.Context, tenantID string) error
	CreateTenant(ctx context.Context, actor policy.Actor, t policy.Tenant) (policy.Tenant, error)
	UpdateTenant(ctx context.Context, actor policy.Actor, t policy.Tenant, ifMatch string) (int64, error)
	CreateTier(ctx context.Context, actor policy.Actor, tenantID, name string) (policy.Tier, int64, error)
	DeleteTier(ctx context.Context, actor policy.Actor, tenantID, tierID string) (int64, error)
	CreateRule(ctx context.Context, actor policy.Actor, tenantID, tierID string, r policy.Rule) (policy.Rule, int64, error)
	UpdateRule(ctx context.Context, actor policy.Actor, tenantID string, r policy.Rule, ifMatch string) (int64, error)
	DeleteRule(ctx context.Context, actor policy.Actor, tenantID, ruleID string) (int64, error)
	ReorderRules(ctx context.Context, actor policy.Actor, tenantID, tierID string, ids []string) (int64, error)
	CreateOverride(ctx context.Context, actor policy.Actor, tenantID string, o policy.Override) (policy.Override, int64, error)
	DeleteOverride(ctx context.Context, actor policy.Actor, tenantID, id string) (int64, error)
}

// Store is a store an apply runs in (pgstore.Store is one): its reads,
// and transactions, in each of which f gets a store S of the
// transaction. Its changes there are one config version per tenant,
// committed when f returns nil and commit is true, else rolled back.
type Store[S any] interface {
	Reader
	Atomically(ctx context.Context, commit bool, f func(tx S) error) error
}

// Transactional is a Store whose transactions' stores are Changes too.
type Transactional[S any] interface {
	Store[S]
	Changes
}

// Files are the tenant-file operations on one store, for a caller that
// holds them as a value (the control plane takes them so, and names no
// store).
type Files[S Transactional[S]] struct {
	Store S
}

// Apply is Apply on f's store.
func (f Files[S]) Apply(ctx context.Context, who Caller, file *tenantfile.File, opt Options) (tenantfile.ApplyResult, error) {
	return Apply(ctx, f.Store, who, file, opt)
}

// ApplyAll is ApplyAll on f's store.
func (f Files[S]) ApplyAll(ctx context.Context, who Caller, files []*tenantfile.File, opt Options) ([]tenantfile.ApplyResult, error) {
	return ApplyAll(ctx, f.Store, who, files, opt)
}

// Import is Import on f's store.
func (f Files[S]) Import(ctx context.Context, who Caller, plan *envoyimport.Plan, opt ImportOptions) (ImportResult, error) {
	return Import(ctx, f.Store, who, plan, opt)
}

// ExportByID is ExportByID on f's store.
func (f Files[S]) ExportByID(ctx context.Context, id string) (*tenantfile.File, int64, error) {
	return ExportByID(ctx, f.Store, id)
}
