// Package cli holds what the sluice command does against a running control
// plane, through the public Connect API.
package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/connect"

	"github.com/sluicehq/sluice/internal/envoyimport"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/tenantfile"
)

// Client reaches a control plane with a key.
type Client struct {
	tenants sluicev1connect.TenantServiceClient
	files   sluicev1connect.TenantFileServiceClient
	key     string
	// operator is whether key is the operator's, as the last look for a
	// tenant found (see findTenant).
	operator bool
}

// NewClient returns a client of the control plane at server (a base URL)
// authenticating with key (the operator's or a tenant admin's).
func NewClient(httpClient *http.Client, server, key string) *Client {
	return &Client{
		tenants: sluicev1connect.NewTenantServiceClient(httpClient, server),
		files:   sluicev1connect.NewTenantFileServiceClient(httpClient, server),
		key:     key,
	}
}

func request[T any](c *Client, msg *T) *connect.Request[T] {
	r := connect.NewRequest(msg)
	r.Header().Set("Authorization", "Bearer "+c.key)
	return r
}

// ImportSummary says what an import did.
type ImportSummary struct {
	TenantID       string   `json:"tenant_id,omitempty"` // empty: the admin key's own tenant
	Tenant         string   `json:"tenant"`              // the tenant's slug
	TenantCreated  bool     `json:"tenant_created"`
	Tier           string   `json:"tier"`
	Created        []string `json:"created"`
	Updated        []string `json:"updated"`
	Unchanged      []string `json:"unchanged"`         // already as the plan says: not written, no new config version
	Deleted        []string `json:"deleted,omitempty"` // with prune
	UnlimitedPaths []string `json:"unlimited_paths"`
	Notes          []string `json:"notes,omitempty"` // where the rules differ from the file's limiter, what the deciders need
	DryRun         bool     `json:"dry_run"`         // what the import would do: nothing was written
}

// Import applies plan: with the operator key, into the tenant whose slug is
// the plan's (created if missing); with an admin key, into the key's own
// tenant. Rules go to the plan's tier (created if missing); a rule of the
// same name is updated when it differs, so importing twice changes nothing
// (no new config version, no audit row) the second time; with prune, the
// tier's rules the plan does not name are deleted (and the overrides of
// those rules), so the tier becomes what the file says, as
// envoyproxy/ratelimit's reload would. The import is the tenant's file
// read, changed and applied back in one transaction, only over the
// version it was read at: all of it or nothing, never over a change made
// meanwhile (that is Aborted; import again). With dryRun the control
// plane makes the changes, meets every error they would, and keeps none:
// the summary is what the import would do.
func (c *Client) Import(ctx context.Context, plan *envoyimport.Plan, prune, dryRun bool) (ImportSummary, error) {
	sum := ImportSummary{Tier: plan.Tenant.DefaultTier, UnlimitedPaths: plan.Unlimited, Notes: plan.Notes, DryRun: dryRun}
	tenant, err := c.findTenant(ctx, plan.Tenant.Slug)
	if err != nil {
		return sum, err
	}
	if plan.Tenant.Slug == "" && c.operator {
		return sum, errors.New("the file names no tenant: give its slug (sluice import -tenant SLUG), or import with the tenant's admin key")
	}
	f := &tenantfile.File{Tenant: plan.Tenant.Slug, Name: plan.Tenant.Name, DefaultTier: plan.Tenant.DefaultTier}
	var version int64
	if tenant != nil || !c.operator {
		var id string
		if tenant != nil {
			id = tenant.Id
		}
		exp, err := c.files.ExportTenantFile(ctx, request(c, &sluicev1.ExportTenantFileRequest{TenantId: id}))
		if err != nil {
			return sum, err
		}
		if f, err = tenantfile.Parse(exp.Msg.Content); err != nil {
			return sum, fmt.Errorf("the tenant's file: %w", err)
		}
		version = exp.Msg.ConfigVersion
	}

	// The plan's rules into its tier: in place when named, else last.
	i := slices.IndexFunc(f.Tiers, func(t tenantfile.Tier) bool { return t.Name == sum.Tier })
	if i < 0 {
		f.Tiers = append(f.Tiers, tenantfile.Tier{Name: sum.Tier})
		i = len(f.Tiers) - 1
	}
	tier := &f.Tiers[i]
	planned := map[string]bool{}
	for _, r := range plan.Rules {
		planned[r.Name] = true
		fr := tenantfile.RuleFrom(r)
		if j := slices.IndexFunc(tier.Rules, func(o tenantfile.Rule) bool { return o.Name == r.Name }); j >= 0 {
			tier.Rules[j] = fr
		} else {
			tier.Rules = append(tier.Rules, fr)
		}
	}
	if prune {
		tier.Rules = slices.DeleteFunc(tier.Rules, func(r tenantfile.Rule) bool { return !planned[r.Name] })
		f.Overrides = slices.DeleteFunc(f.Overrides, func(o tenantfile.Override) bool {
			name, ok := strings.CutPrefix(o.Rule, sum.Tier+"/")
			return ok && !planned[name]
		})
	}
	sum.Tenant = f.Tenant
	content, err := f.Marshal()
	if err != nil {
		return sum, err
	}
	res, err := c.Apply(ctx, &sluicev1.ApplyTenantFileRequest{Content: content, Prune: prune, DryRun: dryRun, IfVersion: version})
	if err != nil {
		return sum, err
	}
	sum.TenantID = res.TenantID
	changed := map[string]bool{}
	for _, ch := range res.Changes {
		name, inTier := strings.CutPrefix(ch.Name, sum.Tier+"/")
		switch {
		case ch.Kind == "tenant" && ch.Op == "create":
			sum.TenantCreated = true
		case ch.Kind != "rule" || !inTier:
			continue
		case ch.Op == "create":
			sum.Created = append(sum.Created, name)
		case ch.Op == "update":
			sum.Updated = append(sum.Updated, name)
		case ch.Op == "delete":
			sum.Deleted = append(sum.Deleted, name)
		default:
			continue
		}
		changed[name] = true
	}
	for _, r := range plan.Rules {
		if !changed[r.Name] {
			sum.Unchanged = append(sum.Unchanged, r.Name)
		}
	}
	return sum, nil
}
