// Package web is the console: a tenant's tiers, rules, overrides and keys,
// the analyst dashboard, the operator view and the audit log, as static
// files embedded into the binary (no build step, no CDN). Everything it
// does goes through the public Connect API with the signed-in key.
package web

import (
	"crypto/subtle"
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var static embed.FS

// Prefix is where the console is served.
const Prefix = "/console/"

// Options tunes the console.
type Options struct {
	// TryKeys fill the try panel: a check key for each key that may ask
	// for it (sluice dev gives the demo tenant's check key to its admin
	// and viewer keys). None fills nothing, and the key is typed in.
	TryKeys map[string]string
}

// Handler serves the console under Prefix, with a content security
// policy that allows only this origin's scripts, styles and API.
func Handler(opts Options) http.Handler {
	sub, _ := fs.Sub(static, "static") // the directory is embedded above
	files := http.StripPrefix(Prefix, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == Prefix+"try-key" {
			serveTryKey(w, r, opts.TryKeys)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src *; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// serveTryKey answers the check key that fills the try panel of a console
// signed in with the bearer key, as {"key": …}; 404 to any other caller.
func serveTryKey(w http.ResponseWriter, r *http.Request, keys map[string]string) {
	signedIn, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	for k, check := range keys {
		if subtle.ConstantTimeCompare([]byte(k), []byte(signedIn)) == 1 && signedIn != "" {
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]string{"key": check})
			return
		}
	}
	http.NotFound(w, r)
}
