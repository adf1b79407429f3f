package main

import (
	"flag"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/days"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
)

// keyVerbs manage a tenant's API keys.
var keyVerbs = map[string]verb{
	"keys list": {"", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		revoked := fs.Bool("revoked", false, "revoked keys too")
		return func(s *session, c *http.Client, _ string) error {
			list := cli.AllPages(sluicev1connect.NewKeyServiceClient(c, s.server).ListKeys, func(r *sluicev1.ListKeysRequest, token string) { r.PageToken = token },
				func(all, page *sluicev1.ListKeysResponse) { all.Keys = append(all.Keys, page.Keys...) })
			return call(s, list, &sluicev1.ListKeysRequest{TenantId: s.tenant, PageSize: 1000, ShowRevoked: *revoked}, func(w *tabwriter.Writer, r *sluicev1.ListKeysResponse) {
				fmt.Fprintln(w, "ID\tKIND\tNAME\tPREFIX\tLAST USED\tREVOKED\tEXPIRES")
				for _, k := range r.Keys {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.Id, strings.ToLower(strings.TrimPrefix(k.Kind.String(), "KEY_KIND_")), k.Name, k.Prefix,
						when(k.LastUsedAt.IsValid(), k.LastUsedAt.AsTime()), when(k.RevokedAt.IsValid(), k.RevokedAt.AsTime()), expiry(k.ExpiresAt))
				}
			})
		}
	}},
	"keys create": {"", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		kind, name := fs.String("kind", "check", "admin (the control plane), viewer (the control plane, read only: an analyst's) or check (the data plane)"), fs.String("name", "", "a name to tell the key by")
		lasts := days.Flag(fs, "for", 0, "expires after this long, e.g. 30d (0: never)")
		return func(s *session, c *http.Client, _ string) error {
			kv, err := enumFlag(sluicev1.KeyKind_value, "KEY_KIND_", fs.Lookup("kind"))
			if err != nil {
				return err
			}
			req := &sluicev1.CreateKeyRequest{TenantId: s.tenant, Kind: sluicev1.KeyKind(kv), Name: *name}
			if *lasts > 0 {
				req.ExpiresAt = timestamppb.New(time.Now().Add(*lasts))
			}
			return call(s, sluicev1connect.NewKeyServiceClient(c, s.server).CreateKey, req, func(w *tabwriter.Writer, r *sluicev1.CreateKeyResponse) {
				fmt.Fprintf(w, "created %s key %s\nsecret\t%s\t(shown once: store it now)\n", *kind, r.Key.Id, r.Secret)
				if r.Key.ExpiresAt.IsValid() {
					fmt.Fprintf(w, "expires\t%s\n", r.Key.ExpiresAt.AsTime().Format(time.RFC3339))
				}
			})
		}
	}},
	"keys rotate": {"ID", func(fs *flag.FlagSet) func(*session, *http.Client, string) error {
		grace := days.Flag(fs, "grace", 24*time.Hour, "how long the old key keeps working, at most 30d (0: revoked at once)")
		return func(s *session, c *http.Client, id string) error {
			req := &sluicev1.RotateKeyRequest{TenantId: s.tenant, KeyId: id, Grace: durationpb.New(*grace)}
			return call(s, sluicev1connect.NewKeyServiceClient(c, s.server).RotateKey, req, func(w *tabwriter.Writer, r *sluicev1.RotateKeyResponse) {
				fmt.Fprintf(w, "rotated key %s into %s\nsecret\t%s\t(shown once: store it now)\n", r.Old.Id, r.Key.Id, r.Secret)
				if r.Old.RevokedAt.IsValid() {
					fmt.Fprintf(w, "old key\trevoked\n")
				} else {
					fmt.Fprintf(w, "old key\tworks until %s\n", r.Old.ExpiresAt.AsTime().Format(time.RFC3339))
				}
			})
		}
	}},
	"keys revoke": plain("ID", func(s *session, c *http.Client, id string) error {
		return call(s, sluicev1connect.NewKeyServiceClient(c, s.server).RevokeKey, &sluicev1.RevokeKeyRequest{TenantId: s.tenant, KeyId: id}, func(w *tabwriter.Writer, _ *sluicev1.RevokeKeyResponse) {
			fmt.Fprintf(w, "revoked key %s\n", id)
		})
	}),
}
