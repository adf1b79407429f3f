package redisengine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// Decisions go on while the slots holding their counters move from one
// master to another (an operator resharding: CLUSTER SETSLOT MIGRATING and
// IMPORTING, MIGRATE of each key, SETSLOT NODE), each decision two rules
// whose keys share a slot: the engine follows the redirections (ASK
// while a slot is half moved, TRYAGAIN when a decision's keys are split
// between the two, MOVED after), none fails, and none admits more than a
// rule allows; once the slots have moved, every client gets exactly its
// limit.
func TestDecisionsWhileSlotsMigrate(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			t.Parallel()
			decideWhileMigrating(t, batch)
		})
	}
}

func decideWhileMigrating(t *testing.T, batch bool) {
	ctx := context.Background()
	cl := redistest.StartCluster(t)
	prefix := redistest.Prefix(t)
	const limitPerClient, clients = 40, 12
	hourly := limit.MustCompile(policy.Params{Algorithm: policy.FixedWindow, Limit: limitPerClient, Window: time.Hour})
	daily := limit.MustCompile(policy.Params{Algorithm: policy.SlidingWindow, Limit: 1000, Window: 24 * time.Hour})
	const now = 1_700_000_040_000_000

	nodes := make([]*redis.Client, 3)
	for i, addr := range cl.Addrs {
		nodes[i] = redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { nodes[i].Close() })
	}
	// The clients whose counters the first master holds: their slots move
	// to the second.
	var moving []int64
	names := make([]string, 0, clients)
	for i := 0; len(names) < clients; i++ {
		name := fmt.Sprintf("client-%d", i)
		slot, err := nodes[0].ClusterKeySlot(ctx, name).Result()
		if err != nil {
			t.Fatal(err)
		}
		if slot < 16384/3 {
			names = append(names, name)
			moving = append(moving, slot)
		}
	}

	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, PoolSize: 20})
	t.Cleanup(func() { c.Close() })
	e := New(c, Config{Prefix: prefix, MinTTL: testTTL, Batch: batch})
	t.Cleanup(e.Close)

	admitted := make([]atomic.Int64, clients)
	var decided, errs atomic.Int64
	var firstErr atomic.Value
	decideOnce := func(i int) {
		tag := "{" + names[i] + "}"
		reqs := []limit.Request{{Key: tag + "hourly", Limiter: hourly, Cost: 1}, {Key: tag + "daily", Limiter: daily, Cost: 1}}
		res := make([]limit.Result, 2)
		ok, err := e.AllowAllAt(ctx, reqs, now, res)
		decided.Add(1)
		switch {
		case err != nil:
			errs.Add(1)
			firstErr.CompareAndSwap(nil, err.Error())
		case ok:
			admitted[i].Add(1)
		}
	}

	// Deciding, until the slots have moved.
	moved := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for n := w; ; n++ {
				select {
				case <-moved:
					return
				default:
				}
				decideOnce(n % clients)
			}
		})
	}
	// progress waits until the workers have made n more decisions, or,
	// with pace, at most pace: within a slot's move the workers may all
	// wait on it (their calls refused until it ends), and pace lets it
	// go on.
	progress := func(n int64, pace time.Duration) error {
		target, deadline := decided.Load()+n, time.Now().Add(10*time.Second)
		if pace > 0 {
			deadline = time.Now().Add(pace)
		}
		for decided.Load() < target {
			if time.Now().After(deadline) {
				if pace > 0 {
					return nil
				}
				return fmt.Errorf("decisions stalled at %d", decided.Load())
			}
			time.Sleep(time.Millisecond)
		}
		return nil
	}
	migrate := func() error {
		if err := progress(clients*6, 0); err != nil { // every client has counters to move
			return err
		}
		slots := make([]int, len(moving))
		for i, slot := range moving {
			slots[i] = int(slot)
		}
		var err error
		// One key at a time, so that decisions meet the slot split.
		cl.MoveSlots(t, cl.Servers[0], cl.Servers[1], slots, func(slotDone bool) {
			pace := 20 * time.Millisecond
			if slotDone {
				pace = 0
			}
			if err == nil {
				err = progress(6, pace)
			}
		})
		return err
	}
	err := migrate()
	close(moved)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if n := errs.Load(); n != 0 {
		t.Fatalf("%d decisions failed while the slots moved: %v", n, firstErr.Load())
	}

	// The slots have moved: the second master holds every counter, the
	// first none.
	for _, name := range names {
		pattern := prefix + "*{" + name + "}*"
		on0, err0 := nodes[0].Keys(ctx, pattern).Result()
		on1, err1 := nodes[1].Keys(ctx, pattern).Result()
		if err0 != nil || err1 != nil || len(on0) != 0 || len(on1) == 0 {
			t.Fatalf("counters of %s after the move: %v on the first master, %v on the second (%v, %v)", name, on0, on1, err0, err1)
		}
	}
	for i := range clients {
		if got := admitted[i].Load(); got > limitPerClient {
			t.Fatalf("%s admitted %d times while its slot moved; its rule allows %d", names[i], got, limitPerClient)
		}
	}
	// Afterwards every decision is answered, and each client gets exactly
	// its limit: nothing lost in the move, nothing counted twice.
	errs.Store(0)
	for i := range clients {
		for range limitPerClient + 5 {
			decideOnce(i)
		}
		if got := admitted[i].Load(); got != limitPerClient {
			t.Errorf("%s: %d admitted in all, want exactly %d", names[i], got, limitPerClient)
		}
	}
	if n := errs.Load(); n != 0 {
		t.Fatalf("%d decisions failed after the move: %v", n, firstErr.Load())
	}
}
