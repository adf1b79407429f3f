package policy

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Descriptor is one key/value pair describing a request, such as
// client_id=abc, route=/login or method=POST.
type Descriptor struct {
	Key   string
	Value string
}

// Descriptors is a request's descriptor list. Lists are short, so lookups
// are linear; the first entry with a key wins.
type Descriptors []Descriptor

// Get returns the value of key and whether it is present.
func (d Descriptors) Get(key string) (string, bool) {
	for i := range d {
		if d[i].Key == key {
			return d[i].Value, true
		}
	}
	return "", false
}

// Validate checks a request's descriptors against the size limits.
func (d Descriptors) Validate() error {
	fe := newFieldErrors()
	if len(d) > MaxDescriptors {
		fe.add("descriptors", "at most %d descriptors", MaxDescriptors)
	}
	for i := range d {
		validateDescriptorKey(fe.index("descriptors", i), "key", d[i].Key)
		if len(d[i].Value) > MaxDescriptorVal {
			fe.index("descriptors", i).add("value", "at most %d bytes", MaxDescriptorVal)
		} else if strings.IndexByte(d[i].Value, 0) >= 0 {
			fe.index("descriptors", i).add("value", "must not contain NUL")
		}
	}
	return fe.err("descriptors")
}

// AnyValue as a Match value matches any value of a present descriptor.
const AnyValue = "*"

// Match is one condition of a rule: the request has descriptor Key, with
// value Value, or with any value when Value is AnyValue, or with a value
// Value matches as a Glob when it holds a '*': P followed by "*" a value
// starting with P (as envoyproxy/ratelimit's wildcard values), "*" followed
// by S one ending with S (*.example.com). A rule's conditions on different
// keys must all hold; of several on one key, any: route=/v1/users* and
// route=/v2/users* is one limit over both paths, counted together.
type Match struct {
	Key   string
	Value string
}

// Holds reports whether value v of the descriptor meets m.
func (m Match) Holds(v string) bool { return Glob(m.Value, v) }

// specificity ranks m's value: a pattern by the bytes that stand for
// themselves (a prefix by its length; AnyValue: 0), a literal value above
// every pattern.
func (m Match) specificity() int {
	if strings.Contains(m.Value, "*") {
		return GlobLiterals(m.Value)
	}
	return math.MaxInt
}

// Rule is one limit of a tier. The zero value is invalid; see Validate.
type Rule struct {
	// ID identifies the rule across config versions; counters are keyed by
	// it, so renaming a rule keeps its counters.
	ID   string
	Name string
	// Match lists conditions that must all hold; empty matches every request.
	Match []Match
	// KeyBy lists the descriptors whose values partition the counter; empty
	// means one counter for the whole tenant. A request without one of
	// them is not counted by the rule (Matches), as envoyproxy/ratelimit.
	KeyBy []string
	Params
	// Shadow rules are evaluated and reported but never reject.
	Shadow      bool
	FailureMode FailureMode
	Enabled     bool
	// Sync, when positive, counts the rule on each decider, reconciling
	// with the shared counters in Redis every Sync: decisions then need no
	// Redis round trip, at the price of a bounded overshoot (several
	// deciders may each admit the same remaining units before they
	// reconcile; see docs/algorithms.md). Zero is strict: Redis decides
	// every request. Token bucket without warm-up, GCRA and fixed window.
	Sync time.Duration
	// Exact narrows Match to envoyproxy/ratelimit's lookup, which `sluice
	// import` gives every rule it makes: the rule applies only to requests
	// whose descriptors are its match keys and no others, and of a tier's
	// exact rules that apply to a request only the most specific counts
	// (see MoreSpecific), so that each Envoy descriptor meets one limit
	// and an entry with a value overrides its default.
	Exact bool
	// Block rejects every request the rule applies to, counting nothing
	// and asking no store (envoyproxy/ratelimit's requests_per_unit: 0,
	// which `sluice import` makes a block): for blocklists, and to stop a
	// client or route at once. Its Params stay, to apply again when Block
	// is cleared. A blocked request never can be admitted: its answer has
	// a limit and remaining of 0 and no retry-after. A shadow block
	// reports what it would reject.
	Block bool
	// Replaces names rules this one replaces (envoyproxy/ratelimit's
	// replaces): when this rule applies, rules of those names do not, in
	// the same request or, on Envoy's rate limit service, in the other
	// descriptors of the same call.
	Replaces []string
	// Quota is envoyproxy/ratelimit's quota_mode, for Envoy's rate limit
	// service: a descriptor a quota rule rejects is answered OVER_LIMIT,
	// but the call is rejected only when every quota descriptor of it is
	// over its limit (and no other rule rejects), so that a request passes
	// while any one of its quotas has room. Elsewhere a quota rule rejects
	// as any rule does: one request, one quota.
	Quota bool
	// Scope is where the limit holds: in each region (the default) or once
	// across regions (ScopeGlobal), for fixed and sliding windows, GCRA
	// and token buckets without warm-up.
	Scope Scope
	// PartitionBy and Partitions (adaptive concurrency only) share the
	// rule's limit between the values of one descriptor, such as a plan
	// or a tenant's customer: the requests of each value hold at least its
	// share while they want it and may borrow what the others leave idle;
	// requests of other values share the rest. The limit itself is never
	// exceeded.
	PartitionBy string
	Partitions  []Partition
	// Message is what a client this rule rejects is told (the 429's
	// problem detail, Envoy's response body, the check answers' message),
	// such as "Free plans make 100 searches an hour: see
	// https://example.com/pricing". Empty: a generic one.
	Message string
}

