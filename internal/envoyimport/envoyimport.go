// Package envoyimport converts an envoyproxy/ratelimit configuration (YAML)
// into a Sluice tenant and rules, so teams can move over.
//
// The domain becomes the tenant slug ('_' becomes '-'). Each descriptor
// entry with a rate_limit becomes a rule of the default tier: entries on
// its path with a value become match conditions; entries without a value
// match any value and partition the counter (key_by), as envoy keeps one
// counter per value, and so do wildcard values, where each '*' stands for
// any run of characters ("/api/*": a prefix; "*.pdf", "bar*b").
// requests_per_unit per unit becomes a fixed window (the algorithm
// envoyproxy/ratelimit uses); shadow_mode becomes a shadow rule, and
// quota_mode a quota rule (policy.Rule.Quota: on Envoy's rate limit
// service a call is over only when all its quota descriptors are).
// Every rule is exact (policy.Rule.Exact), envoyproxy/ratelimit's lookup:
// a request descriptor meets the one limit at its path, not those of the
// paths above it, and an entry with a value overrides its sibling without
// one. An entry marked unlimited becomes a shadow rule that never rejects
// (policy.MaxLimit per unit), so that it too overrides its default, and so
// does an entry without a rate_limit beside such a default (a whitelist
// entry); one of requests_per_unit 0, which rejects every request, a
// blocking rule (policy.Rule.Block). A rate_limit's replaces become the rule's Replaces:
// the names of the limits it replaces (their rate_limit names, which name
// the rules made of them).
package envoyimport

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/policy"
)

// MaxBytes bounds the configuration read.
const MaxBytes = 1 << 20

// Plan is what an import creates: a tenant and the rules of its default
// tier, in file order.
type Plan struct {
	Tenant policy.Tenant
	Rules  []policy.Rule
	// Unlimited names the rules of descriptor paths marked unlimited, or
	// whitelisted: leaves without a rate_limit, where envoyproxy/ratelimit
	// meets no limit, not even a sibling default's (each has a note).
	Unlimited []string
	// Notes tell where the rules enforce what the file says otherwise
	// than its own limiter would (see package kongimport), and what the
	// deciders need to enforce it.
	Notes []string
}

type config struct {
	Domain      string       `yaml:"domain"`
	Descriptors []descriptor `yaml:"descriptors"`
}

type descriptor struct {
	Key         string       `yaml:"key"`
	Value       string       `yaml:"value"`
	RateLimit   *rateLimit   `yaml:"rate_limit"`
	Descriptors []descriptor `yaml:"descriptors"`
	ShadowMode  bool         `yaml:"shadow_mode"`
	// QuotaMode makes the limit a quota: a call is over only when all its
	// quota descriptors are (policy.Rule.Quota).
	QuotaMode      bool `yaml:"quota_mode"`
	DetailedMetric bool `yaml:"detailed_metric"` // accepted, no effect (metrics)
	ValueToMetric  bool `yaml:"value_to_metric"` // accepted, no effect (metrics)
	// ShareThreshold makes every value a wildcard matches share one
	// counter, where each value has its own otherwise.
	ShareThreshold bool `yaml:"share_threshold"`
	// Metadata is what envoyproxy/ratelimit adds to the dynamic metadata
	// of its answers: accepted with a note, as Sluice sends none.
	Metadata yaml.Node `yaml:"metadata"`
}

type rateLimit struct {
	Unit            string `yaml:"unit"`
	RequestsPerUnit int64  `yaml:"requests_per_unit"`
	Unlimited       bool   `yaml:"unlimited"`
	Name            string `yaml:"name"`
	Replaces        []struct {
		Name string `yaml:"name"`
	} `yaml:"replaces"`
}

var units = map[string]time.Duration{
	"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour,
	"week": 7 * 24 * time.Hour, "month": 30 * 24 * time.Hour, "year": 365 * 24 * time.Hour,
}

// maxDepth bounds descriptor nesting.
const maxDepth = 16

