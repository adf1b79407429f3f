// Package decide is the decision path: it selects a tenant's rules for a
// request, applies overrides, builds counter keys, asks an engine for an
// all-or-nothing answer and composes the decision.
package decide

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// Compiled is one tenant's snapshot compiled for deciding. It is immutable:
// deciders swap whole Configs atomically when a new version arrives.
type Compiled struct {
	Tenant  policy.Tenant
	Version int64
	tiers   map[string][]compiledRule
	indexes map[string]*ruleIndex // of the tiers large enough to index
	exact   map[overrideKey][]*compiledOverride
	// patterns are the overrides of a '*' in the identifier, the most
	// literal bytes first, indexed (nil: few enough to try each).
	patterns   []*compiledOverride
	patternIdx *patternIndex
	idKeys     []string // descriptor keys overrides match on
	local      sync.Map // localKey → *limit.Limiter, built on first failure
	// requestLimits holds the limiters of requests' own limits
	// (RequestLimit → *limit.Limiter), at most maxRequestLimits of them.
	requestLimits  sync.Map
	requestLimitsN atomic.Int64
	// replaces is set when an enabled rule replaces others (Rule.Replaces).
	replaces bool
	// shadowAll: every rule is in shadow (ShadowAll).
	shadowAll bool
}

// RuleNames returns the names of c's rules by the name of their tier, as
// decisions report them (Decision.Tier and each rule's Name).
func (c *Compiled) RuleNames() map[string][]string {
	out := make(map[string][]string, len(c.tiers))
	for tier, rules := range c.tiers {
		names := make([]string, len(rules))
		for i, r := range rules {
			names[i] = r.Name
		}
		out[tier] = names
	}
	return out
}

// ShadowAll puts every rule of c in shadow, blocks and requests' own
// limits included: decisions are evaluated, counted and reported as
// ever, and none is rejected (a decider's -shadow-mode, as
// envoyproxy/ratelimit's global shadow mode: a first rollout that shows
// what the limits would do). Call it before c is in use.
func (c *Compiled) ShadowAll() {
	c.shadowAll = true
	for _, rules := range c.tiers {
		for i := range rules {
			rules[i].Shadow = true
		}
	}
	shadowBlock := func(o *compiledOverride) {
		if o.blockRule != nil {
			o.blockRule.Shadow = true
		}
	}
	for _, os := range c.exact {
		for _, o := range os {
			shadowBlock(o)
		}
	}
	for _, o := range c.patterns {
		shadowBlock(o)
	}
}

// HasReplaces reports whether an enabled rule of c replaces others: a
// caller deciding several requests as one call (Envoy's descriptors)
// then asks each which rules it replaces (Decider.Replacing) first.
func (c *Compiled) HasReplaces() bool { return c.replaces }

type localKey struct {
	rule   *policy.Rule
	params policy.Params
	share  float64
}

// localLimiter returns the limiter enforcing share of p for rule r while the
// engine fails: limit and burst scaled down, at least 1.
func (c *Compiled) localLimiter(r *policy.Rule, p policy.Params, share float64) *limit.Limiter {
	k := localKey{r, p, share}
	if l, ok := c.local.Load(k); ok {
		return l.(*limit.Limiter)
	}
	scaled := p
	scaled.Limit = max(1, int64(float64(p.Limit)*share))
	if p.Burst > 0 {
		scaled.Burst = max(1, int64(float64(p.Burst)*share))
	}
	l, err := limit.Compile(scaled)
	if err != nil {
		// A warm-up burst scaled under its cold factor: warm-up cannot be
		// scaled, so the share is a plain bucket at the scaled rate whose
		// burst is the share of what the cold bucket admits at once.
		// Keeping the rule whole would let each decider spend all of it.
		whole, _ := limit.Compile(p) // valid: the rule compiled
		scaled.WarmUp, scaled.ColdFactor = 0, 0
		scaled.Burst = max(1, int64(float64(whole.Capacity())*share))
		l, _ = limit.Compile(scaled)
	}
	c.local.Store(k, l)
	return l
}

// maxRequestLimits bounds the limiters of request limits kept per Compiled;
// others are compiled for their request.
const maxRequestLimits = 1024

// requestLimitPrefix begins the ID (and name) of a request's own limit's
// rule: limit/[<algorithm>/]<window in seconds>s/<descriptor keys>, the
// algorithm named unless it is the fixed window.
const requestLimitPrefix = "limit/"

