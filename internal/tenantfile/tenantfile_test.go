package tenantfile

import (
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
)

const sample = `
tenant: acme
name: Acme Corp
default_tier: free
tiers:
  - name: free
    rules:
      - name: per-client
        key_by: [client_id]
        algorithm: token_bucket
        limit: 100
        window: 1m
        burst: 20
      - name: search
        match: {path: [/search, /find], method: GET}
        key_by: [client_id]
        algorithm: sliding_buckets
        limit: 10
        window: 1h
        granularity: 5m
        failure_mode: open
        shadow: true
  - name: pro
    rules:
      - name: per-client
        algorithm: gcra
        limit: 1000
        window: 1s
        sync: 100ms
        disabled: true
      - name: monthly
        algorithm: fixed_window
        limit: 100000
        calendar: month
      - name: daily
        algorithm: fixed_window
        limit: 5000
        calendar: day
        time_zone: America/Chicago
        message: "5,000 a day, from midnight in Chicago"
      - name: search-backend
        key_by: [upstream]
        algorithm: adaptive_concurrency
        limit: 200
        floor: 2
        window: 500ms
        lease_ttl: 30s
        adaptation: aimd
        partition_by: customer
        partitions: {big: 0.5, small: 0.25}
overrides:
  - identifier: alice
    rule: free/per-client
    algorithm: token_bucket
    limit: 500
    window: 1m
  - identifier: bigco-*
    tier: pro
  - identifier: mallory
    block: true
    expires_at: 2030-01-02T03:04:05Z
`

// A file reads into the domain's types as written: rules in order, match
// conditions sorted, enabled unless disabled, overrides' rules by
// tier/name.
func TestParse(t *testing.T) {
	f, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.TenantPolicy(); got != (policy.Tenant{Slug: "acme", Name: "Acme Corp", DefaultTier: "free"}) {
		t.Fatalf("tenant %+v", got)
	}
	free, err := f.Tiers[0].Policy()
	if err != nil {
		t.Fatal(err)
	}
	search := free.Rules[1]
	if search.Name != "search" || !search.Enabled || !search.Shadow || search.FailureMode != policy.FailOpen ||
		search.Algorithm != policy.SlidingBuckets || search.Granularity != 5*time.Minute ||
		!slices.Equal(search.Match, []policy.Match{{Key: "method", Value: "GET"}, {Key: "path", Value: "/search"}, {Key: "path", Value: "/find"}}) {
		t.Fatalf("search rule %+v", search)
	}
	pro, _ := f.Tiers[1].Policy()
	if r := pro.Rules[0]; r.Enabled || r.Sync != 100*time.Millisecond || r.Algorithm != policy.GCRA {
		t.Fatalf("pro rule %+v", r)
	}
	if f.rule(f.Overrides[0].Rule) != &f.Tiers[0].Rules[0] {
		t.Fatalf("override's rule %q not resolved to free/per-client", f.Overrides[0].Rule)
	}
	o, err := f.Overrides[0].Policy("r1")
	if err != nil || o.RuleID != "r1" || o.Params == nil || o.Params.Limit != 500 {
		t.Fatalf("override %+v %v", o, err)
	}
	if o, _ := f.Overrides[2].Policy(""); !o.Block || !o.ExpiresAt.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("blocking override %+v", o)
	}
}

// What From writes, Parse reads back to the same file, and the domain's
// values survive the trip.
func TestExportRoundTrip(t *testing.T) {
	f, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	var tiers []policy.Tier
	for i, ft := range f.Tiers {
		tier, _ := ft.Policy()
		for j := range tier.Rules {
			tier.Rules[j].ID = ft.Name + "-id-" + string(rune('a'+j))
		}
		tier.ID = "tier" + string(rune('0'+i))
		tiers = append(tiers, tier)
	}
	var overrides []policy.Override
	for _, fo := range f.Overrides {
		o, _ := fo.Policy("free-id-a")
		if o.Key == "" {
			o.Key = policy.DefaultIdentifierKey // as the store answers
		}
		overrides = append(overrides, o)
	}
	out, err := From(f.TenantPolicy(), tiers, overrides).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"method: GET\n", "- /find\n", "sync: 100ms\n", "rule: free/per-client\n", "failure_mode: open\n", "calendar: month\n", "time_zone: America/Chicago\n", "message: 5,000 a day, from midnight in Chicago\n", "floor: 2\n", "adaptation: aimd\n", "partition_by: customer\n", "big: 0.5\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("export lacks %q:\n%s", want, out)
		}
	}
	back, err := Parse(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !reflect.DeepEqual(back, f) {
		t.Fatalf("round trip:\n%+v\nwant\n%+v\n%s", back, f, out)
	}
}

