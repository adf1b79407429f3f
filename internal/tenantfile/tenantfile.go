// Package tenantfile is Sluice's own file format for one tenant's
// configuration: its tiers with their rules in order, and its overrides.
// `sluice export` writes it and `sluice apply` makes a tenant match it, so
// that a tenant's limits can live in Git and be reviewed like code.
//
//	tenant: acme
//	default_tier: free
//	tiers:
//	  - name: free
//	    rules:
//	      - name: per-client
//	        key_by: [client_id]
//	        algorithm: token_bucket
//	        limit: 100
//	        window: 1m
//	overrides:
//	  - identifier: alice
//	    rule: free/per-client
//	    limit: 1000 # the rule's algorithm and window
//
// A file is checked whole before anything is applied: unknown fields are
// refused with their line, and every invalid value is reported with its
// path in the file (tiers[0].rules[1].limit), by the same validation the
// control plane applies.
package tenantfile

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/policy"
)

// File is one tenant's configuration.
type File struct {
	// Tenant is the tenant's slug.
	Tenant      string `yaml:"tenant" json:"tenant"`
	Name        string `yaml:"name,omitempty" json:"name,omitempty"`
	DefaultTier string `yaml:"default_tier,omitempty" json:"default_tier,omitempty"`
	// Shadow puts every rule of the tenant in shadow: decisions are
	// reported, none rejects (a first rollout).
	Shadow    bool       `yaml:"shadow,omitempty" json:"shadow,omitempty"`
	Tiers     []Tier     `yaml:"tiers" json:"tiers"`
	Overrides []Override `yaml:"overrides,omitempty" json:"overrides,omitempty"`
}

// Tier is a tier and its rules, in the order they are evaluated.
type Tier struct {
	Name  string `yaml:"name" json:"name"`
	Rules []Rule `yaml:"rules,omitempty" json:"rules,omitempty"`
}

// Params are a limit's parameters (see docs/algorithms.md).
type Params struct {
	Algorithm   string   `yaml:"algorithm,omitempty" json:"algorithm,omitempty"`
	Limit       int64    `yaml:"limit,omitempty" json:"limit,omitempty"`
	Window      Duration `yaml:"window,omitempty" json:"window,omitempty"`
	Burst       int64    `yaml:"burst,omitempty" json:"burst,omitempty"`
	WarmUp      Duration `yaml:"warm_up,omitempty" json:"warm_up,omitempty"`
	ColdFactor  float64  `yaml:"cold_factor,omitempty" json:"cold_factor,omitempty"`
	MaxDelay    Duration `yaml:"max_delay,omitempty" json:"max_delay,omitempty"`
	Granularity Duration `yaml:"granularity,omitempty" json:"granularity,omitempty"`
	LeaseTTL    Duration `yaml:"lease_ttl,omitempty" json:"lease_ttl,omitempty"`
	Calendar    string   `yaml:"calendar,omitempty" json:"calendar,omitempty"`     // day, week, month or year: fixed_window only, without window
	TimeZone    string   `yaml:"time_zone,omitempty" json:"time_zone,omitempty"`   // with calendar: the IANA zone of its midnights (UTC unless given)
	Floor       int64    `yaml:"floor,omitempty" json:"floor,omitempty"`           // adaptive_concurrency: the least its limit falls to
	Adaptation  string   `yaml:"adaptation,omitempty" json:"adaptation,omitempty"` // adaptive_concurrency: gradient (the default) or aimd
}

