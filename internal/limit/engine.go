package limit

import (
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxKeys is the key cap of an Engine whose config leaves it zero:
// about 70 MB of token-bucket state.
const DefaultMaxKeys = 1 << 20

// EngineConfig configures an Engine. The zero value is usable.
type EngineConfig struct {
	// Shards is the number of independently locked shards, rounded up to a
	// power of two. 0 means 16 per CPU, at least 64.
	Shards int
	// MaxKeys caps the keys tracked at once, so that a flood of distinct
	// client ids cannot exhaust memory. At the cap, inserting a key first
	// drops an expired one, else evicts the key nearest to expiry among a
	// few sampled (an approximation of Redis's volatile-ttl policy). 0 means
	// DefaultMaxKeys.
	MaxKeys int
}

func (c *EngineConfig) validate() {
	if c.Shards <= 0 {
		c.Shards = max(64, 16*runtime.GOMAXPROCS(0))
	}
	c.Shards = 1 << bits.Len(uint(c.Shards-1))
	if c.MaxKeys <= 0 {
		c.MaxKeys = DefaultMaxKeys
	}
}

// Engine is the in-process store of limiter states: the embedded default of
// sluice dev and the fallback when Redis is down. It is safe for concurrent
// use; a decision locks only the shards of its keys.
//
// Keys are stored as 63-bit hashes (seeded per Engine), so memory per key
// does not grow with key length; two keys collide with probability about
// n²/2⁶⁴ for n keys (6·10⁻⁸ at a million), and a collision merges their
// counters. The algorithm is mixed into the hash, so a rule that changes
// algorithm starts from a fresh state.
type Engine struct {
	shards   []shard
	shift    uint
	seed     uint64
	perShard int

	evictions   atomic.Uint64
	expirations atomic.Uint64
}

// slot is one key's fixed-size state. It holds no pointers, so the garbage
// collector never scans the table.
type slot struct {
	h    uint64
	exp  int64 // µs; from then on the state equals a fresh one
	t    int64
	x, y float64
}

type shard struct {
	mu  sync.Mutex
	t   table
	ext map[uint64][]int64
	buf []int64 // scratch for Eval's variable-size state
	rng uint64
	_   [64]byte // keep neighbouring shards' locks off one cache line
}

// NewEngine returns an Engine configured by cfg.
func NewEngine(cfg EngineConfig) *Engine {
	cfg.validate()
	e := &Engine{
		shards:   make([]shard, cfg.Shards),
		shift:    uint(64 - bits.TrailingZeros(uint(cfg.Shards))),
		seed:     rand.Uint64(),
		perShard: max(1, cfg.MaxKeys/cfg.Shards),
	}
	for i := range e.shards {
		e.shards[i] = shard{ext: make(map[uint64][]int64), rng: uint64(i)*0x9E3779B97F4A7C15 | 1}
	}
	return e
}

func (e *Engine) hash(key string, l *Limiter) uint64 {
	// Bit 31 set keeps the hash off 0 (an empty table slot) without a
	// branch; tables index with the low bits and shards take the top ones,
	// so it costs one bit of the 64 against collisions.
	return (hashString(e.seed, key) ^ uint64(l.alg)*0x9E3779B97F4A7C15) | 1<<31
}

// shardNum takes the top bits of h; with one shard the shift is 64, which
// Go defines to give 0.
func (e *Engine) shardNum(h uint64) int { return int(h >> e.shift) }

func (e *Engine) shardOf(h uint64) *shard { return &e.shards[e.shardNum(h)] }

// Allow evaluates one request for key under l and stores the new state when
// it is admitted. See Limiter.Eval for the meaning of the answer.
func (e *Engine) Allow(key string, l *Limiter, a Args) Result {
	h := e.hash(key, l)
	sh := e.shardOf(h)
	var s State
	var r Result
	sh.mu.Lock()
	i, found := sh.t.find(h)
	sh.load(&s, i, found, h, a.Now, l)
	if l.Step(&s, a, sh.buf, &r) {
		exp := ExpiresAt(s.T, r.ResetAfter) // the answer is measured from the state's time
		if found && !l.usesExt() {          // the common case, inline
			sl := &sh.t.slots[i]
			sl.exp, sl.t, sl.x, sl.y = exp, s.T, s.X, s.Y
		} else {
			e.store(sh, h, i, found, &s, exp, l, a.Now)
		}
	}
	sh.mu.Unlock()
	return r
}

// Release ends a Concurrency lease on key.
func (e *Engine) Release(key string, l *Limiter, now, lease int64) {
	h := e.hash(key, l)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, found := sh.t.find(h)
	if !found {
		return
	}
	var s State
	sh.load(&s, i, found, h, now, l)
	ns := l.Release(s, now, lease, sh.buf)
	_, r := l.Eval(ns, Args{Now: now, Lease: lease}, nil) // peek for the expiry
	e.store(sh, h, i, found, &ns, ExpiresAt(ns.T, r.ResetAfter), l, now)
}

// Reset forgets key's state under l: its next request meets a fresh
// limiter (a concurrency rule's leases are dropped with it).
func (e *Engine) Reset(key string, l *Limiter) {
	h := e.hash(key, l)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i, found := sh.t.find(h); found {
		sh.remove(i)
	}
}

// Request is one rule's part of a multi-rule decision.
type Request struct {
	Key     string
	Limiter *Limiter
	Cost    int64
	Lease   int64
	// Shadow requests are evaluated and answered but never reject the
	// decision; they consume only when they and the decision are admitted.
	Shadow bool
	// Spent is what other regions took of the limit (Args.Spent).
	Spent int64
	// Sync, when positive, lets an engine of shared counters (Redis) count
	// the request on this decider and reconcile with the shared state every
	// Sync (see policy.Rule.Sync). The in-process engine, all local, ignores it.
	Sync time.Duration
	// Partition, of an adaptive concurrency rule with partitions
	// (policy.Rule.Partitions), is the request's share of the limit. The
	// shared counters enforce it; the in-process engine, a fallback, holds
	// the whole limit alone.
	Partition *Partition
}

// Partition is the share of an adaptive concurrency limit a request
// holds: Arg, "of:share1:share2…", of the 1-based partition of the
// rule's Partitions (0: the rest of the limit) and the shares of all.
type Partition struct{ Arg string }

// Charge is cost a decider admitted on Key under Limiter at At (µs) without
// the shared counters, to be added to them (decide.Counters.Charge).
type Charge struct {
	Key     string
	Limiter *Limiter
	Cost    int64
	At      int64
}

// Call is one all-or-nothing decision of a batch that an engine of shared
// counters answers at once (decide.Counters.AllowBatch): its requests,
// room for their results (len(Res) ≥ len(Reqs)), and the answer the engine
// writes, Allowed or the Err that kept it from deciding.
type Call struct {
	Reqs    []Request
	Res     []Result
	Allowed bool
	Err     error
}

// AllowAll evaluates reqs at now as one all-or-nothing decision and writes
// one Result per request into res (len(res) ≥ len(reqs)). It returns
// whether the decision is admitted: when any non-shadow request is rejected,
// nothing is consumed. Requests naming the same key see each other's effect
// in order.
func (e *Engine) AllowAll(reqs []Request, now int64, res []Result) bool {
	ps := make([]pending, len(reqs))
	order := make([]int, 0, len(reqs)) // shard numbers, locked in ascending order
	for k := range reqs {
		ps[k].h = e.hash(reqs[k].Key, reqs[k].Limiter)
		order = append(order, e.shardNum(ps[k].h))
	}
	slices.Sort(order)
	order = slices.Compact(order)
	for _, n := range order {
		e.shards[n].mu.Lock()
	}
	defer func() {
		for _, n := range order {
			e.shards[n].mu.Unlock()
		}
	}()

	allowed := true
	for k, rq := range reqs {
		p := &ps[k]
		sh := e.shardOf(p.h)
		i, found := sh.t.find(p.h)
		var s State
		sh.load(&s, i, found, p.h, now, rq.Limiter)
		if j := lastCommit(ps[:k], p.h); j >= 0 { // an earlier request on this key
			s = ps[j].s
		}
		var buf []int64
		if rq.Limiter.usesExt() {
			buf = make([]int64, 0, len(s.Ext)+3)
		}
		p.before = s
		p.s, res[k] = rq.Limiter.Eval(s, Args{Now: now, Cost: rq.Cost, Lease: rq.Lease, Spent: rq.Spent}, buf)
		p.commit = res[k].Allowed && rq.Cost > 0
		if !res[k].Allowed && !rq.Shadow {
			allowed = false
		}
	}
	if !allowed {
		// Nothing was consumed: rules that would have admitted answer with
		// their untouched state, so their remaining is not understated.
		for k, rq := range reqs {
			if res[k].Allowed {
				_, res[k] = rq.Limiter.Eval(ps[k].before, Args{Now: now, Lease: rq.Lease, Spent: rq.Spent}, nil)
			}
		}
		return false
	}
	for k, rq := range reqs {
		p := &ps[k]
		if !p.commit || lastCommit(ps, p.h) != k { // store only a key's last state
			continue
		}
		sh := e.shardOf(p.h)
		i, found := sh.t.find(p.h) // an earlier store may have moved slots
		e.store(sh, p.h, i, found, &p.s, ExpiresAt(p.s.T, res[k].ResetAfter), rq.Limiter, now)
	}
	return true
}

// pending is one request's evaluation inside AllowAll, before commit.
type pending struct {
	h         uint64
	before, s State
	commit    bool
}

// lastCommit returns the index of the last entry of ps that commits h, or -1.
func lastCommit(ps []pending, h uint64) int {
	for j := len(ps) - 1; j >= 0; j-- {
		if ps[j].h == h && ps[j].commit {
			return j
		}
	}
	return -1
}

// load sets s to the stored state of h; it leaves s as the zero (fresh)
// State when h is absent or expired at now.
func (sh *shard) load(s *State, i int, found bool, h uint64, now int64, l *Limiter) {
	if !found {
		return
	}
	sl := &sh.t.slots[i]
	if sl.exp <= now {
		return
	}
	s.T, s.X, s.Y = sl.t, sl.x, sl.y
	if l.usesExt() {
		s.Ext = sh.ext[h]
	}
}

// store writes s for h with expiry exp, inserting (and evicting at the cap)
// when h is new.
func (e *Engine) store(sh *shard, h uint64, i int, found bool, s *State, exp int64, l *Limiter, now int64) {
	sl := slot{h: h, exp: exp, t: s.T, x: s.X, y: s.Y}
	if found {
		sh.t.slots[i] = sl
	} else {
		if sh.t.n >= e.perShard {
			e.evictOne(sh, now)
		}
		sh.t.insert(sl)
	}
	if l.usesExt() {
		old := sh.ext[h]
		sh.ext[h] = s.Ext
		// s.Ext may alias sh.buf; the replaced state's array becomes the
		// scratch space, so steady-state evaluation does not allocate.
		sh.buf = old[:0]
	}
}

// evictOne removes one key from a full shard: an expired one among a few
// sampled if any, else the sampled key nearest to expiry.
func (e *Engine) evictOne(sh *shard, now int64) {
	const samples = 5
	victim := -1
	for k := 0; k < samples || victim < 0; k++ { // at least a quarter full: ends fast
		sh.rng ^= sh.rng << 13
		sh.rng ^= sh.rng >> 7
		sh.rng ^= sh.rng << 17
		j := int(sh.rng & uint64(len(sh.t.slots)-1))
		if sh.t.slots[j].h != 0 && (victim < 0 || sh.t.slots[j].exp < sh.t.slots[victim].exp) {
			victim = j
		}
	}
	if sh.t.slots[victim].exp <= now {
		e.expirations.Add(1)
	} else {
		e.evictions.Add(1)
	}
	sh.remove(victim)
}

func (sh *shard) remove(j int) {
	delete(sh.ext, sh.t.slots[j].h)
	sh.t.removeAt(j)
}

// Sweep removes every key expired at now and returns how many it removed.
// Run it periodically; the engine never reads the clock itself.
func (e *Engine) Sweep(now int64) int {
	n := 0
	for k := range e.shards {
		sh := &e.shards[k]
		sh.mu.Lock()
		for j := 0; j < len(sh.t.slots); {
			if sl := &sh.t.slots[j]; sl.h != 0 && sl.exp <= now {
				// Removal may shift a later entry into j: look at j again.
				// Shifts move entries backwards only, so none is skipped.
				sh.remove(j)
				n++
			} else {
				j++
			}
		}
		sh.mu.Unlock()
	}
	e.expirations.Add(uint64(n))
	return n
}

// RunSweeper calls Sweep every interval with the time from now until stop
// is closed. now is usually time.Now.
func (e *Engine) RunSweeper(stop <-chan struct{}, interval time.Duration, now func() time.Time) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			e.Sweep(now().UnixMicro())
		}
	}
}

