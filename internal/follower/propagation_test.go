package follower

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/pgstore"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

// BenchmarkConfigPropagation measures a change from its start at the
// control plane's store to every decider enforcing it: the watch's
// signal, each decider's pull of the tenant's snapshot, its compile and
// the swap, with a state file kept, as deciders run. It reports p50 and
// p99 for a tenant of one rule, and for one of 1,000 rules and 10,000
// overrides, whose every change a decider pulls and compiles whole, with
// one decider and with ten.
func BenchmarkConfigPropagation(b *testing.B) {
	for _, size := range []struct {
		name                       string
		rules, overrides, deciders int
	}{{"small", 0, 0, 1}, {"1000-rules-10000-overrides", 999, 10000, 1}, {"1000-rules-10000-overrides-10-deciders", 999, 10000, 10}} {
		b.Run(size.name, func(b *testing.B) {
			ctx := context.Background()
			pool := pgtest.Pool(b)
			store := pgstore.New(pool)
			tn, err := store.CreateTenant(ctx, "operator", policy.Tenant{Slug: "p", Name: "p"})
			if err != nil {
				b.Fatal(err)
			}
			// Bulk rows straight in SQL: the benchmark is the propagation.
			if _, err := pool.Exec(ctx, `INSERT INTO rules (tenant_id, tier_id, position, name, key_by, algorithm, lim, window_us)
				SELECT $1, t.id, g - 1, 'rule-' || g, '{client_id}', 'token_bucket', 100, 60000000
				FROM tiers t, generate_series(1, $2::int) g WHERE t.tenant_id = $1`, tn.ID, size.rules); err != nil {
				b.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `INSERT INTO overrides (tenant_id, identifier, tier_name)
				SELECT $1, 'client-' || g, 'default' FROM generate_series(1, $2::int) g`, tn.ID, size.overrides); err != nil {
				b.Fatal(err)
			}
			tiers, err := store.ListTiers(ctx, tn.ID)
			if err != nil {
				b.Fatal(err)
			}
			rule, _, err := store.CreateRule(ctx, "operator", tn.ID, tiers[0].ID, policy.Rule{Name: "changing", KeyBy: []string{"client_id"},
				Enabled: true, Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 1, Window: time.Minute}})
			if err != nil {
				b.Fatal(err)
			}
			cp := serveControlPlane(b, store)
			type decider struct {
				s        *Follower
				enforced chan int64
			}
			var deciders []decider
			for range size.deciders {
				enforced := make(chan int64, 16)
				s, _, stop := startSyncerWith(b, Config{Client: sluicev1connect.NewConfigServiceClient(cp.Client(), cp.URL),
					StateFile: filepath.Join(b.TempDir(), "snapshot.pb"), PullTimeout: 20 * time.Second,
					OnChange: func(_, next *decide.Compiled) {
						if next != nil {
							enforced <- next.Version
						}
					}})
				defer stop()
				deciders = append(deciders, decider{s, enforced})
			}
			// The first load is no change (OnChange is not told of it).
			_, v, _ := store.GetTenant(ctx, tn.ID)
			for _, d := range deciders {
				for deadline := time.Now().Add(time.Minute); d.s.Config(tn.ID) == nil || d.s.Config(tn.ID).Version < v; time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						b.Fatal("a decider never loaded the tenant")
					}
				}
			}
			var lat []time.Duration
			for b.Loop() {
				start := time.Now()
				rule.Limit++
				if _, err := store.UpdateRule(ctx, "operator", tn.ID, rule, ""); err != nil {
					b.Fatal(err)
				}
				_, v, _ := store.GetTenant(ctx, tn.ID)
				for _, d := range deciders {
					for got := int64(0); got < v; {
						got = <-d.enforced
					}
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			for _, d := range deciders {
				if n := size.rules + 1; len(d.s.Config(tn.ID).RuleNames()["default"]) != n {
					b.Fatalf("a decider enforces %d rules, want %d", len(d.s.Config(tn.ID).RuleNames()["default"]), n)
				}
			}
		})
	}
}
