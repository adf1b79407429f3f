// Package redact keeps the passwords of service URLs (REDIS_URL,
// DATABASE_URL) out of what the binaries print: parse errors of
// url.Parse, and the errors of libraries built on it, quote the URL
// whole.
package redact

import (
	"net/url"
	"strings"
)

// URL is u with its password replaced by "xxxxx"; a URL that does not
// parse is shown as its scheme alone.
func URL(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Redacted()
	}
	if scheme, _, ok := strings.Cut(u, "://"); ok {
		return scheme + "://(malformed URL, not shown)"
	}
	return "(malformed URL, not shown)"
}

// Error returns err, its message cleared of u's password, also when u
// does not parse; errors.Is and errors.As still see err.
func Error(err error, u string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := msg
	for _, s := range secrets(u) {
		clean = strings.ReplaceAll(clean, s, "xxxxx")
	}
	if clean == msg {
		return err
	}
	return &redacted{msg: clean, err: err}
}

// secrets are the strings of u to hide: its password, raw and decoded.
// The password runs from the first ':' after "://" to the last '@', so a
// password holding '/', '?' or '@' unescaped is hidden whole (and a path
// holding '@' may hide more than the password: never less).
func secrets(u string) []string {
	_, rest, ok := strings.Cut(u, "://")
	if !ok {
		return nil
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return nil
	}
	userinfo := rest[:at]
	_, pw, ok := strings.Cut(userinfo, ":")
	if !ok || pw == "" {
		return nil
	}
	out := []string{pw}
	if dec, err := url.PathUnescape(pw); err == nil && dec != pw {
		out = append(out, dec)
	}
	return out
}

type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }
