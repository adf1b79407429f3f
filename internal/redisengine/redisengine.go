// Package redisengine evaluates decisions in Redis or a Redis Cluster with
// Lua scripts that mirror package limit operation for operation, so the
// in-process engine and Redis give the same answers on the same inputs
// (the conformance suite of package enginetest checks it).
//
// The scripts under scripts/ are one file per algorithm family plus the
// decision driver; they are concatenated into one script so that a
// decision's rules, of any families, are evaluated in one atomic call.
package redisengine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/spinconn"
)

// Config configures an Engine. The zero value is usable.
type Config struct {
	// Prefix is prepended to every counter key, before its hash tag.
	Prefix string
	// MinTTL is the shortest expiry set on a key. A key expires once its
	// state equals a fresh one; keeping it longer is harmless, and the flat
	// scripts keep keys up to twice as long, or a minute longer when that
	// is less, rather than set an expiry on every write (flat.lua). 0
	// means 1s.
	MinTTL time.Duration
	// Batch coalesces concurrent decisions into pipelines: one write and
	// one read for many decisions. BatchSize caps a pipeline (0 means 128);
	// BatchWait is how long a flusher waits for more after the first call
	// (0: it takes what is queued and goes, adding no delay at low load);
	// Flushers pipelines may be in flight at once. 0 means 1 on one Redis:
	// while a pipeline is out, the next fills, and fewer, fuller pipelines
	// cost Redis and the decider less per decision than many small ones
	// (under 50 concurrent checks, 18 decisions a pipeline against 10.5
	// with 2 flushers: Redis CPU per decision -15%, POST /v1/check
	// +12–24%). On a cluster 0 means 2: a pipeline there waits for its
	// slowest node, and a second lets the next go meanwhile.
	Batch     bool
	BatchSize int
	BatchWait time.Duration
	Flushers  int
	// Timeout bounds how long Redis may take to answer a pipeline, from the
	// moment it is written (or longer, when its calls' budgets all leave
	// more): a slower answer fails its calls, as Redis's failure. It is apart from a decision's budget, which bounds the time
	// a call may wait in the decider's queue before it is sent (see
	// limit.ErrOverloaded); a decision takes at most both. 0 means
	// DefaultTimeout. Unbatched calls are bounded by their context alone.
	Timeout time.Duration
	// BreakerFailures consecutive failures of the calls to one Redis (on a
	// cluster, to one master) open its circuit breaker, which then refuses
	// the calls that would go there for BreakerCooldown before letting one
	// probe: their decisions follow their failure modes at once, rather
	// than each wait out its budget. Overload and cancelled calls count
	// neither way. 0 disables the breakers.
	BreakerFailures uint32
	BreakerCooldown time.Duration
	// Logger receives one line per breaker transition; nil means
	// slog.Default().
	Logger *slog.Logger
	// SyncTick is how often locally counted keys (rules with a Sync
	// interval, see local.go) are looked at for reconciliation; 0 means
	// 10ms, a negative value never (tests call Reconcile). MaxLocalKeys
	// caps the keys counted locally at once (0 means DefaultMaxLocalKeys);
	// beyond it, new keys are decided in Redis.
	SyncTick     time.Duration
	MaxLocalKeys int
	// Now, when set, is the clock of every decision and reconciliation in
	// place of Redis TIME, and of local counting in place of time.Now: for
	// tests.
	Now func() time.Time
}

// DefaultTimeout is how long Redis may take to answer a pipeline when
// Config.Timeout is 0: long enough for a decider whose CPU is saturated to
// read an answer Redis gave in time (a late read is counted as Redis's
// failure), short enough that a frozen Redis is found out within a second.
const DefaultTimeout = 500 * time.Millisecond

// Engine evaluates decisions in Redis. It is safe for concurrent use.
type Engine struct {
	client  Client
	cluster Cluster // client, when it is a Redis Cluster's; else nil
	cfg     Config
	slack   any
	// waiting holds the calls for the flushers, when batching.
	waiting *fairQueue
	stop    chan struct{}
	// pipelines and pipelined count flushes and the calls they carried.
	pipelines, pipelined atomic.Int64
	once                 sync.Once
	// minTTL is cfg.MinTTL in ms, boxed once for the scripts' arguments.
	minTTL  any
	statics argCache
	local   *localCounts
	// inRedis counts script calls waiting on Redis (Open's spin condition).
	inRedis atomic.Int64
	// ownClient: Close closes the client (Open made it); spins counts
	// its reads' spins.
	ownClient bool
	spins     *spinconn.Stats
	// evicting is what WatchEviction last found.
	evicting atomic.Int64
	breakers breakers
	failures atomic.Int64 // see Failures
	// failing is set while the last pipeline sent failed (a network error
	// or a timeout): calls expiring in the queue meanwhile waited on Redis
	// (ErrStalled), not on the decider.
	failing atomic.Bool
}

