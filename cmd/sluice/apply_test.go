package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/tenantfile"
)

const tenantYAML = `
tenant: shop
name: Shop
default_tier: free
shadow: true
tiers:
  - name: free
    rules:
      - name: per-client
        key_by: [client_id]
        algorithm: token_bucket
        limit: 100
        window: 1m
      - name: search
        match: {path: /search}
        key_by: [client_id]
        algorithm: fixed_window
        limit: 10
        window: 1h
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

// sluice apply makes a tenant what its file says, and a second apply of
// the same file changes nothing (no new config version); export writes the
// file back; a changed file is shown by -dry-run without a write, applied
// rule by rule without -prune (what the file drops stays), and with -prune
// the tenant becomes the file.
func TestApplyAndExport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, getenv := importServer(t)
	apply := func(body string, flags ...string) tenantfile.ApplyResult {
		t.Helper()
		var out, errOut strings.Builder
		args := append([]string{"apply", "-json", "-f", writeFile(t, body)}, flags...)
		if err := run(ctx, args, &out, &errOut, getenv); err != nil {
			t.Fatalf("apply %v: %v\n%s", flags, err, errOut.String())
		}
		var res tenantfile.ApplyResult
		if err := json.Unmarshal([]byte(out.String()), &res); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		return res
	}
	changes := func(res tenantfile.ApplyResult) []string {
		var out []string
		for _, c := range res.Changes {
			out = append(out, c.String())
		}
		return out
	}
	version := func() int64 {
		_, v, err := store.GetTenantBySlug(ctx, "shop")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	first := apply(tenantYAML)
	for _, want := range []string{"create tenant shop", "create tier pro", "create rule free/per-client", "create rule free/search",
		"create rule pro/per-client", "create override alice on free/per-client", "create override bigco-* to pro"} {
		if !slices.Contains(changes(first), want) {
			t.Errorf("first apply: no %q in %v", want, changes(first))
		}
	}
	tenant, v1, _ := store.GetTenantBySlug(ctx, "shop")
	if tenant.DefaultTier != "free" || tenant.Name != "Shop" || !tenant.Shadow {
		t.Fatalf("tenant %+v", tenant)
	}
	if again := apply(tenantYAML); len(again.Changes) != 0 || version() != v1 {
		t.Fatalf("second apply changed %v (version %d → %d)", changes(again), v1, version())
	}

	// Export writes what apply reads back to the same file.
	var out, errOut strings.Builder
	if err := run(ctx, []string{"export", "shop"}, &out, &errOut, getenv); err != nil {
		t.Fatalf("export: %v %s", err, errOut.String())
	}
	exported, err := tenantfile.Parse([]byte(out.String()))
	if err != nil {
		t.Fatalf("export does not parse: %v\n%s", err, out.String())
	}
	want, _ := tenantfile.Parse([]byte(tenantYAML))
	if !reflect.DeepEqual(exported, want) {
		t.Fatalf("export:\n%s\nwant the applied file's content", out.String())
	}

	// The file changes: search before per-client with a new limit, the
	// tenant out of shadow, pro and alice's override gone, a block for
	// mallory.
	changed := `
tenant: shop
name: Shop
default_tier: free
tiers:
  - name: free
    rules:
      - name: search
        match: {path: /search}
        key_by: [client_id]
        algorithm: fixed_window
        limit: 20
        window: 1h
      - name: per-client
        key_by: [client_id]
        algorithm: token_bucket
        limit: 100
        window: 1m
overrides:
  - identifier: mallory
    block: true
