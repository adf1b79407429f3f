package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/controlplane"
	"github.com/sluicehq/sluice/internal/pgstore"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

const ratelimitYAML = `
domain: edge_proxy
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: path
    value: /login
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: health
    rate_limit: {unlimited: true}
`

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// fileWriter returns a function that writes a file of dir, and returns
// its path.
func fileWriter(t *testing.T, dir string) func(name, body string) string {
	return func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// importServer serves a control plane on a schema of the test's own, and
// returns its store and the environment that points the CLI at it with
// the operator key.
func importServer(t *testing.T) (*pgstore.Store, func(string) string) {
	t.Helper()
	store := pgstore.New(pgtest.Pool(t))
	srv := httptest.NewServer(controlplane.NewHandler(controlplane.HandlerConfig{OperatorKey: "op"}.OnPostgres(store, 0)))
	t.Cleanup(srv.Close)
	env := map[string]string{"SLUICE_SERVER": srv.URL, "SLUICE_KEY": "op"}
	return store, func(k string) string { return env[k] }
}

func TestImportIntoARunningControlPlane(t *testing.T) {
	t.Parallel()
	store, getenv := importServer(t)
	file := writeFile(t, ratelimitYAML)

	importOnce := func() cli.ImportSummary {
		var out, errOut strings.Builder
		if err := run(context.Background(), []string{"import", "-json", file}, &out, &errOut, getenv); err != nil {
			t.Fatalf("import: %v (%s)", err, errOut.String())
		}
		var sum cli.ImportSummary
		if err := json.Unmarshal([]byte(out.String()), &sum); err != nil {
			t.Fatalf("output %q: %v", out.String(), err)
		}
		return sum
	}
	first := importOnce()
	if !first.TenantCreated || len(first.Created) != 3 || len(first.Updated) != 0 || len(first.UnlimitedPaths) != 1 {
		t.Fatalf("first import %+v", first)
	}
	tn, v1, err := store.GetTenantBySlug(context.Background(), "edge-proxy")
	if err != nil {
		t.Fatal(err)
	}
	second := importOnce()
	if second.TenantCreated || second.TenantID != first.TenantID || len(second.Created) != 0 || len(second.Updated) != 0 || len(second.Unchanged) != 3 {
		t.Fatalf("second import %+v: it must change nothing, not duplicate", second)
	}
	if _, v2, _ := store.GetTenantBySlug(context.Background(), "edge-proxy"); v2 != v1 {
		t.Fatalf("the second import moved the config version from %d to %d", v1, v2)
	}
	tiers, _ := store.ListTiers(context.Background(), tn.ID)
	// Stored as imported: exact rules, the unlimited path a shadow rule.
	if len(tiers) != 1 || len(tiers[0].Rules) != 3 || tiers[0].Rules[1].Name != "path=/login" || tiers[0].Rules[1].Limit != 2 ||
		!tiers[0].Rules[0].Exact || !tiers[0].Rules[1].Exact || !tiers[0].Rules[2].Shadow || !tiers[0].Rules[2].Exact {
		t.Fatalf("stored %+v", tiers)
	}

	// The file loses its health path: -prune deletes its rule, and
	// only with -prune.
	var out, errOut strings.Builder
	smaller := writeFile(t, strings.Split(ratelimitYAML, "  - key: health")[0])
	for _, tc := range []struct {
		args    []string
		deleted int
	}{{[]string{"import", smaller}, 0}, {[]string{"import", "-prune", smaller}, 1}, {[]string{"import", "-prune", smaller}, 0}} {
		out.Reset()
		if err := run(context.Background(), tc.args, &out, &errOut, getenv); err != nil {
			t.Fatalf("%v: %v (%s)", tc.args, err, errOut.String())
		}
		if want := fmt.Sprintf("0 updated, 2 unchanged, %d deleted", tc.deleted); !strings.Contains(out.String(), want) {
			t.Fatalf("%v printed %q, want %q", tc.args, out.String(), want)
		}
	}
	tiers, _ = store.ListTiers(context.Background(), tn.ID)
	if len(tiers[0].Rules) != 2 || tiers[0].Rules[0].Name != "remote_address" || tiers[0].Rules[1].Name != "path=/login" {
		t.Fatalf("after -prune: %+v", tiers[0].Rules)
	}
	// A changed limit updates its rule alone.
	out.Reset()
	raised := writeFile(t, strings.Replace(strings.Split(ratelimitYAML, "  - key: health")[0], "requests_per_unit: 60", "requests_per_unit: 120", 1))
	if err := run(context.Background(), []string{"import", raised}, &out, &errOut, getenv); err != nil || !strings.Contains(out.String(), "1 updated, 1 unchanged") {
		t.Fatalf("import of a raised limit: %v, %q", err, out.String())
	}
	// -tier imports into another tier of the tenant.
	out.Reset()
	if err := run(context.Background(), []string{"import", "-tier", "pro", smaller}, &out, &errOut, getenv); err != nil || !strings.Contains(out.String(), "tier pro: 2 rules created") {
		t.Fatalf("import -tier pro: %v, %q", err, out.String())
	}
	if tiers, _ = store.ListTiers(context.Background(), tn.ID); len(tiers) != 2 || len(tiers[1].Rules) != 2 || len(tiers[0].Rules) != 2 {
		t.Fatalf("after -tier pro: %+v", tiers)
	}
}

func TestImportDryRunAndBadFiles(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	var out strings.Builder
	if err := run(context.Background(), []string{"import", "-dry-run", writeFile(t, ratelimitYAML)}, &out, &out, none); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "tenant edge-proxy") || !strings.Contains(out.String(), "unlimited health") {
		t.Fatalf("dry run printed %q", out.String())
	}
	// As JSON, the rules as a tenant file writes them: names of
	// algorithms, durations as "1m", not Go's field names and numbers.
	out.Reset()
	if err := run(context.Background(), []string{"import", "-dry-run", "-json", writeFile(t, ratelimitYAML)}, &out, &out, none); err != nil {
		t.Fatal(err)
	}
	var plan struct {
		Tenant, Tier   string
		Rules          []map[string]any
		UnlimitedPaths []string `json:"unlimited_paths"`
	}
	if err := json.Unmarshal([]byte(out.String()), &plan); err != nil || plan.Tenant != "edge-proxy" || plan.Tier != "default" ||
		len(plan.Rules) != 3 || !slices.Equal(plan.UnlimitedPaths, []string{"health"}) {
		t.Fatalf("dry run as JSON: %s (%v)", out.String(), err)
	}
	if r := plan.Rules[0]; r["name"] != "remote_address" || r["algorithm"] != "fixed_window" || r["limit"] != 60.0 || r["window"] != "1m" ||
		!reflect.DeepEqual(r["key_by"], []any{"remote_address"}) {
		t.Fatalf("the first rule as JSON: %v", r)
	}
	var errOut strings.Builder
	err := run(context.Background(), []string{"import", writeFile(t, "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: eon, requests_per_unit: 1}\n")},
		&out, &errOut, none)
	if !errors.Is(err, errInput) || !strings.Contains(errOut.String(), "descriptors[0].rate_limit.unit") {
		t.Fatalf("invalid file: %v, %q", err, errOut.String())
	}
	if err := run(context.Background(), []string{"import"}, &out, &errOut, none); !errors.Is(err, errUsage) {
		t.Fatalf("no file: %v", err)
	}
}