// Parse reads one envoyproxy/ratelimit configuration. Unknown fields are
// errors; every problem is reported as a field error with its path, such as
// "descriptors[2].descriptors[0].rate_limit.unit".
func Parse(r io.Reader) (*Plan, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxBytes {
		return nil, invalid(policy.FieldError{Field: "", Description: fmt.Sprintf("larger than %d bytes", MaxBytes)})
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c config
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, invalid(policy.FieldError{Field: "", Description: "not a ratelimit configuration: " + err.Error()})
	}
	p := &Plan{Tenant: policy.Tenant{Slug: strings.ReplaceAll(strings.ToLower(c.Domain), "_", "-"), Name: c.Domain, DefaultTier: "default"}}
	var errs []policy.FieldError
	if c.Domain == "" {
		errs = append(errs, policy.FieldError{Field: "domain", Description: "required"})
	} else if err := p.Tenant.Validate(); err != nil {
		errs = append(errs, policy.FieldError{Field: "domain", Description: "cannot be a tenant slug (letters, digits, '-' and '_')"})
	}
	names := map[string]bool{}
	var walk func(ds []descriptor, path string, match []policy.Match, keyBy []string, depth int)
	walk = func(ds []descriptor, path string, match []policy.Match, keyBy []string, depth int) {
		seen := make(map[[2]string]bool, len(ds))
		for i, d := range ds {
			field := fmt.Sprintf("%sdescriptors[%d]", path, i)
			if depth > maxDepth {
				errs = append(errs, policy.FieldError{Field: field, Description: fmt.Sprintf("nested deeper than %d", maxDepth)})
				return
			}
			if d.Key == "" {
				errs = append(errs, policy.FieldError{Field: field + ".key", Description: "required"})
				continue
			}
			// envoyproxy/ratelimit refuses a key and value twice among
			// siblings ("duplicate descriptor composite key"), limit or not.
			kv := [2]string{d.Key, d.Value}
			if seen[kv] {
				errs = append(errs, policy.FieldError{Field: field, Description: fmt.Sprintf("key %q with value %q appears twice here", d.Key, d.Value)})
				continue
			}
			seen[kv] = true
			if slices.ContainsFunc(match, func(m policy.Match) bool { return m.Key == d.Key }) {
				// A rule names a key once: matching files=top/* then
				// files=nested/* at the next level cannot be said.
				errs = append(errs, policy.FieldError{Field: field + ".key", Description: fmt.Sprintf("%q is also the key of an enclosing entry; Sluice matches each key once in a request", d.Key)})
				continue
			}
			m, kb := append(match[:len(match):len(match)], policy.Match{Key: d.Key, Value: d.Value}), keyBy
			if d.Value == "" {
				m[len(m)-1].Value = policy.AnyValue
			}
			if v := m[len(m)-1].Value; v == policy.AnyValue || strings.Contains(v, "*") && !d.ShareThreshold {
				kb = append(keyBy[:len(keyBy):len(keyBy)], d.Key) // a counter per value
			}
			if !d.Metadata.IsZero() {
				p.Notes = append(p.Notes, fmt.Sprintf("%s.metadata (line %d) is ignored: Sluice sets no dynamic metadata on Envoy's answers", field, d.Metadata.Line))
			}
			rl := d.RateLimit
			if rl == nil && shadowed(ds, i) {
				// An entry without a limit meets none in
				// envoyproxy/ratelimit, not even a sibling default's that
				// would match its value (a whitelist entry). It is
				// imported as unlimited, which overrides that default as
				// it does.
				rl = &rateLimit{Unlimited: true}
				p.Notes = append(p.Notes, field+" has no rate_limit: a whitelist entry, never limited, imported as an unlimited rule")
			}
			if rl != nil {
				if r, ok := p.rule(rl, d.ShadowMode, m, kb, field, &errs); ok {
					r.Quota = d.QuotaMode && !rl.Unlimited
					if names[r.Name] {
						errs = append(errs, policy.FieldError{Field: field, Description: "the same descriptor path appears twice"})
					}
					names[r.Name] = true
					p.Rules = append(p.Rules, r)
				}
			}
			walk(d.Descriptors, field+".", m, kb, depth+1)
		}
	}
	walk(c.Descriptors, "", nil, nil, 0)
	if len(p.Rules) > policy.MaxRulesPerTier {
		errs = append(errs, policy.FieldError{Field: "descriptors", Description: fmt.Sprintf("more than %d limits", policy.MaxRulesPerTier)})
	}
	if len(errs) > 0 {
		return nil, invalid(errs...)
	}
	return p, nil
}

