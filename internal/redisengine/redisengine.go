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
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/spinconn"
)

//go:embed scripts/*.lua
var scripts embed.FS

// script is the decision script: the families, then the driver.
var script = redis.NewScript(loadScript("clock", "common", "meter", "window", "log", "lease", "decide"))

// single and window1, the flat scripts, decide the commonest decisions,
// one rule of the meter family (single) or of the fixed or weighted sliding
// window (window1); they answer as script would, for a fraction of its
// Redis CPU.
var (
	single  = redis.NewScript(flatScript("single"))
	window1 = redis.NewScript(flatScript("window1"))
)

// flatScript is flat.lua with the step of family in place of its line
// "-- step", and load.lua and store.lua of "-- load" and "-- store".
func flatScript(family string) string {
	return insert(loadScript("clock", "flat"), "-- load", "load", "-- step", family, "-- store", "store")
}

// insert returns src with each line that is marks[i] (the mark and its
// indentation) replaced by the script marks[i+1]. Each mark must stand
// once.
func insert(src string, marks ...string) string {
	for i := 0; i+1 < len(marks); i += 2 {
		mark := marks[i] + "\n"
		if strings.Count(src, mark) != 1 {
			panic("redisengine: no single " + marks[i] + " to replace") // a build mistake
		}
		src = strings.Replace(src, mark, loadScript(marks[i+1]), 1)
	}
	return src
}

// multi decides decisions of several rules of the flat scripts' families,
// for about half script's Redis CPU (multi.lua).
var multi = redis.NewScript(multiScript())

// multiScript is multi.lua with the families' steps in place of its lines
// "-- meter step" and "-- window step", and load.lua and store.lua of
// "-- load" and "-- store".
func multiScript() string {
	return insert(loadScript("clock", "multi"), "-- load", "load", "-- meter step", "single", "-- window step", "window1", "-- store", "store")
}

// syncScript reconciles locally counted rules with the shared state.
var syncScript = redis.NewScript(loadScript("clock", "sync"))

// allScripts lists every script, for Preload.
var allScripts = []*redis.Script{script, single, window1, multi, syncScript}

func loadScript(names ...string) string {
	var b strings.Builder
	for _, n := range names {
		src, err := scripts.ReadFile("scripts/" + n + ".lua")
		if err != nil {
			panic("redisengine: missing embedded script " + n) // a build mistake
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	return b.String()
}

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
	client redis.UniversalClient
	cfg    Config
	slack  any
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

// New returns an Engine on client (a *redis.Client or *redis.ClusterClient).
// It needs no connection: a decider starts even while Redis is down. The
// client should have ContextTimeoutEnabled, so that a decision's deadline
// bounds its Redis call, however slow Redis is.
func New(client redis.UniversalClient, cfg Config) *Engine {
	if cfg.MinTTL <= 0 {
		cfg.MinTTL = time.Second
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 128
	}
	if cfg.Flushers <= 0 {
		cfg.Flushers = 1
		if _, cluster := client.(*redis.ClusterClient); cluster {
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
	e := &Engine{client: client, cfg: cfg, slack: float(limit.Slack), minTTL: cfg.MinTTL.Milliseconds(), stop: make(chan struct{})}
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
	if cc, ok := e.client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return load(ctx, c) })
	} else {
		err = load(ctx, e.client)
	}
	if err != nil {
		return fmt.Errorf("redisengine: load script: %w", err)
	}
	return nil
}

// Evicting lists the Redis nodes (masters) that may evict keys, counters
// among them, when full: a maxmemory with a policy other than noeviction
// (every key of the engine has an expiry, so the volatile-* policies evict
// them too). An evicted counter starts afresh, and its client is admitted
// beyond its limit without an error to show it; with noeviction a full
// Redis refuses writes instead, and decisions follow their failure modes.
// Each is "address: policy". A Redis that refuses CONFIG (some managed
// ones) gives an error.
func (e *Engine) Evicting(ctx context.Context) ([]string, error) {
	var (
		mu  sync.Mutex
		out []string
	)
	check := func(ctx context.Context, c *redis.Client) error {
		cfg, err := c.ConfigGet(ctx, "maxmemory*").Result()
		if err != nil {
			return err
		}
		if policy := cfg["maxmemory-policy"]; cfg["maxmemory"] != "0" && policy != "noeviction" {
			mu.Lock()
			out = append(out, c.Options().Addr+": "+policy)
			mu.Unlock()
		}
		return nil
	}
	var err error
	switch c := e.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, check)
	case *redis.Client:
		err = check(ctx, c)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redisengine: read the memory policy: %w", err)
	}
	slices.Sort(out)
	return out, nil
}