// Partition is the share of an adaptive concurrency rule's limit that
// the requests whose PartitionBy descriptor is Value hold.
type Partition struct {
	Value string
	Share float64
}

// MaxPartitions bounds Rule.Partitions.
const MaxPartitions = 8

// PartitionOf returns the 1-based index in r.Partitions of the partition
// of requests with descriptors d, 0 for the rest.
func (r *Rule) PartitionOf(d Descriptors) int {
	v, ok := d.Get(r.PartitionBy)
	if !ok {
		return 0
	}
	for i := range r.Partitions {
		if r.Partitions[i].Value == v {
			return i + 1
		}
	}
	return 0
}

// MaxReplaces bounds Rule.Replaces.
const MaxReplaces = 16

// MaxMessageLen bounds Rule.Message, in bytes.
const MaxMessageLen = 512

// Bounds of Rule.Sync.
const (
	MinSync = 10 * time.Millisecond
	MaxSync = time.Minute
)

// Matches reports whether r applies to a request of descriptors d: for
// each key of r's Match, d has that descriptor and one of the key's
// conditions holds for its value; for an exact rule, d has no other
// descriptors; and d has each of r's KeyBy descriptors. A request without
// a rule's key-by descriptor is not counted by that rule (as
// envoyproxy/ratelimit does), rather than all such requests sharing one
// counter of an empty value.
func (r *Rule) Matches(d Descriptors) bool {
	if r.Exact && len(d) != len(r.Match) { // with the keys distinct, as validation makes them
		return false
	}
	for _, k := range r.KeyBy {
		if _, ok := d.Get(k); !ok {
			return false
		}
	}
	for i, m := range r.Match {
		v, ok := d.Get(m.Key)
		if !ok {
			return false
		}
		if !m.Holds(v) && !holdsAnother(r.Match, i, v) {
			return false
		}
	}
	return true
}

// holdsAnother reports whether a condition of ms other than ms[i] on the
// same key holds for v.
func holdsAnother(ms []Match, i int, v string) bool {
	for j := range ms {
		if j != i && ms[j].Key == ms[i].Key && ms[j].Holds(v) {
			return true
		}
	}
	return false
}

// MoreSpecific reports whether exact rule s, matching the same request as
// exact rule r, is the more specific of the two: at the first of r's match
// keys where their values differ in kind, s has a value where r has a
// prefix or any value, or a longer prefix, or a prefix where r takes any.
// This is envoyproxy/ratelimit's descriptor tree walk, which at each entry
// prefers the node with the entry's value, then a wildcard value, then the
// node for any value (of two matching wildcards it takes the first listed,
// Sluice the longer); unlike it, a request is never left without a limit
// because a more specific path had none further down.
func (r *Rule) MoreSpecific(s *Rule) bool {
	for _, m := range r.Match {
		for _, n := range s.Match {
			if n.Key != m.Key {
				continue
			}
			if a, b := m.specificity(), n.specificity(); a != b {
				return b > a
			}
		}
	}
	return false
}

// Validate returns an *Error with CodeInvalid listing every invalid field, or nil.
func (r *Rule) Validate() error {
	fe := newFieldErrors()
	r.validate(fe)
	return fe.err("rule")
}