// A config directory imports as envoyproxy/ratelimit loads it, each
// .yaml or .yml file a domain and so a tenant; every file is checked
// before anything changes, and two files of one domain are refused.
func TestImportSeveralFiles(t *testing.T) {
	t.Parallel()
	store, getenv := importServer(t)
	dir := t.TempDir()
	write := fileWriter(t, dir)
	write("edge.yaml", ratelimitYAML)
	write("mongo.yml", "domain: mongo_cps\ndescriptors:\n  - key: database\n    value: users\n    rate_limit: {unit: second, requests_per_unit: 500}\n")
	write("README.md", "not a configuration")
	bad := write("bad.yaml", "domain: bad\ndescriptors:\n  - key: a\n    rate_limit: {unit: eon, requests_per_unit: 1}\n")

	var out, errOut strings.Builder
	err := run(context.Background(), []string{"import", dir}, &out, &errOut, getenv)
	if !errors.Is(err, errInput) || !strings.Contains(errOut.String(), "bad.yaml") || !strings.Contains(errOut.String(), "descriptors[0].rate_limit.unit") {
		t.Fatalf("a directory with an invalid file: %v, %q", err, errOut.String())
	}
	if tenants, _ := store.ListTenants(context.Background()); len(tenants) != 0 {
		t.Fatalf("a refused import created %d tenants", len(tenants))
	}
	if err := os.Remove(bad); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"import", "-json", dir}, &out, &errOut, getenv); err != nil {
		t.Fatalf("import of the directory: %v (%s)", err, errOut.String())
	}
	var sums []cli.ImportSummary
	if err := json.Unmarshal([]byte(out.String()), &sums); err != nil || len(sums) != 2 || !sums[0].TenantCreated || !sums[1].TenantCreated ||
		len(sums[0].Created) != 3 || len(sums[1].Created) != 1 {
		t.Fatalf("summaries %q: %v", out.String(), err)
	}
	for _, slug := range []string{"edge-proxy", "mongo-cps"} {
		if _, _, err := store.GetTenantBySlug(context.Background(), slug); err != nil {
			t.Fatalf("tenant %s: %v", slug, err)
		}
	}
	// With a key, a dry run asks the control plane what would change, and
	// nothing does.
	_, before, _ := store.GetTenantBySlug(context.Background(), "mongo-cps")
	mongo := write("mongo.yml", "domain: mongo_cps\ndescriptors:\n  - key: database\n    value: users\n    rate_limit: {unit: second, requests_per_unit: 600}\n"+
		"  - key: database\n    value: orders\n    rate_limit: {unit: second, requests_per_unit: 50}\n")
	out.Reset()
	if err := run(context.Background(), []string{"import", "-dry-run", "-json", mongo}, &out, &errOut, getenv); err != nil {
		t.Fatalf("dry run: %v (%s)", err, errOut.String())
	}
	var sum cli.ImportSummary
	if err := json.Unmarshal([]byte(out.String()), &sum); err != nil || !sum.DryRun || len(sum.Updated) != 1 || len(sum.Created) != 1 || sum.TenantCreated {
		t.Fatalf("dry run's summary %q: %v", out.String(), err)
	}
	if _, after, _ := store.GetTenantBySlug(context.Background(), "mongo-cps"); after != before {
		t.Fatalf("a dry run moved the tenant from version %d to %d", before, after)
	}
	errOut.Reset()
	err = run(context.Background(), []string{"import", "-dry-run", filepath.Join(dir, "edge.yaml"), write("again.yaml", ratelimitYAML)}, &out, &errOut, getenv)
	if !errors.Is(err, errInput) || !strings.Contains(errOut.String(), "one file per domain") {
		t.Fatalf("two files of one domain: %v, %q", err, errOut.String())
	}
}

