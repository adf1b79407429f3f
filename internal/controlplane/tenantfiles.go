package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/sluicehq/sluice/internal/envoyimport"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/kongimport"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/tenantapply"
	"github.com/sluicehq/sluice/internal/tenantfile"
)

// tenantFileServer serves sluice.v1.TenantFileService: a file's tenant is
// the one its slug names for the operator, and must be the key's own for
// an admin key (tenantapply checks it).
type tenantFileServer struct{ *server }

// MaxFilesBytes bounds the files of one ApplyTenantFiles together.
const MaxFilesBytes = 2 * tenantfile.MaxBytes

func (s tenantFileServer) ApplyTenantFile(ctx context.Context, req *connect.Request[sluicev1.ApplyTenantFileRequest]) (*connect.Response[sluicev1.ApplyTenantFileResponse], error) {
	f, err := parseFile(req.Msg.GetContent())
	if err != nil {
		return reply[sluicev1.ApplyTenantFileResponse](ctx, s.server, nil, err)
	}
	res, err := s.files.Apply(ctx, applyCaller(ctx), f, tenantapply.Options{Prune: req.Msg.GetPrune(), DryRun: req.Msg.GetDryRun(), IfVersion: req.Msg.GetIfVersion()})
	return reply(ctx, s.server, applyResponse(res), err)
}

func (s tenantFileServer) ApplyTenantFiles(ctx context.Context, req *connect.Request[sluicev1.ApplyTenantFilesRequest]) (*connect.Response[sluicev1.ApplyTenantFilesResponse], error) {
	contents := req.Msg.GetFiles()
	if err := tenantapply.CheckCount(len(contents)); err != nil {
		return reply[sluicev1.ApplyTenantFilesResponse](ctx, s.server, nil, err)
	}
	files := make([]*tenantfile.File, len(contents))
	for i, content := range contents {
		f, err := parseFile(content)
		if err != nil {
			err = policy.Within(err, fmt.Sprintf("files[%d]", i), fmt.Sprintf("files[%d]", i))
			return reply[sluicev1.ApplyTenantFilesResponse](ctx, s.server, nil, err)
		}
		files[i] = f
	}
	results, err := s.files.ApplyAll(ctx, applyCaller(ctx), files, tenantapply.Options{Prune: req.Msg.GetPrune(), DryRun: req.Msg.GetDryRun()})
	out := &sluicev1.ApplyTenantFilesResponse{}
	for _, res := range results {
		out.Results = append(out.Results, applyResponse(res))
	}
	return reply(ctx, s.server, out, err)
}

// parseFile reads a tenant file from a request: a file over
// tenantfile.MaxBytes is ResourceExhausted, a malformed or invalid one
// InvalidArgument.
func parseFile(content []byte) (*tenantfile.File, error) {
	if len(content) > tenantfile.MaxBytes {
		return nil, policy.Errorf(policy.CodeResourceExhausted, "tenant file of %d bytes: at most %d", len(content), tenantfile.MaxBytes)
	}
	f, err := tenantfile.Parse(content)
	if err != nil {
		if _, ok := errors.AsType[*policy.Error](err); !ok {
			err = policy.Errorf(policy.CodeInvalid, "%v", err) // a YAML error: the caller's, and safe to show
		}
		return nil, err
	}
	return f, nil
}

// applyCaller is who applies a tenant file: the operator, or a tenant
// admin key in its own tenant.
func applyCaller(ctx context.Context) tenantapply.Caller {
	p := principalFrom(ctx)
	return tenantapply.Caller{Actor: p.actor(), Operator: p.Role == RoleOperator, TenantID: p.TenantID}
}

func applyResponse(res tenantfile.ApplyResult) *sluicev1.ApplyTenantFileResponse {
	out := &sluicev1.ApplyTenantFileResponse{TenantId: res.TenantID, ConfigVersion: res.Version, DryRun: res.DryRun, Skipped: res.Skipped}
	for _, c := range res.Changes {
		out.Changes = append(out.Changes, &sluicev1.TenantFileChange{Op: c.Op, Kind: c.Kind, Name: c.Name})
	}
	return out
}

