package cli

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/tenantfile"
)

// Export returns the tenant file of a tenant: with the
// operator key the tenant of slug, with an admin key the key's own (slug
// is then only checked against it).
func (c *Client) Export(ctx context.Context, slug string) ([]byte, error) {
	tenant, err := c.findTenant(ctx, slug)
	if err != nil {
		return nil, err
	}
	var id string
	switch {
	case tenant != nil:
		id = tenant.Id
	case c.operator:
		return nil, fmt.Errorf("no tenant %q", slug)
	}
	res, err := c.files.ExportTenantFile(ctx, request(c, &sluicev1.ExportTenantFileRequest{TenantId: id}))
	if err != nil {
		return nil, err
	}
	if res.Msg.Slug != slug {
		return nil, fmt.Errorf("the key is tenant %s's, not %s's", res.Msg.Slug, slug)
	}
	return res.Msg.Content, nil
}

// findTenant returns the tenant of slug (nil when there is none) with the
// operator key, and nil with an admin key, whose calls act in its own
// tenant; it records which of the two the key is.
func (c *Client) findTenant(ctx context.Context, slug string) (*sluicev1.Tenant, error) {
	// The slug, if a tenant has it, comes first of those it begins.
	list, err := c.tenants.ListTenants(ctx, request(c, &sluicev1.ListTenantsRequest{SlugPrefix: slug, PageSize: 1}))
	switch {
	case connect.CodeOf(err) == connect.CodePermissionDenied:
		c.operator = false
		return nil, nil
	case err != nil:
		return nil, err
	}
	c.operator = true
	if ts := list.Msg.Tenants; len(ts) > 0 && ts[0].Slug == slug {
		return ts[0], nil
	}
	return nil, nil
}

// Apply has the control plane make a tenant match a tenant file, in one
// transaction (see sluice.v1.TenantFileService): with the operator key
// the tenant the file names, with an admin key the key's own.
func (c *Client) Apply(ctx context.Context, req *sluicev1.ApplyTenantFileRequest) (tenantfile.ApplyResult, error) {
	res, err := c.files.ApplyTenantFile(ctx, request(c, req))
	if err != nil {
		return tenantfile.ApplyResult{}, err
	}
	return applyResult(res.Msg), nil
}

// ApplyAll has the control plane make each tenant match its file, all in
// one transaction: every tenant or none. The results are in the order of
// the files.
func (c *Client) ApplyAll(ctx context.Context, req *sluicev1.ApplyTenantFilesRequest) ([]tenantfile.ApplyResult, error) {
	res, err := c.files.ApplyTenantFiles(ctx, request(c, req))
	if err != nil {
		return nil, err
	}
	out := make([]tenantfile.ApplyResult, len(res.Msg.Results))
	for i, m := range res.Msg.Results {
		out[i] = applyResult(m)
	}
	return out, nil
}

func applyResult(m *sluicev1.ApplyTenantFileResponse) tenantfile.ApplyResult {
	out := tenantfile.ApplyResult{TenantID: m.TenantId, Version: m.ConfigVersion, DryRun: m.DryRun, Skipped: m.Skipped}
	for _, ch := range m.Changes {
		out.Changes = append(out.Changes, tenantfile.Change{Op: ch.Op, Kind: ch.Kind, Name: ch.Name})
	}
	return out
}
