package tenantapply

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoyimport"
	"github.com/sluicehq/sluice/internal/pgstore"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

// Imports into one tenant at once, each into a tier of its own, all land:
// each is read again when another overtook it, and none undoes another.
func TestConcurrentImports(t *testing.T) {
	t.Parallel()
	s := pgstore.New(pgtest.Pool(t))
	ctx := context.Background()
	if _, err := Apply(ctx, s, operator, parse(t, shopFile), Options{}); err != nil {
		t.Fatal(err)
	}
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			plan := &envoyimport.Plan{Tenant: policy.Tenant{Slug: "shop"}, Rules: []policy.Rule{{Name: "r", Enabled: true,
				Params: policy.Params{Algorithm: policy.FixedWindow, Limit: int64(i + 1), Window: time.Minute}}}}
			_, errs[i] = Import(ctx, s, operator, plan, ImportOptions{Tier: fmt.Sprint("t", i)})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("import %d: %v", i, err)
		}
	}
	tn, _, err := s.GetTenantBySlug(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	tiers, _ := s.ListTiers(ctx, tn.ID)
	var names []string
	for _, tier := range tiers {
		names = append(names, tier.Name)
		if tier.Name != "free" && tier.Name != "pro" && (len(tier.Rules) != 1 || fmt.Sprint("t", tier.Rules[0].Limit-1) != tier.Name) {
			t.Errorf("tier %s: %+v", tier.Name, tier.Rules)
		}
	}
	slices.Sort(names)
	if want := []string{"free", "pro", "t0", "t1", "t2", "t3", "t4", "t5"}; !slices.Equal(names, want) {
		t.Fatalf("tiers %v, want %v: an import undone by another", names, want)
	}
	if ovs, _ := s.ListOverrides(ctx, tn.ID); len(ovs) != 2 {
		t.Fatalf("the file's overrides lost: %+v", ovs)
	}
}
