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
)

// watch runs Watch in the background and returns what it delivers.
func watch(t *testing.T, s *Store, cfg WatchConfig) <-chan Version {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan Version, 1000)
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx, cfg, func(v Version) error { out <- v; return nil }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("watch ended with %v", err)
		}
	})
	return out
}

// collect reads deliveries until every tenant of want reached its version.
func collect(t *testing.T, out <-chan Version, want map[string]int64) map[string][]int64 {
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
					if _, err := bump(ctx, tx, op, change{tenantID: tn, action: "update", resource: "tenant"}); err != nil {
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
