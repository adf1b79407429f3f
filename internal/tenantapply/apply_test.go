package tenantapply

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/pgstore"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/tenantfile"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var operator = Caller{Actor: "operator", Operator: true}

const shopFile = `
tenant: shop
default_tier: free
tiers:
  - name: free
    rules:
      - name: per-client
        key_by: [client_id]
        algorithm: token_bucket
        limit: 100
        window: 1m
  - name: pro
    rules:
      - name: per-client
        key_by: [client_id]
        algorithm: gcra
        limit: 1000
        window: 1m
overrides:
  - identifier: alice
    rule: free/per-client
    algorithm: token_bucket
    limit: 500
    window: 1m
  - identifier: bigco-*
    tier: pro
`

func parse(t *testing.T, s string) *tenantfile.File {
	t.Helper()
	f, err := tenantfile.Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// state is what a tenant's configuration reads as: its file.
func state(t *testing.T, s *pgstore.Store, slug string) (string, int64) {
	t.Helper()
	ctx := context.Background()
	tn, v, err := s.GetTenantBySlug(ctx, slug)
	if err != nil {
		return "", 0
	}
	tiers, err := s.ListTiers(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	overrides, err := s.ListOverrides(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tenantfile.From(tn, tiers, overrides).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return string(b), v
}

// An apply is one config version: one version row, one audit row per
// change at that version, and a second apply of the same file none.
func TestApplyIsOneVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	s := pgstore.New(pool)
	tn, err := s.CreateTenant(ctx, "operator", policy.Tenant{Slug: "shop", Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Apply(ctx, s, operator, parse(t, shopFile), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Version != 2 || res.TenantID != tn.ID || len(res.Changes) < 6 {
		t.Fatalf("result %+v, want version 2 and the changes", res)
	}
	var versions []int64
	rows, _ := pool.Query(ctx, `SELECT version FROM config_versions WHERE tenant_id = $1 ORDER BY version`, tn.ID)
	for rows.Next() {
		var v int64
		_ = rows.Scan(&v)
		versions = append(versions, v)
	}
	if rows.Err() != nil || !slices.Equal(versions, []int64{1, 2}) {
		t.Fatalf("version rows %v (%v), want [1 2]", versions, rows.Err())
	}
	var audits, atTwo int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE version = 2) FROM audit_log WHERE tenant_id = $1 AND version > 1`, tn.ID).Scan(&audits, &atTwo); err != nil {
		t.Fatal(err)
	}
	if audits != len(res.Changes) || atTwo != audits {
		t.Fatalf("%d audit rows after version 1 (%d at 2), want one per change (%d)", audits, atTwo, len(res.Changes))
	}
	again, err := Apply(ctx, s, operator, parse(t, shopFile), Options{})
	if err != nil || len(again.Changes) != 0 || again.Version != 2 {
		t.Fatalf("second apply: %+v, %v; want no change at version 2", again, err)
	}
}

// A change the store refuses fails the apply whole: the file's 101st tier
// (a tenant holds at most 100) leaves no tenant and no tier behind, and
// the error names the change. A dry run meets the same error.
func TestFailedApplyWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgstore.New(pgtest.Pool(t))
	var b strings.Builder
	b.WriteString("tenant: big\ndefault_tier: t0\ntiers:\n")
	for i := range policy.MaxTiers + 1 {
		fmt.Fprintf(&b, "  - name: t%d\n", i)
	}
	for _, dry := range []bool{true, false} {
		_, err := Apply(ctx, s, operator, parse(t, b.String()), Options{DryRun: dry})
		if policy.ErrorCode(err) != policy.CodeResourceExhausted || !strings.Contains(err.Error(), "create tier t100") {
			t.Fatalf("dry run %v: %v, want the 101st tier refused by name", dry, err)
		}
		if got, _ := state(t, s, "big"); got != "" {
			t.Fatalf("dry run %v: a failed apply left the tenant behind:\n%s", dry, got)
		}
	}

	// On an existing tenant: its configuration and version stay.
	if _, err := Apply(ctx, s, operator, parse(t, shopFile), Options{}); err != nil {
		t.Fatal(err)
	}
	before, v := state(t, s, "shop")
	// Changes before the refusal: a rule updated, an override added.
	f := parse(t, strings.Replace(shopFile, "limit: 1000", "limit: 2000", 1)+"  - identifier: carol\n    tier: pro\n")
	for i := range policy.MaxTiers {
		f.Tiers = append(f.Tiers, tenantfile.Tier{Name: fmt.Sprintf("x%d", i)})
	}
	if _, err := Apply(ctx, s, operator, f, Options{}); policy.ErrorCode(err) != policy.CodeResourceExhausted {
		t.Fatalf("got %v, want ResourceExhausted", err)
	}
	if after, v2 := state(t, s, "shop"); after != before || v2 != v {
		t.Fatalf("a failed apply changed the tenant (version %d → %d):\n%s\nwas\n%s", v, v2, after, before)
	}
}

// A dry run lists exactly the changes the apply then makes, and writes
// nothing.
func TestDryRunIsTheApply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgstore.New(pgtest.Pool(t))
	dry, err := Apply(ctx, s, operator, parse(t, shopFile), Options{Prune: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := state(t, s, "shop"); got != "" || !dry.DryRun || dry.TenantID != "" || dry.Version != 0 {
		t.Fatalf("a dry run wrote, or says it did: %+v\n%s", dry, got)
	}
	res, err := Apply(ctx, s, operator, parse(t, shopFile), Options{Prune: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dry.Changes, res.Changes) || res.DryRun {
		t.Fatalf("dry run %v, apply %v", dry.Changes, res.Changes)
	}
	got, v := state(t, s, "shop")
	if want := string(mustMarshal(t, parse(t, shopFile))); got != want || v != res.Version {
		t.Fatalf("after apply (version %d, result %d):\n%s\nwant\n%s", v, res.Version, got, want)
	}
}

func mustMarshal(t *testing.T, f *tenantfile.File) []byte {
	t.Helper()
	b, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An admin key applies only its own tenant's file, and leaves the tenant's
// own fields alone.
func TestAdminKeyAppliesOnlyItsTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgstore.New(pgtest.Pool(t))
	shop, err := s.CreateTenant(ctx, "operator", policy.Tenant{Slug: "shop", Name: "Shop", DefaultTier: "free"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.CreateTenant(ctx, "operator", policy.Tenant{Slug: "other", Name: "Other"})
	if err != nil {
		t.Fatal(err)
	}
	admin := Caller{Actor: "key:x", TenantID: other.ID}
	if _, err := Apply(ctx, s, admin, parse(t, shopFile), Options{Prune: true}); policy.ErrorCode(err) != policy.CodePermissionDenied {
		t.Fatalf("another tenant's file: %v, want PermissionDenied", err)
	}
	admin.TenantID = shop.ID
	res, err := Apply(ctx, s, admin, parse(t, strings.Replace(shopFile, "default_tier: free", "name: Renamed\nshadow: true\ndefault_tier: free", 1)), Options{})
	if err != nil || res.Skipped != "the tenant's name, shadow mode: only the operator key changes them" {
		t.Fatalf("%+v, %v", res, err)
	}
	// A file that leaves them as they are skips nothing.
	if res, err = Apply(ctx, s, admin, parse(t, strings.Replace(shopFile, "default_tier: free", "name: Shop\ndefault_tier: free", 1)), Options{}); err != nil || res.Skipped != "" {
		t.Fatalf("a file of the tenant's own fields: skipped %q, %v", res.Skipped, err)
	}
	if tn, _, _ := s.GetTenant(ctx, shop.ID); tn.Name != "Shop" || tn.Shadow {
		t.Fatalf("an admin key changed its tenant's fields: %+v", tn)
	}
}

// Pruning never deletes the tenant's default tier unless the file names
// another default: the apply is refused with the field to fix.
func TestPruneKeepsTheDefaultTier(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgstore.New(pgtest.Pool(t))
	if _, err := Apply(ctx, s, operator, parse(t, shopFile), Options{}); err != nil {
		t.Fatal(err)
	}
	before, _ := state(t, s, "shop")
	proOnly := "tenant: shop\ntiers:\n  - name: pro\n"
	_, err := Apply(ctx, s, operator, parse(t, proOnly), Options{Prune: true})
	pe, _ := err.(*policy.Error)
	if pe == nil || pe.Code != policy.CodeInvalid || len(pe.Fields) != 1 || pe.Fields[0].Field != "default_tier" {
		t.Fatalf("got %v, want the default tier named", err)
	}
	if after, _ := state(t, s, "shop"); after != before {
		t.Fatal("the refused prune changed the tenant")
	}
	res, err := Apply(ctx, s, operator, parse(t, "tenant: shop\ndefault_tier: pro\ntiers:\n  - name: pro\n"), Options{Prune: true})
	if err != nil {
		t.Fatal(err)
	}
	tn, _, _ := s.GetTenantBySlug(ctx, "shop")
	tiers, _ := s.ListTiers(ctx, tn.ID)
	if tn.DefaultTier != "pro" || len(tiers) != 1 || !slices.ContainsFunc(res.Changes, func(c tenantfile.Change) bool { return c.String() == "delete tier free" }) {
		t.Fatalf("tenant %+v, tiers %+v, changes %v", tn, tiers, res.Changes)
	}
}

// Applies of two files to one tenant at once are serialized: each
// succeeds, and the tenant ends as one of the files, whole.
func TestConcurrentAppliesEndAsOneFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgstore.New(pgtest.Pool(t))
	files := []string{shopFile, strings.NewReplacer("limit: 100\n", "limit: 7\n", "bigco-*", "megacorp", "alice", "bob").Replace(shopFile)}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for range 5 {
				if _, err := Apply(ctx, s, operator, parse(t, files[w%2]), Options{Prune: true}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, _ := state(t, s, "shop")
	if got != string(mustMarshal(t, parse(t, files[0]))) && got != string(mustMarshal(t, parse(t, files[1]))) {
		t.Fatalf("the tenant is neither file:\n%s", got)
	}
}

// IfVersion applies a file only over the version it was read at.
func TestIfVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgstore.New(pgtest.Pool(t))
	if _, err := Apply(ctx, s, operator, parse(t, shopFile), Options{IfVersion: 1}); policy.ErrorCode(err) != policy.CodeAborted {
		t.Fatalf("a missing tenant at version 1: %v, want Aborted", err)
	}
	res, err := Apply(ctx, s, operator, parse(t, shopFile), Options{})
	if err != nil {
		t.Fatal(err)
	}
	changed := parse(t, strings.Replace(shopFile, "limit: 100\n", "limit: 50\n", 1))
	if _, err := Apply(ctx, s, operator, changed, Options{IfVersion: res.Version + 1}); policy.ErrorCode(err) != policy.CodeAborted {
		t.Fatalf("another version: %v, want Aborted", err)
	}
	if _, v := state(t, s, "shop"); v != res.Version {
		t.Fatalf("an aborted apply moved the version %d → %d", res.Version, v)
	}
	next, err := Apply(ctx, s, operator, changed, Options{IfVersion: res.Version})
	if err != nil || next.Version != res.Version+1 {
		t.Fatalf("the current version: %+v, %v", next, err)
	}
}

// Several files are applied all or none: when the last tenant's file (in
// slug order, applied last) meets a refusal, the tenants before it are
// left as they were, the error naming the file by its index; once it is
// fixed every tenant matches its file, each at a version of its own.
func TestApplyAllIsAllOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgstore.New(pgtest.Pool(t))
	if _, err := Apply(ctx, s, operator, parse(t, shopFile), Options{}); err != nil {
		t.Fatal(err)
	}
	shopBefore, shopV := state(t, s, "shop")
	shop := parse(t, strings.Replace(shopFile, "limit: 1000", "limit: 2000", 1))
	var big strings.Builder
	big.WriteString("tenant: zoo\ndefault_tier: t0\ntiers:\n")
	for i := range policy.MaxTiers + 1 {
		fmt.Fprintf(&big, "  - name: t%d\n", i)
	}
	for _, dry := range []bool{true, false} {
		_, err := ApplyAll(ctx, s, operator, []*tenantfile.File{parse(t, big.String()), shop}, Options{DryRun: dry})
		if policy.ErrorCode(err) != policy.CodeResourceExhausted || !strings.HasPrefix(err.Error(), "files[0] (tenant zoo): create tier t100") {
			t.Fatalf("dry run %v: %v, want files[0]'s 101st tier refused", dry, err)
		}
		if got, v := state(t, s, "shop"); got != shopBefore || v != shopV {
			t.Fatalf("dry run %v: the set's refusal left shop changed (version %d → %d)", dry, shopV, v)
		}
		if got, _ := state(t, s, "zoo"); got != "" {
			t.Fatalf("dry run %v: the refused tenant was created", dry)
		}
	}

	zoo := parse(t, "tenant: zoo\ndefault_tier: t0\ntiers:\n  - name: t0\n")
	res, err := ApplyAll(ctx, s, operator, []*tenantfile.File{zoo, shop}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Version != 1 || res[1].Version != shopV+1 || len(res[1].Changes) != 1 || res[1].Changes[0] != (tenantfile.Change{Op: "update", Kind: "rule", Name: "pro/per-client"}) {
		t.Fatalf("results %+v, want zoo at 1 and shop's one update at %d", res, shopV+1)
	}
	for _, f := range []*tenantfile.File{zoo, shop} {
		got, _ := state(t, s, f.Tenant)
		if want := string(mustMarshal(t, f)); got != want {
			t.Fatalf("tenant %s:\n%s\nwant\n%s", f.Tenant, got, want)
		}
	}
}

// A set names each tenant once, its files are refused whole when one is
// of a tenant an admin key may not touch, and if_version (of one tenant)
// is refused.
func TestApplyAllRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgstore.New(pgtest.Pool(t))
	other, err := s.CreateTenant(ctx, "operator", policy.Tenant{Slug: "other", Name: "Other"})
	if err != nil {
		t.Fatal(err)
	}
	shop := parse(t, shopFile)
	_, err = ApplyAll(ctx, s, operator, []*tenantfile.File{shop, parse(t, "tenant: x\n"), parse(t, shopFile)}, Options{})
	if pe, ok := errors.AsType[*policy.Error](err); !ok || pe.Code != policy.CodeInvalid || len(pe.Fields) != 1 || pe.Fields[0].Field != "files[2].tenant" {
		t.Fatalf("two files of one tenant: %v", err)
	}
	if _, err := ApplyAll(ctx, s, operator, []*tenantfile.File{shop}, Options{IfVersion: 3}); policy.ErrorCode(err) != policy.CodeInvalid {
		t.Fatalf("if_version: %v", err)
	}
	if _, err := ApplyAll(ctx, s, operator, nil, Options{}); policy.ErrorCode(err) != policy.CodeInvalid {
		t.Fatalf("no file: %v", err)
	}
	admin := Caller{Actor: "key:x", TenantID: other.ID}
	_, err = ApplyAll(ctx, s, admin, []*tenantfile.File{parse(t, "tenant: other\ntiers:\n  - name: extra\n"), shop}, Options{})
	if pe, ok := errors.AsType[*policy.Error](err); !ok || pe.Code != policy.CodePermissionDenied || !strings.HasPrefix(pe.Message, "files[1] (tenant shop)") {
		t.Fatalf("an admin key with another tenant's file: %v", err)
	}
	// A set of one file names it too.
	_, err = ApplyAll(ctx, s, admin, []*tenantfile.File{shop}, Options{})
	if pe, ok := errors.AsType[*policy.Error](err); !ok || pe.Code != policy.CodePermissionDenied || !strings.HasPrefix(pe.Message, "files[0] (tenant shop)") ||
		len(pe.Fields) != 1 || pe.Fields[0].Field != "files[0].tenant" {
		t.Fatalf("a set of one file of another tenant: %v", err)
	}
	if got, v := state(t, s, "other"); strings.Contains(got, "extra") || v != 1 {
		t.Fatalf("the refused set changed the admin's own tenant (version %d):\n%s", v, got)
	}
}

// Sets of the same tenants sent in opposite orders, concurrently, neither
// deadlock nor fail (tenants are locked in slug order), and each tenant
// ends as one of its files.
func TestConcurrentSetsDoNotDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgstore.New(pgtest.Pool(t))
	file := func(slug string, limit int) *tenantfile.File {
		return parse(t, fmt.Sprintf("tenant: %s\ndefault_tier: free\ntiers:\n  - name: free\n    rules:\n      - name: r\n        algorithm: fixed_window\n        limit: %d\n        window: 1m\n", slug, limit))
	}
	sets := [][]*tenantfile.File{{file("a", 1), file("b", 1)}, {file("b", 2), file("a", 2)}}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for range 5 {
				if _, err := ApplyAll(ctx, s, operator, sets[w%2], Options{}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, slug := range []string{"a", "b"} {
		got, _ := state(t, s, slug)
		if got != string(mustMarshal(t, file(slug, 1))) && got != string(mustMarshal(t, file(slug, 2))) {
			t.Fatalf("tenant %s is neither file:\n%s", slug, got)
		}
	}
}

// A file's override that has expired is not created (the store refuses
// it, and it would enforce nothing): a file kept in a repository still
// applies, with no change, after its temporary block runs out and after
// retention deletes the block.
func TestExpiredOverridesOfAFileAreNotCreated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgstore.New(pgtest.Pool(t))
	file := shopFile + "  - identifier: mallory\n    block: true\n    expires_at: 2020-01-02T03:04:05Z\n"
	res, err := Apply(ctx, s, operator, parse(t, file), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(res.Changes, func(c tenantfile.Change) bool { return strings.Contains(c.Name, "mallory") }) {
		t.Fatalf("changes %+v name the expired override", res.Changes)
	}
	tn, _, _ := s.GetTenantBySlug(ctx, "shop")
	ovs, _ := s.ListOverrides(ctx, tn.ID)
	if len(ovs) != 2 {
		t.Fatalf("overrides %+v, want the file's two live ones", ovs)
	}
	again, err := Apply(ctx, s, operator, parse(t, file), Options{Prune: true})
	if err != nil || len(again.Changes) != 0 {
		t.Fatalf("second apply: %+v, %v; want no change", again, err)
	}
}
