// Package fleet gives adaptive concurrency rules one limit for a whole
// fleet of deciders.
//
// The limit lives in Redis, in the state of the rule's leases: the lease
// script counts the fleet's leases in flight and checks them against it
// in the call that takes a lease, so it costs no round trip of its own.
// Each decider learns the limit from the answers of its decisions and
// gathers, a window at a time, the samples of the leases released through
// it: latency and outcome. At each window's end it adds them to the
// window's samples in Redis. One decider at a time, the updater (a lock
// in Redis, taken by a decider with samples to give), reads the window
// just ended, computes the next limit (package adaptive) and sets it. So
// the fleet's limit moves once a window, whatever the number of deciders,
// and only the updater measures the latency without load.
package fleet

import (
	"context"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/adaptive"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// Adapter sets an adaptive rule's fleet limit in Redis and takes its
// count of leases that expired unreleased (redisengine.Engine.Adapt).
type Adapter interface {
	Adapt(ctx context.Context, key string, l *limit.Limiter, to int64) (before, expired int64, err error)
}

// Config configures a Fleet.
type Config struct {
	// Client and Prefix are the counters' Redis and key prefix.
	Client redis.Scripter
	Prefix string
	// Adapter is the engine deciding the rules' leases.
	Adapter Adapter
	// Name tells this decider apart in the updater's lock.
	Name   string
	Logger *slog.Logger
	// Now is the clock windows are cut by; nil means time.Now.
	Now func() time.Time
}

// Fleet is one decider's part in its fleet's adaptive limits. It is safe
// for concurrent use.
type Fleet struct {
	cfg      Config
	backends sync.Map // counter key → *backend
	limiters sync.Map // policy.Params → *limit.Limiter
}

// New returns a Fleet; Run gives its samples and updates the limits.
func New(cfg Config) *Fleet {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Fleet{cfg: cfg}
}

// initialLimit is an adaptive rule's limit until its first update: 10,
// within its floor and ceiling.
func initialLimit(p policy.Params) int64 { return min(max(10, p.LeastLimit()), p.Limit) }

// backend is what a decider knows of one counter key of an adaptive rule:
// a backend, as the rule's key-by values name it.
type backend struct {
	p     policy.Params  // the rule's, its ceiling as Limit
	rule  *limit.Limiter // p's, for Adapt
	limit atomic.Int64   // the fleet's, as last answered
	used  atomic.Int64   // the last window a lease was taken or released in
	last  atomic.Pointer[lastLimiter]

	// What the metrics tell: whose it is, and what this decider saw.
	tenant, ruleName, name               string
	succeeded, dropped, ignored, latency atomic.Int64 // latency: µs, of those succeeded
	inFlight, updates                    atomic.Int64 // inFlight: the most in the last window
	updater                              atomic.Bool

	mu   sync.Mutex
	cur  gathered           // the window being gathered
	done gathered           // the window before it, until Run gives it
	alg  adaptive.Algorithm // this decider's, while it updates

}

func (f *Fleet) backendOf(key string, o decide.Backend, p policy.Params) *backend {
	if b, ok := f.backends.Load(key); ok {
		return b.(*backend)
	}
	b := &backend{p: p, rule: limit.MustCompile(p), tenant: o.Tenant, ruleName: o.Rule.Name, name: policy.ClientKey(o.Rule, o.Descriptors)}
	b.limit.Store(initialLimit(p))
	b.used.Store(f.windowOf(p))
	v, _ := f.backends.LoadOrStore(key, b)
	return v.(*backend)
}

// Params is p, an adaptive rule's parameters, with the fleet's limit of
// key in force as its limit, and their limiter: the lease script admits
// to the limit its updater set and to this one until there is one, and
// the local fallback enforces a share of it while Redis fails.
func (f *Fleet) Params(key string, o decide.Backend, p policy.Params) (policy.Params, *limit.Limiter) {
	b := f.backendOf(key, o, p)
	at := b.limit.Load()
	if c := b.last.Load(); c != nil && c.of == p && c.p.Limit == at { // the limit moves once a window at most
		return c.p, c.l
	}
	of := p
	p.Limit = at
	var l *limit.Limiter
	if v, ok := f.limiters.Load(p); ok {
		l = v.(*limit.Limiter)
	} else {
		var err error
		if l, err = limit.Compile(p); err != nil { // not reached: a limit within the rule's floor and ceiling
			l = limit.MustCompile(b.p)
		}
		f.limiters.Store(p, l)
	}
	b.last.Store(&lastLimiter{of: of, p: p, l: l})
	return p, l
}

// lastLimiter is the parameters and limiter a backend's decisions last
// took: its rule's parameters of, at the fleet's limit.
type lastLimiter struct {
	of, p policy.Params
	l     *limit.Limiter
}

// Decided notes the answer Redis gave a decision on key: the fleet's
// limit, and the leases in flight once it was taken.
func (f *Fleet) Decided(key string, r limit.Result) {
	v, ok := f.backends.Load(key)
	if !ok || r.Limit <= 0 {
		return
	}
	b := v.(*backend)
	if b.limit.Load() != r.Limit {
		b.limit.Store(min(max(r.Limit, b.p.LeastLimit()), b.p.Limit))
	}
	if !r.Allowed {
		return
	}
	inFlight := r.Limit - r.Remaining
	b.mu.Lock()
	f.roll(b)
	b.cur.maxInFl = max(b.cur.maxInFl, inFlight)
	b.mu.Unlock()
}

// Released takes the sample of a lease released on key: its request's
// latency and outcome.
func (f *Fleet) Released(key string, latency time.Duration, o adaptive.Outcome) {
	v, ok := f.backends.Load(key)
	if !ok {
		return
	}
	if o == adaptive.Ignored {
		v.(*backend).ignored.Add(1)
		return
	}
	b := v.(*backend)
	us := max(latency.Microseconds(), 1)
	switch o {
	case adaptive.Dropped:
		b.dropped.Add(1)
	default:
		b.succeeded.Add(1)
		b.latency.Add(us)
	}
	b.mu.Lock()
	f.roll(b)
	g := &b.cur
	g.samples++
	if o == adaptive.Dropped {
		g.dropped++
	} else {
		g.rttSum += us
		if g.rttMin == 0 || us < g.rttMin {
			g.rttMin = us
		}
	}
	b.mu.Unlock()
}

func (f *Fleet) windowOf(p policy.Params) int64 {
	return f.cfg.Now().UnixMicro() / p.Window.Microseconds()
}

// roll starts b's next window when the one it gathers has ended, keeping
// the one that ended for Run to give.
func (f *Fleet) roll(b *backend) {
	w := f.windowOf(b.p)
	if w == b.cur.window {
		return
	}
	b.used.Store(w)
	b.done = gathered{}
	if b.cur.window == w-1 {
		b.done = b.cur
	}
	b.cur = gathered{window: w}
}

// gathered is one window's samples, of a decider or of the fleet.
type gathered struct {
	window                                    int64
	samples, dropped, rttSum, rttMin, maxInFl int64
}

// take returns the samples of the window that ended last, once.
func (f *Fleet) take(b *backend) (gathered, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f.roll(b)
	g := b.done
	b.done = gathered{}
	return g, g.window != 0
}

// tick is how often Run looks for windows that ended.
const tick = 20 * time.Millisecond

// Run gives the samples of each window that ended and, where this
// decider holds a backend's updater lock, sets its next limit, until ctx
// ends.
func (f *Fleet) Run(ctx context.Context) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.backends.Range(func(k, v any) bool {
			key, b := k.(string), v.(*backend)
			if f.windowOf(b.p)-b.used.Load() > forgetAfter {
				f.backends.Delete(key) // idle: its limit stays in Redis a while
				return true
			}
			if g, ok := f.take(b); ok {
				b.inFlight.Store(g.maxInFl)
				if err := f.give(ctx, key, b, g); err != nil && ctx.Err() == nil {
					f.cfg.Logger.Warn("adaptive limits: giving a window's samples", "err", err)
				}
			}
			return true
		})
	}
}

