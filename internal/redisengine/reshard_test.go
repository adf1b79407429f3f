package redisengine

import (
	"context"
	"fmt"
	"strings"
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
	ids := make([]string, 3)
	for i, addr := range cl.Addrs {
		nodes[i] = redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { nodes[i].Close() })
		id, err := nodes[i].Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
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
		src, dst := nodes[0], nodes[1]
		dstHost, dstPort, _ := strings.Cut(cl.Addrs[1], ":")
		for _, slot := range moving {
			if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[0]).Err(); err != nil {
				return fmt.Errorf("importing %d: %w", slot, err)
			}
			if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[1]).Err(); err != nil {
				return fmt.Errorf("migrating %d: %w", slot, err)
			}
			for {
				keys, err := src.ClusterGetKeysInSlot(ctx, int(slot), 1).Result()
				if err != nil {
					return err
				}
				if len(keys) == 0 {
					break
				}
				// One key at a time, so that decisions meet the slot split.
				if err := src.Do(ctx, "MIGRATE", dstHost, dstPort, keys[0], 0, 5000).Err(); err != nil {
					return fmt.Errorf("migrate %s: %w", keys[0], err)
				}
				if err := progress(6, 20*time.Millisecond); err != nil {
					return err
				}
			}
			for _, n := range []*redis.Client{dst, src, nodes[2]} {
				if err := n.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", ids[1]).Err(); err != nil {
					return fmt.Errorf("node %d: %w", slot, err)
				}
			}
			if err := progress(6, 0); err != nil {
				return err
			}
		}
		return nil
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
