package limit

import "time"

// Concurrency state: T = last time seen; Ext holds (lease, expiry µs, cost)
// triples in the order they were taken or renewed.

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
	*r = Result{Limit: l.shown}
	switch {
	case held || inflight+a.Cost <= l.limit:
		r.Allowed = true
		if !held {
			cost = a.Cost
		}
		inflight += cost
		leases = append(leases, a.Lease, now+l.leaseTTL, cost)
		*s = State{T: now, Ext: leases}
	default:
		// Leases end by their expiry at the latest; earlier on release.
		freed, at := int64(0), int64(0)
		for i := 0; i < len(leases); i += 3 {
			freed += leases[i+2]
			at = max(at, leases[i+1])
			if inflight-freed+a.Cost <= l.limit {
				r.RetryAfter = time.Duration(at-now) * time.Microsecond
				break
			}
		}
	}
	r.Remaining = l.limit - inflight
	for i := 1; i < len(leases); i += 3 {
		r.ResetAfter = max(r.ResetAfter, time.Duration(leases[i]-now)*time.Microsecond)
	}
}

// Release returns the state with lease removed, for Concurrency limiters;
// releasing an unknown or expired lease changes nothing else.
func (l *Limiter) Release(s State, now int64, lease int64, buf []int64) State {
	now = effectiveNow(s.T, now)
	return State{T: now, Ext: liveLeases(buf[:0], s.Ext, now, lease)}
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
