// Package protoconv converts between the generated protobuf types and the
// domain, in both directions, for the transport packages (control plane and
// data plane). Generated types go no further than the transports.
package protoconv

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/auditdiff"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/policy"
)

func TenantToProto(t policy.Tenant, version int64) *sluicev1.Tenant {
	status := sluicev1.TenantStatus_TENANT_STATUS_ACTIVE
	if t.Status == policy.TenantSuspended {
		status = sluicev1.TenantStatus_TENANT_STATUS_SUSPENDED
	}
	return &sluicev1.Tenant{Id: t.ID, Slug: t.Slug, Name: t.Name, Status: status, DefaultTier: t.DefaultTier, ConfigVersion: version, Shadow: t.Shadow}
}

func TenantFromProto(p *sluicev1.Tenant) policy.Tenant {
	t := policy.Tenant{ID: p.GetId(), Slug: p.GetSlug(), Name: p.GetName(), DefaultTier: p.GetDefaultTier(), Shadow: p.GetShadow()}
	if p.GetStatus() == sluicev1.TenantStatus_TENANT_STATUS_SUSPENDED {
		t.Status = policy.TenantSuspended
	}
	return t
}

func TierToProto(t policy.Tier) *sluicev1.Tier {
	out := &sluicev1.Tier{Id: t.ID, Name: t.Name}
	for _, r := range t.Rules {
		out.Rules = append(out.Rules, RuleToProto(r))
	}
	return out
}

// failureModes maps the proto enum to the domain; unspecified is local,
// the default.
var failureModes = map[sluicev1.FailureMode]policy.FailureMode{
	sluicev1.FailureMode_FAILURE_MODE_UNSPECIFIED: policy.DefaultFailureMode,
	sluicev1.FailureMode_FAILURE_MODE_OPEN:        policy.FailOpen,
	sluicev1.FailureMode_FAILURE_MODE_CLOSED:      policy.FailClosed,
	sluicev1.FailureMode_FAILURE_MODE_LOCAL:       policy.FailLocal,
}

// failureModesOut is failureModes the other way, each mode by its own
// name (never unspecified), so that a decider reads what the control
// plane meant.
var failureModesOut = func() map[policy.FailureMode]sluicev1.FailureMode {
	out := map[policy.FailureMode]sluicev1.FailureMode{}
	for p, m := range failureModes {
		if p != sluicev1.FailureMode_FAILURE_MODE_UNSPECIFIED {
			out[m] = p
		}
	}
	return out
}()

// failureModeToProto is the proto enum of m (unspecified for a mode of no
// name, which validation refuses).
func failureModeToProto(m policy.FailureMode) sluicev1.FailureMode { return failureModesOut[m] }

// scopeToProto is the proto enum of s; a scope of no name is unspecified
// (region), as validation refuses it.
func scopeToProto(s policy.Scope) sluicev1.Scope {
	if s == policy.ScopeGlobal {
		return sluicev1.Scope_SCOPE_GLOBAL
	}
	return sluicev1.Scope_SCOPE_UNSPECIFIED
}

// scopeFromProto is the scope of s: unspecified is region; an unknown
// value is refused by validation.
func scopeFromProto(s sluicev1.Scope) policy.Scope {
	switch s {
	case sluicev1.Scope_SCOPE_UNSPECIFIED, sluicev1.Scope_SCOPE_REGION:
		return policy.ScopeRegion
	case sluicev1.Scope_SCOPE_GLOBAL:
		return policy.ScopeGlobal
	}
	return policy.Scope(255)
}

func RuleToProto(r policy.Rule) *sluicev1.Rule {
	out := &sluicev1.Rule{Id: r.ID, Name: r.Name, KeyBy: r.KeyBy, Params: ParamsToProto(r.Params), Shadow: r.Shadow,
		FailureMode: failureModeToProto(r.FailureMode), Enabled: r.Enabled, Sync: durationToProto(r.Sync), Exact: r.Exact, Block: r.Block, Quota: r.Quota, Replaces: r.Replaces,
		Message: r.Message, Scope: scopeToProto(r.Scope)}
	for _, m := range r.Match {
		out.Match = append(out.Match, &sluicev1.Match{Key: m.Key, Value: m.Value})
	}
	out.PartitionBy = r.PartitionBy
	for _, p := range r.Partitions {
		out.Partitions = append(out.Partitions, &sluicev1.Partition{Value: p.Value, Share: p.Share})
	}
	return out
}