// Rule is a rule. Match is a map: its conditions all hold or the rule
// does not apply, in no order; a key with a list of values holds when
// one of them does (route: [/v1/users*, /v2/users*]).
type Rule struct {
	Name   string            `yaml:"name" json:"name"`
	Match  map[string]Values `yaml:"match,omitempty" json:"match,omitempty"`
	KeyBy  []string          `yaml:"key_by,omitempty" json:"key_by,omitempty"`
	Params `yaml:",inline"`
	Shadow bool `yaml:"shadow,omitempty" json:"shadow,omitempty"`
	// Disabled rules are kept but not evaluated (rules are enabled unless
	// the file says otherwise).
	Disabled    bool     `yaml:"disabled,omitempty" json:"disabled,omitempty"`
	FailureMode string   `yaml:"failure_mode,omitempty" json:"failure_mode,omitempty"` // local (default), open or closed
	Sync        Duration `yaml:"sync,omitempty" json:"sync,omitempty"`
	Exact       bool     `yaml:"exact,omitempty" json:"exact,omitempty"`
	Block       bool     `yaml:"block,omitempty" json:"block,omitempty"`
	Replaces    []string `yaml:"replaces,omitempty" json:"replaces,omitempty"`
	Message     string   `yaml:"message,omitempty" json:"message,omitempty"` // what a client it rejects is told
	Quota       bool     `yaml:"quota,omitempty" json:"quota,omitempty"`     // envoyproxy/ratelimit's quota_mode
	Scope       string   `yaml:"scope,omitempty" json:"scope,omitempty"`     // region (the default) or global
	// PartitionBy and Partitions share an adaptive_concurrency limit
	// between the values of a descriptor: value: share.
	PartitionBy string             `yaml:"partition_by,omitempty" json:"partition_by,omitempty"`
	Partitions  map[string]float64 `yaml:"partitions,omitempty" json:"partitions,omitempty"`
}

// Override is a per-client exception: it moves the client to Tier, or
// gives it its own Params for Rule, or blocks it (on Rule only, when
// named).
type Override struct {
	Identifier    string `yaml:"identifier" json:"identifier"`
	DescriptorKey string `yaml:"descriptor_key,omitempty" json:"descriptor_key,omitempty"` // default client_id
	Tier          string `yaml:"tier,omitempty" json:"tier,omitempty"`
	// Rule names a rule as "tier/rule".
	Rule      string `yaml:"rule,omitempty" json:"rule,omitempty"`
	Block     bool   `yaml:"block,omitempty" json:"block,omitempty"`
	Params    `yaml:",inline"`
	ExpiresAt time.Time `yaml:"expires_at,omitempty" json:"expires_at,omitzero"`
}

// MaxBytes bounds a file: a tenant's configuration at the control plane's
// own limits is far smaller.
const MaxBytes = 8 << 20

// Parse reads and checks a file. Errors name the line (YAML) or the path
// of each invalid field (a *policy.Error), unknown fields among them.
func Parse(data []byte) (*File, error) {
	if len(data) > MaxBytes {
		return nil, fmt.Errorf("tenant file: %d bytes, at most %d", len(data), MaxBytes)
	}
	// The document first, for the fields no type has: they are reported
	// by their path, among the file's other errors.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("tenant file: %w", err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); err == nil {
		return nil, errors.New("tenant file: one tenant per file, and this one holds another document")
	}
	unknown := unknownFields(&doc, reflect.TypeFor[File](), "", nil)
	var f File
	if err := doc.Decode(&f); err != nil {
		return nil, fmt.Errorf("tenant file: %w", err)
	}
	f.inheritOverrideParams()
	err := f.Validate()
	if len(unknown) == 0 {
		if err != nil {
			return nil, err
		}
		return &f, nil
	}
	all := &policy.Error{Code: policy.CodeInvalid, Message: "invalid tenant file", Fields: unknown}
	var pe *policy.Error
	if errors.As(err, &pe) {
		all.Fields = append(all.Fields, pe.Fields...)
	}
	return nil, all
}

// inheritOverrideParams completes each override that changes its rule's
// parameters without naming an algorithm from the rule's
// (policy.Params.Inherit), as the control plane completes such overrides:
// the file then shows what it asks for, as `sluice export` would write it.
func (f *File) inheritOverrideParams() {
	for i := range f.Overrides {
		o := &f.Overrides[i]
		r := f.rule(o.Rule)
		if r == nil || o.Block || o.Algorithm != "" || o.Params == (Params{}) {
			continue
		}
		base, fields := r.Params.policy()
		partial, pfields := o.Params.policy()
		// Its only error is its missing algorithm; others are reported
		// at the rule or at the override.
		if fields != nil || len(pfields) != 1 || pfields[0].Field != "algorithm" {
			continue
		}
		o.Params = paramsFrom(partial.Inherit(base))
	}
}

