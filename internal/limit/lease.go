package limit

import (
	"time"

	"github.com/sluicehq/sluice/internal/policy"
)

// Concurrency state: T = last time seen; Ext holds (lease, expiry µs, cost)
// triples in the order they were taken or renewed. An adaptive limiter's X
// is the fleet's limit its updater last set (0: none, the limiter's own
// stands), and Y counts the leases that expired unreleased since the
// updater last took them (Taken): requests dropped.

// acquire takes a lease of a.Cost units for a.Lease, or renews it when the
// lease is already held (its cost unchanged): retries are idempotent.
func (l *Limiter) acquire(s *State, a Args, buf []int64, r *Result) {
	now := effectiveNow(s.T, a.Now)
	leases := liveLeases(buf[:0], s.Ext, now, a.Lease)
	cost, held := heldLease(s.Ext, now, a.Lease)
	var inflight int64
	for i := 2; i < len(leases); i += 3 {
		inflight += leases[i]
	}
	limit, x, y := l.limit, 0.0, 0.0
	if l.alg == policy.AdaptiveConcurrency {
		x, y = s.X, s.Y+float64(expired(s.Ext, now))
		if x > 0 {
			limit = int64(x)
		}
	}
	*r = Result{Limit: l.shown}
	if l.alg == policy.AdaptiveConcurrency {
		r.Limit = limit
	}
	switch {
	case held || inflight+a.Cost <= limit:
		r.Allowed = true
		if !held {
			cost = a.Cost
		}
		inflight += cost
		leases = append(leases, a.Lease, now+l.leaseTTL, cost)
		*s = State{T: now, X: x, Y: y, Ext: leases}
	default:
		// Leases end by their expiry at the latest; earlier on release.
		freed, at := int64(0), int64(0)
		for i := 0; i < len(leases); i += 3 {
			freed += leases[i+2]
			at = max(at, leases[i+1])
			if inflight-freed+a.Cost <= limit {
				r.RetryAfter = time.Duration(at-now) * time.Microsecond
				break
			}
		}
	}
	r.Remaining = limit - inflight
	for i := 1; i < len(leases); i += 3 {
		r.ResetAfter = max(r.ResetAfter, time.Duration(leases[i]-now)*time.Microsecond)
	}
}

// Release returns the state with lease removed, for Concurrency limiters;
// releasing an unknown or expired lease changes nothing else.
func (l *Limiter) Release(s State, now int64, lease int64, buf []int64) State {
	now = effectiveNow(s.T, now)
	if l.alg == policy.AdaptiveConcurrency {
		return State{T: now, X: s.X, Y: s.Y + float64(expired(s.Ext, now)), Ext: liveLeases(buf[:0], s.Ext, now, lease)}
	}
	return State{T: now, Ext: liveLeases(buf[:0], s.Ext, now, lease)}
}

// expired counts the leases of ext that expired by now.
func expired(ext []int64, now int64) int {
	n := 0
	for i := 1; i < len(ext); i += 3 {
		if ext[i] <= now {
			n++
		}
	}
	return n
}

// liveLeases appends to dst the leases of ext that have not expired at now,
// leaving out lease skip.
func liveLeases(dst, ext []int64, now, skip int64) []int64 {
	for i := 0; i+2 < len(ext); i += 3 {
		if ext[i+1] > now && ext[i] != skip {
			dst = append(dst, ext[i], ext[i+1], ext[i+2])
		}
	}
	return dst
}

// heldLease returns the cost of lease and whether it is held at now.
func heldLease(ext []int64, now, lease int64) (int64, bool) {
	for i := 0; i+2 < len(ext); i += 3 {
		if ext[i] == lease && ext[i+1] > now {
			return ext[i+2], true
		}
	}
	return 0, false
}