// forgetAfter is how many windows a backend no decision met is kept.
const forgetAfter = 600

// Limit returns the fleet's limit of key as this decider last heard it,
// 0 for a key it has not decided.
func (f *Fleet) Limit(key string) int64 {
	if b, ok := f.backends.Load(key); ok {
		return b.(*backend).limit.Load()
	}
	return 0
}

// give adds g, a window of b's samples, to the fleet's, and, when this
// decider is (or becomes) the updater, computes and sets the limit from
// the window before it, whose samples every decider gave a window ago.
func (f *Fleet) give(ctx context.Context, key string, b *backend, g gathered) error {
	ms := b.p.Window.Milliseconds()
	var noLoad int64 // what this decider, updating, estimates
	b.mu.Lock()
	if gr, ok := b.alg.(*adaptive.Gradient); ok {
		noLoad = gr.NoLoad().Microseconds()
	}
	b.mu.Unlock()
	reply, err := giveScript.Run(ctx, f.cfg.Client, []string{
		f.cfg.Prefix + key + ":s:" + strconv.FormatInt(g.window, 10),
		f.cfg.Prefix + key + ":s:" + strconv.FormatInt(g.window-1, 10),
		f.cfg.Prefix + key + ":u",
		f.cfg.Prefix + key + ":n",
	}, g.samples, g.dropped, g.rttSum, g.rttMin, g.maxInFl, 10*ms, f.cfg.Name, 2*ms+tick.Milliseconds(), noLoad).Int64Slice()
	if err != nil {
		return err
	}
	b.updater.Store(len(reply) == 7 && reply[0] == 1)
	if len(reply) != 7 || reply[0] != 1 {
		b.mu.Lock()
		b.alg = nil // another decider updates: its state is its own
		b.mu.Unlock()
		return nil
	}
	fleet := gathered{g.window - 1, reply[1], reply[2], reply[3], reply[4], reply[5]}
	return f.update(ctx, key, b, fleet, time.Duration(reply[6])*time.Microsecond)
}

