package decide

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// A Redis at its maxmemory with the noeviction policy refuses every write
// ("OOM command not allowed"), so every script that counts: each decision
// answers by its rules' failure modes at once (the refusal is immediate,
// the budget is not waited out), and counts nothing; once memory is freed,
// decisions go back to Redis with the counts they had. (With an evicting
// policy Redis would drop counters instead, silently: docs/operations.md.)
func TestRedisOutOfMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t, "--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
	// Batched into pipelines, as a decider runs it.
	eng, err := redisengine.Open("redis://"+srv.Addr, redisengine.ClientOptions{}, redisengine.Config{Prefix: redistest.Prefix(t), Batch: true, BreakerFailures: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	rule := func(name, route string, mode policy.FailureMode) policy.Rule {
		return policy.Rule{ID: name, Name: name, Match: []policy.Match{{Key: "route", Value: route}}, KeyBy: []string{"client_id"},
			FailureMode: mode, Enabled: true, Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Hour}}
	}
	c, err := Compile(&policy.Snapshot{
		Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "T", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{rule("open", "/open", policy.FailOpen), rule("closed", "/closed", policy.FailClosed)}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	const budget = 5 * time.Second
	d := NewDecider(Options{Counters: eng, Budget: budget})
	check := func(route, client string) Decision {
		t.Helper()
		start := time.Now()
		dec, err := d.Decide(ctx, c, Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: client}, {Key: "route", Value: route}}})
		if err != nil {
			t.Fatalf("%s: %v", route, err)
		}
		if took := time.Since(start); took > budget/2 {
			t.Fatalf("%s took %v: the refusal waited out the budget", route, took)
		}
		return dec
	}
	if dec := check("/closed", "alice"); !dec.Allowed || dec.Degraded {
		t.Fatalf("before: %+v, want admitted by Redis", dec)
	}

	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	// Its memory limit drops under what it holds (as a limit reached
	// would, without the sway of a client's buffers).
	if err := rc.Set(ctx, "filler", strings.Repeat("x", 2<<20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.ConfigSet(ctx, "maxmemory", "1mb").Err(); err != nil {
		t.Fatal(err)
	}
	errors0 := d.EngineErrors()
	for range 3 {
		if dec := check("/closed", "alice"); dec.Allowed || !dec.Degraded {
			t.Fatalf("closed rule, Redis out of memory: allowed %v, degraded %v; want refused by its failure mode", dec.Allowed, dec.Degraded)
		}
		if dec := check("/open", "bob"); !dec.Allowed || !dec.Degraded {
			t.Fatalf("open rule, Redis out of memory: allowed %v, degraded %v; want admitted by its failure mode", dec.Allowed, dec.Degraded)
		}
	}
	if n := d.EngineErrors() - errors0; n != 6 {
		t.Fatalf("%d engine errors counted, want 6", n)
	}

	if err := rc.ConfigSet(ctx, "maxmemory", "64mb").Err(); err != nil {
		t.Fatal(err)
	}
	// alice's one admission before is all that was counted: two more,
	// then the limit.
	var allowed []bool
	for range 3 {
		dec := check("/closed", "alice")
		if dec.Degraded {
			t.Fatalf("memory freed, yet degraded: %+v", dec)
		}
		allowed = append(allowed, dec.Allowed)
	}
	if want := []bool{true, true, false}; !slices.Equal(allowed, want) {
		t.Fatalf("alice after: %v, want %v (the refused writes counted nothing)", allowed, want)
	}
}