func (r *Rule) validate(fe fieldErrors) {
	validateName(fe, "name", r.Name)
	if len(r.ID) > MaxNameLen {
		fe.add("id", "at most %d bytes", MaxNameLen)
	}
	if len(r.Match) > MaxMatchers {
		fe.add("match", "at most %d conditions", MaxMatchers)
	}
	seen := make(map[Match]bool, len(r.Match))
	keys := make(map[string]bool, len(r.Match))
	for i, m := range r.Match {
		mf := fe.index("match", i)
		validateDescriptorKey(mf, "key", m.Key)
		switch {
		case seen[m]:
			mf.add("value", "%s=%s appears twice", m.Key, m.Value)
		case keys[m.Key] && r.Exact:
			mf.add("key", "%q appears twice: an exact rule has one condition per key", m.Key)
		}
		seen[m], keys[m.Key] = true, true
		if m.Value == "" {
			mf.add("value", "must not be empty (use %q for any value)", AnyValue)
		} else if len(m.Value) > MaxDescriptorVal || !utf8.ValidString(m.Value) {
			mf.add("value", "must be valid UTF-8 of at most %d bytes", MaxDescriptorVal)
		}
	}
	if len(r.KeyBy) > MaxKeyBy {
		fe.add("key_by", "at most %d descriptors", MaxKeyBy)
	}
	keys = make(map[string]bool, len(r.KeyBy))
	for i, k := range r.KeyBy {
		validateDescriptorKey(fe, "key_by["+strconv.Itoa(i)+"]", k)
		if keys[k] {
			fe.add("key_by["+strconv.Itoa(i)+"]", "%q appears twice", k)
		}
		keys[k] = true
	}
	if len(r.Replaces) > MaxReplaces {
		fe.add("replaces", "at most %d rule names", MaxReplaces)
	}
	for i, n := range r.Replaces {
		validateName(fe, "replaces["+strconv.Itoa(i)+"]", n)
		if n == r.Name {
			fe.add("replaces["+strconv.Itoa(i)+"]", "a rule cannot replace itself")
		}
	}
	r.Params.validate(fe)
	r.validatePartitions(fe)
	switch {
	case len(r.Message) > MaxMessageLen:
		fe.add("message", "at most %d bytes", MaxMessageLen)
	case !utf8.ValidString(r.Message) || strings.ContainsFunc(r.Message, unicode.IsControl):
		fe.add("message", "must be valid UTF-8 without control characters (one line)")
	}
	if !r.FailureMode.Valid() {
		fe.add("failure_mode", "must be open, closed or local")
	}
	switch {
	case r.Sync == 0:
	case r.Sync < MinSync || r.Sync > MaxSync || r.Sync%time.Millisecond != 0:
		fe.add("sync", "must be 0 (strict) or whole milliseconds from %v to %v", MinSync, MaxSync)
	case !(r.Algorithm == TokenBucket && r.WarmUp == 0 || r.Algorithm == GCRA || r.Algorithm == FixedWindow):
		fe.add("sync", "local counting applies to token_bucket (without warm_up), gcra and fixed_window")
	case r.Calendar != CalendarNone:
		fe.add("sync", "local counting does not apply to calendar windows")
	}
	switch {
	case r.Scope == ScopeRegion:
	case r.Scope != ScopeGlobal:
		fe.add("scope", "must be region or global")
	case !(r.Algorithm == FixedWindow || r.Algorithm == SlidingWindow || r.Algorithm == GCRA || r.Algorithm == TokenBucket && r.WarmUp == 0):
		// A window's count merges across regions as one number per region,
		// and a meter's debt takes the other regions' admissions; a
		// queue's, a log's, a warming bucket's or a lease's state does not.
		fe.add("scope", "global applies to fixed_window, sliding_window, gcra and token_bucket without warm_up: their counts merge across regions")
	case r.Sync != 0:
		fe.add("scope", "global does not combine with sync: the region's own count must be exact")
	}
}

func (r *Rule) validatePartitions(fe fieldErrors) {
	switch {
	case r.PartitionBy == "" && len(r.Partitions) == 0:
		return
	case r.Algorithm != AdaptiveConcurrency:
		fe.add("partitions", "apply only to adaptive_concurrency")
		return
	case len(r.Partitions) == 0 || len(r.Partitions) > MaxPartitions:
		fe.add("partitions", "1 to %d partitions, with partition_by", MaxPartitions)
	}
	validateDescriptorKey(fe, "partition_by", r.PartitionBy)
	seen := make(map[string]bool, len(r.Partitions))
	total := 0.0
	for i, p := range r.Partitions {
		pf := fe.index("partitions", i)
		switch {
		case p.Value == "" || len(p.Value) > MaxDescriptorVal || !utf8.ValidString(p.Value):
			pf.add("value", "must be valid UTF-8 of 1 to %d bytes", MaxDescriptorVal)
		case seen[p.Value]:
			pf.add("value", "%q appears twice", p.Value)
		}
		seen[p.Value] = true
		if !(p.Share > 0 && p.Share <= 1) {
			pf.add("share", "must be above 0 and at most 1")
		}
		total += p.Share
	}
	if total > 1+1e-9 {
		fe.add("partitions", "the shares add up to %.3g, over 1", total)
	}
}

func validateName(fe fieldErrors, field, s string) {
	switch {
	case s == "":
		fe.add(field, "must not be empty")
	case len(s) > MaxNameLen:
		fe.add(field, "at most %d bytes", MaxNameLen)
	case !utf8.ValidString(s):
		fe.add(field, "must be valid UTF-8")
	}
}

