package rlheaders

import (
	"maps"
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
	Set(h, IETF, rules, 0, false)
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

	// A quota apart from the limit is the policy's q; the limit stays
	// X-RateLimit-Limit's.
	h = http.Header{}
	Set(h, IETF, []Rule{{Name: "bursty", Limit: 20, Quota: 10, Remaining: 19, Window: time.Minute}}, 0, true)
	if h.Get("RateLimit-Policy") != `"bursty";q=10;w=60` || h.Get("X-RateLimit-Limit") != "20" {
		t.Errorf("a quota apart: %v", h)
	}

	h = http.Header{}
	Set(h, IETF, rules, 1, false) // the deciding rule can never admit: no Retry-After
	if h.Get("Retry-After") != "" || h.Get("X-RateLimit-Limit") != "3" {
		t.Errorf("deciding rule 1: %v", h)
	}
	h = http.Header{}
	Set(h, IETF, rules, -1, true)
	if len(h) != 2 || h.Get("RateLimit") == "" {
		t.Errorf("no deciding rule: %v", h)
	}
	h = http.Header{}
	Set(h, IETF, []Rule{{Name: "é\x01", Limit: 1}}, 0, true)
	if got := h.Get("RateLimit-Policy"); got != `"???";q=1` {
		t.Errorf("non-ASCII name: %q", got)
	}
}

// Each style answers its own headers: of every rule, of the deciding one,
// and Retry-After on a rejection that can be admitted later.
func TestStyles(t *testing.T) {
	rules := []Rule{
		{Name: "per-client", Limit: 10, Remaining: 0, Window: time.Minute, ResetAfter: 1500 * time.Millisecond, RetryAfter: 200 * time.Millisecond},
		{Name: "login", Limit: 3, Remaining: 2, ResetAfter: time.Millisecond, RetryAfter: -1},
	}
	x := map[string]string{"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "2"}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	for _, c := range []struct {
		style    Style
		deciding int
		allowed  bool
		want     map[string]string
	}{
		{IETF, 0, false, with(x, "RateLimit-Policy", `"per-client";q=10;w=60, "login";q=3`, "RateLimit", `"per-client";r=0;t=2, "login";r=2;t=1`, "Retry-After", "1")},
		{Draft6, 0, false, with(x, "RateLimit-Policy", "10;w=60, 3", "RateLimit-Limit", "10", "RateLimit-Remaining", "0", "RateLimit-Reset", "2", "Retry-After", "1")},
		{Draft6, 0, true, with(x, "RateLimit-Policy", "10;w=60, 3", "RateLimit-Limit", "10", "RateLimit-Remaining", "0", "RateLimit-Reset", "2")},
		{Draft6, -1, true, map[string]string{"RateLimit-Policy": "10;w=60, 3"}},
		{X, 0, false, with(x, "Retry-After", "1")},
		{X, 1, false, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "1"}},
		{None, 0, false, map[string]string{"Retry-After": "1"}},
		{None, 0, true, map[string]string{}},
		{Kong, 0, false, map[string]string{"X-RateLimit-Limit-Minute": "10", "X-RateLimit-Remaining-Minute": "0",
			"RateLimit-Limit": "10", "RateLimit-Remaining": "0", "RateLimit-Reset": "2", "Retry-After": "1"}},
		{Kong, 1, true, map[string]string{"X-RateLimit-Limit-Minute": "10", "X-RateLimit-Remaining-Minute": "0", // login has no window
			"RateLimit-Limit": "3", "RateLimit-Remaining": "2", "RateLimit-Reset": "1"}},
		{Style(99), 1, true, map[string]string{"RateLimit-Policy": `"per-client";q=10;w=60, "login";q=3`,
			"RateLimit": `"per-client";r=0;t=2, "login";r=2;t=1`, "X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "1"}},
	} {
		h := http.Header{}
		Set(h, c.style, rules, c.deciding, c.allowed)
		got := map[string]string{}
		for k, v := range h {
			got[k] = v[0]
			if len(v) != 1 {
				t.Errorf("%s: %s has %d values", c.style, k, len(v))
			}
		}
		want := map[string]string{}
		for k, v := range c.want {
			want[http.CanonicalHeaderKey(k)] = v
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s, deciding %d, allowed %v:\n got %v\nwant %v", c.style, c.deciding, c.allowed, got, want)
		}
		// Append gives the same, unallocated, by Key.
		var buf [256]byte
		b, keys, ends, n := Append(buf[:0], c.style, rules, c.deciding, c.allowed)
		if n != len(want) {
			t.Errorf("%s: Append gave %d headers, want %d", c.style, n, len(want))
		}
		from := 0
		for i := range n {
			if k, v := string(keys[i]), string(b[from:ends[i]]); want[k] != v {
				t.Errorf("%s: Append's %s = %q, want %q", c.style, k, v, want[k])
			}
			from = ends[i]
		}
	}
	for _, name := range []string{"ietf", "draft-6", "x", "none", "kong"} {
		if s, err := ParseStyle(name); err != nil || s.String() != name {
			t.Errorf("ParseStyle(%q) = %v, %v", name, s, err)
		}
	}
	if _, err := ParseStyle("draft-7"); err == nil {
		t.Error("ParseStyle took draft-7")
	}
}

func TestHeaderKeysAreCanonical(t *testing.T) {
	names := headerNames[:]
	for _, k := range windowKeys {
		names = append(names, string(k[0]), string(k[1]))
	}
	for _, k := range names {
		if c := http.CanonicalHeaderKey(k); c != k {
			t.Errorf("%q is stored as given but looked up as %q", k, c)
		}
	}
}

// Kong's per-window headers name each window as Kong does, once per
// window, as many as fit.
func TestKongWindows(t *testing.T) {
	var rules []Rule
	for i, w := range []time.Duration{time.Second, 30 * time.Second, time.Hour, 24 * time.Hour, 30 * 24 * time.Hour, 365 * 24 * time.Hour, time.Hour, 0, 7 * 24 * time.Hour} {
		rules = append(rules, Rule{Name: "r", Limit: int64(i + 1), Remaining: -1, Window: w})
	}
	rules[6].Remaining = -2 // the hour's tighter rule, whose headers the hour's are
	h := http.Header{}
	Set(h, Kong, rules, 1, true)
	want := map[string]string{"X-RateLimit-Limit-Second": "1", "X-RateLimit-Remaining-Second": "0", "X-RateLimit-Limit-30": "2",
		"X-RateLimit-Limit-Hour": "7", "X-RateLimit-Limit-Day": "4", "X-RateLimit-Limit-Month": "5", "X-RateLimit-Limit-Year": "6",
		"RateLimit-Limit": "2"}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	// Six windows fit beside the deciding rule's three: the week's does not.
	if len(h) != 15 || h.Get("X-RateLimit-Limit-604800") != "" {
		t.Errorf("%d headers: %v", len(h), h)
	}
	var buf [256]byte
	if n := testing.AllocsPerRun(100, func() { _, _, _, _ = Append(buf[:0], Kong, rules[:6], 0, true) }); n > 1 {
		t.Errorf("Append: %v allocations, want only the 30 s window's names", n)
	}
}

func TestSetAllocations(t *testing.T) {
	rules := []Rule{{Name: "per-client", Limit: 10, Remaining: 3, Window: time.Second, ResetAfter: time.Second}}
	h := http.Header{}
	if n := testing.AllocsPerRun(100, func() { Set(h, IETF, rules, 0, true) }); n > 2 {
		t.Errorf("%v allocations per call, want at most 2", n)
	}
}