`
	dry := apply(changed, "-dry-run")
	if !dry.DryRun || version() != v1 {
		t.Fatalf("a dry run wrote: version %d → %d", v1, version())
	}
	if want := []string{"update rule free/search", "reorder rule free", "update tenant shop", "create override mallory blocked"}; !reflect.DeepEqual(changes(dry), want) {
		t.Fatalf("dry run: %v, want %v", changes(dry), want)
	}
	if got := apply(changed); !reflect.DeepEqual(changes(got), changes(dry)) {
		t.Fatalf("apply: %v, want what the dry run said, %v", changes(got), changes(dry))
	}
	tiers, _ := store.ListTiers(ctx, tenant.ID)
	var free *policy.Tier
	for i := range tiers {
		if tiers[i].Name == "free" {
			free = &tiers[i]
		}
	}
	if len(tiers) != 2 || free == nil || len(free.Rules) != 2 || free.Rules[0].Name != "search" || free.Rules[0].Limit != 20 {
		t.Fatalf("after apply without -prune: %+v", tiers)
	}
	if tn, _, _ := store.GetTenantBySlug(ctx, "shop"); tn.Shadow {
		t.Fatal("the tenant stayed in shadow")
	}
	pruned := apply(changed, "-prune")
	if want := []string{"delete override alice", "delete override bigco-*", "delete tier pro"}; !reflect.DeepEqual(changes(pruned), want) {
		t.Fatalf("prune: %v, want %v", changes(pruned), want)
	}
	overrides, _ := store.ListOverrides(ctx, tenant.ID)
	if tiers, _ := store.ListTiers(ctx, tenant.ID); len(tiers) != 1 || len(overrides) != 1 || !overrides[0].Block {
		t.Fatalf("after -prune: tiers %+v, overrides %+v", tiers, overrides)
	}

	// A tenant admin key applies to its own tenant, leaving the tenant's
	// own fields to the operator.
	secret, _, err := store.CreateKey(ctx, "operator", tenant.ID, policy.KeyAdmin, "ci")
	if err != nil {
		t.Fatal(err)
	}
	operatorEnv := getenv
	getenv = func(k string) string {
		if k == "SLUICE_KEY" {
			return secret
		}
		return operatorEnv(k)
	}
	renamed := strings.Replace(changed, "name: Shop", "name: Renamed", 1) + `  - identifier: bob
    rule: free/search
    algorithm: fixed_window
    limit: 1
    window: 1h
`
	byAdmin := apply(renamed)
	if want := []string{"create override bob on free/search"}; !reflect.DeepEqual(changes(byAdmin), want) || byAdmin.Skipped == "" {
		t.Fatalf("apply with an admin key: %v (skipped %q), want %v and the tenant's fields skipped", changes(byAdmin), byAdmin.Skipped, want)
	}
	if tn, _, _ := store.GetTenantBySlug(ctx, "shop"); tn.Name != "Shop" {
		t.Fatalf("an admin key renamed its tenant to %q", tn.Name)
	}
}

// An invalid file is refused whole, every field named, before anything is
// written (exit code 3).
func TestApplyRefusesAnInvalidFile(t *testing.T) {
	t.Parallel()
	store, getenv := importServer(t)
	var out, errOut strings.Builder
	err := run(context.Background(), []string{"apply", "-f", writeFile(t, `
tenant: shop
tiers:
  - name: free
    rules:
      - name: r
        algorithm: token_bucket
        limit: 0
        window: 1m
      - name: s
        algorithm: leaky
        limit: 1
        window: 1m