// Validate checks every field as the control plane would, and that names
// are unique and references resolve within the file, returning a
// *policy.Error listing every invalid field by its path.
func (f *File) Validate() error {
	var fields []policy.FieldError
	add := func(path string, err error) {
		var pe *policy.Error
		if errors.As(err, &pe) && len(pe.Fields) > 0 {
			for _, fe := range pe.Fields {
				fields = append(fields, policy.FieldError{Field: path + "." + fe.Field, Description: fe.Description})
			}
		} else if err != nil {
			fields = append(fields, policy.FieldError{Field: path, Description: err.Error()})
		}
	}
	t := policy.Tenant{Slug: f.Tenant, Name: f.Name, DefaultTier: f.DefaultTier}
	if t.Name == "" {
		t.Name = t.Slug // the control plane's default
	}
	if err := t.Validate(); err != nil {
		for _, fe := range err.(*policy.Error).Fields {
			name := map[string]string{"slug": "tenant", "default_tier": "default_tier", "name": "name"}[fe.Field]
			fields = append(fields, policy.FieldError{Field: name, Description: fe.Description})
		}
	}
	tiers := map[string]bool{}
	for i, tf := range f.Tiers {
		path := fmt.Sprintf("tiers[%d]", i)
		tier, err := tf.Policy()
		add(path, err)
		add(path, tier.Validate())
		if tiers[tf.Name] {
			fields = append(fields, policy.FieldError{Field: path + ".name", Description: fmt.Sprintf("%q names another tier of this file", tf.Name)})
		}
		tiers[tf.Name] = true
	}
	if f.DefaultTier != "" && !tiers[f.DefaultTier] {
		fields = append(fields, policy.FieldError{Field: "default_tier", Description: fmt.Sprintf("no tier %q in this file", f.DefaultTier)})
	}
	for i, o := range f.Overrides {
		path := fmt.Sprintf("overrides[%d]", i)
		if o.Rule != "" && f.rule(o.Rule) == nil {
			fields = append(fields, policy.FieldError{Field: path + ".rule", Description: fmt.Sprintf("no rule %q in this file (write tier/rule)", o.Rule)})
		}
		if o.Tier != "" && !tiers[o.Tier] {
			fields = append(fields, policy.FieldError{Field: path + ".tier", Description: fmt.Sprintf("no tier %q in this file", o.Tier)})
		}
		po, err := o.Policy("rule") // a stand-in id: the rule is resolved above
		add(path, err)
		add(path, po.Validate())
	}
	if len(fields) > 0 {
		// Once per field: an unknown algorithm is also a missing one to
		// the domain's validation.
		seen := map[string]bool{}
		out := fields[:0]
		for _, fe := range fields {
			if fe.Field = f.fileField(fe.Field); !seen[fe.Field] {
				seen[fe.Field] = true
				out = append(out, fe)
			}
		}
		fields = out
		return &policy.Error{Code: policy.CodeInvalid, Message: "invalid tenant file", Fields: fields}
	}
	return nil
}

// matchField finds a rule's match condition in a validation's path.
var matchField = regexp.MustCompile(`^tiers\[(\d+)\]\.rules\[(\d+)\]\.match\[(\d+)\]`)