// RuleFromProto converts without judging: validation reports what is wrong.
func RuleFromProto(p *sluicev1.Rule) policy.Rule {
	r := policy.Rule{ID: p.GetId(), Name: p.GetName(), KeyBy: p.GetKeyBy(), Params: ParamsFromProto(p.GetParams()),
		Shadow: p.GetShadow(), Enabled: p.GetEnabled(), Sync: durationFromProto(p.GetSync()), Exact: p.GetExact(), Block: p.GetBlock(), Quota: p.GetQuota(), Replaces: p.GetReplaces(),
		Message: p.GetMessage()}
	mode, ok := failureModes[p.GetFailureMode()]
	if !ok {
		mode = policy.FailureMode(255) // refused by validation, with its field
	}
	r.FailureMode = mode
	r.Scope = scopeFromProto(p.GetScope())
	for _, m := range p.GetMatch() {
		r.Match = append(r.Match, policy.Match{Key: m.GetKey(), Value: m.GetValue()})
	}
	r.PartitionBy = p.GetPartitionBy()
	for _, pt := range p.GetPartitions() {
		r.Partitions = append(r.Partitions, policy.Partition{Value: pt.GetValue(), Share: pt.GetShare()})
	}
	return r
}

// durationToProto leaves a zero duration unset.
func durationToProto(v time.Duration) *durationpb.Duration {
	if v == 0 {
		return nil
	}
	return durationpb.New(v)
}

// durationFromProto reads an unset duration as zero.
func durationFromProto(v *durationpb.Duration) time.Duration {
	if v == nil {
		return 0
	}
	return v.AsDuration()
}

func ParamsToProto(p policy.Params) *sluicev1.LimitParams {
	d := durationToProto
	return &sluicev1.LimitParams{Algorithm: sluicev1.Algorithm(p.Algorithm), Limit: p.Limit, Window: d(p.Window), Burst: p.Burst,
		WarmUp: d(p.WarmUp), ColdFactor: p.ColdFactor, MaxDelay: d(p.MaxDelay), Granularity: d(p.Granularity), LeaseTtl: d(p.LeaseTTL),
		Calendar: sluicev1.Calendar(p.Calendar), TimeZone: p.TimeZone, Floor: p.Floor, Adaptation: adaptationToProto(p.Adaptation)}
}

func adaptationToProto(a policy.Adaptation) sluicev1.Adaptation {
	if a == policy.AdaptGradient {
		return sluicev1.Adaptation_ADAPTATION_UNSPECIFIED
	}
	return sluicev1.Adaptation(a + 1)
}

// adaptationFromProto reads ADAPTATION_UNSPECIFIED as gradient, and an
// unknown value as one validation refuses.
func adaptationFromProto(a sluicev1.Adaptation) policy.Adaptation {
	switch {
	case a == sluicev1.Adaptation_ADAPTATION_UNSPECIFIED:
		return policy.AdaptGradient
	case a < 0 || a > 255:
		return 255
	}
	return policy.Adaptation(a - 1)
}

func ParamsFromProto(p *sluicev1.LimitParams) policy.Params {
	d := durationFromProto
	alg := policy.Algorithm(p.GetAlgorithm())
	if p.GetAlgorithm() < 0 || p.GetAlgorithm() > 255 {
		alg = policy.AlgorithmUnspecified
	}
	cal := policy.Calendar(p.GetCalendar())
	if p.GetCalendar() < 0 || p.GetCalendar() > 255 {
		cal = 255 // refused by validation, as every unknown calendar
	}
	return policy.Params{Algorithm: alg, Limit: p.GetLimit(), Window: d(p.GetWindow()), Burst: p.GetBurst(),
		WarmUp: d(p.GetWarmUp()), ColdFactor: p.GetColdFactor(), MaxDelay: d(p.GetMaxDelay()),
		Granularity: d(p.GetGranularity()), LeaseTTL: d(p.GetLeaseTtl()), Calendar: cal,
		TimeZone: p.GetTimeZone(), Floor: p.GetFloor(), Adaptation: adaptationFromProto(p.GetAdaptation())}
}

// ts is t as a timestamp, nil for the zero time.
func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func KeyToProto(k policy.APIKey) *sluicev1.ApiKey {
	return &sluicev1.ApiKey{Id: k.ID, Kind: sluicev1.KeyKind(k.Kind), Name: k.Name, Prefix: k.Prefix,
		CreatedAt: ts(k.CreatedAt), LastUsedAt: ts(k.LastUsedAt), RevokedAt: ts(k.RevokedAt), ExpiresAt: ts(k.ExpiresAt)}
}

