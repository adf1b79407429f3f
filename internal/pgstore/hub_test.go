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

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
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
	outs := make([]chan policy.Version, watchers)
	done := make(chan error, watchers)
	for i := range outs {
		outs[i] = make(chan policy.Version, 100)
		since := map[string]int64{tn.ID: v0}
		if i%2 == 1 {
			since = nil // from the first version
		}
		go func() { done <- hub.Watch(wctx, since, func(v policy.Version) error { outs[i] <- v; return nil }) }()
	}
	var last int64
	for i := range 5 {
		_, v, err := s.CreateTier(ctx, op, tn.ID, "tier-"+string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		last = v
	}
	next := func(i int) policy.Version {
		select {
		case v := <-outs[i]:
			if v.TenantID != tn.ID {
				t.Fatalf("watcher %d: a version of another tenant: %+v", i, v)
			}
			return v
		case <-time.After(20 * time.Second):
			t.Fatalf("watcher %d: nothing delivered", i)
			return policy.Version{}
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

	first := make(chan policy.Version, 10)
	go func() { _ = hub.Watch(ctx, nil, func(v policy.Version) error { first <- v; return nil }) }()
	select { // the shared watch listens once the first watcher has its versions
	case <-first:
	case <-time.After(20 * time.Second):
		t.Fatal("the first watcher got nothing")
	}

	if err := db.Stop(); err != nil {
		t.Fatal(err)
	}
	second := make(chan policy.Version, 10)
	ended := make(chan error, 1)
	go func() { ended <- hub.Watch(ctx, nil, func(v policy.Version) error { second <- v; return nil }) }()
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

// A database that goes back to an earlier state under a running watch (a
// backup restored, a failover to a replica the last changes had not
// reached) is noticed: each watcher ahead of it is told the tenant's
// version now (Back), without any change to notify it, and then gets the
// versions committed after it, though they are numbered as the lost ones
// were.
func TestHubNoticesTheDatabaseWentBack(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := context.Background()
	hub := s.NewHub(WatchConfig{Recheck: 20 * time.Millisecond})
	tn := newTenant(t, s, "acme")
	_, v0, _ := s.GetTenant(ctx, tn.ID)
	for i := range 3 {
		if _, _, err := s.CreateTier(ctx, op, tn.ID, "lost-"+string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ahead, behind := make(chan policy.Version, 100), make(chan policy.Version, 100)
	go func() {
		_ = hub.Watch(wctx, map[string]int64{tn.ID: v0 + 3}, func(v policy.Version) error { ahead <- v; return nil })
	}()
	go func() {
		_ = hub.Watch(wctx, map[string]int64{tn.ID: v0}, func(v policy.Version) error { behind <- v; return nil })
	}()
	// behind catches up to v0+3 first: both are then ahead of the database
	// that goes back.
	for want := v0 + 1; want <= v0+3; want++ {
		if v := recv(t, behind); v.Version != want || v.Back {
			t.Fatalf("the watcher from %d: %+v, want version %d", v0, v, want)
		}
	}

	// The database goes back to v0: as a restore leaves it, nothing notified.
	if _, err := pool.Exec(ctx, `WITH d AS (DELETE FROM config_versions WHERE tenant_id = $1 AND version > $2)
		UPDATE tenants SET config_version = $2 WHERE id = $1`, tn.ID, v0); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan policy.Version{"ahead": ahead, "behind": behind} {
		if v := recv(t, ch); v != (policy.Version{TenantID: tn.ID, Version: v0, Back: true}) {
			t.Fatalf("watcher %s after the database went back: %+v, want back at %d", name, v, v0)
		}
	}
	// New changes take the lost changes' numbers, and are delivered.
	for i := range 2 {
		if _, _, err := s.CreateTier(ctx, op, tn.ID, "new-"+string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
		for name, ch := range map[string]chan policy.Version{"ahead": ahead, "behind": behind} {
			if v := recv(t, ch); v != (policy.Version{TenantID: tn.ID, Version: v0 + 1 + int64(i)}) {
				t.Fatalf("watcher %s, the change after the database went back: %+v, want version %d", name, v, v0+1+int64(i))
			}
		}
	}
}

// recv returns the next version of ch, failing after 20 seconds.
func recv(t *testing.T, ch chan policy.Version) policy.Version {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatal("nothing delivered")
		return policy.Version{}
	}
}
