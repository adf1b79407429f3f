package envoyimport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// An example in the style of envoyproxy/ratelimit's README.
const example = `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: remote_address
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: destination_cluster
    value: mock
    descriptors:
      - key: source_cluster
        rate_limit:
          unit: hour
          requests_per_unit: 1
          name: per-source
  - key: health
    rate_limit:
      unlimited: true
  - key: tenant_quota
    quota_mode: true
    rate_limit:
      unit: day
      requests_per_unit: 1000
`

func TestParseExample(t *testing.T) {
	t.Parallel()
	p, err := Parse(strings.NewReader(example))
	if err != nil {
		t.Fatal(err)
	}
	if p.Tenant.Slug != "mongo-cps" || p.Tenant.Name != "mongo_cps" {
		t.Fatalf("tenant %+v", p.Tenant)
	}
	want := []policy.Rule{
		{Name: "database=users", Match: []policy.Match{{Key: "database", Value: "users"}}, Enabled: true,
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 500, Window: time.Second}},
		{Name: "remote_address", Match: []policy.Match{{Key: "remote_address", Value: "*"}}, KeyBy: []string{"remote_address"},
			Shadow: true, Enabled: true, Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 10, Window: time.Minute}},
		{Name: "per-source", Match: []policy.Match{{Key: "destination_cluster", Value: "mock"}, {Key: "source_cluster", Value: "*"}},
			KeyBy: []string{"source_cluster"}, Enabled: true, Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 1, Window: time.Hour}},
		{Name: "health", Match: []policy.Match{{Key: "health", Value: "*"}}, KeyBy: []string{"health"},
			Shadow: true, Enabled: true, Params: policy.Params{Algorithm: policy.FixedWindow, Limit: policy.MaxLimit, Window: time.Second}},
		{Name: "tenant_quota", Match: []policy.Match{{Key: "tenant_quota", Value: "*"}}, KeyBy: []string{"tenant_quota"},
			Quota: true, Enabled: true, Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 1000, Window: 24 * time.Hour}},
	}
	if len(p.Rules) != len(want) {
		t.Fatalf("%d rules, want %d: %+v", len(p.Rules), len(want), p.Rules)
	}
	for i := range want {
		g, w := p.Rules[i], want[i]
		if g.Name != w.Name || !slices.Equal(g.Match, w.Match) || !slices.Equal(g.KeyBy, w.KeyBy) || g.Params != w.Params || g.Shadow != w.Shadow || g.Quota != w.Quota || !g.Enabled || !g.Exact {
			t.Errorf("rule %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
	if !slices.Equal(p.Unlimited, []string{"health"}) {
		t.Fatalf("unlimited %v", p.Unlimited)
	}
	// Two rules on different sibling values count separately: the keys
	// differ by rule, and the matches select one value each.
	d := policy.Descriptors{{Key: "destination_cluster", Value: "mock"}, {Key: "source_cluster", Value: "proxy"}}
	if !p.Rules[2].Matches(d) || p.Rules[0].Matches(d) {
		t.Fatal("matching")
	}
}

// Imported rules decide as envoyproxy/ratelimit does: each descriptor
// meets the one limit at its path, not those above it, and an entry with a
// value (a limit, unlimited, requests_per_unit 0: blocked, or no
// rate_limit at a leaf: whitelisted) overrides its sibling without one.
func TestImportedRulesDecideAsEnvoyDoes(t *testing.T) {
	t.Parallel()
	p, err := Parse(strings.NewReader(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: remote_address
    value: 10.0.0.1
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: remote_address
    value: 10.0.0.2
    rate_limit: {unlimited: true}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: remote_address
    value: 10.0.0.3
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 1}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /api/v2/*
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /api/v2/bulk
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: host
    value: "web-*"
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: host
    value: "api-*"
    share_threshold: true
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: file
    value: "*.pdf"
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: file
    value: "bar*b"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Notes) != 1 || !strings.HasPrefix(p.Notes[0], "descriptors[4] has no rate_limit: a whitelist entry") {
		t.Fatalf("notes %q, want one of the whitelist entry descriptors[4]", p.Notes)
	}
	for i := range p.Rules {
		p.Rules[i].ID = fmt.Sprint("r", i)
	}
	c, err := decide.Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: p.Tenant.Slug, Name: "edge", DefaultTier: p.Tenant.DefaultTier},
		Version: 1, Tiers: []policy.Tier{{Name: p.Tenant.DefaultTier, Rules: p.Rules}}})
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC) }
	d := decide.New(decide.InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: now}, now)
	allowed := func(kv ...string) bool {
		t.Helper()
		var req decide.Request
		for i := 0; i < len(kv); i += 2 {
			req.Descriptors = append(req.Descriptors, policy.Descriptor{Key: kv[i], Value: kv[i+1]})
		}
		dec, err := d.Decide(context.Background(), c, req)
		if err != nil {
			t.Fatal(err)
		}
		return dec.Allowed
	}
	count := func(n int, kv ...string) (admitted int) {
		t.Helper()
		for range n {
			if allowed(kv...) {
				admitted++
			}
		}
		return admitted
	}
	for _, tc := range []struct {
		ip   string
		want int
	}{{"1.2.3.4", 2}, {"10.0.0.1", 4}, {"10.0.0.2", 10}, {"50.0.0.5", 0}, {"10.0.0.3", 10}} {
		if got := count(10, "remote_address", tc.ip); got != tc.want {
			t.Errorf("remote_address %s: %d of 10 admitted, want %d", tc.ip, got, tc.want)
		}
	}
	// Envoy sends two descriptors for a marketing message: the marketing
	// path's and the number's own. The number's limit counts each message
	// once.
	if !allowed("message_type", "marketing", "to_number", "555") || !allowed("to_number", "555") {
		t.Fatal("first marketing message")
	}
	if allowed("message_type", "marketing", "to_number", "555") || !allowed("to_number", "555") {
		t.Fatal("second marketing message: the marketing limit (1) rejects, the number's (3) admits its second")
	}
	if got := count(2, "to_number", "555"); got != 1 {
		t.Fatalf("the number's other messages: %d of 2 admitted, want its third", got)
	}
	// A value beats a wildcard, a longer wildcard a shorter one, any
	// wildcard the entry without a value; each counts per value.
	for _, tc := range []struct {
		path string
		want int
	}{{"/web", 1}, {"/api/v1/a", 2}, {"/api/v1/b", 2}, {"/api/v2/a", 3}, {"/api/v2/bulk", 4}} {
		if got := count(5, "path", tc.path); got != tc.want {
			t.Errorf("path %s: %d of 5 admitted, want %d", tc.path, got, tc.want)
		}
	}
	// A wildcard counts per value, unless share_threshold: one counter for
	// every value it matches.
	if !allowed("host", "web-a") || !allowed("host", "web-b") || allowed("host", "web-a") {
		t.Fatal("web-*: a counter per host")
	}
	if !allowed("host", "api-a") || allowed("host", "api-b") {
		t.Fatal("api-* with share_threshold: one counter")
	}
	// A '*' anywhere stands for any run of characters, as in
	// envoyproxy/ratelimit: a counter per value, or one for all with
	// share_threshold.
	for _, tc := range []struct {
		file string
		want int
	}{{"a.pdf", 1}, {"b.pdf", 1}, {"a.txt", 3}, {"barb", 2}, {"bar-b", 0}, {"bar-c", 3}} {
		if got := count(3, "file", tc.file); got != tc.want {
			t.Errorf("file %s: %d of 3 admitted, want %d", tc.file, got, tc.want)
		}
	}
	// Descriptors matching no path meet no limit.
	if got := count(5, "remote_address", "1.2.3.4", "path", "/x"); got != 5 {
		t.Fatalf("a path with no limit: %d of 5 admitted", got)
	}
}

func TestParseReportsEveryFieldWithItsPath(t *testing.T) {
	t.Parallel()
	bad := `
domain: "Not a slug!"
descriptors:
  - value: x
  - key: a
    rate_limit: {unit: fortnight, requests_per_unit: 5}
  - key: b
    descriptors:
      - key: c
        rate_limit: {unit: second, requests_per_unit: -1}
  - key: d
    rate_limit: {unit: second, requests_per_unit: 1, name: d, replaces: [{name: d}]}
  - key: b
    descriptors:
      - key: e
  - key: a
    value: x
  - key: a
    value: x
  - key: g
    rate_limit: {unit: second, unlimited: true}
`
	_, err := Parse(strings.NewReader(bad))
	var e *policy.Error
	if !errors.As(err, &e) || e.Code != policy.CodeInvalid {
		t.Fatalf("error %v", err)
	}
	var got []string
	for _, f := range e.Fields {
		got = append(got, f.Field)
	}
	want := []string{"domain", "descriptors[0].key", "descriptors[1].rate_limit.unit", "descriptors[2].descriptors[0].rate_limit.requests_per_unit",
		"descriptors[3].rate_limit.replaces[0].name", "descriptors[4]", "descriptors[6]", "descriptors[7].rate_limit.unit"}
	if !slices.Equal(got, want) {
		t.Fatalf("fields %v, want %v", got, want)
	}
	for _, in := range []string{"domain: x\nunknown_field: 1\n", "{{{", "domain: [1, 2]", strings.Repeat("a", MaxBytes+1)} {
		if _, err := Parse(strings.NewReader(in)); policy.ErrorCode(err) != policy.CodeInvalid {
			t.Errorf("%.30q: %v", in, err)
		}
	}
}

// Merge joins the limits of two files of a domain, and refuses a limit in
// both, leaving the plan as it was.
func TestMerge(t *testing.T) {
	t.Parallel()
	parse := func(s string) *Plan {
		t.Helper()
		p, err := Parse(strings.NewReader(s))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := parse("domain: d\ndescriptors:\n  - key: k\n    value: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	b := parse("domain: d\ndescriptors:\n  - key: k\n    value: b\n    rate_limit: {unlimited: true}\n")
	if err := a.Merge(b); err != nil {
		t.Fatal(err)
	}
	if got := []string{a.Rules[0].Name, a.Rules[1].Name}; len(a.Rules) != 2 || !slices.Equal(got, []string{"k=a", "k=b"}) || !slices.Equal(a.Unlimited, []string{"k=b"}) {
		t.Fatalf("merged %v, unlimited %v", a.Rules, a.Unlimited)
	}
	again := parse("domain: d\ndescriptors:\n  - key: k\n    value: b\n    rate_limit: {unit: minute, requests_per_unit: 9}\n")
	if err := a.Merge(again); policy.ErrorCode(err) != policy.CodeInvalid || !strings.Contains(err.Error(), "k=b is in both files") {
		t.Fatalf("a limit in both: %v", err)
	}
	if len(a.Rules) != 2 {
		t.Fatalf("a refused merge left %d rules", len(a.Rules))
	}
}

// FuzzParse: the parser never panics, refuses with field errors, and every
// plan it accepts is valid.
func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte("domain: a\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n        rate_limit: {unit: day, requests_per_unit: 3}\n"))
	f.Add([]byte("domain: a\ndescriptors:\n  - key: k\n    quota_mode: true\n    rate_limit: {unit: second, requests_per_unit: 0, name: n, replaces: [{name: m}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(strings.NewReader(string(data)))
		if err != nil {
			var e *policy.Error
			if !errors.As(err, &e) || e.Code != policy.CodeInvalid || len(e.Fields) == 0 {
				t.Fatalf("refusal without field errors: %v", err)
			}
			return
		}
		if err := p.Tenant.Validate(); err != nil {
			t.Fatalf("accepted tenant: %v", err)
		}
		tier := policy.Tier{Name: "default", Rules: p.Rules}
		if err := tier.Validate(); err != nil {
			t.Fatalf("accepted rules: %v", err)
		}
	})
}