// With -merge-domains the files of one domain make its tenant together, as
// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG: their limits land in one tier
// in one import, replaces may name a limit of another file, and a limit
// in two files refuses them all.
func TestImportMergesTheFilesOfADomain(t *testing.T) {
	t.Parallel()
	store, getenv := importServer(t)
	dir := t.TempDir()
	write := fileWriter(t, dir)
	write("a-team.yaml", "domain: shared\ndescriptors:\n  - key: route\n    value: /a\n    rate_limit: {unit: second, requests_per_unit: 5, name: a}\n")
	write("b-team.yaml", "domain: shared\ndescriptors:\n  - key: route\n    value: /b\n    rate_limit: {unit: minute, requests_per_unit: 7, replaces: [{name: a}]}\n")
	write("other.yaml", "domain: other\ndescriptors:\n  - key: client_id\n    rate_limit: {unit: hour, requests_per_unit: 9}\n")

	var out, errOut strings.Builder
	if err := run(context.Background(), []string{"import", "-merge-domains", "-json", dir}, &out, &errOut, getenv); err != nil {
		t.Fatalf("merged import: %v (%s)", err, errOut.String())
	}
	var sums []cli.ImportSummary
	if err := json.Unmarshal([]byte(out.String()), &sums); err != nil || len(sums) != 2 {
		t.Fatalf("summaries %q: %v", out.String(), err)
	}
	tenant, _, err := store.GetTenantBySlug(context.Background(), "shared")
	if err != nil {
		t.Fatal(err)
	}
	tiers, err := store.ListTiers(context.Background(), tenant.ID)
	if err != nil || len(tiers) != 1 {
		t.Fatalf("shared's tiers: %v, %v", tiers, err)
	}
	var got []string
	for _, r := range tiers[0].Rules {
		got = append(got, fmt.Sprintf("%s %d/%v replaces %v", r.Name, r.Limit, r.Window, r.Replaces))
	}
	if want := []string{"a 5/1s replaces []", "route=/b 7/1m0s replaces [a]"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("shared's rules %q, want %q", got, want)
	}

	// The same limit in two files of the domain: nothing imported.
	write("c-team.yaml", "domain: shared\ndescriptors:\n  - key: route\n    value: /b\n    rate_limit: {unit: minute, requests_per_unit: 70}\n")
	write("d.yaml", "domain: fresh\ndescriptors:\n  - key: client_id\n    rate_limit: {unit: hour, requests_per_unit: 9}\n")
	errOut.Reset()
	err = run(context.Background(), []string{"import", "-merge-domains", dir}, &out, &errOut, getenv)
	if !errors.Is(err, errInput) || !strings.Contains(errOut.String(), "c-team.yaml") || !strings.Contains(errOut.String(), "route=/b is in both files") {
		t.Fatalf("a limit in two files: %v, %q", err, errOut.String())
	}
	if _, _, err := store.GetTenantBySlug(context.Background(), "fresh"); err == nil {
		t.Fatal("a refused import created a tenant")
	}
}