`)}, &out, &errOut, getenv)
	if !errors.Is(err, errInput) {
		t.Fatalf("got %v, want errInput", err)
	}
	for _, want := range []string{"tiers[0].rules[0].limit", "tiers[0].rules[1].algorithm"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %s:\n%s", want, errOut.String())
		}
	}
	if _, _, err := store.GetTenantBySlug(context.Background(), "shop"); err == nil {
		t.Fatal("an invalid file created its tenant")
	}
}

// sluice tenants create -shadow makes a tenant in shadow, and tenants list
// shows it.
func TestTenantsCreateInShadow(t *testing.T) {
	t.Parallel()
	store, getenv := importServer(t)
	var out, errOut strings.Builder
	if err := run(context.Background(), []string{"tenants", "create", "-slug", "trial", "-name", "Trial", "-shadow"}, &out, &errOut, getenv); err != nil {
		t.Fatalf("%v %s", err, errOut.String())
	}
	if tn, _, err := store.GetTenantBySlug(context.Background(), "trial"); err != nil || !tn.Shadow {
		t.Fatalf("tenant %+v %v, want it in shadow", tn, err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"tenants", "list"}, &out, &errOut, getenv); err != nil || !strings.Contains(out.String(), "SHADOW") ||
		!regexp.MustCompile(`trial\s+Trial\s+default\s+active\s+true\s+1\n`).MatchString(out.String()) {
		t.Fatalf("tenants list: %v\n%s", err, out.String())
	}
}

// sluice apply -f DIR applies every tenant file of the directory, each in
// its own transaction, after checking them all: one invalid file, or two
// for one tenant, and none is applied.
func TestApplyADirectory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, getenv := importServer(t)
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tenant := func(slug string, limit int) string {
		return fmt.Sprintf("tenant: %s\ntiers:\n  - name: default\n    rules:\n      - name: r\n        algorithm: fixed_window\n        limit: %d\n        window: 1m\n", slug, limit)
	}
	write("a.yaml", tenant("alpha", 5))
	write("b.yml", tenant("beta", 7))
	write("bad.yaml", tenant("gamma", 0))
	write("notes.txt", "not a tenant file")
	var out, errOut strings.Builder
	if err := run(ctx, []string{"apply", "-f", dir}, &out, &errOut, getenv); !errors.Is(err, errInput) || !strings.Contains(errOut.String(), "bad.yaml") {
		t.Fatalf("a directory with an invalid file: %v\n%s", err, errOut.String())
	}
	for _, slug := range []string{"alpha", "beta"} {
		if _, _, err := store.GetTenantBySlug(ctx, slug); err == nil {
			t.Fatalf("tenant %s was applied beside an invalid file", slug)
		}
	}
	write("bad.yaml", tenant("alpha", 9))
	errOut.Reset()
	if err := run(ctx, []string{"apply", "-f", dir}, &out, &errOut, getenv); !errors.Is(err, errInput) || !strings.Contains(errOut.String(), "one file per tenant") {
		t.Fatalf("two files for one tenant: %v\n%s", err, errOut.String())
	}
	if err := os.Remove(filepath.Join(dir, "bad.yaml")); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(ctx, []string{"apply", "-json", "-f", dir}, &out, &errOut, getenv); err != nil {
		t.Fatalf("apply: %v\n%s", err, errOut.String())
	}
	var results []tenantfile.ApplyResult
	if err := json.Unmarshal([]byte(out.String()), &results); err != nil || len(results) != 2 {
		t.Fatalf("JSON of two files: %v\n%s", err, out.String())
	}
	for slug, limit := range map[string]int64{"alpha": 5, "beta": 7} {
		tn, _, err := store.GetTenantBySlug(ctx, slug)
		if err != nil {
			t.Fatalf("tenant %s: %v", slug, err)
		}
		tiers, _ := store.ListTiers(ctx, tn.ID)
		if len(tiers) != 1 || len(tiers[0].Rules) != 1 || tiers[0].Rules[0].Limit != limit {
			t.Fatalf("tenant %s: %+v", slug, tiers)
		}
	}

	// The files go in one transaction: one the server refuses (a tenant
	// holds at most 100 tiers) leaves the others unapplied, and the error
	// names it.
	write("a.yaml", tenant("alpha", 6))
	var many strings.Builder
	many.WriteString("tenant: gamma\ndefault_tier: t0\ntiers:\n")
	for i := range policy.MaxTiers + 1 {
		fmt.Fprintf(&many, "  - name: t%d\n", i)
	}
	write("c.yaml", many.String())
	err := run(ctx, []string{"apply", "-f", dir}, &out, &errOut, getenv)
	if msg := describe(err); !strings.HasPrefix(msg, filepath.Join(dir, "c.yaml")+": resource exhausted: files[2] (tenant gamma)") {
		t.Fatalf("a refused file: %q", msg)
	}
	tn, _, _ := store.GetTenantBySlug(ctx, "alpha")
	if tiers, _ := store.ListTiers(ctx, tn.ID); tiers[0].Rules[0].Limit != 5 {
		t.Fatalf("alpha applied beside a refused file: %+v", tiers)
	}
}

// sluice tenants create takes the slug as its argument, as tiers create
// takes the name; an argument it cannot take is named, not just refused.
func TestTenantsCreateTakesTheSlugAsItsArgument(t *testing.T) {
	t.Parallel()
	store, getenv := importServer(t)
	sluice := func(args ...string) (string, error) {
		var out, errOut strings.Builder
		err := run(context.Background(), args, &out, &errOut, getenv)
		return out.String() + errOut.String(), err
	}
	if out, err := sluice("tenants", "create", "bench", "-name", "Bench"); err != nil || !strings.Contains(out, "created tenant bench") {
		t.Fatalf("tenants create bench: %v\n%s", err, out)
	}
	if tn, _, err := store.GetTenantBySlug(context.Background(), "bench"); err != nil || tn.Name != "Bench" {
		t.Fatalf("tenant %+v %v", tn, err)
	}
	if out, err := sluice("tenants", "create", "a", "-slug", "b"); !errors.Is(err, errUsage) || !strings.Contains(out, "two slugs") {
		t.Fatalf("two slugs: %v\n%s", err, out)
	}
	if out, err := sluice("tenants", "create", "a", "Alpha"); !errors.Is(err, errUsage) || !strings.Contains(out, `unexpected argument "Alpha"`) {
		t.Fatalf("an extra argument: %v\n%s", err, out)
	}
}
