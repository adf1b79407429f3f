package redisengine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A reset on one engine deletes the counters, so the next request of each
// key meets a fresh limiter on every engine: strictly counted keys at
// once, locally counted ones on every engine's view too, as each engine
// watching resets drops its view and hands the keys on (for the deny
// cache).
func TestResetReachesEveryEngine(t *testing.T) {
	t.Parallel()
	clk := newClock()
	es, _ := localDeciders(t, 2, clk, true)
	a, b := es[0], es[1]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	forgotten := make(chan []string, 10)
	ready := make(chan struct{})
	go b.WatchResets(ctx, func(keys []string) { forgotten <- keys }, slog.Default(), ready)
	<-ready

	strict := limit.Request{Key: "{alice}strict", Limiter: window10, Cost: 1}
	local := limit.Request{Key: "{alice}local", Limiter: bucket10, Cost: 1, Sync: 100 * time.Millisecond}
	for _, rq := range []limit.Request{strict, local} {
		for _, e := range es {
			for range 10 {
				decideOne(t, e, rq)
			}
		}
		for i, e := range es {
			if ok, _ := decideOne(t, e, rq); ok {
				t.Fatalf("%s on engine %d: admitted past its limit", rq.Key, i)
			}
		}
	}

	if err := a.Reset(ctx, []limit.Request{strict, local}); err != nil {
		t.Fatal(err)
	}
	select {
	case keys := <-forgotten:
		if !slices.Equal(keys, []string{strict.Key, local.Key}) {
			t.Fatalf("engine b was told of %v", keys)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("engine b never heard of the reset")
	}
	for _, rq := range []limit.Request{strict, local} {
		for i, e := range es {
			if ok, r := decideOne(t, e, rq); !ok || r.Remaining < 8 {
				t.Fatalf("%s on engine %d after the reset: %v %+v, want a fresh limiter", rq.Key, i, ok, r)
			}
		}
	}
	// Other keys keep their counts.
	other := limit.Request{Key: "{bob}strict", Limiter: window10, Cost: 1}
	for range 10 {
		decideOne(t, a, other)
	}
	if err := a.Reset(ctx, []limit.Request{strict}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := decideOne(t, b, other); ok {
		t.Fatal("a reset of alice's counter admitted bob past his limit")
	}
}

// On a cluster a reset deletes keys of several slots in one call, and the
// broadcast reaches an engine subscribed through another connection.
func TestResetOnCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	prefix := redistest.Prefix(t)
	a := New(cl.Client(t), Config{Prefix: prefix, MinTTL: testTTL})
	b := New(cl.Client(t), Config{Prefix: prefix, MinTTL: testTTL})
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	forgotten := make(chan []string, 1)
	ready := make(chan struct{})
	go b.WatchResets(ctx, func(keys []string) { forgotten <- keys }, slog.Default(), ready)
	<-ready
	var reqs []limit.Request
	for i := range 6 { // keys of different slots
		rq := limit.Request{Key: fmt.Sprintf("{client-%d}r", i), Limiter: window10, Cost: 10}
		if ok, _ := decideOne(t, a, rq); !ok {
			t.Fatalf("client %d: the first request of 10 rejected", i)
		}
		reqs = append(reqs, rq)
	}
	if err := a.Reset(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	for _, rq := range reqs {
		if ok, _ := decideOne(t, b, rq); !ok {
			t.Fatalf("%s after its reset: rejected", rq.Key)
		}
	}
	select {
	case keys := <-forgotten:
		if len(keys) != len(reqs) {
			t.Fatalf("the other engine was told of %v", keys)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the other engine never heard of the reset")
	}
}
