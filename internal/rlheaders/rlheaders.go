// Package rlheaders writes rate limit response headers, the one place
// their format lives: RateLimit-Policy and RateLimit (IETF
// draft-ietf-httpapi-ratelimit-headers, one item per rule), the
// X-RateLimit-Limit, -Remaining and -Reset of the deciding rule, and
// Retry-After on a rejection.
package rlheaders

import (
	"net/http"
	"strconv"
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
	keys, vals := Values(rules, deciding, allowed)
	for i, k := range keys {
		h[k] = vals[i : i+1 : i+1]
	}
}

// Values returns the headers Set sets, in a fixed order: keys[i], in
// canonical form, has the value vals[i]. keys is shared: it must not be
// modified.
func Values(rules []Rule, deciding int, allowed bool) (keys, vals []string) {
	if len(rules) == 0 {
		return nil, nil
	}
	// Every value is built in one buffer and becomes one string whose
	// parts are the values: a decision's headers cost two allocations, not
	// one or more per value.
	var arr [256]byte
	b, ends, n := build(arr[:0], rules, deciding, allowed)
	all := string(b)
	vals = make([]string, n)
	from := 0
	for i := range n {
		vals[i] = all[from:ends[i]]
		from = ends[i]
	}
	return headerKeys[:n], vals
}

// Append appends the values of the headers Set sets to b, in Values'
// order, and returns b and where each value ends in it: the value of
// Key(i) is b[ends[i-1]:ends[i]] (from len(b) for the first), for i below
// n. It allocates nothing when b has room.
func Append(b []byte, rules []Rule, deciding int, allowed bool) (_ []byte, ends [headerCount]int, n int) {
	if len(rules) == 0 {
		return b, ends, 0
	}
	return build(b, rules, deciding, allowed)
}

// Key is the canonical name of header i of Append's values, as bytes:
// shared, not to be modified.
func Key(i int) []byte { return headerKeyBytes[i] }

// build appends the header values to b (see Append).
func build(b []byte, rules []Rule, deciding int, allowed bool) (_ []byte, ends [headerCount]int, n int) {
	for header := range current + 1 { // one item per rule in each
		for i, r := range rules {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendSfString(b, r.Name)
			switch header {
			case policy:
				b = append(b, ";q="...)
				b = strconv.AppendInt(b, r.Limit, 10)
				if r.Window > 0 {
					b = append(b, ";w="...)
					b = strconv.AppendInt(b, ceilSeconds(r.Window), 10)
				}
			case current:
				b = append(b, ";r="...)
				b = strconv.AppendInt(b, r.Remaining, 10)
				b = append(b, ";t="...)
				b = strconv.AppendInt(b, ceilSeconds(r.ResetAfter), 10)
			}
		}
		ends[header] = len(b)
	}
	n = current + 1
	if deciding >= 0 && deciding < len(rules) {
		d := rules[deciding]
		b = strconv.AppendInt(b, d.Limit, 10)
		ends[xLimit] = len(b)
		b = strconv.AppendInt(b, d.Remaining, 10)
		ends[xRemaining] = len(b)
		b = strconv.AppendInt(b, ceilSeconds(d.ResetAfter), 10)
		ends[xReset] = len(b)
		n = xReset + 1
		if !allowed && d.RetryAfter >= 0 {
			b = strconv.AppendInt(b, max(1, ceilSeconds(d.RetryAfter)), 10)
			ends[retryAfter] = len(b)
			n = retryAfter + 1
		}
	}
	return b, ends, n
}

const (
	policy = iota
	current
	xLimit
	xRemaining
	xReset
	retryAfter
	headerCount
)

// headerKeys are the canonical forms (http.CanonicalHeaderKey) of the
// headers' names, as http.Header.Get looks them up.
var headerKeys = [headerCount]string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining",
	"X-Ratelimit-Reset", "Retry-After"}

var headerKeyBytes = func() (keys [headerCount][]byte) {
	for i, k := range headerKeys {
		keys[i] = []byte(k)
	}
	return keys
}()

// appendSfString appends s as a structured-field string (RFC 8941):
// quoted, with '"' and '\\' escaped and anything else outside printable
// ASCII replaced by '?'.
func appendSfString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