// New returns an Engine on client (a *redis.Client or *redis.ClusterClient:
// see Client and Cluster).
// It needs no connection: a decider starts even while Redis is down. The
// client should have ContextTimeoutEnabled, so that a decision's deadline
// bounds its Redis call, however slow Redis is.
func New(client Client, cfg Config) *Engine {
	if cfg.MinTTL <= 0 {
		cfg.MinTTL = time.Second
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 128
	}
	if cfg.Flushers <= 0 {
		cfg.Flushers = 1
		if _, cluster := client.(Cluster); cluster {
			cfg.Flushers = 2
		}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SyncTick == 0 {
		cfg.SyncTick = 10 * time.Millisecond
	}
	if cfg.MaxLocalKeys <= 0 {
		cfg.MaxLocalKeys = DefaultMaxLocalKeys
	}
	cluster, _ := client.(Cluster)
	e := &Engine{client: client, cluster: cluster, cfg: cfg, slack: float(limit.Slack), minTTL: cfg.MinTTL.Milliseconds(), stop: make(chan struct{})}
	e.local = newLocalCounts(e)
	if cfg.Batch {
		e.waiting = newFairQueue(2 * quantum)
		go e.waiting.expire(e.stop, func() error { return e.expired(context.DeadlineExceeded) })
		for range cfg.Flushers {
			go e.flusher()
		}
	}
	return e
}

// Close stops the flushers of a batching engine and local counting's
// reconciliations; calls after it fail.
func (e *Engine) Close() {
	e.once.Do(func() {
		close(e.stop)
		if e.ownClient {
			_ = e.client.Close()
		}
	})
}

// Preload loads the scripts on every master, so the first decisions need
// no EVAL. It is an optimisation: EVALSHA falls back to EVAL on NOSCRIPT.
func (e *Engine) Preload(ctx context.Context) error {
	load := func(ctx context.Context, c redis.Scripter) error {
		for _, s := range allScripts {
			if err := s.Load(ctx, c).Err(); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	if cc := e.cluster; cc != nil {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return load(ctx, c) })
	} else {
		err = load(ctx, e.client)
	}
	if err != nil {
		return fmt.Errorf("redisengine: load script: %w", err)
	}
	return nil
}

// AllowAll evaluates reqs as one all-or-nothing decision with Redis's clock
// and writes one Result per request into res; see limit.Engine.AllowAll.
// It is AllowBatch of one call, bounded by ctx alone.
func (e *Engine) AllowAll(ctx context.Context, reqs []limit.Request, res []limit.Result) (bool, error) {
	batch := []limit.Call{{Reqs: reqs, Res: res}}
	e.AllowBatch(ctx, 0, batch)
	return batch[0].Allowed, batch[0].Err
}

// AllowBatch answers each call of batch all-or-nothing, with Redis's
// clock, each within budget as well as ctx (0: ctx alone); see
// decide.Counters. Each call passes the circuit breakers of the masters
// its keys are on (Config.BreakerFailures). When batching, the calls made
// in one script call go to the flushers as one unit, to share a pipeline;
// those that are not (counted locally, or spanning a cluster's slots) run
// alongside.
//
// Requests with a Sync interval are counted locally when their algorithm
// allows it (see local.go).
func (e *Engine) AllowBatch(ctx context.Context, budget time.Duration, batch []limit.Call) {
	var deadline time.Time
	if budget > 0 {
		deadline = time.Now().Add(budget)
	}
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	if len(batch) == 1 {
		c := &batch[0]
		c.Allowed, c.Err = e.guarded(ctx, deadline, c.Reqs, c.Res)
		return
	}
	var (
		wg     sync.WaitGroup
		unit   []*call
		owners []*limit.Call
		passes []pass
	)
	cluster := e.cluster != nil
	for i := range batch {
		c := &batch[i]
		if len(c.Reqs) == 0 {
			c.Allowed = true
			continue
		}
		var (
			sc   *redis.Script
			keys []string
			args []any
			u    *call
		)
		alone := e.waiting == nil || e.localIndexes(c.Reqs) != nil
		if !alone {
			var err error
			u = &call{}
			if sc, keys, args, err = e.prepare("check", c.Reqs, e.nowArg(), u); err != nil {
				c.Err = err
				continue
			}
			alone = cluster && !sameSlot(keys)
		}
		if alone {
			dl := deadline // the closure's copy: deadline itself stays on the stack
			wg.Go(func() { c.Allowed, c.Err = e.guarded(ctx, dl, c.Reqs, c.Res) })
			continue
		}
		p, err := e.enter(ctx, c.Reqs)
		if err != nil {
			c.Err = err
			continue
		}
		u.script, u.keys, u.args, u.done, u.deadline = sc, keys, args, newDone(), deadline
		unit = append(unit, u)
		owners, passes = append(owners, c), append(passes, p)
	}
	if len(unit) > 0 {
		e.inRedis.Add(int64(len(unit)))
		e.queue(unit)
		for k, u := range unit {
			c := owners[k]
			reply, err := e.wait(ctx, u)
			if err != nil {
				c.Err = fmt.Errorf("redisengine: decide: %w", err)
			} else {
				c.Allowed, c.Err = e.decode(u.script, c.Reqs, reply, c.Res)
			}
			e.leave(passes[k], c.Err)
		}
		e.inRedis.Add(-int64(len(unit)))
	}
	wg.Wait()
}

// guarded decides one call through its masters' breakers (see
// AllowBatch).
func (e *Engine) guarded(ctx context.Context, deadline time.Time, reqs []limit.Request, res []limit.Result) (bool, error) {
	if len(reqs) == 0 {
		return true, nil
	}
	p, err := e.enter(ctx, reqs)
	if err != nil {
		return false, err
	}
	var allowed bool
	if local := e.localIndexes(reqs); local != nil {
		b := lazyDeadline{parent: ctx, deadline: deadline}
		allowed, err = e.local.allowAll(&b, reqs, local, res)
		b.release()
	} else {
		allowed, err = e.run(ctx, deadline, "check", reqs, e.nowArg(), res)
	}
	e.leave(p, err)
	return allowed, err
}

// lazyDeadline is a context bounded by a deadline, made at its first use:
// a decision counted locally mostly needs none.
type lazyDeadline struct {
	parent   context.Context
	deadline time.Time // zero: the parent's alone
	c        context.Context
	cancel   context.CancelFunc
}

func (b *lazyDeadline) ctx() context.Context {
	if b.c == nil {
		if !b.deadline.IsZero() {
			b.c, b.cancel = context.WithDeadline(b.parent, b.deadline)
		} else {
			b.c = b.parent
		}
	}
	return b.c
}

func (b *lazyDeadline) release() {
	if b.cancel != nil {
		b.cancel()
	}
}

// AllowAllAt is AllowAll at the time now (µs), for tests and replays.
func (e *Engine) AllowAllAt(ctx context.Context, reqs []limit.Request, now int64, res []limit.Result) (bool, error) {
	return e.run(ctx, time.Time{}, "check", reqs, strconv.FormatInt(now, 10), res)
}

// ReleaseAt ends a Concurrency lease on key at the time now (µs).
func (e *Engine) ReleaseAt(ctx context.Context, key string, l *limit.Limiter, now, lease int64) error {
	_, err := e.run(ctx, time.Time{}, "release", []limit.Request{{Key: key, Limiter: l, Lease: lease}}, strconv.FormatInt(now, 10), nil)
	return err
}

// Release ends the Concurrency lease of each request (its Lease) at
// Redis's time; see decide.Counters. While a breaker its keys pass is
// open, Redis is not asked: the leases end at their TTL.
func (e *Engine) Release(ctx context.Context, reqs []limit.Request) error {
	if open := e.breakerOpen(ctx, reqs); open != nil {
		return open
	}
	for _, r := range reqs {
		if _, err := e.run(ctx, time.Time{}, "release", []limit.Request{r}, "", nil); err != nil {
			e.failed(err)
			return err
		}
	}
	return nil
}

// Client is the engine's Redis client, for the work beside decisions that
// shares its Redis (package fleet).
func (e *Engine) Client() Client { return e.client }

// Adapt sets the fleet's limit of the adaptive concurrency rule l on key
// to the limit to (0 leaves it) and takes the count of its leases that expired
// unreleased since the last Adapt: requests dropped. It returns the limit
// before (0: none set) and that count. One updater of the fleet calls it
// once a window (see package fleet).
func (e *Engine) Adapt(ctx context.Context, key string, l *limit.Limiter, to int64) (before, expired int64, err error) {
	sc, keys, args, err := e.prepare("adapt", []limit.Request{{Key: key, Limiter: l, Cost: to}}, "", nil)
	if err != nil {
		return 0, 0, err
	}
	reply, err := e.runScript(ctx, sc, keys, args)
	if err != nil {
		return 0, 0, fmt.Errorf("redisengine: adapt: %w", err)
	}
	if len(reply) != 2 {
		return 0, 0, fmt.Errorf("redisengine: adapt: a reply of %d values", len(reply))
	}
	return reply[0], reply[1], nil
}

// maxLease bounds lease ids: Lua numbers are doubles, exact below 2^53.
const maxLease = 1 << 53

// run runs op on reqs in one script call (a decision spanning a cluster's
// slots in one per slot), by deadline as well as ctx (zero: ctx alone).
func (e *Engine) run(ctx context.Context, deadline time.Time, op string, reqs []limit.Request, now string, res []limit.Result) (bool, error) {
	if len(reqs) == 0 {
		return true, nil
	}
	into := &call{} // the call that carries the keys and args, when batched
	sc, keys, args, err := e.prepare(op, reqs, now, into)
	if err != nil {
		return false, err
	}
	if e.cluster != nil && op == "check" && !sameSlot(keys) {
		return e.acrossSlots(ctx, deadline, reqs, now, res)
	}
	reply, err := e.evalIn(ctx, deadline, into, sc, keys, args)
	if err != nil {
		return false, fmt.Errorf("redisengine: decide: %w", err)
	}
	if op != "check" {
		return true, nil
	}
	return e.decode(sc, reqs, reply, res)
}

// eval runs one script call by deadline as well as ctx (zero: ctx alone),
// through the flushers' pipelines when batching.
func (e *Engine) eval(ctx context.Context, deadline time.Time, sc *redis.Script, keys []string, args []any) ([]int64, error) {
	return e.evalIn(ctx, deadline, nil, sc, keys, args)
}

// evalIn is eval through call c when batching (nil: a new one).
func (e *Engine) evalIn(ctx context.Context, deadline time.Time, c *call, sc *redis.Script, keys []string, args []any) ([]int64, error) {
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	e.inRedis.Add(1)
	defer e.inRedis.Add(-1)
	if e.waiting != nil {
		return e.batched(ctx, deadline, c, sc, keys, args)
	}
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	return e.runScript(ctx, sc, keys, args)
}

// runScript runs one script call by itself, sending it again after a short
// pause while a cluster node answers that the keys' slot is moving
// (slotMoving), up to the end of ctx or about a second: an operator
// resharding delays the decisions of the slot it moves, and fails none
// that fit their time budget.
func (e *Engine) runScript(ctx context.Context, sc *redis.Script, keys []string, args []any) ([]int64, error) {
	pause := time.Millisecond
	for attempt := 0; ; attempt++ {
		reply, err := sc.Run(ctx, e.client, keys, args...).Int64Slice()
		e.followTopology(err)
		if err == nil || !slotMoving(err) || attempt == 60 {
			return reply, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// followTopology has a cluster client read the cluster's slots again after
// err, when err may mean they are served elsewhere now: a node that did not
// answer (gone, or too slow for the budget: a master that died, whose
// replica is taking its slots over) or one that says so (MOVED,
// CLUSTERDOWN). go-redis reads them again by itself on the redirections it
// follows, and otherwise once a minute: a failover would leave decisions
// to their failure modes for that minute, not for the seconds it takes.
// The reload runs in the background, one at a time, at most five a second.
func (e *Engine) followTopology(err error) {
	cc, ok := e.cluster, e.cluster != nil
	if !ok || err == nil {
		return
	}
	var answer redis.Error
	if errors.As(err, &answer) && !redis.HasErrorPrefix(err, "MOVED") && !redis.HasErrorPrefix(err, "CLUSTERDOWN") {
		return // the node answered for its slot
	}
	cc.ReloadState(context.Background())
}

// prepare picks the script for one call and builds its keys and arguments.
