package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// The try key goes only to a caller signed in with a key that may have it.
func TestTryKeyOnlyToItsKeys(t *testing.T) {
	h := Handler(Options{TryKeys: map[string]string{"sk_admin_a": "sk_check_a", "": "sk_check_empty"}})
	for _, c := range []struct {
		bearer string
		want   int
	}{{"sk_admin_a", 200}, {"sk_admin_b", 404}, {"", 404}, {"sk_admin_", 404}} {
		r := httptest.NewRequest("GET", Prefix+"try-key", nil)
		if c.bearer != "" {
			r.Header.Set("Authorization", "Bearer "+c.bearer)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("bearer %q: %d, want %d", c.bearer, w.Code, c.want)
			continue
		}
		var body struct{ Key string }
		if c.want == 200 && (json.Unmarshal(w.Body.Bytes(), &body) != nil || body.Key != "sk_check_a" || w.Header().Get("Cache-Control") != "no-store") {
			t.Errorf("bearer %q: %q (%s), want sk_check_a, not stored", c.bearer, w.Body, w.Header().Get("Cache-Control"))
		}
	}
	// Without try keys, nobody gets one.
	r := httptest.NewRequest("GET", Prefix+"try-key", nil)
	r.Header.Set("Authorization", "Bearer sk_admin_a")
	w := httptest.NewRecorder()
	Handler(Options{}).ServeHTTP(w, r)
	if w.Code != http.StatusNotFound {
		t.Errorf("no try keys: %d, want 404", w.Code)
	}
}
