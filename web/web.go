// Package web is the console: a tenant's tiers, rules, overrides and keys,
// the analyst dashboard, the operator view and the audit log, as static
// files embedded into the binary (no build step, no CDN). Everything it
// does goes through the public Connect API with the signed-in key.
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Prefix is where the console is served.
const Prefix = "/console/"

// Handler serves the console under Prefix, with a content security
// policy that allows only this origin's scripts, styles and API.
func Handler() http.Handler {
	sub, _ := fs.Sub(static, "static") // the directory is embedded above
	files := http.StripPrefix(Prefix, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src *; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
