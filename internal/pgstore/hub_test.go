package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"testing"
	"time"
)

// Many watchers of a hub share one LISTEN connection, each gets every
// version after its own since, in order, and a deleted tenant's deletion;
// the shared watch ends with the last watcher.
func TestHubServesManyWatchersFromOneListen(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := context.Background()
	var r [4]byte
	_, _ = rand.Read(r[:])
	// A channel of this test's own, so that only its listener is counted
	// (nothing notifies on it: the re-check delivers).
	channel := "hub_test_" + hex.EncodeToString(r[:])
	hub := s.NewHub(WatchConfig{Recheck: 20 * time.Millisecond, Channel: channel})
	tn := newTenant(t, s, "acme")
	_, v0, _ := s.GetTenant(ctx, tn.ID)

	const watchers = 20
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	outs := make([]chan Version, watchers)
	done := make(chan error, watchers)
	for i := range outs {
		outs[i] = make(chan Version, 100)
		since := map[string]int64{tn.ID: v0}
		if i%2 == 1 {
			since = nil // from the first version
		}
		go func() { done <- hub.Watch(wctx, since, func(v Version) error { outs[i] <- v; return nil }) }()
	}
	var last int64
	for i := range 5 {
		_, v, err := s.CreateTier(ctx, op, tn.ID, "tier-"+string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		last = v
	}
	next := func(i int) Version {
		select {
		case v := <-outs[i]:
			if v.TenantID != tn.ID {
				t.Fatalf("watcher %d: a version of another tenant: %+v", i, v)
			}
			return v
		case <-time.After(20 * time.Second):
			t.Fatalf("watcher %d: nothing delivered", i)
			return Version{}
		}
	}
	for i := range outs {
		from := v0 + 1
		if i%2 == 1 {
			from = 1
		}
		var got, want []int64
		for v := from; v <= last; v++ {
			want = append(want, v)
		}
		for len(got) < len(want) {
			got = append(got, next(i).Version)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("watcher %d: versions %v, want %v", i, got, want)
		}
	}
	if err := s.DeleteTenant(ctx, op, tn.ID); err != nil {
		t.Fatal(err)
	}
	for i := range outs {
		if v := next(i); !v.Deleted {
			t.Fatalf("watcher %d: %+v, want the deletion", i, v)
		}
	}

	listeners := func() (n int) {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query = $1`, `LISTEN "`+channel+`"`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := listeners(); n != 1 {
		t.Fatalf("%d LISTEN connections for %d watchers, want 1", n, watchers)
	}
	cancel()
	for range watchers {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("a watcher ended with %v", err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for listeners() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the shared watch outlived its watchers")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
