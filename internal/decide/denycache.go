package decide

import (
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// denyCache remembers keys rejected until a known time, so that later
// checks before then are answered without the engine. It holds only
// rejections that are exact lower bounds: for the meters and the windows,
// whatever other clients do can only push the time later. Concurrency
// leases (released early) and warm-up buckets (inexact retry) are never
// cached. An entry covers requests of at least the rejected cost, under the
// config version that rejected them: a new version starts afresh. Keys
// name their tenant, so one key is one tenant's.
type denyCache struct {
	entries *lru.Cache[string, denied]
}

type denied struct {
	version int64
	until   int64 // µs, the decider's clock
	cost    int64
	res     limit.Result
}

func newDenyCache(size int) *denyCache {
	c, _ := lru.New[string, denied](size) // size > 0: cannot fail
	return &denyCache{entries: c}
}

// cacheable reports whether a rejection under p is exact until its RetryAfter.
func cacheable(p policy.Params) bool {
	return !p.Algorithm.Leases() && p.WarmUp == 0
}

// lookup returns the remembered rejection of key for cost at now, with its
// RetryAfter counted from now.
func (d *denyCache) lookup(version int64, key string, cost, now int64) (limit.Result, bool) {
	e, ok := d.entries.Get(key)
	if !ok || e.version != version || now >= e.until || cost < e.cost {
		return limit.Result{}, false
	}
	r := e.res
	r.RetryAfter = time.Duration(e.until-now) * time.Microsecond
	return r, true
}

// remember records a rejection of key at now.
func (d *denyCache) remember(version int64, key string, cost, now int64, r limit.Result) {
	if r.Allowed || r.RetryAfter <= 0 { // Never is negative: not worth a slot
		return
	}
	d.entries.Add(key, denied{version: version, until: now + r.RetryAfter.Microseconds(), cost: cost, res: r})
}

// forget drops what is remembered of key.
func (d *denyCache) forget(key string) { d.entries.Remove(key) }