// fileField renames a path of the domain's validation to the file's
// names: parameters are inline, a rule's match conditions are a map, and
// an override names its rule.
func (f *File) fileField(path string) string {
	path = strings.Replace(path, ".params.", ".", 1)
	path = strings.TrimSuffix(path, ".params")
	if m := matchField.FindStringSubmatch(path); m != nil {
		ti, _ := strconv.Atoi(m[1])
		ri, _ := strconv.Atoi(m[2])
		mi, _ := strconv.Atoi(m[3])
		match := f.Tiers[ti].Rules[ri].Match
		for _, k := range sortedKeys(match) {
			if mi >= len(match[k]) {
				mi -= len(match[k])
				continue
			}
			name := "." + k
			if len(match[k]) > 1 {
				name += "[" + strconv.Itoa(mi) + "]"
			}
			path = strings.Replace(path, m[0], m[0][:len(m[0])-len(m[3])-2]+name, 1)
			path = strings.TrimSuffix(strings.TrimSuffix(path, ".key"), ".value")
			break
		}
	}
	if strings.HasPrefix(path, "overrides[") {
		if p, ok := strings.CutSuffix(path, ".rule_id"); ok {
			path = p + ".rule"
		}
	}
	return path
}

// rule returns the rule named "tier/rule", or nil.
func (f *File) rule(ref string) *Rule {
	tier, name, ok := strings.Cut(ref, "/")
	if !ok {
		return nil
	}
	for i := range f.Tiers {
		if f.Tiers[i].Name != tier {
			continue
		}
		for j := range f.Tiers[i].Rules {
			if f.Tiers[i].Rules[j].Name == name {
				return &f.Tiers[i].Rules[j]
			}
		}
	}
	return nil
}

// TenantPolicy is the file's tenant, without an id.
func (f *File) TenantPolicy() policy.Tenant {
	t := policy.Tenant{Slug: f.Tenant, Name: f.Name, DefaultTier: f.DefaultTier, Shadow: f.Shadow}
	if t.Name == "" {
		t.Name = t.Slug
	}
	return t
}

// Policy is the tier with its rules, without ids. An unknown algorithm or
// failure mode is an error naming its field.
func (t Tier) Policy() (policy.Tier, error) {
	out := policy.Tier{Name: t.Name}
	var fields []policy.FieldError
	for i, r := range t.Rules {
		pr, err := r.Policy()
		var pe *policy.Error
		if errors.As(err, &pe) {
			for _, fe := range pe.Fields {
				fields = append(fields, policy.FieldError{Field: fmt.Sprintf("rules[%d].%s", i, fe.Field), Description: fe.Description})
			}
		}
		out.Rules = append(out.Rules, pr)
	}
	if len(fields) > 0 {
		return out, &policy.Error{Code: policy.CodeInvalid, Message: "invalid tier", Fields: fields}
	}
	return out, nil
}

// Policy is the rule, without an id.
func (r Rule) Policy() (policy.Rule, error) {
	params, fields := r.Params.policy()
	mode, err := policy.ParseFailureMode(r.FailureMode)
	if err != nil {
		fields = append(fields, policy.FieldError{Field: "failure_mode", Description: "must be open, closed or local"})
	}
	scope, err := policy.ParseScope(r.Scope)
	if err != nil {
		fields = append(fields, policy.FieldError{Field: "scope", Description: "must be region or global"})
	}
	out := policy.Rule{Name: r.Name, KeyBy: r.KeyBy, Params: params, Shadow: r.Shadow, FailureMode: mode, Enabled: !r.Disabled,
		Sync: time.Duration(r.Sync), Exact: r.Exact, Block: r.Block, Quota: r.Quota, Replaces: r.Replaces, Message: r.Message, Scope: scope,
		PartitionBy: r.PartitionBy}
	for _, v := range slices.Sorted(maps.Keys(r.Partitions)) { // in the order of their values: the same on every apply
		out.Partitions = append(out.Partitions, policy.Partition{Value: v, Share: r.Partitions[v]})
	}
	for _, k := range sortedKeys(r.Match) {
		if len(r.Match[k]) == 0 {
			fields = append(fields, policy.FieldError{Field: "match." + k, Description: "at least one value"})
		}
		for _, v := range r.Match[k] {
			out.Match = append(out.Match, policy.Match{Key: k, Value: v})
		}
	}
	if len(fields) > 0 {
		return out, &policy.Error{Code: policy.CodeInvalid, Message: "invalid rule", Fields: fields}
	}
	return out, nil
}

