// Package cli holds what the sluice command does against a running control
// plane, through the public Connect API.
package cli

import (
	"context"
	"net/http"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
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
	TenantID       string   `json:"tenant_id,omitempty"` // empty: a dry run's tenant to be created
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

// Import has the control plane import another limiter's configuration
// (sluice.v1.TenantFileService/ImportConfig): with the operator key into
// the tenant it names (created if missing), with an admin key into the
// key's own; the tier's rules of the configuration's names created or
// updated where they differ, so importing twice changes nothing the
// second time; with Prune, the tier's other rules deleted (and their
// overrides), as envoyproxy/ratelimit's reload would. All of it in one
// config version, or nothing.
func (c *Client) Import(ctx context.Context, req *sluicev1.ImportConfigRequest) (ImportSummary, error) {
	res, err := c.files.ImportConfig(ctx, request(c, req))
	if err != nil {
		return ImportSummary{}, err
	}
	m := res.Msg
	return ImportSummary{TenantID: m.TenantId, Tenant: m.Tenant, TenantCreated: m.TenantCreated, Tier: m.Tier,
		Created: nonNil(m.Created), Updated: nonNil(m.Updated), Unchanged: nonNil(m.Unchanged), Deleted: m.Deleted,
		UnlimitedPaths: nonNil(m.UnlimitedPaths), Notes: m.Notes, DryRun: m.DryRun}, nil
}

// nonNil is s, or an empty list for JSON's [] where a list is expected.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
