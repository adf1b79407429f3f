package redisengine

import (
	"context"
	"errors"
	"hash/maphash"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
)

// Local counting: a request whose rule has a Sync interval (limit.Request.
// Sync) is decided on this decider, against a view of its key's shared
// state, with no Redis round trip; what it admits is added to the shared
// state at the next reconciliation, at most Sync later, which also brings
// back what the other deciders admitted. A key's first decision, and one
// after the key was idle for two intervals, waits for a reconciliation.
//
// Overshoot: between reconciliations each decider admits against its own
// view, so the deciders together may admit up to (deciders − 1) times what
// one admits in two intervals beyond the limit. The meters record it in the
// shared debt, which then drains at the rule's rate before anything more is
// admitted: over time they admit no more than strict counting plus that
// bound. A fixed window's overshoot is not paid back in later windows.
//
// Only algorithms whose states add up take part: the token bucket without
// warm-up, GCRA and the fixed window. Others are decided in Redis as usual.
const (
	familyMeter = 0
	familyFixed = 1
)

// syncChunk caps the keys of one sync.lua call.
const syncChunk = 128

// localShards is the number of independently locked shards of local views.
const localShards = 64

// DefaultMaxLocalKeys is the cap on locally counted keys when
// Config.MaxLocalKeys is 0; beyond it, new keys are decided in Redis. A
// key takes about 200 bytes (counter keys of ~25 bytes): ~50 MB at the cap.
const DefaultMaxLocalKeys = 1 << 18

// localCounts holds the views of locally counted keys.
type localCounts struct {
	e      *Engine
	seed   maphash.Seed
	shards [localShards]localShard
	keys   atomic.Int64
	start  sync.Once
	tick   int64 // µs: the due lists' resolution

	decisions, syncs, syncErrors atomic.Int64
}

type localShard struct {
	mu sync.Mutex
	m  map[string]*entry
	// due holds the entries decided on since their last reconciliation,
	// by the tick (time / tick) their interval ends in; next is the first
	// tick not yet taken.
	due  map[int64][]*entry
	next int64
	_    [64]byte
}

// entry is one key's view: the shared state as last reconciled plus what
// this decider admitted since. Its fields are guarded by its shard's lock.
type entry struct {
	key   string
	lim   *limit.Limiter
	args  *limiterArgs
	every int64 // the Sync interval, µs
	view  limit.State
	// pending is the cost admitted here and not yet sent (negative: a
	// refund of cost already sent); win is the fixed window it counts in.
	pending, win int64
	synced       int64 // local µs of the last reconciliation; 0: none yet
	dirty        bool  // in its shard's due lists
	loading      *fetch
	// resets counts the key's resets (reset.go): a reconciliation under
	// way across one brings a state from before it, which is dropped.
	resets uint32
}

// fetch is a reconciliation that decisions wait for: a key's first.
type fetch struct {
	done chan struct{}
	err  error
}

func newLocalCounts(e *Engine) *localCounts {
	l := &localCounts{e: e, seed: maphash.MakeSeed(), tick: max(e.cfg.SyncTick, 10*time.Millisecond).Microseconds()}
	for i := range l.shards {
		l.shards[i].m = make(map[string]*entry)
		l.shards[i].due = make(map[int64][]*entry)
	}
	return l
}

func (l *localCounts) shardOf(key string) int {
	return int(maphash.String(l.seed, key) % localShards)
}

// now is the local clock, µs.
func (e *Engine) now() int64 {
	if e.cfg.Now != nil {
		return e.cfg.Now().UnixMicro()
	}
	return time.Now().UnixMicro()
}

// nowArg is a script's "now": Config.Now when set, else Redis TIME.
func (e *Engine) nowArg() string {
	if e.cfg.Now != nil {
		return strconv.FormatInt(e.now(), 10)
	}
	return ""
}

// localIndexes returns which of reqs are counted locally, or nil if none is.
func (e *Engine) localIndexes(reqs []limit.Request) []int {
	var idx []int
	for i := range reqs {
		if reqs[i].Sync > 0 && e.statics.get(reqs[i].Limiter).family >= 0 {
			idx = append(idx, i)
		}
	}
	return idx
}