func sortedKeys(m map[string]Values) []string { return slices.Sorted(maps.Keys(m)) }

// policy is p in the domain's terms, and the fields whose names are
// not names of anything.
func (p Params) policy() (policy.Params, []policy.FieldError) {
	out := policy.Params{Limit: p.Limit, Window: time.Duration(p.Window), Burst: p.Burst, WarmUp: time.Duration(p.WarmUp),
		ColdFactor: p.ColdFactor, MaxDelay: time.Duration(p.MaxDelay), Granularity: time.Duration(p.Granularity), LeaseTTL: time.Duration(p.LeaseTTL),
		TimeZone: p.TimeZone, Floor: p.Floor}
	var fields []policy.FieldError
	if a, err := policy.ParseAdaptation(p.Adaptation); err != nil {
		fields = append(fields, policy.FieldError{Field: "adaptation", Description: "must be gradient or aimd"})
	} else {
		out.Adaptation = a
	}
	alg, err := policy.ParseAlgorithm(p.Algorithm)
	if err != nil {
		fields = append(fields, policy.FieldError{Field: "algorithm", Description: "must be one of " + policy.AlgorithmNames})
	}
	cal, err := policy.ParseCalendar(p.Calendar)
	if err != nil {
		fields = append(fields, policy.FieldError{Field: "calendar", Description: "must be day, week, month or year"})
	}
	out.Algorithm, out.Calendar = alg, cal
	return out, fields
}

// Policy is the override, without an id, its rule the one of ruleID.
func (o Override) Policy(ruleID string) (policy.Override, error) {
	out := policy.Override{Key: o.DescriptorKey, Identifier: o.Identifier, Tier: o.Tier, Block: o.Block, ExpiresAt: o.ExpiresAt}
	if o.Rule != "" {
		out.RuleID = ruleID
	}
	if o.Params == (Params{}) {
		return out, nil
	}
	if o.Rule == "" || o.Block {
		return out, &policy.Error{Code: policy.CodeInvalid, Message: "invalid override",
			Fields: []policy.FieldError{{Field: "algorithm", Description: "limit parameters need a rule (tier/rule) and no block"}}}
	}
	params, fields := o.Params.policy()
	if fields != nil {
		return out, &policy.Error{Code: policy.CodeInvalid, Message: "invalid override", Fields: fields}
	}
	out.Params = &params
	return out, nil
}

// From returns the file of a tenant as the control plane holds it: its
// tiers (rules in order) and overrides, whose rules are named by tier and
// name.
func From(t policy.Tenant, tiers []policy.Tier, overrides []policy.Override) *File {
	f := &File{Tenant: t.Slug, DefaultTier: t.DefaultTier, Shadow: t.Shadow}
	if t.Name != t.Slug {
		f.Name = t.Name
	}
	refs := map[string]string{}
	for _, tier := range tiers {
		ft := Tier{Name: tier.Name}
		for _, r := range tier.Rules {
			refs[r.ID] = tier.Name + "/" + r.Name
			ft.Rules = append(ft.Rules, RuleFrom(r))
		}
		f.Tiers = append(f.Tiers, ft)
	}
	for _, o := range overrides {
		fo := Override{Identifier: o.Identifier, Tier: o.Tier, Rule: refs[o.RuleID], Block: o.Block, ExpiresAt: o.ExpiresAt.UTC()}
		if o.Key != policy.DefaultIdentifierKey {
			fo.DescriptorKey = o.Key
		}
		if o.ExpiresAt.IsZero() {
			fo.ExpiresAt = time.Time{}
		}
		if o.Params != nil {
			fo.Params = paramsFrom(*o.Params)
		}
		f.Overrides = append(f.Overrides, fo)
	}
	return f
}

