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
	"unsafe"
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
	// express-rate-limit's "draft-6" sends: RateLimit-Policy with
	// an unnamed item per rule (10;w=60), RateLimit-Limit, -Remaining and
	// -Reset of the deciding rule, and the X-RateLimit-* headers.
	Draft6
	// X: X-RateLimit-Limit, -Remaining and -Reset of the deciding rule
	// alone, the de facto headers (GitHub's, Twitter's).
	X
	// None: no rate limit header but Retry-After: clients are not told
	// the limits (Kong's hide_client_headers).
	None
	// Kong: the headers of Kong's rate limiting plugins, for clients
	// written against them: X-RateLimit-Limit-Minute and
	// X-RateLimit-Remaining-Minute for each rule, named after its window
	// (Second, Minute, Hour, Day, Month or Year, else its length in
	// seconds, as rate-limiting-advanced names them: -Limit-30), and
	// RateLimit-Limit, -Remaining and -Reset of the deciding rule.
	Kong
)

var styleNames = [...]string{IETF: "ietf", Draft6: "draft-6", X: "x", None: "none", Kong: "kong"}

func (s Style) String() string {
	if int(s) < len(styleNames) {
		return styleNames[s]
	}
	return "style(" + strconv.Itoa(int(s)) + ")"
}

// ParseStyle reads a style by its name: ietf, draft-6, x, none or kong.
func ParseStyle(name string) (Style, error) {
	for s, n := range styleNames {
		if n == name {
			return Style(s), nil
		}
	}
	return 0, fmt.Errorf("rate limit headers %q: want ietf, draft-6, x, none or kong", name)
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
// canonical form, has the value vals[i]. keys may be shared: it must not
// be modified.
func Values(style Style, rules []Rule, deciding int, allowed bool) (keys, vals []string) {
	return AppendValues(nil, nil, style, rules, deciding, allowed)
}

// AppendValues is Values appending to keys and vals: with room in both,
// a decision's headers cost one allocation. With keys nil, the style's own
// names are returned shared, as Values does.
func AppendValues(keys, vals []string, style Style, rules []Rule, deciding int, allowed bool) ([]string, []string) {
	// Every value is built in one buffer and becomes one string whose
	// parts are the values, not one allocation or more per value.
	var arr [256]byte
	var ks [MaxHeaders][]byte
	b, ends, n := build(arr[:0], &ks, style, rules, deciding, allowed)
	if n == 0 {
		return keys, vals
	}
	return appendSplit(keys, vals, string(b), 0, &ks, ends, n, style)
}

// AppendValuesTo is AppendValues building the values in buf, which it
// returns grown: the values are views of it, valid until buf is written
// again. A caller that keeps its buffer (a pooled call) allocates nothing
// for them; one that keeps the values longer must copy them.
func AppendValuesTo(buf []byte, keys, vals []string, style Style, rules []Rule, deciding int, allowed bool) ([]byte, []string, []string) {
	var ks [MaxHeaders][]byte
	start := len(buf)
	buf, ends, n := build(buf, &ks, style, rules, deciding, allowed)
	if n == 0 || len(buf) == start {
		return buf, keys, vals
	}
	keys, vals = appendSplit(keys, vals, unsafe.String(&buf[start], len(buf)-start), start, &ks, ends, n, style)
	return buf, keys, vals
}

// appendSplit appends the n values of all, which build wrote from offset
// start (each ends[i]-start long), and their keys.
func appendSplit(keys, vals []string, all string, start int, ks *[MaxHeaders][]byte, ends [MaxHeaders]int, n int, style Style) ([]string, []string) {
	if vals == nil {
		vals = make([]string, 0, n)
	}
	from := 0
	for i := range n {
		vals = append(vals, all[from:ends[i]-start])
		from = ends[i] - start
	}
	if known(style) != Kong { // the style's own names, in order
		if keys == nil {
			return styleKeys[known(style)][:n], vals
		}
		return append(keys, styleKeys[known(style)][:n]...), vals
	}
	if keys == nil {
		keys = make([]string, 0, n)
	}
	for i := range n {
		keys = append(keys, string(ks[i]))
	}
	return keys, vals
}

// MaxHeaders bounds the headers of one decision, in any style.
const MaxHeaders = 16

// Append appends the values of the headers Set sets to b, in Values'
// order, and returns b, their canonical names and where each value ends
// in b: the value of keys[i] is b[ends[i-1]:ends[i]] (from len(b) for the
// first), for i below n. The names are shared, not to be modified. It
// allocates nothing when b has room (in the Kong style, for windows of a
// second, minute, hour, day, month or year).
func Append(b []byte, style Style, rules []Rule, deciding int, allowed bool) (_ []byte, keys [MaxHeaders][]byte, ends [MaxHeaders]int, n int) {
	b, ends, n = build(b, &keys, style, rules, deciding, allowed)
	return b, keys, ends, n
}

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
	perWindow = headerKinds // Kong: X-RateLimit-Limit-Minute and -Remaining-Minute per rule
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
	Kong:   {perWindow, limit6, remaining6, reset6, retryAfter},
}

