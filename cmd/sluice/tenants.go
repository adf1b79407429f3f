package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/cli"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
)

// tenantVerbs manage tenants: the operator's commands.
var tenantVerbs = map[string]verb{
	"tenants list": {"", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		prefix := fs.String("slug", "", "only tenants whose slug starts with this")
		return func(s *session, c *http.Client, _ string) error {
			req := &sluicev1.ListTenantsRequest{SlugPrefix: *prefix, PageSize: 1000}
			return call(s, allTenants(sluicev1connect.NewTenantServiceClient(c, s.server).ListTenants), req, func(w *tabwriter.Writer, r *sluicev1.ListTenantsResponse) {
				fmt.Fprintln(w, "ID\tSLUG\tNAME\tDEFAULT TIER\tSTATUS\tSHADOW\tVERSION")
				for _, t := range r.Tenants {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%v\t%d\n", t.Id, t.Slug, t.Name, t.DefaultTier, tenantStatus(t), t.Shadow, t.ConfigVersion)
				}
			})
		}
	}},
	"tenants get": plain("TENANT", func(s *session, c *http.Client, id string) error {
		return call(s, sluicev1connect.NewTenantServiceClient(c, s.server).GetTenant, &sluicev1.GetTenantRequest{TenantId: id}, func(w *tabwriter.Writer, r *sluicev1.GetTenantResponse) {
			fmt.Fprintf(w, "id\t%s\nslug\t%s\nname\t%s\ndefault tier\t%s\nstatus\t%s\nshadow\t%v\nconfig version\t%d\n", r.Tenant.Id, r.Tenant.Slug, r.Tenant.Name, r.Tenant.DefaultTier, tenantStatus(r.Tenant), r.Tenant.Shadow, r.Tenant.ConfigVersion)
		})
	}),
	"tenants create": {"[SLUG]", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		slug, name, defTier := fs.String("slug", "", "tenant slug, its Envoy domain (or as the argument)"), fs.String("name", "", "name"), fs.String("default-tier", "", "tenant's default tier")
		shadow := fs.Bool("shadow", false, "shadow mode: the tenant's rules report, never reject")
		return func(s *session, c *http.Client, arg string) error {
			switch {
			case arg != "" && *slug != "" && arg != *slug:
				return usageErrorf("two slugs: %q and -slug %q", arg, *slug)
			case arg != "":
				*slug = arg
			}
			return call(s, sluicev1connect.NewTenantServiceClient(c, s.server).CreateTenant, &sluicev1.CreateTenantRequest{Tenant: &sluicev1.Tenant{Slug: *slug, Name: *name, DefaultTier: *defTier, Shadow: *shadow}}, func(w *tabwriter.Writer, r *sluicev1.CreateTenantResponse) {
				fmt.Fprintf(w, "created tenant %s (%s)\n", r.Tenant.Slug, r.Tenant.Id)
			})
		}
	}},
	"tenants update": {"TENANT", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		name, defTier := fs.String("name", "", "name"), fs.String("default-tier", "", "tenant's default tier")
		shadow := fs.Bool("shadow", false, "shadow mode: the tenant's rules report, never reject")
		fs.String("status", "active", "active, or suspended: every check of the tenant refused")
		return func(s *session, c *http.Client, id string) error {
			return edit(func() error {
				tenants := sluicev1connect.NewTenantServiceClient(c, s.server)
				req := connect.NewRequest(&sluicev1.GetTenantRequest{TenantId: id})
				req.Header().Set("Authorization", "Bearer "+s.key)
				res, err := tenants.GetTenant(s.ctx, req)
				if err != nil {
					return err
				}
				t := res.Msg.Tenant
				before := proto.Clone(t)
				fs.Visit(func(fl *flag.Flag) {
					switch fl.Name {
					case "name":
						t.Name = *name
					case "default-tier":
						t.DefaultTier = *defTier
					case "shadow":
						t.Shadow = *shadow
					case "status":
						var v int32
						v, err = enumFlag(sluicev1.TenantStatus_value, "TENANT_STATUS_", fl)
						t.Status = sluicev1.TenantStatus(v)
					}
				})
				if err != nil {
					return err
				}
				return call(s, tenants.UpdateTenant, &sluicev1.UpdateTenantRequest{Tenant: t}, func(w *tabwriter.Writer, r *sluicev1.UpdateTenantResponse) {
					fmt.Fprintf(w, "%s tenant %s (%s), config version %d\n", updated(before, t), t.Slug, t.Id, r.ConfigVersion)
				})
			})
		}
	}},
	"tenants delete": plain("TENANT", func(s *session, c *http.Client, id string) error {
		return call(s, sluicev1connect.NewTenantServiceClient(c, s.server).DeleteTenant, &sluicev1.DeleteTenantRequest{TenantId: id}, func(w *tabwriter.Writer, _ *sluicev1.DeleteTenantResponse) {
			fmt.Fprintf(w, "deleted tenant %s\n", id)
		})
	}),
}

// tenantStatus is t's status as -status names it: active or suspended.
func tenantStatus(t *sluicev1.Tenant) string {
	return strings.ToLower(strings.TrimPrefix(t.Status.String(), "TENANT_STATUS_"))
}

// tenantsByID is every tenant by id, for the commands that name the
// tenants they show (nil when they cannot be listed).
func tenantsByID(s *session, tenants sluicev1connect.TenantServiceClient) map[string]*sluicev1.Tenant {
	req := connect.NewRequest(&sluicev1.ListTenantsRequest{PageSize: 1000})
	req.Header().Set("Authorization", "Bearer "+s.key)
	res, err := allTenants(tenants.ListTenants)(s.ctx, req)
	if err != nil {
		return nil
	}
	byID := make(map[string]*sluicev1.Tenant, len(res.Msg.Tenants))
	for _, t := range res.Msg.Tenants {
		byID[t.Id] = t
	}
	return byID
}

// allTenants is ListTenants over every page.
func allTenants(list func(context.Context, *connect.Request[sluicev1.ListTenantsRequest]) (*connect.Response[sluicev1.ListTenantsResponse], error)) func(context.Context, *connect.Request[sluicev1.ListTenantsRequest]) (*connect.Response[sluicev1.ListTenantsResponse], error) {
	return cli.AllPages(list, func(r *sluicev1.ListTenantsRequest, token string) { r.PageToken = token },
		func(all, page *sluicev1.ListTenantsResponse) { all.Tenants = append(all.Tenants, page.Tenants...) })
}

// tenantIDOf is the id of the tenant v names: the tenant whose slug is v,
// else v as it is (an id, or a slug the server will say it does not know).
// With a tenant's own key, which may not list tenants, v goes as it is.
func tenantIDOf(s *session, c *http.Client, v string) (string, error) {
	req := connect.NewRequest(&sluicev1.ListTenantsRequest{SlugPrefix: strings.ReplaceAll(strings.ToLower(v), "_", "-"), PageSize: 1000})
	req.Header().Set("Authorization", "Bearer "+s.key)
	res, err := allTenants(sluicev1connect.NewTenantServiceClient(c, s.server).ListTenants)(s.ctx, req)
	if err != nil {
		if connect.CodeOf(err) == connect.CodePermissionDenied {
			return v, nil // a tenant's own key, which needs no -tenant
		}
		return "", err
	}
	// An envoyproxy/ratelimit domain names its tenant too: mongo_cps is
	// the tenant mongo-cps its import made.
	slug := strings.ReplaceAll(strings.ToLower(v), "_", "-")
	for _, t := range res.Msg.Tenants {
		if t.Slug == v || t.Slug == slug {
			return t.Id, nil
		}
	}
	return v, nil
}