// RuleFrom returns the file's form of rule r.
func RuleFrom(r policy.Rule) Rule {
	out := Rule{Name: r.Name, KeyBy: r.KeyBy, Params: paramsFrom(r.Params), Shadow: r.Shadow, Disabled: !r.Enabled,
		Sync: Duration(r.Sync), Exact: r.Exact, Block: r.Block, Quota: r.Quota, Replaces: r.Replaces, Message: r.Message}
	if r.Scope != policy.ScopeRegion {
		out.Scope = r.Scope.String()
	}
	out.PartitionBy = r.PartitionBy
	for _, p := range r.Partitions {
		if out.Partitions == nil {
			out.Partitions = map[string]float64{}
		}
		out.Partitions[p.Value] = p.Share
	}
	if r.FailureMode != policy.DefaultFailureMode {
		out.FailureMode = r.FailureMode.String()
	}
	if len(r.Match) > 0 {
		out.Match = map[string]Values{}
		for _, m := range r.Match {
			out.Match[m.Key] = append(out.Match[m.Key], m.Value)
		}
	}
	return out
}

func paramsFrom(p policy.Params) Params {
	out := Params{Algorithm: p.Algorithm.String(), Limit: p.Limit, Window: Duration(p.Window), Burst: p.Burst, WarmUp: Duration(p.WarmUp),
		ColdFactor: p.ColdFactor, MaxDelay: Duration(p.MaxDelay), Granularity: Duration(p.Granularity), LeaseTTL: Duration(p.LeaseTTL),
		Calendar: p.Calendar.String(), TimeZone: p.TimeZone, Floor: p.Floor}
	if p.Algorithm == policy.AdaptiveConcurrency {
		out.Adaptation = p.Adaptation.String()
	}
	return out
}

// Marshal writes f as YAML, which Parse reads back to an equal File.
func (f *File) Marshal() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Sluice tenant file: sluice apply -f FILE makes the tenant match it (docs/api.md)\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Change is one write an apply of a file makes (or, dry, would make).
type Change struct {
	Op   string `json:"op"`   // create, update, reorder or delete
	Kind string `json:"kind"` // tenant, tier, rule or override
	Name string `json:"name"` // the tenant's slug, the tier, tier/rule, or the override's identifier and what it does
}

func (c Change) String() string { return c.Op + " " + c.Kind + " " + c.Name }

// ApplyResult says what an apply of a file did.
type ApplyResult struct {
	TenantID string   `json:"tenant_id,omitempty"` // empty: a dry run's tenant to be created
	Version  int64    `json:"config_version"`      // after the apply; dry: the tenant's version now
	DryRun   bool     `json:"dry_run"`
	Changes  []Change `json:"changes"`
	// Skipped says what the file holds that the caller may not apply:
	// with a tenant admin key, the tenant's own fields.
	Skipped string `json:"skipped,omitempty"`
}

// Import puts rules into f's tier of that name (added last if f has
// none): a rule of the same name replaced in place, the others appended in
// order; with prune, the tier's rules that rules do not name are removed,
// and the overrides of those rules. It is how an imported configuration
// (another limiter's) becomes a tier's rules, the rest of the file kept.
func (f *File) Import(tier string, rules []policy.Rule, prune bool) {
	i := slices.IndexFunc(f.Tiers, func(t Tier) bool { return t.Name == tier })
	if i < 0 {
		f.Tiers = append(f.Tiers, Tier{Name: tier})
		i = len(f.Tiers) - 1
	}
	t := &f.Tiers[i]
	planned := map[string]bool{}
	for _, r := range rules {
		planned[r.Name] = true
		fr := RuleFrom(r)
		if j := slices.IndexFunc(t.Rules, func(o Rule) bool { return o.Name == r.Name }); j >= 0 {
			t.Rules[j] = fr
		} else {
			t.Rules = append(t.Rules, fr)
		}
	}
	if prune {
		t.Rules = slices.DeleteFunc(t.Rules, func(r Rule) bool { return !planned[r.Name] })
		f.Overrides = slices.DeleteFunc(f.Overrides, func(o Override) bool {
			name, ok := strings.CutPrefix(o.Rule, tier+"/")
			return ok && !planned[name]
		})
	}
}