// shadowed reports whether entry i of siblings ds, without a rate_limit,
// has a sibling with one that would limit its requests were it not there:
// the same key without a value, or with a wildcard its value matches.
func shadowed(ds []descriptor, i int) bool {
	d := ds[i]
	if d.Value == "" {
		return false
	}
	for j, s := range ds {
		if j == i || s.Key != d.Key || s.RateLimit == nil || s.Value == d.Value {
			continue
		}
		if s.Value == "" || strings.Contains(s.Value, "*") && policy.Glob(s.Value, d.Value) {
			return true
		}
	}
	return false
}

// Merge adds other's rules (another file of p's domain) to p's, as
// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG joins the files of a domain;
// the names of rules both have (the same descriptor path, or the same
// rate_limit name) are an error, and so is a tier over the rules' bound.
// p is unchanged on an error.
func (p *Plan) Merge(other *Plan) error {
	names := make(map[string]bool, len(p.Rules))
	for _, r := range p.Rules {
		names[r.Name] = true
	}
	var errs []policy.FieldError
	for _, r := range other.Rules {
		if names[r.Name] {
			errs = append(errs, policy.FieldError{Field: "descriptors", Description: fmt.Sprintf("%s is in both files", r.Name)})
		}
	}
	if n := len(p.Rules) + len(other.Rules); len(errs) == 0 && n > policy.MaxRulesPerTier {
		errs = append(errs, policy.FieldError{Field: "descriptors", Description: fmt.Sprintf("more than %d limits in the domain's files", policy.MaxRulesPerTier)})
	}
	if len(errs) > 0 {
		return invalid(errs...)
	}
	p.Rules = append(p.Rules, other.Rules...)
	p.Unlimited = append(p.Unlimited, other.Unlimited...)
	return nil
}

// rule converts one rate_limit at a descriptor path.
func (p *Plan) rule(rl *rateLimit, shadow bool, match []policy.Match, keyBy []string, field string, errs *[]policy.FieldError) (policy.Rule, bool) {
	parts := make([]string, len(match))
	for i, m := range match {
		parts[i] = m.Key
		if m.Value != policy.AnyValue {
			parts[i] += "=" + m.Value
		}
	}
	name := strings.Join(parts, "/")
	if rl.Name != "" {
		name = rl.Name
	}
	r := policy.Rule{Name: name, Match: match, KeyBy: keyBy, Shadow: shadow, Enabled: true, Exact: true, FailureMode: policy.DefaultFailureMode,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: rl.RequestsPerUnit}}
	window, ok := units[strings.ToLower(rl.Unit)]
	for _, rp := range rl.Replaces {
		r.Replaces = append(r.Replaces, rp.Name)
	}
	switch {
	case rl.Unlimited && ok:
		// envoyproxy/ratelimit refuses the file: a unit says a limit.
		*errs = append(*errs, policy.FieldError{Field: field + ".rate_limit.unit", Description: "must not be given with unlimited: true"})
		return policy.Rule{}, false
	case rl.Unlimited:
		window = time.Second // any: the rule never limits
		r.Shadow, r.Limit = true, policy.MaxLimit
		p.Unlimited = append(p.Unlimited, name)
	case !ok:
		*errs = append(*errs, policy.FieldError{Field: field + ".rate_limit.unit", Description: "must be second, minute, hour, day, week, month or year"})
		return policy.Rule{}, false
	case rl.RequestsPerUnit == 0: // every request rejected: a blocklist entry
		r.Block, r.Limit = true, 1 // the limit applies only if the block is lifted
	}
	r.Window = window
	var pe *policy.Error
	if err := r.Validate(); errors.As(err, &pe) {
		for _, f := range pe.Fields {
			*errs = append(*errs, policy.FieldError{Field: field + "." + envoyField(f.Field), Description: f.Description})
		}
		return policy.Rule{}, false
	}
	return r, true
}

// envoyField names a rule field in the configuration's terms.
func envoyField(f string) string {
	switch {
	case f == "limit":
		return "rate_limit.requests_per_unit"
	case f == "name":
		return "rate_limit.name"
	case strings.HasPrefix(f, "match"), strings.HasPrefix(f, "key_by"):
		return "key"
	case strings.HasPrefix(f, "replaces["): // replaces[i] names replaces[i].name
		return "rate_limit." + f + ".name"
	}
	return f
}

func invalid(fields ...policy.FieldError) error {
	return &policy.Error{Code: policy.CodeInvalid, Message: "invalid ratelimit configuration", Fields: fields}
}