// styleKeys and styleKeyBytes are the canonical forms (as http.Header.Get
// looks them up) of each style's headers' names, in order.
var styleKeys, headerKeyBytes = func() (keys [len(styleHeaders)][]string, bs [headerKinds][]byte) {
	for s, hs := range styleHeaders {
		for _, h := range hs {
			if h != perWindow {
				keys[s] = append(keys[s], headerNames[h])
			}
		}
	}
	for h, name := range headerNames {
		bs[h] = []byte(name)
	}
	return keys, bs
}()

// windowKeys are the Kong style's names of the headers of a rule of a
// named window: X-RateLimit-Limit-Minute, X-RateLimit-Remaining-Minute.
var windowKeys = func() map[time.Duration][2][]byte {
	m := map[time.Duration][2][]byte{}
	for d, unit := range map[time.Duration]string{time.Second: "Second", time.Minute: "Minute", time.Hour: "Hour",
		24 * time.Hour: "Day", 30 * 24 * time.Hour: "Month", 365 * 24 * time.Hour: "Year"} {
		m[d] = [2][]byte{[]byte("X-Ratelimit-Limit-" + unit), []byte("X-Ratelimit-Remaining-" + unit)}
	}
	return m
}()

// keysOf returns the Kong style's names of the headers of a rule of
// window w.
func keysOf(w time.Duration) [2][]byte {
	if k, ok := windowKeys[w]; ok {
		return k
	}
	b := append(make([]byte, 0, 64), "X-Ratelimit-Limit-"...) // one allocation for both
	b = strconv.AppendInt(b, ceilSeconds(w), 10)
	limit := b[:len(b):len(b)]
	b = append(b, "X-Ratelimit-Remaining-"...)
	b = strconv.AppendInt(b, ceilSeconds(w), 10)
	return [2][]byte{limit, b[len(limit):]}
}

// build appends the header values to b and sets their names in keys (see
// Append). A style it does not know is IETF.
func build(b []byte, keys *[MaxHeaders][]byte, style Style, rules []Rule, deciding int, allowed bool) (_ []byte, ends [MaxHeaders]int, n int) {
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
		case perWindow: // two headers per window, of its rule with the least remaining
			for i, r := range rules {
				if r.Window <= 0 || n+2 > MaxHeaders-4 || tighter(rules, i) {
					continue
				}
				k := keysOf(r.Window)
				keys[n] = k[0]
				b = strconv.AppendInt(b, r.Limit, 10)
				ends[n] = len(b)
				keys[n+1] = k[1]
				b = strconv.AppendInt(b, max(0, r.Remaining), 10)
				ends[n+1] = len(b)
				n += 2
			}
			continue
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
		keys[n] = headerKeyBytes[h]
		ends[n] = len(b)
		n++
	}
	return b, ends, n
}

// tighter reports whether another rule of rules[i]'s window has less
// remaining, or as little and comes first.
func tighter(rules []Rule, i int) bool {
	r := rules[i]
	for j, o := range rules {
		if j != i && o.Window == r.Window && (o.Remaining < r.Remaining || o.Remaining == r.Remaining && j < i) {
			return true
		}
	}
	return false
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
