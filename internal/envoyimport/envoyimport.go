// Package envoyimport converts an envoyproxy/ratelimit configuration (YAML)
// into a Sluice tenant and rules, so teams can move over.
//
// The domain becomes the tenant slug ('_' becomes '-'). Each descriptor
// entry with a rate_limit becomes a rule of the default tier: entries on
// its path with a value become match conditions; entries without a value
// match any value and partition the counter (key_by), as envoy keeps one
// counter per value. requests_per_unit per unit becomes a fixed window (the
// algorithm envoyproxy/ratelimit uses); shadow_mode becomes a shadow rule.
// Entries marked unlimited produce no rule: with no rule, nothing limits.
package envoyimport

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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
	// Unlimited lists the descriptor paths marked unlimited (no rule).
	Unlimited []string
}

type config struct {
	Domain      string       `yaml:"domain"`
	Descriptors []descriptor `yaml:"descriptors"`
}

type descriptor struct {
	Key            string       `yaml:"key"`
	Value          string       `yaml:"value"`
	RateLimit      *rateLimit   `yaml:"rate_limit"`
	Descriptors    []descriptor `yaml:"descriptors"`
	ShadowMode     bool         `yaml:"shadow_mode"`
	DetailedMetric bool         `yaml:"detailed_metric"` // accepted, no effect
}

type rateLimit struct {
	Unit            string `yaml:"unit"`
	RequestsPerUnit int64  `yaml:"requests_per_unit"`
	Unlimited       bool   `yaml:"unlimited"`
	Name            string `yaml:"name"`
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
			m, kb := append(match[:len(match):len(match)], policy.Match{Key: d.Key, Value: d.Value}), keyBy
			if d.Value == "" {
				m[len(m)-1].Value = policy.AnyValue
				kb = append(keyBy[:len(keyBy):len(keyBy)], d.Key)
			}
			if rl := d.RateLimit; rl != nil {
				if r, ok := p.rule(rl, d.ShadowMode, m, kb, field, &errs); ok {
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
	if rl.Unlimited {
		p.Unlimited = append(p.Unlimited, name)
		return policy.Rule{}, false
	}
	if rl.Name != "" {
		name = rl.Name
	}
	window, ok := units[strings.ToLower(rl.Unit)]
	if !ok {
		*errs = append(*errs, policy.FieldError{Field: field + ".rate_limit.unit", Description: "must be second, minute, hour, day, week, month or year"})
		return policy.Rule{}, false
	}
	r := policy.Rule{Name: name, Match: match, KeyBy: keyBy, Shadow: shadow, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: rl.RequestsPerUnit, Window: window}}
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
	}
	return f
}

func invalid(fields ...policy.FieldError) error {
	return &policy.Error{Code: policy.CodeInvalid, Message: "invalid ratelimit configuration", Fields: fields}
}
