package httpport

import (
	"net/http"
	"slices"
	"strings"
)

// CORS lets browsers on the listed origins call the check API (the
// console's "try a check" panel, served by the control plane on another
// origin). Preflights are answered here; other requests get the
// Access-Control headers and go on to next. Credentials are bearer keys
// in a header, never cookies, so none are allowed.
func CORS(origins []string, next http.Handler) http.Handler {
	if len(origins) == 0 {
		return next
	}
	anyOrigin := slices.Contains(origins, "*")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin != "" && (anyOrigin || slices.Contains(origins, origin)) {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			h.Set("Access-Control-Expose-Headers", strings.Join([]string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit",
				"X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"}, ", "))
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				h.Set("Access-Control-Allow-Methods", "POST")
				h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