func KeyKindFromProto(k sluicev1.KeyKind) policy.KeyKind {
	switch k {
	case sluicev1.KeyKind_KEY_KIND_ADMIN:
		return policy.KeyAdmin
	case sluicev1.KeyKind_KEY_KIND_CHECK:
		return policy.KeyCheck
	case sluicev1.KeyKind_KEY_KIND_VIEWER:
		return policy.KeyViewer
	}
	return 0 // refused by the store, with its field
}

func OverrideToProto(o policy.Override) *sluicev1.Override {
	out := &sluicev1.Override{Id: o.ID, DescriptorKey: o.Key, Identifier: o.Identifier, Tier: o.Tier, RuleId: o.RuleID, Block: o.Block}
	if o.Params != nil {
		out.Params = ParamsToProto(*o.Params)
	}
	if !o.ExpiresAt.IsZero() {
		out.ExpiresAt = timestamppb.New(o.ExpiresAt)
	}
	return out
}

func OverrideFromProto(p *sluicev1.Override) policy.Override {
	o := policy.Override{ID: p.GetId(), Key: p.GetDescriptorKey(), Identifier: p.GetIdentifier(), Tier: p.GetTier(), RuleID: p.GetRuleId(), Block: p.GetBlock()}
	if p.GetParams() != nil {
		params := ParamsFromProto(p.GetParams())
		o.Params = &params
	}
	if p.GetExpiresAt() != nil {
		o.ExpiresAt = p.GetExpiresAt().AsTime()
	}
	return o
}

// AuditToProto is an audit entry with the fields it changed.
func AuditToProto(a policy.AuditEntry) *sluicev1.AuditEntry {
	out := &sluicev1.AuditEntry{Id: a.ID, Actor: a.Actor, ActorName: a.ActorName, Action: a.Action, Resource: a.Resource, ResourceId: a.ResourceID,
		OldValue: string(auditdiff.Readable(a.Old)), NewValue: string(auditdiff.Readable(a.New)), ConfigVersion: a.Version, At: timestamppb.New(a.At)}
	for _, c := range auditdiff.Changes(a.Old, a.New) {
		out.Changes = append(out.Changes, &sluicev1.AuditChange{Field: c.Field, Old: c.Old, New: c.New})
	}
	return out
}

func SnapshotToProto(s *policy.Snapshot, keys []policy.CheckKey) *sluicev1.Snapshot {
	out := &sluicev1.Snapshot{Tenant: TenantToProto(s.Tenant, s.Version), Version: s.Version, Stamp: s.Stamp}
	for _, t := range s.Tiers {
		out.Tiers = append(out.Tiers, TierToProto(t))
	}
	for _, o := range s.Overrides {
		out.Overrides = append(out.Overrides, OverrideToProto(o))
	}
	for _, k := range keys {
		if k.ExpiresAt.IsZero() {
			out.CheckKeyHashes = append(out.CheckKeyHashes, k.Hash[:])
		} else {
			out.ExpiringCheckKeys = append(out.ExpiringCheckKeys, &sluicev1.ExpiringKey{Hash: k.Hash[:], ExpiresAt: timestamppb.New(k.ExpiresAt)})
		}
	}
	return out
}

// SnapshotFromProto returns the snapshot s carries and its check keys
// (malformed hashes are dropped: they could match nothing).
func SnapshotFromProto(s *sluicev1.Snapshot) (*policy.Snapshot, []policy.CheckKey) {
	snap := &policy.Snapshot{Tenant: TenantFromProto(s.GetTenant()), Version: s.GetVersion(), Stamp: s.GetStamp()}
	for _, t := range s.GetTiers() {
		tier := policy.Tier{ID: t.GetId(), Name: t.GetName()}
		for _, r := range t.GetRules() {
			tier.Rules = append(tier.Rules, RuleFromProto(r))
		}
		snap.Tiers = append(snap.Tiers, tier)
	}
	for _, o := range s.GetOverrides() {
		snap.Overrides = append(snap.Overrides, OverrideFromProto(o))
	}
	var keys []policy.CheckKey
	for _, h := range s.GetCheckKeyHashes() {
		if len(h) == 32 {
			keys = append(keys, policy.CheckKey{Hash: [32]byte(h)})
		}
	}
	for _, k := range s.GetExpiringCheckKeys() {
		// An expiry that is not a valid time expires the key at once.
		if h := k.GetHash(); len(h) == 32 {
			keys = append(keys, policy.CheckKey{Hash: [32]byte(h), ExpiresAt: expiry(k.GetExpiresAt())})
		}
	}
	return snap, keys
}

// expiry is an expiry from a message: a missing or invalid one is the
// earliest time, long past.
func expiry(t *timestamppb.Timestamp) time.Time {
	if t == nil || t.CheckValid() != nil {
		return time.Unix(0, 1)
	}
	return t.AsTime()
}