// update computes b's next limit from the fleet's window w and sets it,
// with the leases that expired unreleased counted as dropped. noLoad is
// the latency without load the updater before estimated, if any.
func (f *Fleet) update(ctx context.Context, key string, b *backend, w gathered, noLoad time.Duration) error {
	_, expired, err := f.cfg.Adapter.Adapt(ctx, key, b.rule, 0)
	if err != nil {
		return err
	}
	b.mu.Lock()
	if b.alg == nil {
		b.alg = newAlgorithm(b.p)
		if gr, ok := b.alg.(*adaptive.Gradient); ok {
			gr.SetNoLoad(noLoad)
		}
	}
	win := adaptive.Window{Samples: int(w.samples + expired), Dropped: int(w.dropped + expired),
		MinRTT: time.Duration(w.rttMin) * time.Microsecond, MaxInFlight: int(w.maxInFl), Length: b.p.Window}
	if ok := w.samples - w.dropped; ok > 0 {
		win.MeanRTT = time.Duration(w.rttSum/ok) * time.Microsecond
	}
	next := int64(math.Round(b.alg.Next(float64(b.limit.Load()), win)))
	b.mu.Unlock()
	next = min(max(next, b.p.LeastLimit()), b.p.Limit)
	if _, _, err := f.cfg.Adapter.Adapt(ctx, key, b.rule, next); err != nil {
		return err
	}
	b.limit.Store(next)
	b.updates.Add(1)
	return nil
}

// newAlgorithm returns the algorithm of p between its floor and ceiling.
func newAlgorithm(p policy.Params) adaptive.Algorithm {
	bounds := adaptive.Bounds{Floor: float64(p.LeastLimit()), Ceiling: float64(p.Limit)}
	if p.Adaptation == policy.AdaptAIMD {
		return &adaptive.AIMD{Bounds: bounds}
	}
	return &adaptive.Gradient{Bounds: bounds}
}

// giveScript adds a decider's window of samples (KEYS[1]) and takes or
// keeps the updater's lock (KEYS[3]); the holder gets the fleet's samples
// of the window before (KEYS[2]) and the latency without load its updater
// last estimated (KEYS[4]), and keeps its own there. ARGV: samples,
// dropped, the latencies' sum and least (µs), the most in flight, the
// samples' TTL (ms), this decider's name, the lock's TTL (ms), the
// holder's latency without load (µs; 0: none). Reply: {1 when this
// decider updates, then samples, dropped, sum, least, most in flight,
// latency without load}.
var giveScript = redis.NewScript(`
local k = KEYS[1]
redis.call('HINCRBY', k, 'n', ARGV[1])
redis.call('HINCRBY', k, 'd', ARGV[2])
redis.call('HINCRBY', k, 's', ARGV[3])
local least = tonumber(ARGV[4])
if least > 0 then
  local m = tonumber(redis.call('HGET', k, 'm') or '0')
  if m == 0 or least < m then redis.call('HSET', k, 'm', least) end
end
local most = tonumber(ARGV[5])
if most > tonumber(redis.call('HGET', k, 'f') or '0') then redis.call('HSET', k, 'f', most) end
redis.call('PEXPIRE', k, ARGV[6])
local holder = redis.call('GET', KEYS[3])
if holder and holder ~= ARGV[7] then return {0} end
redis.call('SET', KEYS[3], ARGV[7], 'PX', ARGV[8])
if holder and tonumber(ARGV[9]) > 0 then
  redis.call('SET', KEYS[4], ARGV[9], 'PX', 100 * tonumber(ARGV[6]))
end
local v = redis.call('HMGET', KEYS[2], 'n', 'd', 's', 'm', 'f')
local out = {1}
for i = 1, 5 do out[i + 1] = tonumber(v[i] or '0') end
out[7] = tonumber(redis.call('GET', KEYS[4]) or '0')
return out
`)
