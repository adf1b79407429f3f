package auditdiff

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestChanges(t *testing.T) {
	rule := `{"ID": "r1", "Name": "per-client", "Sync": 0, "Burst": 0, "KeyBy": ["client_id"], "Limit": 10, "Match": null,
		"Shadow": false, "Window": 60000000000, "Enabled": true, "LeaseTTL": 0, "Algorithm": 1, "FailureMode": 0}`
	raised := `{"ID": "r1", "Name": "per-client", "Sync": 50000000, "Burst": 0, "KeyBy": ["client_id", "ip"], "Limit": 20, "Match": [{"Key": "route", "Value": "/login"}],
		"Shadow": false, "Window": 90000000000, "Enabled": false, "LeaseTTL": 0, "Algorithm": 4, "FailureMode": 1}`
	for _, c := range []struct {
		name     string
		old, new string
		want     []Change
	}{
		{"an update lists what differs", rule, raised, []Change{
			{"algorithm", "token_bucket", "fixed_window"}, {"enabled", "true", ""}, {"failure_mode", "open", "closed"},
			{"key_by", `["client_id"]`, `["client_id","ip"]`}, {"limit", "10", "20"},
			{"match", "", `[{"key":"route","value":"/login"}]`}, {"sync", "", "50ms"}, {"window", "1m0s", "1m30s"}}},
		{"a creation lists what it sets", "", `{"kind": "check", "name": "ci", "prefix": "sk_check_ab", "expires_at": null}`, []Change{
			{"kind", "", "check"}, {"name", "", "ci"}, {"prefix", "", "sk_check_ab"}}},
		{"a deletion lists what was set but its id", `{"ID": "o1", "Identifier": "bob", "RuleID": "r1", "Params": {"Limit": 50, "WarmUp": 0, "MaxDelay": 1500000000, "ID": "x"}}`, "null", []Change{
			{"identifier", "bob", ""}, {"params.id", "x", ""}, {"params.limit", "50", ""}, {"params.max_delay", "1.5s", ""}, {"rule_id", "r1", ""}}},
		{"an override that never expires", "", `{"Identifier": "vip", "Tier": "pro", "ExpiresAt": "0001-01-01T00:00:00Z"}`, []Change{
			{"identifier", "", "vip"}, {"tier", "", "pro"}}},
		{"an expiry set where there was none", `{"ExpiresAt": "0001-01-01T00:00:00Z"}`, `{"ExpiresAt": "2026-12-01T00:00:00Z"}`, []Change{
			{"expires_at", "", "2026-12-01T00:00:00Z"}}},
		{"a calendar window", `{"Calendar": 0, "Window": 60000000000}`, `{"Calendar": 2}`, []Change{{"calendar", "", "month"}, {"window", "1m0s", ""}}},
		{"a tenant suspended", `{"Slug": "acme", "Status": 0}`, `{"Slug": "acme", "Status": 1}`, []Change{{"status", "active", "suspended"}}},
		{"nothing changed", rule, rule, nil},
		{"not an object", `["a","b"]`, `["b","a"]`, []Change{{"", `["a","b"]`, `["b","a"]`}}},
		{"not JSON", `{`, `{"Limit": 1}`, []Change{{"", "{", ""}, {"limit", "", "1"}}},
	} {
		if got := Changes([]byte(c.old), []byte(c.new)); !slices.Equal(got, c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

// Readable shows a stored value as the API names things, every field kept.
func TestReadable(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"ID": "r1", "KeyBy": ["client_id"], "Limit": 10, "Match": [{"Key": "route", "Value": "/login"}], "Shadow": false,
			"Window": 60000000000, "LeaseTTL": 0, "Algorithm": 1, "FailureMode": 0, "Calendar": 0, "Params": {"MaxDelay": 1500000000}}`,
			`{"algorithm":"token_bucket","calendar":"","failure_mode":"open","id":"r1","key_by":["client_id"],"lease_ttl":"0s",` +
				`"limit":10,"match":[{"key":"route","value":"/login"}],"params":{"max_delay":"1.5s"},"shadow":false,"window":"1m0s"}`},
		{`{"Slug": "acme", "Status": 1}`, `{"slug":"acme","status":"suspended"}`},
		{`null`, `null`},
		{``, ``},
		{`{`, `{`},         // not JSON: as it is
		{`{} {}`, `{} {}`}, // nor two values
	} {
		if got := string(Readable([]byte(c.in))); got != c.want {
			t.Errorf("Readable(%s)\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{"KeyBy": "key_by", "LeaseTTL": "lease_ttl", "RuleID": "rule_id", "ID": "id", "ExpiresAt": "expires_at",
		"expires_at": "expires_at", "HTTPHeader": "http_header", "Window": "window", "V2Name": "v2_name"} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzChanges: any two values give an answer; a value against itself
// changes nothing; every change differs, in path order; Readable of JSON
// is JSON.
func FuzzChanges(f *testing.F) {
	f.Add([]byte(`{"Limit": 10, "Window": 60000000000}`), []byte(`{"Limit": 20, "Params": {"LeaseTTL": 5}}`))
	f.Add([]byte(`[1, {"a": null}]`), []byte(`"x"`))
	f.Fuzz(func(t *testing.T, old, new []byte) {
		if same := Changes(old, old); len(same) != 0 {
			t.Fatalf("%q against itself: %q", old, same)
		}
		if json.Valid(old) && !json.Valid(Readable(old)) {
			t.Fatalf("Readable(%q) = %q, not JSON", old, Readable(old))
		}
		got := Changes(old, new)
		for i, c := range got {
			if c.Old == c.New || (i > 0 && got[i-1].Field >= c.Field) {
				t.Fatalf("%q → %q: %q", old, new, got)
			}
		}
	})
}
