package redisengine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
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
	localWindow := limit.Request{Key: "{alice}window", Limiter: window10, Cost: 1, Sync: 100 * time.Millisecond}
	for _, rq := range []limit.Request{strict, local, localWindow} {
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

	if err := a.Reset(ctx, []limit.Request{strict, local, localWindow}); err != nil {
		t.Fatal(err)
	}
	select {
	case keys := <-forgotten:
		if !slices.Equal(keys, []string{strict.Key, local.Key, localWindow.Key}) {
			t.Fatalf("engine b was told of %v", keys)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("engine b never heard of the reset")
	}
	for _, rq := range []limit.Request{strict, local, localWindow} {
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

// holdSync holds the replies of sync.lua calls, once armed: each call runs
// on Redis, then waits for release before its caller sees the reply.
type holdSync struct {
	armed   atomic.Bool
	held    chan struct{} // a reply is held
	release chan struct{}
}

func (h *holdSync) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdSync) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *holdSync) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); h.armed.Load() && len(args) > 1 && args[1] == syncScript.Hash() {
			h.held <- struct{}{}
			<-h.release
		}
		return err
	}
}

// A reconciliation that read a key's state before its reset and answers
// after it does not bring the old state back into the local view.
func TestResetDuringAReconciliation(t *testing.T) {
	t.Parallel()
	_, prefix := redistest.Client(t)
	hold := &holdSync{held: make(chan struct{}), release: make(chan struct{})}
	c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	c.AddHook(hold)
	t.Cleanup(func() { c.Close() })
	clk := newClock()
	e := New(c, Config{Prefix: prefix, MinTTL: testTTL, SyncTick: -1, Now: clk.Now})
	t.Cleanup(e.Close)
	ctx := context.Background()
	if err := e.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	rq := limit.Request{Key: "{alice}window", Limiter: window10, Cost: 1, Sync: 100 * time.Millisecond}
	for range 10 {
		decideOne(t, e, rq)
	}
	clk.advance(100 * time.Millisecond)
	hold.armed.Store(true)
	done := make(chan struct{})
	go func() { e.Reconcile(ctx); close(done) }() // sends the 10, reads them back, held
	<-hold.held
	if err := e.Reset(ctx, []limit.Request{rq}); err != nil {
		t.Fatal(err)
	}
	hold.armed.Store(false)
	close(hold.release)
	<-done
	if ok, r := decideOne(t, e, rq); !ok || r.Remaining != 9 {
		t.Fatalf("after the reset: %v %+v, want a fresh window", ok, r)
	}
}
