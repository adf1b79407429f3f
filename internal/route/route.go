// Package route gives the route descriptor of an HTTP request's path, the
// one spelling of it that rules match, and its host descriptor, for
// Sluice's proxy and the SDK's middleware alike.
package route

import (
	"net"
	"path"
	"strings"
)

// Host returns the host descriptor of a request's Host (HTTP/2's
// :authority): the name in lower case, without its port, a trailing dot
// or an IPv6 address's brackets, so that "Shop.Example:8443" meets the
// rules of "shop.example" and "[::1]:80" those of "::1".
func Host(h string) string {
	if name, _, err := net.SplitHostPort(h); err == nil {
		h = name
	} else if name, ok := strings.CutPrefix(h, "["); ok {
		h = strings.TrimSuffix(name, "]")
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// Normalize returns the route of a request's path p (decoded, as
// url.URL.Path holds it): dot segments resolved and repeated slashes
// merged, as Envoy's normalize_path and merge_slashes do, so that
// "//login", "/./login" and "/static/../login" meet the rules of
// "/login" — an upstream serves them as /login, or not at all — and a
// client cannot step around a route's limit by spelling it otherwise. A
// trailing slash is kept ("/api/" is still under "/api/*"), and so is
// case. A path not starting with "/" (OPTIONS *) is returned as it is. A
// clean path, nearly every request's, is returned without allocating.
func Normalize(p string) string {
	if !strings.HasPrefix(p, "/") {
		return p
	}
	c := path.Clean(p) // p itself when clean
	if strings.HasSuffix(p, "/") && c != "/" {
		if len(c) == len(p)-1 && p[:len(c)] == c {
			return p
		}
		return c + "/"
	}
	return c
}

// Fold returns the route of p as Normalize does, and then in lower case
// and without a trailing slash (but the root's): one spelling for every
// path an upstream that ignores case and a trailing slash serves alike —
// Express's and ASP.NET's defaults, Rails' trailing slash — so that
// "/Login/" meets the rules of "/login" rather than step around them.
// Rules then name routes in lower case.
func Fold(p string) string {
	r := Normalize(p)
	if !strings.HasPrefix(r, "/") { // OPTIONS *: as Normalize leaves it
		return r
	}
	if len(r) > 1 && strings.HasSuffix(r, "/") {
		r = r[:len(r)-1]
	}
	for i := 0; i < len(r); i++ {
		if c := r[i]; c >= 'A' && c <= 'Z' || c >= 0x80 {
			return strings.ToLower(r) // Unicode case too
		}
	}
	return r
}
