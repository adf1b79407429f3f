package protoconv

import (
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
)

// A snapshot with every field of its tenant, rules and overrides set
// reaches a decider unchanged: a field the conversion forgets is lost.
func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	rule := policy.Rule{ID: "r1", Name: "per-client", Match: []policy.Match{{Key: "route", Value: "/login"}, {Key: "client_id", Value: "*"}},
		KeyBy: []string{"client_id"}, Shadow: true, FailureMode: policy.FailLocal, Enabled: true, Sync: 250 * time.Millisecond, Exact: true, Block: true, Quota: true, Replaces: []string{"other"},
		Params: policy.Params{Algorithm: policy.TokenBucket, Limit: 10, Window: time.Minute, Burst: 20, WarmUp: time.Hour, ColdFactor: 3}}
	global := policy.Rule{ID: "r5", Name: "global", Enabled: true, Scope: policy.ScopeGlobal,
		Params: policy.Params{Algorithm: policy.SlidingWindow, Limit: 100, Window: time.Minute}}
	leaky := policy.Rule{ID: "r2", Name: "queue", Enabled: true, FailureMode: policy.FailClosed,
		Params: policy.Params{Algorithm: policy.LeakyBucket, Limit: 5, Window: time.Second, MaxDelay: 2 * time.Second}}
	lease := policy.Rule{ID: "r3", Name: "lease", Enabled: true, Params: policy.Params{Algorithm: policy.Concurrency, Limit: 3, LeaseTTL: time.Minute}}
	adaptive := policy.Rule{ID: "r6", Name: "adaptive", Enabled: true, Params: policy.Params{Algorithm: policy.AdaptiveConcurrency, Limit: 500,
		Window: time.Second, LeaseTTL: time.Minute, Floor: 3, Adaptation: policy.AdaptAIMD},
		PartitionBy: "tier", Partitions: []policy.Partition{{Value: "gold", Share: 0.6}, {Value: "free", Share: 0.3}}}
	buckets := policy.Rule{ID: "r4", Name: "buckets", Params: policy.Params{Algorithm: policy.SlidingBuckets, Limit: 7, Window: time.Minute, Granularity: time.Second}}
	in := &policy.Snapshot{
		Tenant:  policy.Tenant{ID: "t1", Slug: "acme", Name: "Acme", DefaultTier: "free", Status: policy.TenantSuspended, Shadow: true},
		Version: 42,
		Tiers:   []policy.Tier{{ID: "tier1", Name: "free", Rules: []policy.Rule{rule, leaky, lease, buckets, global, adaptive}}},
		Overrides: []policy.Override{
			{ID: "o1", Key: "user", Identifier: "vip-*", Tier: "free", ExpiresAt: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
			{ID: "o2", Key: "user", Identifier: "partner", RuleID: "r1", Params: &policy.Params{Algorithm: policy.FixedWindow, Limit: 5, Window: time.Hour}},
			{ID: "o3", Key: "user", Identifier: "abuser-*", Block: true, ExpiresAt: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		},
	}
	// A key without expiry, and one with (to the microsecond, as stored).
	keys := []policy.CheckKey{{Hash: [32]byte{1, 2, 3}}, {Hash: [32]byte{4}, ExpiresAt: time.Date(2027, 1, 1, 0, 0, 0, 1000, time.UTC)}}
	out, gotKeys := SnapshotFromProto(SnapshotToProto(in, keys))
	if !reflect.DeepEqual(out, in) || !reflect.DeepEqual(gotKeys, keys) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
	}
}
