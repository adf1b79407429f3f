package controlplane

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/policy"
)

// Unkey's override calls keep an override as a rule of the tenant's
// default tier, matching its namespace and identifier: set creates it,
// then updates it in place; get, list and delete find it; each tenant
// sees its own; keys are checked as for the API's calls, and bad input
// is a 400 naming each field, in Unkey's envelope.
func TestUnkeyOverrides(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	c := newClients(srv)
	_, adminA := setupTenant(t, c, "unkey-a")
	_, adminB := setupTenant(t, c, "unkey-b")
	viewerA := callOK(t, adminA, c.keys.CreateKey, &sluicev1.CreateKeyRequest{Kind: sluicev1.KeyKind_KEY_KIND_VIEWER}).Secret
	checkA := callOK(t, adminA, c.keys.CreateKey, &sluicev1.CreateKeyRequest{Kind: sluicev1.KeyKind_KEY_KIND_CHECK}).Secret
	unkeyCall := func(key, name, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/v2/ratelimit."+name, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: not Unkey's JSON envelope: %v %v", name, err, resp.Header)
		}
		if meta, _ := m["meta"].(map[string]any); !strings.HasPrefix(meta["requestId"].(string), "req_") {
			t.Fatalf("%s: no meta.requestId in %v", name, m)
		}
		return resp.StatusCode, m
	}
	data := func(m map[string]any) map[string]any { d, _ := m["data"].(map[string]any); return d }

	const vip = `{"namespace":"api","identifier":"vip_*"`
	status, m := unkeyCall(adminA, "setOverride", vip+`,"limit":10,"duration":60000}`)
	id, _ := data(m)["overrideId"].(string)
	if status != 200 || id == "" {
		t.Fatalf("setOverride: %d %v", status, m)
	}
	if status, m = unkeyCall(adminA, "setOverride", vip+`,"limit":20,"duration":120000}`); status != 200 || data(m)["overrideId"] != id {
		t.Fatalf("setOverride again: %d %v, want the same override %s", status, m, id)
	}
	want := map[string]any{"overrideId": id, "identifier": "vip_*", "limit": 20.0, "duration": 120000.0}
	for _, key := range []string{adminA, viewerA} {
		if status, m = unkeyCall(key, "getOverride", vip+`}`); status != 200 || !maps.Equal(data(m), want) {
			t.Fatalf("getOverride: %d %v, want %v", status, m, want)
		}
	}
	// The override is a rule the console and the CLI show.
	tiers := callOK(t, adminA, c.tiers.ListTiers, &sluicev1.ListTiersRequest{}).Tiers
	idx := slices.IndexFunc(tiers, func(tr *sluicev1.Tier) bool { return len(tr.Rules) > 0 })
	if idx < 0 || len(tiers[idx].Rules) != 1 {
		t.Fatalf("tiers %v: want one rule", tiers)
	}
	if r := tiers[idx].Rules[0]; r.Id != id || !slices.Equal(r.KeyBy, []string{"identifier"}) ||
		r.Params.GetAlgorithm() != sluicev1.Algorithm_ALGORITHM_SLIDING_WINDOW || r.Params.GetLimit() != 20 || len(r.Match) != 2 {
		t.Fatalf("the override's rule: %v", r)
	}

	if status, m = unkeyCall(adminA, "listOverrides", `{"namespace":"api"}`); status != 200 || len(m["data"].([]any)) != 1 {
		t.Fatalf("listOverrides: %d %v", status, m)
	}
	if status, m = unkeyCall(adminA, "listOverrides", `{"namespace":"web"}`); status != 200 || len(m["data"].([]any)) != 0 {
		t.Fatalf("listOverrides of another namespace: %d %v", status, m)
	}
	// Another tenant's key sees its own tenant's overrides: none.
	if status, _ = unkeyCall(adminB, "getOverride", vip+`}`); status != 404 {
		t.Fatalf("another tenant's getOverride: %d", status)
	}
	if status, m = unkeyCall(adminB, "listOverrides", `{"namespace":"api"}`); status != 200 || len(m["data"].([]any)) != 0 {
		t.Fatalf("another tenant's listOverrides: %d %v", status, m)
	}
	for _, tc := range []struct {
		key, name string
		status    int
	}{
		{"", "getOverride", 401}, {"sk_admin_nonsense", "getOverride", 401}, {checkA, "getOverride", 403},
		{viewerA, "setOverride", 403}, {viewerA, "deleteOverride", 403}, {operatorKey, "getOverride", 403},
	} {
		status, m := unkeyCall(tc.key, tc.name, vip+`,"limit":1,"duration":1000}`)
		if e, _ := m["error"].(map[string]any); status != tc.status || e["status"] != float64(tc.status) || e["detail"] == "" {
			t.Errorf("%s with key %.12q: %d %v, want %d", tc.name, tc.key, status, m, tc.status)
		}
	}

	if status, m = unkeyCall(adminA, "setOverride", `{"namespace":"api","identifier":"*@example.com","limit":5,"duration":1000}`); status != 200 {
		t.Fatalf("an override of a suffix: %d %v", status, m)
	}
	status, m = unkeyCall(adminA, "setOverride", `{"namespace":"","identifier":"","limit":0,"duration":1500}`)
	var locations []string
	e, _ := m["error"].(map[string]any)
	errs, _ := e["errors"].([]any)
	for _, fe := range errs {
		locations = append(locations, fe.(map[string]any)["location"].(string))
	}
	slices.Sort(locations)
	if status != 400 || !slices.Equal(locations, []string{"body.duration", "body.identifier", "body.limit", "body.namespace"}) {
		t.Fatalf("an invalid override: %d %v", status, m)
	}
	for _, tc := range []struct{ name, body string }{{"setOverride", vip + `,"limit":1,"duration":1000,"ttl":5}`}, {"getOverride", `{`}} {
		if status, _ := unkeyCall(adminA, tc.name, tc.body); status != 400 {
			t.Errorf("%s %s: %d, want 400", tc.name, tc.body, status)
		}
	}
	if status, _ := unkeyCall(adminA, "limitless", `{}`); status != 404 {
		t.Errorf("an unknown call: %d, want 404", status)
	}

	if status, m = unkeyCall(adminA, "deleteOverride", vip+`}`); status != 200 {
		t.Fatalf("deleteOverride: %d %v", status, m)
	}
	for _, name := range []string{"getOverride", "deleteOverride"} {
		if status, _ := unkeyCall(adminA, name, vip+`}`); status != 404 {
			t.Errorf("%s after the delete: %d, want 404", name, status)
		}
	}
}

