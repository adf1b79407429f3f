// Package cli holds what the sluice command does against a running control
// plane, through the public Connect API.
package cli

import (
	"context"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/envoyimport"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/protoconv"
)

// Client reaches a control plane with a key.
type Client struct {
	tenants   sluicev1connect.TenantServiceClient
	tiers     sluicev1connect.TierServiceClient
	rules     sluicev1connect.RuleServiceClient
	overrides sluicev1connect.OverrideServiceClient
	files     sluicev1connect.TenantFileServiceClient
	key       string
	// operator is whether key is the operator's, as the last look for a
	// tenant found (see findTenant).
	operator bool
}

// NewClient returns a client of the control plane at server (a base URL)
// authenticating with key (the operator's or a tenant admin's).
func NewClient(httpClient *http.Client, server, key string) *Client {
	return &Client{
		tenants:   sluicev1connect.NewTenantServiceClient(httpClient, server),
		tiers:     sluicev1connect.NewTierServiceClient(httpClient, server),
		rules:     sluicev1connect.NewRuleServiceClient(httpClient, server),
		overrides: sluicev1connect.NewOverrideServiceClient(httpClient, server),
		files:     sluicev1connect.NewTenantFileServiceClient(httpClient, server),
		key:       key,
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
	TenantCreated  bool     `json:"tenant_created"`
	Tier           string   `json:"tier"`
	Created        []string `json:"created"`
	Updated        []string `json:"updated"`
	Unchanged      []string `json:"unchanged"`         // already as the plan says: not written, no new config version
	Deleted        []string `json:"deleted,omitempty"` // with prune
	UnlimitedPaths []string `json:"unlimited_paths"`
}

// Import applies plan: with the operator key, into the tenant whose slug is
// the plan's (created if missing); with an admin key, into the key's own
// tenant. Rules go to the tier "default" (created if missing); a rule of
// the same name is updated when it differs, so importing twice changes
// nothing (no new config version, no audit row) the second time; with
// prune, the tier's rules the plan does not name are deleted, so the tier
// becomes what the file says, as envoyproxy/ratelimit's reload would.
func (c *Client) Import(ctx context.Context, plan *envoyimport.Plan, prune bool) (ImportSummary, error) {
	sum := ImportSummary{Tier: plan.Tenant.DefaultTier, UnlimitedPaths: plan.Unlimited}
	tenant, err := c.findTenant(ctx, plan.Tenant.Slug)
	switch {
	case err != nil:
		return sum, err
	case tenant != nil:
		sum.TenantID = tenant.Id
	case c.operator: // (an admin key acts in its own tenant)
		created, err := c.tenants.CreateTenant(ctx, request(c, &sluicev1.CreateTenantRequest{Tenant: &sluicev1.Tenant{
			Slug: plan.Tenant.Slug, Name: plan.Tenant.Name, DefaultTier: plan.Tenant.DefaultTier}}))
		if err != nil {
			return sum, fmt.Errorf("create tenant %s: %w", plan.Tenant.Slug, err)
		}
		sum.TenantID, sum.TenantCreated = created.Msg.Tenant.Id, true
	}
	tiers, err := c.tiers.ListTiers(ctx, request(c, &sluicev1.ListTiersRequest{TenantId: sum.TenantID}))
	if err != nil {
		return sum, err
	}
	var tier *sluicev1.Tier
	for _, t := range tiers.Msg.Tiers {
		if t.Name == sum.Tier {
			tier = t
		}
	}
	if tier == nil {
		created, err := c.tiers.CreateTier(ctx, request(c, &sluicev1.CreateTierRequest{TenantId: sum.TenantID, Name: sum.Tier}))
		if err != nil {
			return sum, fmt.Errorf("create tier %s: %w", sum.Tier, err)
		}
		tier = created.Msg.Tier
	}
	existing := map[string]*sluicev1.Rule{}
	for _, r := range tier.Rules {
		existing[r.Name] = r
	}
	for _, r := range plan.Rules {
		msg := protoconv.RuleToProto(r)
		if old, ok := existing[r.Name]; ok {
			msg.Id = old.Id
			if proto.Equal(msg, old) {
				sum.Unchanged = append(sum.Unchanged, r.Name)
				continue
			}
			if _, err := c.rules.UpdateRule(ctx, request(c, &sluicev1.UpdateRuleRequest{TenantId: sum.TenantID, Rule: msg})); err != nil {
				return sum, fmt.Errorf("update rule %s: %w", r.Name, err)
			}
			sum.Updated = append(sum.Updated, r.Name)
			continue
		}
		if _, err := c.rules.CreateRule(ctx, request(c, &sluicev1.CreateRuleRequest{TenantId: sum.TenantID, TierId: tier.Id, Rule: msg})); err != nil {
			return sum, fmt.Errorf("create rule %s: %w", r.Name, err)
		}
		sum.Created = append(sum.Created, r.Name)
	}
	if !prune {
		return sum, nil
	}
	named := map[string]bool{}
	for _, r := range plan.Rules {
		named[r.Name] = true
	}
	for _, r := range tier.Rules {
		if named[r.Name] {
			continue
		}
		if _, err := c.rules.DeleteRule(ctx, request(c, &sluicev1.DeleteRuleRequest{TenantId: sum.TenantID, RuleId: r.Id})); err != nil {
			return sum, fmt.Errorf("delete rule %s: %w", r.Name, err)
		}
		sum.Deleted = append(sum.Deleted, r.Name)
	}
	return sum, nil
}
