package rlheaders

import (
	"net/http"
	"testing"
	"time"
)

func TestSet(t *testing.T) {
	rules := []Rule{
		{Name: "per-client", Limit: 10, Remaining: 0, Window: time.Second, ResetAfter: 1500 * time.Millisecond, RetryAfter: 200 * time.Millisecond},
		{Name: `a "quoted"\name`, Limit: 3, Remaining: 2, ResetAfter: time.Millisecond, RetryAfter: -1},
	}
	h := http.Header{}
	Set(h, rules, 0, false)
	want := map[string]string{
		"RateLimit-Policy":      `"per-client";q=10;w=1, "a \"quoted\"\\name";q=3`,
		"RateLimit":             `"per-client";r=0;t=2, "a \"quoted\"\\name";r=2;t=1`,
		"X-RateLimit-Limit":     "10",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "2",
		"Retry-After":           "1",
	}
	for k, v := range want {
		if got := h.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if len(h) != len(want) {
		t.Errorf("headers %v, want only %v", h, want)
	}

	h = http.Header{}
	Set(h, rules, 1, false) // the deciding rule can never admit: no Retry-After
	if h.Get("Retry-After") != "" || h.Get("X-RateLimit-Limit") != "3" {
		t.Errorf("deciding rule 1: %v", h)
	}
	h = http.Header{}
	Set(h, rules, -1, true)
	if len(h) != 2 || h.Get("RateLimit") == "" {
		t.Errorf("no deciding rule: %v", h)
	}
	h = http.Header{}
	Set(h, []Rule{{Name: "é\x01", Limit: 1}}, 0, true)
	if got := h.Get("RateLimit-Policy"); got != `"???";q=1` {
		t.Errorf("non-ASCII name: %q", got)
	}
}

func TestHeaderKeysAreCanonical(t *testing.T) {
	for _, k := range headerKeys {
		if c := http.CanonicalHeaderKey(k); c != k {
			t.Errorf("%q is stored as given but looked up as %q", k, c)
		}
	}
}

func TestSetAllocations(t *testing.T) {
	rules := []Rule{{Name: "per-client", Limit: 10, Remaining: 3, Window: time.Second, ResetAfter: time.Second}}
	h := http.Header{}
	if n := testing.AllocsPerRun(100, func() { Set(h, rules, 0, true) }); n > 2 {
		t.Errorf("%v allocations per call, want at most 2", n)
	}
}
