package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/migrations"
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

// A watcher that joins while the database is down (the shared watch
// listening already) waits for it rather than ending, and then gets what
// is committed once it is back.
func TestHubWatcherJoiningDuringAnOutage(t *testing.T) {
	t.Parallel()
	db := pgtest.Private(t)
	if err := migrations.Apply(db.URL()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := pgxpool.New(ctx, db.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := New(pool)
	hub := s.NewHub(WatchConfig{Recheck: 50 * time.Millisecond})
	tn := newTenant(t, s, "acme")

	first := make(chan Version, 10)
	go func() { _ = hub.Watch(ctx, nil, func(v Version) error { first <- v; return nil }) }()
	select { // the shared watch listens once the first watcher has its versions
	case <-first:
	case <-time.After(20 * time.Second):
		t.Fatal("the first watcher got nothing")
	}

	if err := db.Stop(); err != nil {
		t.Fatal(err)
	}
	second := make(chan Version, 10)
	ended := make(chan error, 1)
	go func() { ended <- hub.Watch(ctx, nil, func(v Version) error { second <- v; return nil }) }()
	if _, err := db.Start(); err != nil {
		t.Fatal(err)
	}
	var v int64
	deadline := time.Now().Add(20 * time.Second)
	for { // the pool's connections died with the server: retry until one is new
		_, v, err = s.CreateTier(ctx, op, tn.ID, "pro")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		select {
		case got := <-second:
			if got.TenantID == tn.ID && got.Version >= v {
				return
			}
		case err := <-ended:
			t.Fatalf("the watcher that joined in the outage ended: %v", err)
		case <-time.After(20 * time.Second):
			t.Fatalf("version %d never reached the watcher that joined in the outage", v)
		}
	}
}