// allowAll decides reqs, those at indexes local here and the rest in Redis,
// all or nothing: the local ones are committed first and refunded if Redis
// rejects the others.
func (l *localCounts) allowAll(b *lazyDeadline, reqs []limit.Request, local []int, res []limit.Result) (bool, error) {
	e := l.e
	l.start.Do(func() {
		if e.cfg.SyncTick > 0 {
			go l.loop()
		}
	})
	var strict []limit.Request
	var at []int
	for i := range reqs {
		if !slices.Contains(local, i) {
			strict = append(strict, reqs[i])
			at = append(at, i)
		}
	}
	now := e.now()
	ents, err := l.entries(b, reqs, local, now)
	for attempt := 0; err != nil && b.ctx().Err() == nil && (isContextError(err) || errors.Is(err, errKeyCap)) && attempt < 2; attempt++ {
		// Another decision's fetch, which this one waited for, ended with
		// that decision's deadline or cancellation, or was abandoned at
		// the key cap: fetch again (or be decided in Redis).
		ents, err = l.entries(b, reqs, local, now)
	}
	if err != nil {
		return false, err
	}
	if ents == nil { // at the key cap: decided in Redis
		return e.run(b.parent, b.deadline, "check", reqs, e.nowArg(), res)
	}
	l.decisions.Add(1)
	allowed := l.step(reqs, local, ents, now, res)
	if len(strict) == 0 {
		return allowed, nil
	}
	if !allowed { // answer the others without consuming
		for k := range strict {
			strict[k].Cost = 0
		}
	}
	sub := make([]limit.Result, len(strict))
	ok, err := e.run(b.parent, b.deadline, "check", strict, e.nowArg(), sub)
	if err == nil {
		for k, i := range at {
			res[i] = sub[k]
		}
	}
	if allowed && (err != nil || !ok) {
		l.refund(reqs, local, ents, now, res)
	}
	return allowed && ok, err
}

