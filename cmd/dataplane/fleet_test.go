package main

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pgstore"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// One fleet, one limit: three deciders on one Redis, at their default
// share, while Redis is frozen. A local rule of 12 an hour admits a client
// 12 in all, each decider its third, every answer degraded. A fourth decider joins, the four take a quarter each
// within seconds, and a new client is admitted 12 in all again: the
// shares follow the fleet, never N times the limit. A closed rule admits
// nothing meanwhile. Redis killed rather than frozen, the same.
func TestFleetSharesALimitThroughAnOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("four decider processes and a frozen Redis")
	}
	store := pgstore.New(pgtest.Pool(t))
	const limit = 12
	key := tenantOn(t, store, "fleet", policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true, FailureMode: policy.FailLocal,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: limit, Window: time.Hour}})
	closedKey := tenantOn(t, store, "closed", policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true, FailureMode: policy.FailClosed,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: limit, Window: time.Hour}})
	srv := redistest.StartServer(t)
	cp := controlPlane(t, store)
	args := []string{"-control-plane", cp, "-redis-url", "redis://" + srv.Addr, "-redis-prefix", redistest.Prefix(t)}
	var fleet []deciderAddrs
	join := func() {
		fleet = append(fleet, deciderProcess(t, args, "SLUICE_DECIDER_KEY=dk"))
		want := 1 / float64(len(fleet))
		deadline := time.Now().Add(15 * time.Second)
		for _, d := range fleet {
			for sumOf(metrics(t, d.admin), "sluice_local_share") != want {
				if time.Now().After(deadline) {
					t.Fatalf("decider %s enforces a share of %v with %d deciders, want %v", d.base, sumOf(metrics(t, d.admin), "sluice_local_share"), len(fleet), want)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	// admitted sends 10 checks of client of key's tenant to each decider at
	// once and returns how many the fleet admitted.
	admitted := func(key, client string) int64 {
		var n atomic.Int64
		var wg sync.WaitGroup
		httpClient := &http.Client{Timeout: 30 * time.Second}
		for _, d := range fleet {
			for range 10 {
				wg.Go(func() {
					ok, degraded, err := checkOnce(httpClient, d.base, key, client)
					switch {
					case err != nil:
						t.Errorf("%s: %v", d.base, err)
					case degraded != "store_unavailable" && degraded != "overload":
						// Overload while the first pipeline has not yet failed:
						// answered at the same share.
						t.Errorf("%s: an answer degraded by %q with Redis frozen, want store_unavailable", d.base, degraded)
					case ok:
						n.Add(1)
					}
				})
			}
		}
		wg.Wait()
		return n.Load()
	}
	for range 3 {
		join()
	}
	srv.Pause(t)
	if n := admitted(key, "alice"); n != limit {
		t.Errorf("three deciders admitted alice %d times with Redis frozen, want %d (a third of %d each)", n, limit, limit)
	}
	if n := admitted(closedKey, "alice"); n != 0 {
		t.Errorf("three deciders admitted a closed rule's client %d times with Redis frozen, want 0", n)
	}
	join()
	if n := admitted(key, "bob"); n != limit {
		t.Errorf("four deciders admitted bob %d times with Redis frozen, want %d (a quarter of %d each)", n, limit, limit)
	}
	// Killed rather than frozen: the same.
	srv.Resume(t)
	srv.Stop(t)
	if n := admitted(key, "carol"); n != limit {
		t.Errorf("four deciders admitted carol %d times with Redis killed, want %d", n, limit)
	}
	if n := admitted(closedKey, "carol"); n != 0 {
		t.Errorf("four deciders admitted a closed rule's client %d times with Redis killed, want 0", n)
	}
}
