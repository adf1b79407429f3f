// Package rlheaders writes rate limit response headers, the one place
// their format lives: RateLimit-Policy and RateLimit (IETF
// draft-ietf-httpapi-ratelimit-headers, one item per rule), the
// X-RateLimit-Limit, -Remaining and -Reset of the deciding rule, and
// Retry-After on a rejection.
package rlheaders

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Rule is one rule's answer, as the headers need it.
type Rule struct {
	Name       string
	Limit      int64
	Remaining  int64
	Window     time.Duration // 0 when the rule has none (concurrency)
	ResetAfter time.Duration
	// RetryAfter is when the same request would be admitted; negative when
	// it never can be (no Retry-After is sent).
	RetryAfter time.Duration
}

// Set sets the headers of a decision over rules whose deciding rule (the
// one that denied, or the most restrictive) is rules[deciding]; deciding
// below 0 sets only the per-rule headers.
func Set(h http.Header, rules []Rule, deciding int, allowed bool) {
	if len(rules) == 0 {
		return
	}
	pol := make([]string, 0, len(rules))
	cur := make([]string, 0, len(rules))
	for _, r := range rules {
		name := sfString(r.Name)
		item := name + ";q=" + strconv.FormatInt(r.Limit, 10)
		if r.Window > 0 {
			item += ";w=" + strconv.FormatInt(ceilSeconds(r.Window), 10)
		}
		pol = append(pol, item)
		cur = append(cur, name+";r="+strconv.FormatInt(r.Remaining, 10)+";t="+strconv.FormatInt(ceilSeconds(r.ResetAfter), 10))
	}
	h.Set("RateLimit-Policy", strings.Join(pol, ", "))
	h.Set("RateLimit", strings.Join(cur, ", "))
	if deciding < 0 || deciding >= len(rules) {
		return
	}
	d := rules[deciding]
	h.Set("X-RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(ceilSeconds(d.ResetAfter), 10))
	if !allowed && d.RetryAfter >= 0 {
		h.Set("Retry-After", strconv.FormatInt(max(1, ceilSeconds(d.RetryAfter)), 10))
	}
}

// sfString quotes s as a structured-field string (RFC 8941): printable
// ASCII, with '"' and '\' escaped; other bytes become '?'.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
