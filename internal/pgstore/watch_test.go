package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/policy"
)

// watch runs Watch in the background and returns what it delivers.
func watch(t *testing.T, s *Store, cfg WatchConfig) <-chan policy.Version {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan policy.Version, 1000)
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx, cfg, func(v policy.Version) error { out <- v; return nil }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("watch ended with %v", err)
		}
	})
	return out
}

// collect reads deliveries until every tenant of want reached its version.
func collect(t *testing.T, out <-chan policy.Version, want map[string]int64) map[string][]int64 {
	t.Helper()
	got := map[string][]int64{}
	deadline := time.After(20 * time.Second)
	for {
		done := true
		for id, v := range want {
			if n := len(got[id]); n == 0 || got[id][n-1] < v {
				done = false
			}
		}
		if done {
			return got
		}
		select {
		case v := <-out:
			got[v.TenantID] = append(got[v.TenantID], v.Version)
		case <-deadline:
			t.Fatalf("delivered %v, waiting for %v", got, want)
		}
	}
}

func TestWatchDeliversEveryCommittedVersionInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	out := watch(t, s, WatchConfig{Recheck: time.Minute}) // notifications only, in practice
	a, b := newTenant(t, s, "a"), newTenant(t, s, "b")
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			tn := []string{a.ID, b.ID}[w%2]
			for i := range 6 {
				if _, _, err := s.CreateTier(ctx, op, tn, fmt.Sprintf("t-%d-%d", w, i)); err != nil {
					t.Error(err)
				}
				// A change that rolls back after taking a version.
				_ = s.inTx(ctx, func(tx pgx.Tx) error {
					if _, err := s.bump(ctx, tx, op, change{tenantID: tn, action: "update", resource: "tenant"}); err != nil {
						return err
					}
					return errors.New("roll back")
				})
			}
		})
	}
	wg.Wait()
	_, va, _ := s.GetTenant(ctx, a.ID)
	_, vb, _ := s.GetTenant(ctx, b.ID)
	if va != 13 || vb != 13 {
		t.Fatalf("versions %d and %d, want 13: rolled-back changes must not count", va, vb)
	}
	got := collect(t, out, map[string]int64{a.ID: va, b.ID: vb})
	for id, v := range map[string]int64{a.ID: va, b.ID: vb} {
		want := make([]int64, v)
		for i := range want {
			want[i] = int64(i + 1)
		}
		if !slices.Equal(got[id], want) {
			t.Fatalf("tenant %s: delivered %v, want %v", id, got[id], want)
		}
	}
}

// With no notification ever arriving, the periodic re-check still
// delivers every change, and deletions.
func TestWatchWithoutNotificationsStillDelivers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	a := newTenant(t, s, "a")
	out := watch(t, s, WatchConfig{Since: map[string]int64{a.ID: 1}, Recheck: 50 * time.Millisecond, Channel: "nobody_notifies_this"})
	if _, _, err := s.CreateTier(ctx, op, a.ID, "pro"); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, out, map[string]int64{a.ID: 2}); !slices.Equal(got[a.ID], []int64{2}) {
		t.Fatalf("delivered %v, want [2] (version 1 was known)", got[a.ID])
	}
	if err := s.DeleteTenant(ctx, op, a.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-out:
		if v.TenantID != a.ID || !v.Deleted {
			t.Fatalf("after the deletion: %+v", v)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("deletion never delivered")
	}
}

// A change prunes its tenant's version rows that are both more than
// keptVersions behind and a day old; a watcher from the start still gets
// what is left, ending at the latest.
func TestOldVersionsArePruned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := newStore(t)
	a, b := newTenant(t, s, "a"), newTenant(t, s, "b")
	const at = 5000 // a's version before the change
	for _, q := range []string{
		`UPDATE tenants SET config_version = 5000 WHERE id = $1`,
		`INSERT INTO config_versions (tenant_id, version, changed_at) SELECT $1, v, now() - interval '2 days' FROM generate_series(2, 10) v`,
		`INSERT INTO config_versions (tenant_id, version, changed_at) VALUES ($1, 50, now()), ($1, 4500, now() - interval '2 days'), ($1, 5000, now())`,
	} {
		if _, err := pool.Exec(ctx, q, a.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO config_versions (tenant_id, version, changed_at) VALUES ($1, 2, now() - interval '2 days')`, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateTier(ctx, op, a.ID, "pro"); err != nil {
		t.Fatal(err)
	}
	versions := func(tenant string) []int64 {
		rows, _ := pool.Query(ctx, `SELECT version FROM config_versions WHERE tenant_id = $1 ORDER BY version`, tenant)
		vs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		return vs
	}
	// 1 (a's creation, recent) and 50 are under a day old; 4500 is within
	// keptVersions of 5001; b's rows are b's to prune.
	if got, want := versions(a.ID), []int64{1, 50, 4500, at, at + 1}; !slices.Equal(got, want) {
		t.Fatalf("a's versions %v, want %v", got, want)
	}
	if got := versions(b.ID); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("b's versions %v, want [1 2]", got)
	}
	out := watch(t, s, WatchConfig{Since: map[string]int64{a.ID: 20}})
	if got := collect(t, out, map[string]int64{a.ID: at + 1}); !slices.Equal(got[a.ID], []int64{50, 4500, at, at + 1}) {
		t.Fatalf("delivered %v", got[a.ID])
	}
}