// IsRequestLimit reports whether r is the rule of a request's own limit
// (Request.Limit), made for the request, rather than a tenant's rule:
// its names are the callers' to vary.
func IsRequestLimit(r *policy.Rule) bool { return strings.HasPrefix(r.ID, requestLimitPrefix) }

// requestRule returns the rule deciding a request by its own limit l, and
// its limiter: l's algorithm, counted per the values of all of d's
// descriptors in order, its ID naming l's algorithm, window and d's keys
// (Rule.ID stands for the key-by list in counter keys: two algorithms or
// windows never share a counter). It fails open.
func (c *Compiled) requestRule(l RequestLimit, d policy.Descriptors) (*policy.Rule, *limit.Limiter) {
	l = l.normal()
	p := policy.Params{Algorithm: l.Algorithm, Limit: l.Requests, Window: l.Window, Calendar: l.Calendar}
	var lim *limit.Limiter
	if v, ok := c.requestLimits.Load(l); ok {
		lim = v.(*limit.Limiter)
	} else {
		lim, _ = limit.Compile(p) // valid: refuse checked it
		if c.requestLimitsN.Add(1) <= maxRequestLimits {
			c.requestLimits.Store(l, lim)
		}
	}
	id := make([]byte, 0, 32)
	id = append(id, requestLimitPrefix...)
	if l.Algorithm != policy.FixedWindow { // Envoy's, and the first: its IDs stay as they were
		id = append(id, l.Algorithm.String()...)
		id = append(id, '/')
	}
	if l.Calendar != policy.CalendarNone {
		id = append(id, l.Calendar.String()...)
		id = append(id, '/')
	} else {
		id = strconv.AppendInt(id, int64(l.Window/time.Second), 10)
		id = append(id, "s/"...)
	}
	keys := make([]string, len(d)) // for policy.ClientKey: whom events name
	for i := range d {
		if i > 0 {
			id = append(id, ',') // no descriptor key holds a comma
		}
		id = append(id, d[i].Key...)
		keys[i] = d[i].Key
	}
	r := &policy.Rule{ID: string(id), KeyBy: keys, Params: p, Enabled: true, Shadow: c.shadowAll} // failing open
	r.Name = r.ID
	return r, lim
}

type compiledRule struct {
	policy.Rule
	limiter *limit.Limiter
	// parts are an adaptive rule's partitions as the counters take them:
	// the rest's (0), then each of Partitions'.
	parts []limit.Partition
}

// partitionArgs returns the partitions of r as the counters take them.
func partitionArgs(r *policy.Rule) []limit.Partition {
	if len(r.Partitions) == 0 {
		return nil
	}
	var shares []byte
	for _, p := range r.Partitions {
		shares = strconv.AppendFloat(append(shares, ':'), p.Share, 'g', -1, 64)
	}
	out := make([]limit.Partition, len(r.Partitions)+1)
	for i := range out {
		out[i] = limit.Partition{Arg: strconv.Itoa(i) + string(shares)}
	}
	return out
}

type compiledOverride struct {
	policy.Override
	limiter *limit.Limiter // with RuleID and Params
	// blockRule, with Block, is the rule that rejects the client: its own,
	// of no counter, or a blocking copy of rule RuleID (nil when that rule
	// is not enabled: nothing to block).
	blockRule *policy.Rule
}

type overrideKey struct{ descriptor, identifier string }