// WatchEviction checks Evicting now and every interval until ctx ends,
// keeping what it found for EvictingNodes (a metric) and logging a warning
// whenever the nodes that may evict change to some. A Redis that refuses
// CONFIG leaves the count at 0 and says nothing.
func (e *Engine) WatchEviction(ctx context.Context, every time.Duration, logger *slog.Logger) {
	var last string
	for {
		if nodes, err := e.Evicting(ctx); err == nil {
			e.evicting.Store(int64(len(nodes)))
			if now := strings.Join(nodes, ", "); now != last {
				if now != "" {
					logger.WarnContext(ctx, "redis may evict counters when full, admitting their clients afresh; set maxmemory-policy noeviction",
						"nodes", nodes)
				}
				last = now
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// EvictingNodes is how many nodes WatchEviction last found may evict.
func (e *Engine) EvictingNodes() int64 { return e.evicting.Load() }

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
	_, cluster := e.client.(*redis.ClusterClient)
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
		)
		alone := e.waiting == nil || e.localIndexes(c.Reqs) != nil
		if !alone {
			var err error
			if sc, keys, args, err = e.prepare("check", c.Reqs, e.nowArg()); err != nil {
				c.Err = err
				continue
			}
			alone = cluster && !sameSlot(keys)
		}
		if alone {
			wg.Go(func() { c.Allowed, c.Err = e.guarded(ctx, deadline, c.Reqs, c.Res) })
			continue
		}
		p, err := e.enter(ctx, c.Reqs)
		if err != nil {
			c.Err = err
			continue
		}
		unit = append(unit, &call{script: sc, keys: keys, args: args, done: make(chan struct{}), deadline: deadline})
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

// maxLease bounds lease ids: Lua numbers are doubles, exact below 2^53.
const maxLease = 1 << 53

// run runs op on reqs in one script call (a decision spanning a cluster's
// slots in one per slot), by deadline as well as ctx (zero: ctx alone).
func (e *Engine) run(ctx context.Context, deadline time.Time, op string, reqs []limit.Request, now string, res []limit.Result) (bool, error) {
	if len(reqs) == 0 {
		return true, nil
	}
	sc, keys, args, err := e.prepare(op, reqs, now)
	if err != nil {
		return false, err
	}
	if _, ok := e.client.(*redis.ClusterClient); ok && op == "check" && !sameSlot(keys) {
		return e.acrossSlots(ctx, deadline, reqs, now, res)
	}
	reply, err := e.eval(ctx, deadline, sc, keys, args)
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
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	e.inRedis.Add(1)
	defer e.inRedis.Add(-1)
	if e.waiting != nil {
		return e.batched(ctx, deadline, sc, keys, args)
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
	cc, ok := e.client.(*redis.ClusterClient)
	if !ok || err == nil {
		return
	}
	var answer redis.Error
	if errors.As(err, &answer) && !redis.HasErrorPrefix(err, "MOVED") && !redis.HasErrorPrefix(err, "CLUSTERDOWN") {
		return // the node answered for its slot
	}
	cc.ReloadState(context.Background())
}

// Shards names the Redis Cluster masters (their addresses) that hold reqs'
// keys: first that of the first key, others those of the rest that differ
// from it, each once (nil for a decision on one master: most); "" on one
// Redis. Each master has a breaker of its own (see enter), and a decision
// whose keys span masters (rules keyed by different descriptors) passes
// each one's; its failure names the master that failed (see shardError).
func (e *Engine) Shards(ctx context.Context, reqs []limit.Request) (first string, others []string) {
	cc, ok := e.client.(*redis.ClusterClient)
	if !ok || len(reqs) == 0 {
		return "", nil
	}
	first = e.master(ctx, cc, reqs[0].Key)
	slot := Slot(e.cfg.Prefix + reqs[0].Key)
	for _, rq := range reqs[1:] {
		if s := Slot(e.cfg.Prefix + rq.Key); s != slot {
			if m := e.master(ctx, cc, rq.Key); m != first && !slices.Contains(others, m) {
				others = append(others, m)
			}
		}
	}
	return first, others
}

// master is the address of the master that holds key, "" when the cluster
// client does not know it.
func (e *Engine) master(ctx context.Context, cc *redis.ClusterClient, key string) string {
	c, err := cc.MasterForKey(ctx, e.cfg.Prefix+key)
	if err != nil {
		return ""
	}
	return c.Options().Addr
}

// shardError is the failure of a decision spanning cluster masters on one
// of them, shard: it counts against that master's breaker alone.
type shardError struct {
	shard string
	err   error
}

func (e *shardError) Error() string { return e.err.Error() }
func (e *shardError) Unwrap() error { return e.err }

// onShard wraps err, the failure of a call on key's slot, as that master's.
func (e *Engine) onShard(ctx context.Context, key string, err error) error {
	cc, ok := e.client.(*redis.ClusterClient)
	if !ok {
		return err
	}
	return &shardError{shard: e.master(ctx, cc, key), err: err}
}

// slotMoving reports whether err is a cluster node's answer while the
// slot of a call's keys moves to another node: TRYAGAIN (the call's keys
// are split between the two), or a redirection go-redis stopped following
// (it follows a few, and a pipeline's ASK not always).
func slotMoving(err error) bool {
	return redis.HasErrorPrefix(err, "TRYAGAIN") || redis.HasErrorPrefix(err, "ASK") || redis.HasErrorPrefix(err, "MOVED")
}

// prepare picks the script for one call and builds its keys and arguments.
// A rule's arguments that depend only on its limiter are formatted once
// per limiter (see statics): a decision allocates little beyond its slices.
func (e *Engine) prepare(op string, reqs []limit.Request, now string) (*redis.Script, []string, []any, error) {
	keys := make([]string, len(reqs))
	nowArg := any(now)
	if now == "" {
		nowArg = redisTime
	}
	if op == "check" && len(reqs) == 1 {
		rq := reqs[0]
		if st := e.statics.get(rq.Limiter); st.single != nil { // a limiter a flat script decides
			keys[0] = e.cfg.Prefix + rq.Key
			args := make([]any, 0, flatArgs+len(st.single))
			args = append(args, nowArg, e.minTTL, rq.Cost, firstGroup)
			return st.singleScript, keys, append(args, st.single...), nil
		}
	}
	if op == "check" && len(reqs) > 1 {
		if args, ok := e.multiArgs(reqs, nowArg); ok {
			for i, rq := range reqs {
				keys[i] = e.cfg.Prefix + rq.Key
			}
			return multi, keys, args, nil
		}
	}
	args := make([]any, 0, 4+20*len(reqs))
	args = append(args, nowArg, e.slack, e.minTTL, op)
	for i, rq := range reqs {
		if rq.Lease < 0 || rq.Lease >= maxLease {
			return nil, nil, nil, fmt.Errorf("redisengine: lease %d outside [0, 2^53)", rq.Lease)
		}
		keys[i] = e.cfg.Prefix + rq.Key
		st := e.statics.get(rq.Limiter)
		args = append(args, st.algorithm, rq.Cost, rq.Lease, flag(rq.Shadow))
		args = appendGeneral(args, st, now)
	}
	return script, keys, args, nil
}

// redisTime is the "now" argument that makes a script read Redis TIME.
var redisTime any = ""

// flatArgs is how many of a flat script's arguments (flat.lua) come before
// the parameter group of a call of one key: now, minimum TTL, the key's
// cost and its group. flatReply is the length of their reply per key.
const flatArgs, flatReply = 4, 5

// multiArgs returns the arguments of multi.lua for the decision reqs:
// false when a rule is of neither of its families, or two share a key
// (multi.lua reads each rule's state before writing any).
func (e *Engine) multiArgs(reqs []limit.Request, now any) ([]any, bool) {
	var stBuf [4]*limiterArgs
	sts := stBuf[:0]
	for i, rq := range reqs {
		st := e.statics.get(rq.Limiter)
		if st.multi == nil {
			return nil, false
		}
		for _, other := range reqs[:i] {
			if other.Key == rq.Key {
				return nil, false
			}
		}
		sts = append(sts, st)
	}
	// A group per rule: a merged call (see wires) keeps one of each.
	args := make([]any, 0, 3+multiGroup*len(reqs)+1+2*len(reqs))
	args = append(args, now, e.minTTL, len(reqs))
	for _, st := range sts {
		args = append(args, st.multi...)
	}
	args = append(args, len(reqs))
	for i, rq := range reqs {
		g := i + 1
		if rq.Shadow {
			g = -g
		}
		args = append(args, rq.Cost, g)
	}
	return args, true
}

// multiGroup is how many fields a parameter group of multi.lua has.
const multiGroup = 7

// firstGroup is the group argument of a flat script's one key.
var firstGroup any = 1

// decode reads the reply of sc to reqs into res and says whether the
// decision admitted them.
func (e *Engine) decode(sc *redis.Script, reqs []limit.Request, reply []int64, res []limit.Result) (bool, error) {
	if sc == script {
		return decode(reply, len(reqs), res)
	}
	// multi.lua's reply opens with the decision; a flat script's one rule
	// decides alone, unless it is a shadow rule.
	n := flatReply * len(reqs)
	if sc == multi {
		n++
	}
	if len(reply) != n || sc != multi && len(reqs) != 1 {
		return false, fmt.Errorf("redisengine: reply of %d values for %d rules", len(reply), len(reqs))
	}
	admitted := reply[0] == 1 || reqs[0].Shadow
	if sc == multi {
		admitted, reply = reply[0] == 1, reply[1:]
	}
	for i, rq := range reqs {
		v := reply[flatReply*i:]
		r := limit.Result{Allowed: v[0] == 1, Limit: e.statics.get(rq.Limiter).shown, Remaining: v[1],
			ResetAfter: us(v[2]), RetryAfter: us(v[3]), Delay: us(v[4])}
		if v[3] < 0 {
			r.RetryAfter = limit.Never
		}
		res[i] = r
	}
	return admitted, nil
}

// decode reads decide.lua's reply for n rules into res.
func decode(reply []int64, n int, res []limit.Result) (bool, error) {
	if len(reply) != 1+6*n {
		return false, fmt.Errorf("redisengine: reply of %d values for %d rules", len(reply), n)
	}
	for i := range n {
		v := reply[1+6*i:]
		r := limit.Result{Allowed: v[0] == 1, Limit: v[1], Remaining: v[2],
			ResetAfter: us(v[3]), RetryAfter: us(v[4]), Delay: us(v[5])}
		if v[4] < 0 {
			r.RetryAfter = limit.Never
		}
		res[i] = r
	}
	return reply[0] == 1, nil
}

func us(v int64) time.Duration { return time.Duration(v) * time.Microsecond }

// limiterArgs are the arguments of a limiter's rule that depend only on
// the limiter, formatted once. Floats are sent in their shortest exact
// form, so Lua parses the same doubles.
type limiterArgs struct {
	algorithm any
	// general are decide.lua's fields from capacity on; single are the
	// fields from capacity on of singleScript, the flat script that decides
	// the limiter's rule alone (nil when none does).
	general, single []any
	singleScript    *redis.Script
	multi           []any // the limiter's parameter group in multi.lua (nil: none)
	shown           int64 // the limit answers show
	// family is the limiter's sync.lua family when it can be counted
	// locally (see local.go), else -1; param is its sync.lua parameter.
	family   int
	param    any
	interval float64 // µs per unit, for the meters
	window   int64   // µs, for the fixed window
	// calendar and zone are a calendar window's (CalendarNone: none);
	// edges its last edges (limit.CalendarEdges), reused while the
	// decider's clock stays in their middle window.
	calendar policy.Calendar
	zone     *time.Location
	edges    atomic.Pointer[[4]int64]
}

func newLimiterArgs(l *limit.Limiter) *limiterArgs {
	c := l.Constants()
	window := c.Window
	a := &limiterArgs{algorithm: int(c.Algorithm), family: -1, interval: c.Interval, window: c.Window, shown: c.Shown}
	// window1.lua's kind: 0 fixed, 1 sliding, 1 + the calendar for weeks,
	// months and years in UTC, which it computes from day counts; a UTC
	// calendar day is the epoch's 24 hours.
	kind, flatWindow := flag(c.Algorithm == policy.SlidingWindow), c.Window
	utc := c.Zone == time.UTC
	if c.Calendar != policy.CalendarNone {
		// decide.lua's calendar window: its edges, from the decider's
		// clock, are each call's (see appendGeneral); local counting takes
		// epoch-aligned windows alone.
		window = -1
		a.calendar, a.zone = c.Calendar, c.Zone
		kind = 1 + int(c.Calendar)
		if c.Calendar == policy.CalendarDay {
			kind, flatWindow = 0, 24*time.Hour.Microseconds()
		}
	}
	a.general = []any{c.Capacity, c.Shown, c.Limit, window,
		float(c.Interval), float(c.PerUS), float(c.Bound), c.Gran, c.Buckets, c.LeaseTTL,
		flag(c.Warm), float(c.Stable), float(c.Threshold), float(c.MaxPermits), float(c.Slope), float(c.CoolDown)}
	switch {
	case (c.Algorithm == policy.TokenBucket || c.Algorithm == policy.GCRA) && !c.Warm:
		a.family, a.param = familyMeter, float(c.Interval)
	case c.Algorithm == policy.FixedWindow && c.Calendar == policy.CalendarNone:
		a.family, a.param = familyFixed, c.Window
	}
	switch {
	case c.Algorithm <= policy.LeakyBucket && !c.Warm:
		a.singleScript = single
		a.single = []any{c.Capacity, c.Shown, float(c.Interval), float(c.PerUS), float(c.Bound), flag(c.Algorithm == policy.LeakyBucket)}
		a.multi = append([]any{0}, a.single...)
	case (c.Algorithm == policy.FixedWindow || c.Algorithm == policy.SlidingWindow) && (c.Calendar == policy.CalendarNone || utc):
		// Calendar windows in a time zone are decide.lua's alone: the
		// flat scripts have no room for their edges.
		a.singleScript = window1
		a.single = []any{c.Capacity, c.Shown, c.Limit, flatWindow, kind, float(limit.Slack)}
		a.multi = append([]any{1}, a.single...)
	}
	return a
}

// edgesAt is where a calendar window's edges stand in a rule's
// fields of decide.lua: in place of interval, per_us, bound and gran.
const edgesAt = 4

// appendGeneral appends st's fields of decide.lua, with a calendar
// window's edges around now (µs, or "" for the decider's clock).
func appendGeneral(args []any, st *limiterArgs, now string) []any {
	i := len(args)
	args = append(args, st.general...)
	if st.calendar != policy.CalendarNone {
		t, err := strconv.ParseInt(now, 10, 64)
		if err != nil {
			t = time.Now().UnixMicro()
		}
		edges := st.edges.Load()
		if edges == nil || t < edges[1] || t >= edges[2] {
			e := limit.CalendarEdges(t, st.calendar, st.zone)
			edges = &e
			st.edges.Store(edges)
		}
		for k, edge := range edges {
			args[i+edgesAt+k] = edge
		}
	}
	return args
}

// argCache holds limiterArgs by limiter, for as long as the limiter lives:
// entries are keyed by weak pointers and removed once their limiter is
// collected, so replaced configs leave nothing behind.
type argCache struct{ m sync.Map } // weak.Pointer[limit.Limiter] → *limiterArgs

func (c *argCache) get(l *limit.Limiter) *limiterArgs {
	k := weak.Make(l)
	if v, ok := c.m.Load(k); ok {
		return v.(*limiterArgs)
	}
	v, loaded := c.m.LoadOrStore(k, newLimiterArgs(l))
	if !loaded {
		runtime.AddCleanup(l, func(k weak.Pointer[limit.Limiter]) { c.m.Delete(k) }, k)
	}
	return v.(*limiterArgs)
}

// float formats x in its shortest exact form, so Lua parses the same double.
func float(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// flag is a script's boolean argument.
func flag(v bool) int {
	if v {
		return 1
	}
	return 0
}

// acrossSlots decides a decision whose keys span cluster slots: each slot's
// rules are evaluated all or nothing in their own call, reserving what they
// admit; once a slot rejects, the later slots are only read (what each rule
// would answer, nothing consumed: a lost decision holds nothing back), and
// the slots that reserved are refunded and re-read, so that their answers
// are of the untouched state. Nothing is ever over-admitted; between a
// reservation and its refund (one round trip), other decisions may see less
// remaining than there is.
func (e *Engine) acrossSlots(ctx context.Context, deadline time.Time, reqs []limit.Request, now string, res []limit.Result) (bool, error) {
	if now == "" { // one clock for every slot: Redis TIME differs per node
		now = strconv.FormatInt(time.Now().UnixMicro(), 10)
	}
	var order []int
	groups := map[int][]int{}
	for i, rq := range reqs {
		s := Slot(e.cfg.Prefix + rq.Key)
		if _, ok := groups[s]; !ok {
			order = append(order, s)
		}
		groups[s] = append(groups[s], i)
	}
	pick := func(idx []int, cost func(i int) int64) []limit.Request {
		out := make([]limit.Request, len(idx))
		for k, i := range idx {
			out[k] = reqs[i]
			out[k].Cost = cost(i)
		}
		return out
	}
	same := func(i int) int64 { return reqs[i].Cost }
	read := func(int) int64 { return 0 }
	admitted := true
	var reserved [][]int
	for _, s := range order {
		idx := groups[s]
		sub := make([]limit.Result, len(idx))
		cost := same
		if !admitted {
			cost = read
		}
		ok, err := e.run(ctx, deadline, "check", pick(idx, cost), now, sub)
		if err != nil {
			_ = e.undo(ctx, deadline, reserved, pick, same, now)
			return false, e.onShard(ctx, reqs[idx[0]].Key, err)
		}
		var committed []int // what this slot consumed: admitted rules of positive cost
		for k, i := range idx {
			res[i] = sub[k]
			if !admitted {
				res[i].AsCost(reqs[i].Cost, reqs[i].Limiter.Capacity())
			} else if ok && sub[k].Allowed && reqs[i].Cost > 0 {
				committed = append(committed, i)
			}
		}
		if !ok {
			admitted = false
		} else if len(committed) > 0 {
			reserved = append(reserved, committed)
		}
	}
	if admitted {
		return true, nil
	}
	if err := e.undo(ctx, deadline, reserved, pick, same, now); err != nil {
		return false, err
	}
	for _, idx := range reserved { // answer from the refunded state
		sub := make([]limit.Result, len(idx))
		if _, err := e.run(ctx, deadline, "check", pick(idx, read), now, sub); err != nil {
			return false, e.onShard(ctx, reqs[idx[0]].Key, err)
		}
		for k, i := range idx {
			res[i] = sub[k]
		}
	}
	return false, nil
}

// undo refunds what the reserved slot groups consumed.
func (e *Engine) undo(ctx context.Context, deadline time.Time, reserved [][]int, pick func([]int, func(int) int64) []limit.Request, cost func(int) int64, now string) error {
	for _, idx := range reserved {
		refund := pick(idx, cost)
		if _, err := e.run(ctx, deadline, "refund", refund, now, nil); err != nil {
			return e.onShard(ctx, refund[0].Key, err)
		}
	}
	return nil
}

// sameSlot reports whether every key hashes to the slot of the first.
func sameSlot(keys []string) bool {
	s := Slot(keys[0])
	for _, k := range keys[1:] {
		if Slot(k) != s {
			return false
		}
	}
	return true
}

// Slot returns the Redis Cluster slot of key: CRC16 of its hash tag (the
// text between the first '{' and the next '}', when not empty) or of the key.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}

// crc16 is CRC-16/XMODEM, the checksum of Redis Cluster key slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