// An override that changes some of its rule's parameters, without naming
// an algorithm, has the rule's others, and a burst that follows its limit;
// one naming its algorithm is taken as written.
func TestOverrideInheritsItsRulesParams(t *testing.T) {
	f, err := Parse([]byte(sample + `  - identifier: partner
    rule: free/per-client
    limit: 1000
  - identifier: steady
    rule: free/per-client
    limit: 1000
    burst: 5
  - identifier: weekly
    rule: pro/monthly
    calendar: week
  - identifier: hourly
    rule: pro/monthly
    limit: 10
    window: 1h
`))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range map[int]Params{
		0: {Algorithm: "token_bucket", Limit: 500, Window: Duration(time.Minute)}, // named its algorithm: whole, no burst
		3: {Algorithm: "token_bucket", Limit: 1000, Window: Duration(time.Minute), Burst: 200},
		4: {Algorithm: "token_bucket", Limit: 1000, Window: Duration(time.Minute), Burst: 5},
		5: {Algorithm: "fixed_window", Limit: 100000, Calendar: "week"},
		6: {Algorithm: "fixed_window", Limit: 10, Window: Duration(time.Hour)},
	} {
		if got := f.Overrides[i].Params; got != want {
			t.Errorf("override %s: %+v, want %+v", f.Overrides[i].Identifier, got, want)
		}
	}
	// The example of docs/api.md reads as it says.
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, example, _ := strings.Cut(string(doc), "```yaml\ntenant: shop\n")
	example, _, _ = strings.Cut(example, "```")
	f, err = Parse([]byte("tenant: shop\n" + example))
	if err != nil {
		t.Fatalf("docs/api.md's tenant file: %v", err)
	}
	if o := f.Overrides[0]; o.Identifier != "partner" || o.Params != (Params{Algorithm: "token_bucket", Limit: 1000, Window: Duration(time.Minute)}) {
		t.Fatalf("docs/api.md's partner: %+v", o)
	}

	// What it inherits is checked as its own: a calendar of a rule that
	// has none is an error at the override.
	_, err = Parse([]byte(sample + `  - identifier: odd
    rule: free/per-client
    calendar: month
`))
	var pe *policy.Error
	if !errors.As(err, &pe) || len(pe.Fields) == 0 || !strings.HasPrefix(pe.Fields[0].Field, "overrides[3].") {
		t.Fatalf("a calendar on a token bucket: %v", err)
	}
}

// Every invalid value is reported at once, by its path in the file.
func TestFieldErrors(t *testing.T) {
	_, err := Parse([]byte(`
tenant: Acme!
default_tier: gold
tiers:
  - name: free
    rules:
      - name: r
        match: {path: ""}
        algorithm: token_bucket
        limit: -1
        window: 1m
      - name: r
        algorithm: fixed_window
        limit: 1
        window: 1m
        failure_mode: sometimes
  - name: free
    rules:
      - name: x
        match: {route: [/a, ""], method: []}
        algorithm: bogus
      - name: y
        algorithm: fixed_window
        limit: 5
        calendar: fortnight
      - name: z
        algorithm: fixed_window
        limit: 5
        window: 1h
        calendar: month
overrides:
  - identifier: alice
    rule: free/none
    algorithm: token_bucket
    limit: 5
    window: 1m
  - identifier: bob
    tier: platinum
  - identifier: carol
    descriptor_key: "bad key"
    block: true
`))
	var pe *policy.Error
	if !errors.As(err, &pe) {
		t.Fatalf("got %v, want a *policy.Error", err)
	}
	got := map[string]bool{}
	for _, f := range pe.Fields {
		got[f.Field] = true
	}
	for _, want := range []string{"tenant", "default_tier", "tiers[0].rules[0].limit", "tiers[0].rules[1].name",
		"tiers[0].rules[1].failure_mode", "tiers[1].name", "tiers[1].rules[0].algorithm", "tiers[0].rules[0].match.path", "tiers[1].rules[0].match.route[1]", "tiers[1].rules[0].match.method", "tiers[1].rules[1].calendar", "tiers[1].rules[2].window", "overrides[0].rule",
		"overrides[1].tier", "overrides[2].descriptor_key"} {
		if !got[want] {
			t.Errorf("no error for %s; got %v", want, pe.Fields)
		}
	}
}