// Compile validates the whole snapshot and compiles it. On any invalid part
// it returns an error and no Compiled, so a decider keeps its previous one.
func Compile(s *policy.Snapshot) (*Compiled, error) {
	if s.Tenant.ID == "" {
		return nil, fmt.Errorf("decide: tenant %s has no id", s.Tenant.Slug)
	}
	if err := s.Tenant.Validate(); err != nil {
		return nil, fmt.Errorf("decide: tenant %s: %w", s.Tenant.Slug, err)
	}
	c := &Compiled{Tenant: s.Tenant, Version: s.Version, tiers: make(map[string][]compiledRule, len(s.Tiers)), indexes: map[string]*ruleIndex{},
		exact: make(map[overrideKey][]*compiledOverride)}
	ruleIDs := map[string]bool{}
	for i := range s.Tiers {
		t := &s.Tiers[i]
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("decide: tier %s: %w", t.Name, err)
		}
		rules := make([]compiledRule, 0, len(t.Rules))
		for _, r := range t.Rules {
			// A rule's counters are keyed by its id: two rules of one id
			// would count each request twice on one counter.
			switch {
			case r.ID == "":
				return nil, fmt.Errorf("decide: rule %s of tier %s has no id", r.Name, t.Name)
			case ruleIDs[r.ID]:
				return nil, fmt.Errorf("decide: rule id %s twice", r.ID)
			}
			ruleIDs[r.ID] = true
			if !r.Enabled {
				continue
			}
			l, err := limit.Compile(r.Params)
			if err != nil {
				return nil, fmt.Errorf("decide: rule %s: %w", r.Name, err)
			}
			rules = append(rules, compiledRule{Rule: r, limiter: l, parts: partitionArgs(&r)})
			c.replaces = c.replaces || len(r.Replaces) > 0
		}
		c.tiers[t.Name] = rules
		if x := newRuleIndex(rules); x != nil {
			c.indexes[t.Name] = x
		}
	}
	byID := map[string]*policy.Rule{} // enabled rules, for blocking overrides
	for _, rules := range c.tiers {
		for i := range rules {
			byID[rules[i].ID] = &rules[i].Rule
		}
	}
	seen := map[string]bool{}
	for i := range s.Overrides {
		o := &compiledOverride{Override: s.Overrides[i]}
		if err := o.Validate(); err != nil {
			return nil, fmt.Errorf("decide: override %s: %w", o.Identifier, err)
		}
		if o.Params != nil {
			l, err := limit.Compile(*o.Params)
			if err != nil {
				return nil, fmt.Errorf("decide: override %s: %w", o.Identifier, err)
			}
			o.limiter = l
		}
		if o.Block {
			o.blockRule = blockRule(o, byID)
		}
		if !seen[o.IdentifierKey()] {
			seen[o.IdentifierKey()] = true
			c.idKeys = append(c.idKeys, o.IdentifierKey())
		}
		if strings.Contains(o.Identifier, "*") {
			c.patterns = append(c.patterns, o)
		} else {
			k := overrideKey{o.IdentifierKey(), o.Identifier}
			c.exact[k] = append(c.exact[k], o)
		}
	}
	sort.SliceStable(c.patterns, func(i, j int) bool {
		return policy.GlobLiterals(c.patterns[i].Identifier) > policy.GlobLiterals(c.patterns[j].Identifier)
	})
	c.patternIdx = newPatternIndex(c.patterns)
	return c, nil
}

// blockRule is the rule a blocking override rejects its client's requests
// by: for every request, a rule of its own (named "blocked", counted in
// the analytics as block/<key>=<identifier>, keyed by the identifier);
// for rule RuleID, a blocking copy of it, nil when no tier enables it
// (enabled holds the enabled rules by id).
func blockRule(o *compiledOverride, enabled map[string]*policy.Rule) *policy.Rule {
	if o.RuleID == "" {
		// A window of a second, for headers and Envoy's unit: a block of
		// requests_per_unit 0 per second, as envoyproxy/ratelimit would say.
		return &policy.Rule{ID: "block/" + o.IdentifierKey() + "=" + o.Identifier, Name: "blocked", KeyBy: []string{o.IdentifierKey()},
			Enabled: true, Block: true, Params: policy.Params{Window: time.Second}}
	}
	e, ok := enabled[o.RuleID]
	if !ok {
		return nil
	}
	r := *e
	r.Block, r.Shadow = true, false // a client blocked is blocked
	return &r
}

// overrides returns the overrides applying to a request at clock's now: exact
// matches first, then patterns from the most literal bytes.
func (c *Compiled) overrides(d policy.Descriptors, clock func() time.Time, dst []*compiledOverride) []*compiledOverride {
	var now time.Time // read once, and only when an override may apply
	applies := func(o *compiledOverride, id string) bool {
		if now.IsZero() {
			now = clock()
		}
		return o.Applies(id, now)
	}
	for _, k := range c.idKeys {
		id, ok := d.Get(k)
		if !ok {
			continue
		}
		for _, o := range c.exact[overrideKey{k, id}] {
			if applies(o, id) {
				dst = append(dst, o)
			}
		}
		var cbuf [patternsFrom]int32
		for _, i := range c.patternIdx.candidates(len(c.patterns), k, id, cbuf[:0]) {
			if o := c.patterns[i]; o.IdentifierKey() == k && applies(o, id) {
				dst = append(dst, o)
			}
		}
	}
	return dst
}
