package pgstore

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/policy"
)

// BenchmarkSnapshot builds the snapshot of a tenant with 1,000 rules and
// 10,000 overrides (read in one transaction), and compiles it as deciders do.
func BenchmarkSnapshot(b *testing.B) {
	ctx := context.Background()
	pool := newPoolB(b)
	s := New(pool)
	tn, err := s.CreateTenant(ctx, op, tenantB("big"))
	if err != nil {
		b.Fatal(err)
	}
	// Bulk rows straight in SQL: the benchmark is the read, not the setup.
	_, err = pool.Exec(ctx, `INSERT INTO rules (tenant_id, tier_id, position, name, key_by, algorithm, lim, window_us)
		SELECT $1, t.id, g - 1, 'rule-' || g, '{client_id}', 'token_bucket', 100, 60000000
		FROM tiers t, generate_series(1, 1000) g WHERE t.tenant_id = $1`, tn.ID)
	if err != nil {
		b.Fatal(err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO overrides (tenant_id, identifier, tier_name)
		SELECT $1, 'client-' || g, 'default' FROM generate_series(1, 10000) g`, tn.ID)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("read", func(b *testing.B) {
		for b.Loop() {
			snap, _, err := s.Snapshot(ctx, tn.ID)
			if err != nil || len(snap.Tiers[0].Rules) != 1000 || len(snap.Overrides) != 10000 {
				b.Fatalf("snapshot: %v", err)
			}
		}
	})
	snap, _, _ := s.Snapshot(ctx, tn.ID)
	b.Run("compile", func(b *testing.B) {
		for b.Loop() {
			if _, err := decide.Compile(snap); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkPageOverrides reads pages of 100 of a tenant with 100,000
// overrides (the most it may have): the first, one deep into the list, and
// the overrides of one client's id prefix. Each should cost about the same,
// the index walked from where the page starts, never the whole list sorted.
func BenchmarkPageOverrides(b *testing.B) {
	ctx := context.Background()
	pool := newPoolB(b)
	s := New(pool)
	tn, err := s.CreateTenant(ctx, op, tenantB("many"))
	if err != nil {
		b.Fatal(err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO overrides (tenant_id, identifier, tier_name)
		SELECT $1, 'client-' || lpad(g::text, 6, '0'), 'default' FROM generate_series(1, 100000) g`, tn.ID)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE overrides`); err != nil {
		b.Fatal(err)
	}
	_, deep, err := s.PageOverrides(ctx, tn.ID, "client-09", nil, 1)
	if err != nil || deep == nil {
		b.Fatalf("a cursor deep into the list: %v", err)
	}
	for _, c := range []struct {
		name   string
		prefix string
		after  *policy.OverrideCursor
	}{{"first", "", nil}, {"deep", "", deep}, {"prefix", "client-0500", nil}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				page, _, err := s.PageOverrides(ctx, tn.ID, c.prefix, c.after, 100)
				if err != nil || len(page) != 100 {
					b.Fatalf("%d overrides, %v", len(page), err)
				}
			}
		})
	}
}

// BenchmarkWatchPropagation measures the time from the start of a change to
// its delivery by Watch (an upper bound of commit-to-subscriber latency:
// it includes the change's own transaction), and reports p50 and p99.
func BenchmarkWatchPropagation(b *testing.B) {
	ctx := context.Background()
	s := New(newPoolB(b))
	tn, err := s.CreateTenant(ctx, op, tenantB("w"))
	if err != nil {
		b.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan time.Time, 1)
	go func() {
		_ = s.Watch(wctx, WatchConfig{Since: map[string]int64{tn.ID: 1}, Recheck: time.Minute}, func(policy.Version) error {
			got <- time.Now()
			return nil
		})
	}()
	tier, _, err := s.CreateTier(ctx, op, tn.ID, "t")
	if err != nil {
		b.Fatal(err)
	}
	<-got
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		start := time.Now()
		// A rename a change: as many as the benchmark takes (a tenant
		// holds at most 100 tiers).
		if _, err := s.RenameTier(ctx, op, tn.ID, tier.ID, fmt.Sprintf("t%d", i)); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, (<-got).Sub(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
