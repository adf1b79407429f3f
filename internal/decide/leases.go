package decide

import (
	"context"
	"math/rand/v2"

	"github.com/sluicehq/sluice/internal/adaptive"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// Concurrency leases: their release and renewal.

// NewLease returns a new lease id: random, non-zero, below 2^53 (Lua
// numbers are exact below it).
func NewLease() int64 { return 1 + rand.Int64N(1<<53-1) }

// Release ends req's lease (req.Lease) on each concurrency rule the request
// matches, on the counters and on the in-process fallback (a lease may
// have been taken there while the counters failed). Other rules are
// untouched. Releasing a lease that is not held does nothing. While the
// counters' breaker is open, they are not asked: the leases end at their
// TTL.
func (d *Decider) Release(ctx context.Context, c *Compiled, req Request) error {
	return d.release(ctx, c, req, false)
}

// ReleaseHeld ends the lease dec, the decision of req, holds (dec.Lease)
// where it was taken: on the in-process fallback alone when the counters
// had failed (dec.Degraded), else as Release does.
func (d *Decider) ReleaseHeld(ctx context.Context, c *Compiled, req Request, dec Decision) error {
	if dec.Lease == 0 {
		return nil
	}
	req.Lease = dec.Lease
	return d.release(ctx, c, req, dec.Degraded)
}

// Renew extends the lease dec, the decision of req, holds on req's
// concurrency rules to a full TTL from now, as retaking it does, and
// touches no other rule: for a request that lasts longer than a lease
// (a websocket through the proxy). A lease that ended meanwhile is taken
// again when its rule has room; false when it had none. A decision the
// counters failed has nothing to renew there (its leases live on this
// decider, or nowhere).
func (d *Decider) Renew(ctx context.Context, c *Compiled, req Request, dec Decision) (bool, error) {
	if dec.Lease == 0 || dec.Degraded {
		return true, nil
	}
	req.Lease = dec.Lease
	leases, err := d.leasesOf(c, req, false)
	if err != nil || len(leases) == 0 {
		return err == nil, err
	}
	batch := []limit.Call{{Reqs: leases, Res: make([]limit.Result, len(leases))}}
	d.opts.Counters.AllowBatch(ctx, d.opts.Budget, batch)
	if batch[0].Err != nil {
		return false, errNotRenewed
	}
	return batch[0].Allowed, nil
}

// errNotRenewed answers a renewal the counters did not make.
var errNotRenewed = &policy.Error{Code: policy.CodeUnavailable, Message: "the lease could not be renewed now; it ends at its TTL"}

// leasesOf returns the counter requests of req's concurrency rules, and
// gives the samples of its adaptive ones, when req is a release that
// tells how its request went.
func (d *Decider) leasesOf(c *Compiled, req Request, release bool) ([]limit.Request, error) {
	if err := req.Descriptors.Validate(); err != nil {
		return nil, err
	}
	sel, err := d.selectRules(c, req, 1)
	if err != nil {
		return nil, err
	}
	var leases []limit.Request
	for i, r := range sel.reqs {
		if sel.params[i].Algorithm.Leases() {
			leases = append(leases, r)
		}
		if release && sel.params[i].Algorithm == policy.AdaptiveConcurrency && d.opts.Adaptive != nil &&
			(req.Latency > 0 || req.Outcome != adaptive.Succeeded) {
			d.opts.Adaptive.Released(r.Key, req.Latency, req.Outcome)
		}
	}
	return leases, nil
}

// release is Release, asking the counters unless localOnly.
func (d *Decider) release(ctx context.Context, c *Compiled, req Request, localOnly bool) error {
	leases, err := d.leasesOf(c, req, true)
	if err != nil || len(leases) == 0 {
		return err
	}
	if d.opts.Local != nil {
		now := d.opts.Now().UnixMicro()
		for _, r := range leases {
			d.opts.Local.Release(r.Key, r.Limiter, now, r.Lease)
		}
	}
	if localOnly {
		return nil
	}
	ctx, cancel := d.budgeted(ctx)
	defer cancel()
	if err := d.opts.Counters.Release(ctx, leases); err != nil {
		return errNotReleased
	}
	return nil
}

// errNotReleased answers a release the counters did not make.
var errNotReleased = &policy.Error{Code: policy.CodeUnavailable, Message: "the lease could not be released now; it ends at its TTL"}