const kongYAML = `
_format_version: "3.0"
services:
  - name: orders
    url: http://orders:8080
    routes:
      - {name: orders, paths: [/orders, /v2/orders]}
    plugins:
      - name: rate-limiting
        config: {minute: 100, month: 50000, limit_by: consumer, policy: redis}
plugins:
  - name: rate-limiting-advanced
    config: {limit: [10], window_size: [1], identifier: ip, sync_rate: 0.1, window_type: fixed}
`

// A Kong file imports into the tenant named with -tenant, its service's
// routes one rule over both paths, stored as the plan says, and what
// behaves otherwise than in Kong is printed.
func TestImportKong(t *testing.T) {
	t.Parallel()
	store, getenv := importServer(t)
	file := writeFile(t, kongYAML)
	var out, errOut strings.Builder
	if err := run(context.Background(), []string{"import", "-kong", file}, &out, &errOut, getenv); err == nil ||
		!strings.Contains(err.Error(), "-tenant SLUG") {
		t.Fatalf("a file naming no tenant, with the operator key: %v", err)
	}
	if err := run(context.Background(), []string{"import", "-kong", "-tenant", "shop", file}, &out, &errOut, getenv); err != nil {
		t.Fatalf("import: %v (%s)", err, errOut.String())
	}
	for _, want := range []string{"created tenant shop", "3 rules created", "note: limit_by consumer: clients are told apart by -identity-header"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printed %q, want %q", out.String(), want)
		}
	}
	tn, _, err := store.GetTenantBySlug(context.Background(), "shop")
	if err != nil {
		t.Fatal(err)
	}
	tiers, _ := store.ListTiers(context.Background(), tn.ID)
	if len(tiers) != 1 || len(tiers[0].Rules) != 3 {
		t.Fatalf("stored %+v", tiers)
	}
	rs := tiers[0].Rules
	// The service's limits count both its paths in one counter; Kong's
	// two plugins are apart, so neither replaces the other.
	if rs[0].Name != "service-orders-minute" || len(rs[0].Match) != 2 || len(rs[0].Replaces) != 0 ||
		rs[1].Name != "service-orders-month" || rs[1].Calendar != policy.CalendarMonth ||
		rs[2].Name != "global-1s" || rs[2].Sync != 100*time.Millisecond || rs[2].Algorithm != policy.FixedWindow {
		t.Fatalf("stored %+v", rs)
	}
	// Importing again changes nothing.
	out.Reset()
	if err := run(context.Background(), []string{"import", "-kong", "-tenant", "shop", file}, &out, &errOut, getenv); err != nil ||
		!strings.Contains(out.String(), "0 rules created, 0 updated, 3 unchanged") {
		t.Fatalf("second import: %v, %q", err, out.String())
	}
	// Refusals name their place in the file; -kong takes one file.
	errOut.Reset()
	err = run(context.Background(), []string{"import", "-kong", "-tenant", "shop", writeFile(t, "plugins: [{name: rate-limiting, consumer: bob, config: {minute: 1}}]")},
		&out, &errOut, getenv)
	if !errors.Is(err, errInput) || !strings.Contains(errOut.String(), "plugins[0]") {
		t.Fatalf("consumer plugin: %v, %q", err, errOut.String())
	}
	// Several files are one configuration, a plugin of one naming
	// another's route; a directory stands for its files; each problem is
	// told with its file's name.
	dir := t.TempDir()
	for name, content := range map[string]string{
		"a-orders.yaml": "services: [{name: orders, routes: [{name: list, paths: [/orders]}]}]",
		"b-limits.json": `{"plugins": [{"name": "rate-limiting", "route": "list", "config": {"minute": 5}}]}`,
		"notes.txt":     "not read",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"import", "-kong", "-tenant", "split", dir}, &out, &errOut, getenv); err != nil ||
		!strings.Contains(out.String(), "created tenant split") || !strings.Contains(out.String(), "1 rules created") {
		t.Fatalf("a directory of two files: %v, %q %q", err, out.String(), errOut.String())
	}
	errOut.Reset()
	bad := writeFile(t, "plugins: [{name: rate-limiting, route: gone, config: {minute: 5}}]")
	err = run(context.Background(), []string{"import", "-kong", "-tenant", "split", file, bad}, &out, &errOut, getenv)
	if want := bad + ": plugins[0].route"; !errors.Is(err, errInput) || !strings.Contains(errOut.String(), want) {
		t.Fatalf("a problem of the second file: %v, %q, want %q", err, errOut.String(), want)
	}
}

