package cli

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"

	"connectrpc.com/connect"

	"github.com/sluicehq/sluice/internal/controlplane"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/pgstore"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

// TestAllPages: a listing read in pages of 4 from a control plane comes
// back whole, in order, each item once, with no page token left in it;
// a page refused refuses the whole.
func TestAllPages(t *testing.T) {
	t.Parallel()
	store := pgstore.New(pgtest.Pool(t))
	srv := httptest.NewServer(controlplane.NewHandler(controlplane.HandlerConfig{OperatorKey: "op"}.OnPostgres(store, 0)))
	t.Cleanup(srv.Close)
	var want []string
	for i := range 23 {
		slug := fmt.Sprintf("t%02d", i)
		want = append(want, slug)
		if _, err := store.CreateTenant(context.Background(), "test", policy.Tenant{Slug: slug, Name: slug}); err != nil {
			t.Fatal(err)
		}
	}
	list := AllPages(sluicev1connect.NewTenantServiceClient(srv.Client(), srv.URL).ListTenants,
		func(r *sluicev1.ListTenantsRequest, token string) { r.PageToken = token },
		func(all, page *sluicev1.ListTenantsResponse) { all.Tenants = append(all.Tenants, page.Tenants...) })
	req := connect.NewRequest(&sluicev1.ListTenantsRequest{PageSize: 4})
	req.Header().Set("Authorization", "Bearer op")
	res, err := list(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tn := range res.Msg.Tenants {
		got = append(got, tn.Slug)
	}
	if !slices.Equal(got, want) || res.Msg.NextPageToken != "" {
		t.Fatalf("%q (next %q), want %q", got, res.Msg.NextPageToken, want)
	}
	bad := connect.NewRequest(&sluicev1.ListTenantsRequest{PageSize: 4})
	bad.Header().Set("Authorization", "Bearer nope")
	if _, err := list(context.Background(), bad); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("with a bad key: %v", err)
	}
}
