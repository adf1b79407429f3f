// Package rlheaders writes rate limit response headers, the one place
// their format lives. In the default Style, IETF: RateLimit-Policy and
// RateLimit (draft-ietf-httpapi-ratelimit-headers, one item per rule), the
// X-RateLimit-Limit, -Remaining and -Reset of the deciding rule, and
// Retry-After on a rejection; the other styles are the forms clients
// written against older drafts or other limiters read.
package rlheaders

import (
	"cmp"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Style is a set of headers to answer with.
type Style uint8

// Styles. Every style sends Retry-After on a rejection that can be
// admitted later.
const (
	// IETF: RateLimit-Policy and RateLimit with one named item per rule
	// ("per-client";q=10;w=60 and "per-client";r=9;t=6), and
	// X-RateLimit-Limit, -Remaining and -Reset of the deciding rule.
	IETF Style = iota
	// Draft6: the form of the IETF draft's sixth version, which
	// express-rate-limit's "draft-6" and Kong send: RateLimit-Policy with
	// an unnamed item per rule (10;w=60), RateLimit-Limit, -Remaining and
	// -Reset of the deciding rule, and the X-RateLimit-* headers.
	Draft6
	// X: X-RateLimit-Limit, -Remaining and -Reset of the deciding rule
	// alone, the de facto headers (GitHub's, Twitter's).
	X
	// None: no rate limit header but Retry-After: clients are not told
	// the limits (Kong's hide_client_headers).
	None
)

var styleNames = [...]string{IETF: "ietf", Draft6: "draft-6", X: "x", None: "none"}

func (s Style) String() string {
	if int(s) < len(styleNames) {
		return styleNames[s]
	}
	return "style(" + strconv.Itoa(int(s)) + ")"
}

// ParseStyle reads a style by its name: ietf, draft-6, x or none.
func ParseStyle(name string) (Style, error) {
	for s, n := range styleNames {
		if n == name {
			return Style(s), nil
		}
	}
	return 0, fmt.Errorf("rate limit headers %q: want ietf, draft-6, x or none", name)
}

// Rule is one rule's answer, as the headers need it.
type Rule struct {
	Name string
	// Limit is the most a request can find, which Remaining counts down
	// from: X-RateLimit-Limit.
	Limit     int64
	Remaining int64
	// Quota is the rule's limit per Window (its rate), RateLimit-Policy's
	// q, when it differs from Limit: a token bucket's burst above its
	// rate, a leaky bucket's queue below it. 0: Limit.
	Quota      int64
	Window     time.Duration // 0 when the rule has none (concurrency)
	ResetAfter time.Duration
	// RetryAfter is when the same request would be admitted; negative when
	// it never can be (no Retry-After is sent).
	RetryAfter time.Duration
}

// Set sets the headers of a decision over rules in style, whose deciding
// rule (the one that denied, or the most restrictive) is rules[deciding];
// deciding below 0 sets only the per-rule headers.
func Set(h http.Header, style Style, rules []Rule, deciding int, allowed bool) {
	keys, vals := Values(style, rules, deciding, allowed)
	for i, k := range keys {
		h[k] = vals[i : i+1 : i+1]
	}
}

// Values returns the headers Set sets, in a fixed order: keys[i], in
// canonical form, has the value vals[i]. keys is shared: it must not be
// modified.
func Values(style Style, rules []Rule, deciding int, allowed bool) (keys, vals []string) {
	// Every value is built in one buffer and becomes one string whose
	// parts are the values: a decision's headers cost two allocations, not
	// one or more per value.
	var arr [256]byte
	b, ends, n := build(arr[:0], style, rules, deciding, allowed)
	if n == 0 {
		return nil, nil
	}
	all := string(b)
	vals = make([]string, n)
	from := 0
	for i := range n {
		vals[i] = all[from:ends[i]]
		from = ends[i]
	}
	return styleKeys[known(style)][:n], vals
}

// MaxHeaders bounds the headers of one decision, in any style.
const MaxHeaders = 8

// Append appends the values of the headers Set sets to b, in Values'
// order, and returns b and where each value ends in it: the value of
// Key(style, i) is b[ends[i-1]:ends[i]] (from len(b) for the first), for i
// below n. It allocates nothing when b has room.
func Append(b []byte, style Style, rules []Rule, deciding int, allowed bool) (_ []byte, ends [MaxHeaders]int, n int) {
	return build(b, style, rules, deciding, allowed)
}

// Key is the canonical name of header i of Append's values in style, as
// bytes: shared, not to be modified.
func Key(style Style, i int) []byte { return styleKeyBytes[known(style)][i] }

// known is style, or IETF for a style this package does not know.
func known(style Style) Style {
	if int(style) >= len(styleHeaders) {
		return IETF
	}
	return style
}

// The headers, each a value of one rule (the deciding one) or of every
// rule, or Retry-After.
const (
	policy     = iota // IETF: "name";q=10;w=60 per rule
	current           // IETF: "name";r=9;t=6 per rule
	policy6           // draft 6: 10;w=60 per rule
	limit6            // RateLimit-Limit
	remaining6        // RateLimit-Remaining
	reset6            // RateLimit-Reset
	xLimit            // X-RateLimit-Limit
	xRemaining        // X-RateLimit-Remaining
	xReset            // X-RateLimit-Reset
	retryAfter        // Retry-After
	headerKinds
)

var headerNames = [headerKinds]string{"Ratelimit-Policy", "Ratelimit", "Ratelimit-Policy", "Ratelimit-Limit", "Ratelimit-Remaining",
	"Ratelimit-Reset", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After"}

// styleHeaders are each style's headers in the order they are built: those
// of every rule, then those of the deciding rule, then Retry-After, so
// that the headers a decision lacks (no deciding rule, no retry) are the
// last ones.
var styleHeaders = [...][]int{
	IETF:   {policy, current, xLimit, xRemaining, xReset, retryAfter},
	Draft6: {policy6, limit6, remaining6, reset6, xLimit, xRemaining, xReset, retryAfter},
	X:      {xLimit, xRemaining, xReset, retryAfter},
	None:   {retryAfter},
}

// styleKeys and styleKeyBytes are the canonical forms (as http.Header.Get
// looks them up) of each style's headers' names, in order.
var styleKeys, styleKeyBytes = func() (keys [len(styleHeaders)][]string, bs [len(styleHeaders)][][]byte) {
	for s, hs := range styleHeaders {
		for _, h := range hs {
			keys[s] = append(keys[s], headerNames[h])
			bs[s] = append(bs[s], []byte(headerNames[h]))
		}
	}
	return keys, bs
}()

// build appends the header values to b (see Append). A style it does not
// know is IETF.
func build(b []byte, style Style, rules []Rule, deciding int, allowed bool) (_ []byte, ends [MaxHeaders]int, n int) {
	style = known(style)
	if len(rules) == 0 {
		return b, ends, 0
	}
	hasDeciding := deciding >= 0 && deciding < len(rules)
	var d Rule
	if hasDeciding {
		d = rules[deciding]
	}
	for _, h := range styleHeaders[style] {
		switch h {
		case policy, current, policy6: // one item per rule
			for i, r := range rules {
				if i > 0 {
					b = append(b, ", "...)
				}
				if h != policy6 {
					b = appendSfString(b, r.Name)
				}
				switch h {
				case policy, policy6:
					if h == policy {
						b = append(b, ";q="...)
					}
					b = strconv.AppendInt(b, cmp.Or(r.Quota, r.Limit), 10)
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
		case retryAfter:
			if !hasDeciding || allowed || d.RetryAfter < 0 {
				return b, ends, n
			}
			b = strconv.AppendInt(b, max(1, ceilSeconds(d.RetryAfter)), 10)
		default: // of the deciding rule
			if !hasDeciding {
				return b, ends, n
			}
			switch h {
			case limit6, xLimit:
				b = strconv.AppendInt(b, d.Limit, 10)
			case remaining6, xRemaining:
				b = strconv.AppendInt(b, d.Remaining, 10)
			case reset6, xReset:
				b = strconv.AppendInt(b, ceilSeconds(d.ResetAfter), 10)
			}
		}
		ends[n] = len(b)
		n++
	}
	return b, ends, n
}

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