func (s tenantFileServer) ExportTenantFile(ctx context.Context, req *connect.Request[sluicev1.ExportTenantFileRequest]) (*connect.Response[sluicev1.ExportTenantFileResponse], error) {
	tenantID, err := tenantOf(ctx, req.Msg.GetTenantId())
	if err != nil {
		return nil, err
	}
	f, version, err := s.files.ExportByID(ctx, tenantID)
	if err != nil {
		return reply[sluicev1.ExportTenantFileResponse](ctx, s.server, nil, err)
	}
	b, err := f.Marshal()
	return reply(ctx, s.server, &sluicev1.ExportTenantFileResponse{Content: b, Slug: f.Tenant, ConfigVersion: version}, err)
}

// maxImportFiles bounds the files of one ImportConfig.
const maxImportFiles = 100

func (s tenantFileServer) ImportConfig(ctx context.Context, req *connect.Request[sluicev1.ImportConfigRequest]) (*connect.Response[sluicev1.ImportConfigResponse], error) {
	plan, err := importPlan(req.Msg)
	if err != nil {
		return reply[sluicev1.ImportConfigResponse](ctx, s.server, nil, err)
	}
	res, err := s.files.Import(ctx, applyCaller(ctx), plan,
		tenantapply.ImportOptions{Tier: req.Msg.GetTier(), Prune: req.Msg.GetPrune(), DryRun: req.Msg.GetDryRun()})
	if err != nil {
		return reply[sluicev1.ImportConfigResponse](ctx, s.server, nil, err)
	}
	return reply(ctx, s.server, &sluicev1.ImportConfigResponse{TenantId: res.TenantID, Tenant: res.Tenant, TenantCreated: res.TenantCreated,
		Tier: res.Tier, Created: res.Created, Updated: res.Updated, Unchanged: res.Unchanged, Deleted: res.Deleted,
		UnlimitedPaths: plan.Unlimited, Notes: plan.Notes, ConfigVersion: res.Version, DryRun: res.DryRun}, nil)
}

// importPlan reads an ImportConfig's configuration: Envoy's files of one
// domain joined (as MERGE_DOMAIN_CONFIG), or Kong's files of one
// configuration. Each problem
// is a field error naming its file (contents[1].descriptors[0].key).
func importPlan(m *sluicev1.ImportConfigRequest) (*envoyimport.Plan, error) {
	contents := m.GetContents()
	switch {
	case len(contents) == 0:
		return nil, &policy.Error{Code: policy.CodeInvalid, Message: "no configuration", Fields: []policy.FieldError{{Field: "contents", Description: "required"}}}
	case len(contents) > maxImportFiles:
		return nil, policy.Errorf(policy.CodeResourceExhausted, "%d files: at most %d", len(contents), maxImportFiles)
	}
	in := func(i int, err error) error {
		return policy.Within(err, fmt.Sprintf("contents[%d]", i), fmt.Sprintf("contents[%d]", i))
	}
	switch m.GetFormat() {
	case sluicev1.ImportFormat_IMPORT_FORMAT_ENVOY:
		var plan *envoyimport.Plan
		for i, c := range contents {
			p, err := envoyimport.Parse(bytes.NewReader(c))
			switch {
			case err != nil:
				return nil, in(i, err)
			case plan == nil:
				plan = p
			case p.Tenant.Slug != plan.Tenant.Slug:
				return nil, in(i, &policy.Error{Code: policy.CodeInvalid, Message: "another domain",
					Fields: []policy.FieldError{{Field: "domain", Description: fmt.Sprintf("%s, not %s: one domain an import", p.Tenant.Name, plan.Tenant.Name)}}})
			default:
				if err := plan.Merge(p); err != nil {
					return nil, in(i, err)
				}
			}
		}
		return plan, nil
	case sluicev1.ImportFormat_IMPORT_FORMAT_KONG:
		if len(contents) > 1 { // its field paths name their files
			return kongimport.ParseFiles(contents, m.GetTenant())
		}
		p, err := kongimport.Parse(bytes.NewReader(contents[0]), m.GetTenant())
		if err != nil {
			return nil, in(0, err)
		}
		return p, nil
	}
	return nil, &policy.Error{Code: policy.CodeInvalid, Message: "unknown format", Fields: []policy.FieldError{{Field: "format", Description: "IMPORT_FORMAT_ENVOY or IMPORT_FORMAT_KONG"}}}
}