// Malformed files are refused with their line; unknown fields too (a
// typo must not silently drop a limit).
func TestMalformed(t *testing.T) {
	for name, c := range map[string]struct{ in, want string }{
		"unknown field":  {"tenant: acme\ntiers:\n  - name: free\n    rules:\n      - name: r\n        limt: 5\n", "line 6"},
		"bad duration":   {"tenant: acme\ntiers:\n  - name: free\n    rules:\n      - name: r\n        window: soon\n", "line 6"},
		"not a mapping":  {"- a\n- b\n", "cannot unmarshal"},
		"two documents":  {"tenant: a\ntiers: []\n---\ntenant: b\n", "one tenant per file"},
		"wrong type":     {"tenant: acme\ntiers:\n  - name: free\n    rules:\n      - name: r\n        limit: lots\n", "line 6"},
		"empty":          {"", "EOF"},
		"too large file": {strings.Repeat("#", MaxBytes+1), "at most"},
	} {
		if _, err := Parse([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
}

// FuzzParse: no input panics Parse, and what it accepts exports to a
// file it accepts again, equal.
func FuzzParse(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte("tenant: a\ntiers: [{name: b, rules: [{name: c, algorithm: fixed_window, limit: 1, window: 1s}]}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			return
		}
		out, err := file.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("an accepted file's own output is refused: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(normal(back), normal(file)) {
			t.Fatalf("round trip changed the file:\n%+v\n%+v", back, file)
		}
	})
}

// normal clears what YAML may write differently yet means the same: an
// empty match or list and a missing one.
func normal(f *File) *File {
	for i := range f.Tiers {
		if len(f.Tiers[i].Rules) == 0 {
			f.Tiers[i].Rules = nil
		}
		for j := range f.Tiers[i].Rules {
			r := &f.Tiers[i].Rules[j]
			if len(r.Match) == 0 {
				r.Match = nil
			}
			if len(r.KeyBy) == 0 {
				r.KeyBy = nil
			}
			if len(r.Replaces) == 0 {
				r.Replaces = nil
			}
		}
	}
	if len(f.Tiers) == 0 {
		f.Tiers = nil
	}
	if len(f.Overrides) == 0 {
		f.Overrides = nil
	}
	return f
}

// Durations may be written in days, and whole days are written so.
func TestDurationsInDays(t *testing.T) {
	f, err := Parse([]byte("tenant: a\ntiers:\n  - name: b\n    rules:\n      - {name: c, algorithm: fixed_window, limit: 1, window: 1d12h}\n      - {name: d, algorithm: fixed_window, limit: 1, window: 7d}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rules := f.Tiers[0].Rules
	if time.Duration(rules[0].Window) != 36*time.Hour || time.Duration(rules[1].Window) != 7*24*time.Hour {
		t.Fatalf("windows %v, %v", time.Duration(rules[0].Window), time.Duration(rules[1].Window))
	}
	for d, want := range map[Duration]string{Duration(7 * 24 * time.Hour): "7d", Duration(36 * time.Hour): "36h", Duration(time.Minute): "1m", Duration(90 * time.Second): "1m30s"} {
		if got, _ := d.MarshalYAML(); got != want {
			t.Errorf("%v written %q, want %q", time.Duration(d), got, want)
		}
	}
}

// Import puts rules in a tier by name: one of the same name in its place,
// the others after; with prune, the tier's others go, and their overrides,
// and nothing of another tier.
func TestImport(t *testing.T) {
	f, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	rule := func(name string, limit int64) policy.Rule {
		return policy.Rule{Name: name, Enabled: true, Params: policy.Params{Algorithm: policy.FixedWindow, Limit: limit, Window: time.Minute}}
	}
	f.Import("free", []policy.Rule{rule("search", 7), rule("new", 1)}, false)
	var names []string
	for _, r := range f.Tiers[0].Rules {
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"per-client", "search", "new"}) || f.Tiers[0].Rules[1].Limit != 7 || f.Tiers[0].Rules[1].Match != nil {
		t.Fatalf("free after an import: %+v", f.Tiers[0].Rules)
	}
	f.Import("free", []policy.Rule{rule("new", 2)}, true)
	if len(f.Tiers[0].Rules) != 1 || f.Tiers[0].Rules[0].Limit != 2 || len(f.Tiers[1].Rules) != 4 {
		t.Fatalf("after a pruning import: %+v", f.Tiers)
	}
	if slices.ContainsFunc(f.Overrides, func(o Override) bool { return o.Rule == "free/per-client" }) || len(f.Overrides) != 2 {
		t.Fatalf("the pruned rule's override stays: %+v", f.Overrides)
	}
	f.Import("gold", []policy.Rule{rule("g", 1)}, true)
	if f.Tiers[len(f.Tiers)-1].Name != "gold" || len(f.Tiers) != 3 {
		t.Fatalf("a new tier: %+v", f.Tiers)
	}
}

// An unknown field is reported by its path, with its line, among the
// file's other errors, never by a Go type's name.
func TestUnknownFieldsAmongTheOtherErrors(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte("tenant: acme\ncolor: blue\ntiers:\n  - name: free\n    rules:\n      - name: a\n        algorithm: fixed_window\n        limit: 1\n        window: 1m\n" +
		"      - name: b\n        algorithm: bogus\n        colour: red\n        match: {route: /x}\noverrides:\n  - identifier: bob\n    tier: free\n    expires: soon\n"))
	var pe *policy.Error
	if !errors.As(err, &pe) {
		t.Fatalf("got %v, want a *policy.Error", err)
	}
	got := map[string]string{}
	for _, f := range pe.Fields {
		got[f.Field] = f.Description
	}
	for field, want := range map[string]string{"color": "unknown field (line 2)", "tiers[0].rules[1].colour": "unknown field (line 12)",
		"overrides[0].expires": "unknown field (line 17)"} {
		if got[field] != want {
			t.Errorf("%s: %q, want %q; all: %v", field, got[field], want, pe.Fields)
		}
	}
	if _, ok := got["tiers[0].rules[1].algorithm"]; !ok {
		t.Errorf("the file's other error is missing: %v", pe.Fields)
	}
	if strings.Contains(err.Error(), "tenantfile.") || strings.Contains(err.Error(), "not found in type") {
		t.Errorf("a Go type in the error: %v", err)
	}
}
