package controlplane

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/tenantapply"
	"github.com/sluicehq/sluice/internal/tenantfile"
)

// tenantFileServer serves sluice.v1.TenantFileService: a file's tenant is
// the one its slug names for the operator, and must be the key's own for
// an admin key (tenantapply checks it).
type tenantFileServer struct{ *server }

func (s tenantFileServer) ApplyTenantFile(ctx context.Context, req *connect.Request[sluicev1.ApplyTenantFileRequest]) (*connect.Response[sluicev1.ApplyTenantFileResponse], error) {
	f, err := tenantfile.Parse(req.Msg.GetContent())
	if err != nil {
		if _, ok := errors.AsType[*policy.Error](err); !ok {
			err = policy.Errorf(policy.CodeInvalid, "%v", err) // a YAML error: the caller's, and safe to show
		}
		return reply[sluicev1.ApplyTenantFileResponse](ctx, s.server, nil, err)
	}
	p := principalFrom(ctx)
	who := tenantapply.Caller{Actor: p.actor(), Operator: p.Role == RoleOperator, TenantID: p.TenantID}
	res, err := tenantapply.Apply(ctx, s.store, who, f, tenantapply.Options{Prune: req.Msg.GetPrune(), DryRun: req.Msg.GetDryRun(), IfVersion: req.Msg.GetIfVersion()})
	out := &sluicev1.ApplyTenantFileResponse{TenantId: res.TenantID, ConfigVersion: res.Version, DryRun: res.DryRun, Skipped: res.Skipped}
	for _, c := range res.Changes {
		out.Changes = append(out.Changes, &sluicev1.TenantFileChange{Op: c.Op, Kind: c.Kind, Name: c.Name})
	}
	return reply(ctx, s.server, out, err)
}

func (s tenantFileServer) ExportTenantFile(ctx context.Context, req *connect.Request[sluicev1.ExportTenantFileRequest]) (*connect.Response[sluicev1.ExportTenantFileResponse], error) {
	tenantID, err := tenantOf(ctx, req.Msg.GetTenantId())
	if err != nil {
		return nil, err
	}
	t, version, err := s.store.GetTenant(ctx, tenantID)
	if err != nil {
		return reply[sluicev1.ExportTenantFileResponse](ctx, s.server, nil, err)
	}
	tiers, err := s.store.ListTiers(ctx, tenantID)
	if err != nil {
		return reply[sluicev1.ExportTenantFileResponse](ctx, s.server, nil, err)
	}
	overrides, err := s.store.ListOverrides(ctx, tenantID)
	if err != nil {
		return reply[sluicev1.ExportTenantFileResponse](ctx, s.server, nil, err)
	}
	b, err := tenantfile.From(t, tiers, overrides).Marshal()
	return reply(ctx, s.server, &sluicev1.ExportTenantFileResponse{Content: b, Slug: t.Slug, ConfigVersion: version}, err)
}
