package unkey

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/decision/decisiontest"
	"github.com/sluicehq/sluice/internal/httpport/httpporttest"
	"github.com/sluicehq/sluice/internal/policy"
)

// Unkey's POST /v2/ratelimit.limit: the request's own limit per
// identifier and namespace, counted apart from the tenant's rules and
// from other namespaces; 200 with data.success either way; errors in
// Unkey's envelope with the field named as its location.
func TestUnkeyRatelimitLimit(t *testing.T) {
	t.Parallel()
	httpporttest.Each(t, decisiontest.Default, Routes, func(t *testing.T, srv httpporttest.Served, key string) {
		limit := func(ns, id string, cost string) (status int, data map[string]any) {
			t.Helper()
			body := fmt.Sprintf(`{"namespace":%q,"identifier":%q,"limit":3,"duration":60000%s}`, ns, id, cost)
			resp, m := httpporttest.Post(t, srv, LimitPath, key, body)
			meta, _ := m["meta"].(map[string]any)
			if id, _ := meta["requestId"].(string); !strings.HasPrefix(id, "req_") {
				t.Fatalf("no meta.requestId: %v", m)
			}
			data, _ = m["data"].(map[string]any)
			return resp.StatusCode, data
		}
		now := time.Date(2026, 11, 22, 10, 0, 15, 0, time.UTC).UnixMilli() // testAPI's clock
		for i, want := range []bool{true, true, true, false} {
			status, data := limit("sms.sign_up", "user_1", "")
			reset, _ := data["reset"].(float64)
			if status != 200 || data["success"] != want || data["limit"] != 3.0 || data["remaining"] != float64(max(2-i, 0)) ||
				int64(reset) <= now || int64(reset) > now+120000 {
				// reset: when remaining is back to the limit, for a sliding
				// window once the previous window no longer weighs (10:02 here).
				t.Fatalf("call %d: %d %v; want success %v, limit 3, remaining %d, a reset within two minutes of %d", i, status, data, want, max(2-i, 0), now)
			}
		}
		// A cost of 0 asks without taking: not over, nothing taken.
		if _, data := limit("sms.sign_up", "user_2", `,"cost":0`); data["success"] != true || data["remaining"] != 3.0 {
			t.Fatalf("a cost of 0: %v", data)
		}
		if _, data := limit("sms.sign_up", "user_2", `,"cost":3,"async":true`); data["success"] != true || data["remaining"] != 0.0 {
			t.Fatalf("a cost of 3: %v", data)
		}
		// Another namespace, the same identifier: counted apart; and the
		// tenant's rules (3 a minute per client_id) meet none of these.
		if _, data := limit("api.requests", "user_1", ""); data["success"] != true || data["remaining"] != 2.0 {
			t.Fatalf("another namespace: %v", data)
		}
		for _, tc := range []struct{ body, location string }{
			{`{"namespace":"a","identifier":"b","limit":3,"duration":1500}`, "body.duration"},
			{`{"namespace":"a","identifier":"b","limit":3,"duration":500}`, "body.duration"},
			{`{"namespace":"","identifier":"b","limit":3,"duration":60000}`, "body.namespace"},
			{`{"namespace":"a","identifier":"b\u0000","limit":3,"duration":60000}`, "body.identifier"},
			{`{"namespace":"a","identifier":"b","limit":0,"duration":60000}`, "body.limit"},
			{`{"namespace":"a","identifier":"b","limit":3,"duration":60000,"cost":-1}`, "body.cost"},
		} {
			resp, m := httpporttest.Post(t, srv, LimitPath, key, tc.body)
			e, _ := m["error"].(map[string]any)
			errs, _ := e["errors"].([]any)
			if resp.StatusCode != 400 || e["status"] != 400.0 || len(errs) != 1 || errs[0].(map[string]any)["location"] != tc.location || m["data"] != nil {
				t.Errorf("%s: %d %v; want 400 naming %s", tc.body, resp.StatusCode, m, tc.location)
			}
		}
		for _, tc := range []struct {
			key, body string
			status    int
		}{
			{"", `{"namespace":"a","identifier":"b","limit":3,"duration":60000}`, 401},
			{key, `{"namespace":"a","identifier":"b","limit":3,"duration":60000,"resources":[]}`, 400}, // unknown field
			{key, `{"namespace":"a",`, 400},
		} {
			resp, m := httpporttest.Post(t, srv, LimitPath, tc.key, tc.body)
			e, _ := m["error"].(map[string]any)
			if resp.StatusCode != tc.status || e["status"] != float64(tc.status) || e["detail"] == "" || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%s: %d %v %v; want %d in Unkey's envelope", tc.body, resp.StatusCode, resp.Header, m, tc.status)
			}
		}
	})
}

// A tenant's rule matching an Unkey call with a condition on its
// namespace decides it in place of the call's own limit (Unkey's
// overrides): per identifier when keyed by it, for the identifiers and
// namespace it names alone; a rule naming no namespace never does.
func TestUnkeyOverrides(t *testing.T) {
	t.Parallel()
	mk := func(tb testing.TB) (decision.Service, string) {
		return decisiontest.With(tb, []policy.Rule{
			{ID: "r1", Name: "everyone", KeyBy: []string{"identifier"}, Enabled: true,
				Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 100, Window: time.Minute}},
			{ID: "r2", Name: "vip", KeyBy: []string{"identifier"}, Enabled: true,
				Match:  []policy.Match{{Key: "namespace", Value: "api"}, {Key: "identifier", Value: "vip_*"}},
				Params: policy.Params{Algorithm: policy.SlidingWindow, Limit: 3, Window: time.Minute}},
		})
	}
	httpporttest.Each(t, mk, Routes, func(t *testing.T, srv httpporttest.Served, key string) {
		calls := func(ns, id string, n int) (got []bool, limit float64, override any) {
			t.Helper()
			for range n {
				_, m := httpporttest.Post(t, srv, LimitPath, key, fmt.Sprintf(`{"namespace":%q,"identifier":%q,"limit":1,"duration":60000}`, ns, id))
				data, _ := m["data"].(map[string]any)
				got = append(got, data["success"] == true)
				limit, _ = data["limit"].(float64)
				override = data["overrideId"]
			}
			return got, limit, override
		}
		for _, tc := range []struct {
			ns, id   string
			want     []bool
			limit    float64
			override any // the answer's overrideId: the rule's id when it decided
		}{
			{"api", "vip_1", []bool{true, true, true, false}, 3, "r2"}, // the rule's 3, not the call's 1
			{"api", "vip_2", []bool{true, true, true, false}, 3, "r2"}, // a counter per identifier
			{"api", "user_1", []bool{true, false}, 1, nil},             // not named: the call's limit
			{"web", "vip_1", []bool{true, false}, 1, nil},              // another namespace: the call's limit
		} {
			if got, limit, override := calls(tc.ns, tc.id, len(tc.want)); !slices.Equal(got, tc.want) || limit != tc.limit || override != tc.override {
				t.Errorf("%s/%s: %v, limit %v, overrideId %v; want %v, limit %v, overrideId %v", tc.ns, tc.id, got, limit, override, tc.want, tc.limit, tc.override)
			}
		}
	})
}