// validateDescriptorKey accepts 1 to MaxDescriptorKey bytes of
// [A-Za-z0-9_.-], the characters Envoy descriptor keys use in practice.
func validateDescriptorKey(fe fieldErrors, field, k string) {
	if k == "" || len(k) > MaxDescriptorKey {
		fe.add(field, "must be 1 to %d characters", MaxDescriptorKey)
		return
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			fe.add(field, "may contain only letters, digits, '_', '-' and '.'")
			return
		}
	}
}

// ClientKey names, for people, whom a rule counted a request against: the
// value of its one key-by descriptor, or "key=value" pairs joined by ", "
// for several; "" for a rule without key-by (one counter for everyone).
func ClientKey(r *Rule, d Descriptors) string {
	if len(r.KeyBy) == 1 {
		v, _ := d.Get(r.KeyBy[0])
		return v
	}
	var b strings.Builder
	for i, k := range r.KeyBy {
		if i > 0 {
			b.WriteString(", ")
		}
		v, _ := d.Get(k)
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(v)
	}
	return b.String()
}

// AppendCounterKey appends the counter key of rule r for tenant and the
// request descriptors d to dst and returns the extended slice.
//
// With AppendRequestKey, it is the one place keys are built. The form is
//
//	{<tenant>|<len>:<value>|...}<rule id>
//
// The braces make a Redis Cluster hash tag of the tenant and the key-by
// values, so rules partitioned by the same values share a slot. Values are
// length-prefixed, so no two value lists give the same key whatever bytes
// they contain.
func AppendCounterKey(dst []byte, tenant string, r *Rule, d Descriptors) []byte {
	dst = append(dst, '{')
	dst = append(dst, tenant...)
	for _, k := range r.KeyBy {
		v, _ := d.Get(k)
		dst = appendKeyValue(dst, v)
	}
	dst = append(dst, '}')
	return append(dst, r.ID...)
}

// AppendRequestKey appends the counter key of a limit that partitions by
// every one of the request descriptors d, in their order, duplicates
// included (a limit the request brings, such as Envoy's per-descriptor
// override); id must name the descriptors' keys, as a rule's ID stands
// for its key-by list. The form is AppendCounterKey's.
func AppendRequestKey(dst []byte, tenant, id string, d Descriptors) []byte {
	dst = append(dst, '{')
	dst = append(dst, tenant...)
	for i := range d {
		dst = appendKeyValue(dst, d[i].Value)
	}
	dst = append(dst, '}')
	return append(dst, id...)
}

func appendKeyValue(dst []byte, v string) []byte {
	dst = append(dst, '|')
	dst = strconv.AppendInt(dst, int64(len(v)), 10)
	dst = append(dst, ':')
	return append(dst, v...)
}

// FitValue is v as a store of at most max bytes of text without NUL can
// hold it, for values taken from requests as they come (a path, an
// identity, a client key): NUL shown as U+FFFD, and a value over max cut
// at a character's edge and ended with "~" and 32 hex digits of its
// SHA-256, so that prefixes still match it and two long values stay
// apart. max is at least 64.
func FitValue(v string, max int) string {
	if len(v) <= max && strings.IndexByte(v, 0) < 0 {
		return v
	}
	v = strings.ReplaceAll(v, "\x00", "\uFFFD")
	if len(v) <= max {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	cut := max - 33
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return v[:cut] + "~" + hex.EncodeToString(sum[:16])
}

// SameAs reports whether r and o are the same rule: every field equal,
// their match conditions in any order, an empty list as none.
func (r Rule) SameAs(o Rule) bool {
	return r.ID == o.ID && r.Name == o.Name && sameMatches(r.Match, o.Match) && slices.Equal(r.KeyBy, o.KeyBy) &&
		r.Params == o.Params && r.Shadow == o.Shadow && r.FailureMode == o.FailureMode && r.Enabled == o.Enabled &&
		r.Sync == o.Sync && r.Exact == o.Exact && r.Block == o.Block && r.Quota == o.Quota && r.Scope == o.Scope && slices.Equal(r.Replaces, o.Replaces) && r.Message == o.Message &&
		r.PartitionBy == o.PartitionBy && slices.Equal(r.Partitions, o.Partitions)
}

// sameMatches reports whether a and b hold the same conditions, in any
// order.
func sameMatches(a, b []Match) bool {
	if len(a) != len(b) {
		return false
	}
	order := func(x, y Match) int { return cmp.Or(strings.Compare(x.Key, y.Key), strings.Compare(x.Value, y.Value)) }
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, order)
	slices.SortFunc(b, order)
	return slices.Equal(a, b)
}
