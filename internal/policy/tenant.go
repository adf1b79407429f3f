package policy

import (
	"time"
	"unicode/utf8"
)

// TenantStatus is whether a tenant's checks are served.
type TenantStatus uint8

// Tenant statuses. A suspended tenant's checks are refused.
const (
	TenantActive TenantStatus = iota
	TenantSuspended
)

// Tenant is a customer of Sluice: a company running APIs.
type Tenant struct {
	ID string
	// Slug is the tenant's stable short name, used as the Envoy RLS domain.
	Slug        string
	Name        string
	Status      TenantStatus
	DefaultTier string // tier name
	// Shadow puts every rule of the tenant in shadow: its decisions are
	// reported (shadow would-rejects in the analytics) and none rejects,
	// for a tenant's first rollout. The deciders' -shadow-mode does the
	// same for every tenant.
	Shadow bool
}

// Validate returns an *Error with CodeInvalid listing every invalid field, or nil.
func (t *Tenant) Validate() error {
	fe := newFieldErrors()
	validateSlug(fe, "slug", t.Slug)
	validateName(fe, "name", t.Name)
	if t.Status > TenantSuspended {
		fe.add("status", "must be active or suspended")
	}
	if t.DefaultTier != "" {
		validateSlug(fe, "default_tier", t.DefaultTier)
	}
	return fe.err("tenant")
}

// Tier is a tenant's plan (free, pro, …) holding an ordered list of rules.
type Tier struct {
	ID    string
	Name  string // a slug, unique per tenant
	Rules []Rule
}

// Validate checks the tier and every rule in it; rule fields are reported
// as rules[i].field.
func (t *Tier) Validate() error {
	fe := newFieldErrors()
	validateSlug(fe, "name", t.Name)
	if len(t.Rules) > MaxRulesPerTier {
		fe.add("rules", "at most %d rules", MaxRulesPerTier)
	}
	names := make(map[string]bool, len(t.Rules))
	for i := range t.Rules {
		rf := fe.index("rules", i)
		t.Rules[i].validate(rf)
		if names[t.Rules[i].Name] {
			rf.add("name", "%q is used by another rule of this tier", t.Rules[i].Name)
		}
		names[t.Rules[i].Name] = true
	}
	return fe.err("tier")
}

// validateSlug accepts 1 to 63 bytes of [a-z0-9-], starting with a letter
// or digit: safe in URLs, keys and Envoy domains.
func validateSlug(fe fieldErrors, field, s string) {
	if s == "" || len(s) > 63 {
		fe.add(field, "must be 1 to 63 characters")
		return
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0) {
			fe.add(field, "may contain only lowercase letters, digits and '-' (not first)")
			return
		}
	}
}

// Override is a per-client exception. It applies to clients whose
// identifier (the value of the descriptor Key, client_id by default) equals
// Identifier or, when Identifier holds a '*', matches it as a Glob ("acme-*"
// every identifier starting with "acme-", "*@example.com" every one ending
// so). It either moves
// the client to Tier, or replaces the parameters of rule RuleID, or blocks
// the client: every request (or, with RuleID, rule RuleID makes a blocking
// rule for it; see Rule.Block), until ExpiresAt when set.
type Override struct {
	ID         string
	Key        string // descriptor holding the identifier; "" means client_id
	Identifier string
	Tier       string  // move the client to this tier, or
	RuleID     string  // replace this rule's parameters
	Params     *Params // the replacement, with RuleID
	// Block rejects the client's every request, counting nothing, or with
	// RuleID the requests that rule applies to.
	Block     bool
	ExpiresAt time.Time
}

// DefaultIdentifierKey is the descriptor overrides match when Key is empty.
const DefaultIdentifierKey = "client_id"

// IdentifierKey returns the descriptor the override matches on.
func (o *Override) IdentifierKey() string {
	if o.Key == "" {
		return DefaultIdentifierKey
	}
	return o.Key
}

// Applies reports whether o covers the identifier id at time now.
func (o *Override) Applies(id string, now time.Time) bool {
	if !o.ExpiresAt.IsZero() && !now.Before(o.ExpiresAt) {
		return false
	}
	return Glob(o.Identifier, id)
}

// Validate returns an *Error with CodeInvalid listing every invalid field, or nil.
func (o *Override) Validate() error {
	fe := newFieldErrors()
	if o.Key != "" { // the API's descriptor_key
		validateDescriptorKey(fe, "descriptor_key", o.Key)
	}
	if o.Identifier == "" || len(o.Identifier) > MaxDescriptorVal || !utf8.ValidString(o.Identifier) {
		fe.add("identifier", "must be 1 to %d bytes of UTF-8", MaxDescriptorVal)
	}
	switch {
	case o.Block:
		if o.Tier != "" {
			fe.add("tier", "a blocking override moves no client to a tier")
		}
		if o.Params != nil {
			fe.add("params", "a blocking override has no params")
		}
	case o.Tier != "" && o.RuleID != "":
		fe.add("tier", "set either tier or rule_id, not both")
	case o.Tier != "":
		validateSlug(fe, "tier", o.Tier)
		if o.Params != nil {
			fe.add("params", "applies only with rule_id")
		}
	case o.RuleID != "":
		if o.Params == nil {
			fe.add("params", "required with rule_id")
		} else {
			o.Params.validate(fe.at("params"))
		}
	default:
		fe.add("tier", "set a tier to move the client to, a rule_id with params, or block")
	}
	return fe.err("override")
}

// KeyKind says which API a key opens.
type KeyKind uint8

// Key kinds.
const (
	KeyAdmin  KeyKind = iota + 1 // the control plane, for one tenant
	KeyCheck                     // the data plane's check APIs, for one tenant
	KeyViewer                    // the control plane, read only, for one tenant: an analyst's
)

// APIKey is a tenant's credential. Only a hash of the secret is kept.
type APIKey struct {
	ID         string
	TenantID   string
	Kind       KeyKind
	Name       string
	Prefix     string // the first characters of the secret, for display
	Hash       []byte
	CreatedAt  time.Time
	LastUsedAt time.Time
	RevokedAt  time.Time
	ExpiresAt  time.Time // zero: never
}

// CheckKey is a live check key as deciders hold it: its hash, and when it
// stops working (zero: never).
type CheckKey struct {
	Hash      [32]byte
	ExpiresAt time.Time
}

// Live reports whether k works at now.
func (k CheckKey) Live(now time.Time) bool { return k.ExpiresAt.IsZero() || now.Before(k.ExpiresAt) }

// Snapshot is an immutable, versioned copy of one tenant's configuration, as
// deciders enforce it. Build it once, then share it read-only.
type Snapshot struct {
	Tenant  Tenant
	Version int64
	// Stamp is drawn at random with each version (0: unknown): the same
	// version with another stamp is another configuration, one the
	// database lost when it went back to an earlier state and moved on.
	Stamp     int64
	Tiers     []Tier
	Overrides []Override
}

// SameAs reports whether o and p are the same override but for their ids,
// their expiries equal to the microsecond (what PostgreSQL keeps).
func (o Override) SameAs(p Override) bool {
	sameParams := o.Params == nil && p.Params == nil || o.Params != nil && p.Params != nil && *o.Params == *p.Params
	return o.Key == p.Key && o.Identifier == p.Identifier && o.Tier == p.Tier && o.RuleID == p.RuleID && o.Block == p.Block &&
		sameParams && o.ExpiresAt.Truncate(time.Microsecond).Equal(p.ExpiresAt.Truncate(time.Microsecond))
}