// entries returns the entries of reqs[local], each with a fresh view:
// reconciled within two intervals, else fetched now (or waited for, when
// another decision fetches it). It returns nil entries at the key cap.
func (l *localCounts) entries(b *lazyDeadline, reqs []limit.Request, local []int, now int64) ([]*entry, error) {
	ents := make([]*entry, len(reqs))
	var fetching []*entry
	var waits []*fetch
	for _, i := range local {
		rq := &reqs[i]
		sh := &l.shards[l.shardOf(rq.Key)]
		sh.mu.Lock()
		en := sh.m[rq.Key]
		if en == nil {
			if l.keys.Load() >= int64(l.e.cfg.MaxLocalKeys) {
				sh.mu.Unlock()
				l.abandon(fetching)
				return nil, nil
			}
			l.keys.Add(1)
			en = &entry{key: rq.Key}
			sh.m[rq.Key] = en
		}
		if en.lim != rq.Limiter { // new, or a new config
			args := l.e.statics.get(rq.Limiter)
			if en.args == nil || en.args.family != args.family {
				en.synced, en.view, en.win = 0, limit.State{}, 0 // start over
			}
			// Else the view stays, as the state in Redis does when a rule's
			// parameters change: a config push costs no round trips.
			en.lim, en.args, en.every = rq.Limiter, args, rq.Sync.Microseconds()
		}
		switch {
		case en.synced != 0 && now < en.synced+2*en.every:
			// Fresh: decided now, even while a reconciliation is under way
			// (its answer is merged with what is admitted meanwhile).
		case en.loading != nil:
			waits = append(waits, en.loading)
		default:
			en.loading = &fetch{done: make(chan struct{})}
			fetching = append(fetching, en)
			waits = append(waits, en.loading)
		}
		sh.mu.Unlock()
		ents[i] = en
	}
	if len(waits) == 0 {
		return ents, nil
	}
	ctx := b.ctx()
	if len(fetching) > 0 {
		l.reconcile(ctx, fetching)
	}
	for _, f := range waits {
		select {
		case <-f.done:
			if f.err != nil {
				return nil, f.err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return ents, nil
}

var errKeyCap = errors.New("redisengine: local key cap reached")

func isContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// abandon ends fetches that were started but will not be made.
func (l *localCounts) abandon(fetching []*entry) {
	for _, en := range fetching {
		sh := &l.shards[l.shardOf(en.key)]
		sh.mu.Lock()
		f := en.loading
		en.loading = nil
		sh.mu.Unlock()
		f.err = errKeyCap
		close(f.done)
	}
}

// lockShards locks the shards of ents at local in ascending order and
// returns them, for unlockShards.
func (l *localCounts) lockShards(ents []*entry, local []int) []int {
	order := make([]int, 0, len(local))
	for _, i := range local {
		order = append(order, l.shardOf(ents[i].key))
	}
	slices.Sort(order)
	order = slices.Compact(order)
	for _, n := range order {
		l.shards[n].mu.Lock()
	}
	return order
}

func (l *localCounts) unlockShards(order []int) {
	for _, n := range order {
		l.shards[n].mu.Unlock()
	}
}

// undo is one local request's effect, to take back.
type undo struct {
	view         limit.State
	pending, win int64
	entry        *entry
	request      int
}

// step decides reqs[local] on their views, committing them only if none
// that is not a shadow rejects.
func (l *localCounts) step(reqs []limit.Request, local []int, ents []*entry, now int64, res []limit.Result) bool {
	order := l.lockShards(ents, local)
	defer l.unlockShards(order)
	undos := make([]undo, 0, len(local))
	allowed := true
	for _, i := range local {
		en, rq := ents[i], &reqs[i]
		u := undo{view: en.view, pending: en.pending, win: en.win, entry: en, request: i}
		if rq.Limiter.Step(&en.view, limit.Args{Now: now, Cost: rq.Cost}, nil, &res[i]) {
			en.add(en.view.T, rq.Cost) // the time it was admitted at: never before the view's
		}
		undos = append(undos, u)
		if !res[i].Allowed && !rq.Shadow {
			allowed = false
		}
	}
	// A key decided on is reconciled when its interval has passed, even
	// when it admitted nothing: its view must show what the others admit.
	for _, i := range local {
		l.markDirty(ents[i])
	}
	if allowed {
		return true
	}
	for k := len(undos) - 1; k >= 0; k-- {
		u := undos[k]
		u.entry.view, u.entry.pending, u.entry.win = u.view, u.pending, u.win
	}
	// Rules that would have admitted answer from the untouched state.
	for _, u := range undos {
		if res[u.request].Allowed {
			reqs[u.request].Limiter.Step(&u.entry.view, limit.Args{Now: now}, nil, &res[u.request])
		}
	}
	return false
}

// add records cost admitted at now in the pending count.
func (en *entry) add(now, cost int64) {
	if en.args.family == familyFixed {
		if ws := now - now%en.args.window; ws != en.win {
			en.pending, en.win = 0, ws // what an ended window admitted limits nothing
		}
	}
	en.pending += cost
}

// counts reports whether units admitted at t count with pending: always
// for the meters; for the fixed window, when t is in pending's window.
func (en *entry) counts(t int64) bool {
	return en.args.family == familyMeter || t-t%en.args.window == en.win
}

// credit adds units to the view (negative: takes them back): debt for the
// meters, the window's count for the fixed window.
func (en *entry) credit(units int64) {
	per := 1.0
	if en.args.family == familyMeter {
		per = en.args.interval
	}
	en.view.X = max(en.view.X+float64(units)*per, 0)
}

// refund takes back what step committed, after Redis rejected (or failed)
// the decision's other rules; a cost already sent goes back as a negative
// pending one.
func (l *localCounts) refund(reqs []limit.Request, local []int, ents []*entry, now int64, res []limit.Result) {
	order := l.lockShards(ents, local)
	defer l.unlockShards(order)
	for _, i := range local {
		en, rq := ents[i], &reqs[i]
		if !res[i].Allowed || rq.Cost <= 0 {
			continue
		}
		if en.counts(max(now, en.view.T)) {
			en.credit(-rq.Cost)
			en.pending -= rq.Cost
		}
		rq.Limiter.Step(&en.view, limit.Args{Now: now}, nil, &res[i])
	}
}

// markDirty queues en for its next reconciliation, due when its interval
// since the last one ends. Its shard must be locked.
func (l *localCounts) markDirty(en *entry) {
	if !en.dirty {
		en.dirty = true
		sh := &l.shards[l.shardOf(en.key)]
		t := max((en.synced+en.every+l.tick-1)/l.tick, sh.next)
		sh.due[t] = append(sh.due[t], en)
	}
}

// LocalStats are counters of local counting, for metrics.
type LocalStats struct {
	Keys       int64 // keys counted locally now
	Decisions  int64 // decisions with a locally counted rule
	Syncs      int64 // sync.lua calls that succeeded
	SyncErrors int64 // and that failed
}

// LocalStats returns the engine's local counting counters.
func (e *Engine) LocalStats() LocalStats {
	l := e.local
	return LocalStats{Keys: l.keys.Load(), Decisions: l.decisions.Load(), Syncs: l.syncs.Load(), SyncErrors: l.syncErrors.Load()}
}

// Reconcile sends at once what was counted locally, on every key decided
// on since its last reconciliation, and refreshes their views. The engine
// does it by itself for each key once its Sync interval has passed; this is
// for tests with a clock of their own (Config.Now, SyncTick < 0), and for
// Shutdown.
func (e *Engine) Reconcile(ctx context.Context) { e.local.reconcileDue(ctx, true) }

// Shutdown sends what was counted locally (Reconcile) within ctx, then
// closes the engine. It is a decider's last step, after its servers have
// stopped: what it admitted is then in the shared counters when it exits,
// where it would otherwise be lost with up to an interval's admissions of
// every key counted locally, for the deciders left to admit again.
func (e *Engine) Shutdown(ctx context.Context) {
	e.Reconcile(ctx)
	e.Close()
}