// "-" imports what standard input holds, as deck gateway dump -o - writes.
func TestImportFromStandardInput(t *testing.T) {
	_, getenv := importServer(t)
	in, err := os.Open(writeFile(t, kongYAML))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	saved := os.Stdin
	os.Stdin = in
	defer func() { os.Stdin = saved }()
	var out, errOut strings.Builder
	if err := run(context.Background(), []string{"import", "-kong", "-tenant", "piped", "-"}, &out, &errOut, getenv); err != nil ||
		!strings.Contains(out.String(), "created tenant piped") || !strings.Contains(out.String(), "3 rules created") {
		t.Fatalf("import of standard input: %v, %q %q", err, out.String(), errOut.String())
	}
}

// A domain that is no slug as it is (edge_proxy) says which tenant it
// became, and -tenant takes the domain as well as the slug.
func TestImportSaysWhichTenantADomainBecame(t *testing.T) {
	t.Parallel()
	_, getenv := importServer(t)
	var out, errOut strings.Builder
	if err := run(context.Background(), []string{"import", writeFile(t, ratelimitYAML)}, &out, &errOut, getenv); err != nil {
		t.Fatalf("import: %v (%s)", err, errOut.String())
	}
	if !strings.Contains(out.String(), "domain edge_proxy is tenant edge-proxy") {
		t.Fatalf("the import said %q, not which tenant edge_proxy became", out.String())
	}
	for _, name := range []string{"edge_proxy", "edge-proxy"} {
		out.Reset()
		if err := run(context.Background(), []string{"rules", "list", "-tenant", name}, &out, &errOut, getenv); err != nil || !strings.Contains(out.String(), "remote_address") {
			t.Fatalf("rules list -tenant %s: %v %q (%s)", name, err, out.String(), errOut.String())
		}
	}
}