// setOverride is an upsert, also when several callers set one override
// at once: every call succeeds, all name the one override, and the tier
// holds it once.
func TestUnkeySetOverrideConcurrently(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	c := newClients(srv)
	_, admin := setupTenant(t, c, "unkey-race")
	const n = 8
	ids := make(chan string, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			body := fmt.Sprintf(`{"namespace":"api","identifier":"user_1","limit":%d,"duration":60000}`, 10+i)
			req, _ := http.NewRequest("POST", srv.URL+"/v2/ratelimit.setOverride", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+admin)
			resp, err := srv.Client().Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			var m struct {
				Data struct {
					OverrideID string `json:"overrideId"`
				} `json:"data"`
				Error any `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
				errs <- fmt.Errorf("setOverride %d: %d %v %v", i, resp.StatusCode, m.Error, err)
				return
			}
			ids <- m.Data.OverrideID
		}()
	}
	var got []string
	for range n {
		select {
		case err := <-errs:
			t.Error(err)
		case id := <-ids:
			got = append(got, id)
		}
	}
	if slices.Sort(got); len(got) > 0 && (got[0] == "" || got[0] != got[len(got)-1]) {
		t.Fatalf("the calls named overrides %v, want one", got)
	}
	rules := 0
	for _, tr := range callOK(t, admin, c.tiers.ListTiers, &sluicev1.ListTiersRequest{}).Tiers {
		rules += len(tr.Rules)
	}
	if rules != 1 {
		t.Fatalf("%d rules, want the one override", rules)
	}
}

// Whatever the body, the override calls' checks answer a field error or
// nothing, and names they pass make a rule the store takes.
func FuzzUnkeyOverrideBody(f *testing.F) {
	f.Add([]byte(`{"namespace":"api","identifier":"vip_*","limit":10,"duration":60000}`))
	f.Add([]byte(`{"namespace":"","identifier":"*@example.com","limit":0,"duration":1500}`))
	f.Add([]byte(`{"namespace":"a\u0000","identifier":"*"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var b unkeyOverrideBody
		if json.Unmarshal(in, &b) != nil {
			return
		}
		if err := b.checkNames(true); err != nil {
			if policy.ErrorCode(err) != policy.CodeInvalid {
				t.Fatalf("%v is not a field error", err)
			}
			return
		}
		r := policy.Rule{Name: "unkey-override-0123456789abcdef", Enabled: true, KeyBy: []string{"identifier"},
			Match:  []policy.Match{{Key: "namespace", Value: b.Namespace}, {Key: "identifier", Value: b.Identifier}},
			Params: policy.Params{Algorithm: policy.SlidingWindow, Limit: 1, Window: time.Minute}}
		if err := r.Validate(); err != nil {
			t.Fatalf("namespace %q and identifier %q pass, but make an invalid rule: %v", b.Namespace, b.Identifier, err)
		}
	})
}