// Stats are counters of an Engine, exported as metrics.
type Stats struct {
	Keys        int    // keys tracked now
	Evictions   uint64 // live keys dropped at the memory cap
	Expirations uint64 // expired keys removed
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	st := Stats{Evictions: e.evictions.Load(), Expirations: e.expirations.Load()}
	for k := range e.shards {
		sh := &e.shards[k]
		sh.mu.Lock()
		st.Keys += sh.t.n
		sh.mu.Unlock()
	}
	return st
}

// Deciding returns the index of the request whose answer speaks for the
// decision: when it was rejected, the rejecting non-shadow request that
// asks the caller to wait longest; when admitted, the non-shadow request
// with the least remaining (the most restrictive). It returns -1 when every
// request is a shadow one.
func Deciding(reqs []Request, res []Result, allowed bool) int {
	best := -1
	for k := range reqs {
		if reqs[k].Shadow {
			continue
		}
		r := &res[k]
		switch {
		case !allowed && r.Allowed:
			continue
		case best < 0:
			best = k
		case !allowed && waitsLonger(*r, res[best]):
			best = k
		case allowed && (r.Remaining < res[best].Remaining ||
			r.Remaining == res[best].Remaining && r.Limit < res[best].Limit):
			best = k
		}
	}
	return best
}

func waitsLonger(a, b Result) bool {
	if a.RetryAfter == Never || b.RetryAfter == Never {
		return a.RetryAfter == Never && b.RetryAfter != Never
	}
	return a.RetryAfter > b.RetryAfter
}
