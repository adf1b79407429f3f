package envoyimport

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

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
	}
	if len(p.Rules) != len(want) {
		t.Fatalf("%d rules, want %d: %+v", len(p.Rules), len(want), p.Rules)
	}
	for i := range want {
		g, w := p.Rules[i], want[i]
		if g.Name != w.Name || !slices.Equal(g.Match, w.Match) || !slices.Equal(g.KeyBy, w.KeyBy) || g.Params != w.Params || g.Shadow != w.Shadow || !g.Enabled {
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
        rate_limit: {unit: second, requests_per_unit: 0}
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
	want := []string{"domain", "descriptors[0].key", "descriptors[1].rate_limit.unit", "descriptors[2].descriptors[0].rate_limit.requests_per_unit"}
	if !slices.Equal(got, want) {
		t.Fatalf("fields %v, want %v", got, want)
	}
	for _, in := range []string{"domain: x\nunknown_field: 1\n", "{{{", "domain: [1, 2]", strings.Repeat("a", MaxBytes+1)} {
		if _, err := Parse(strings.NewReader(in)); policy.ErrorCode(err) != policy.CodeInvalid {
			t.Errorf("%.30q: %v", in, err)
		}
	}
}

// FuzzParse: the parser never panics, refuses with field errors, and every
// plan it accepts is valid.
func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte("domain: a\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n        rate_limit: {unit: day, requests_per_unit: 3}\n"))
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
