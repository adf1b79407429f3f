package redisengine

import (
	"context"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
)

// Charge adds to the shared state of each charge's key what the decider
// admitted for it without Redis, at its time (decide.Counters.Charge), as
// local counting's reconciliations do (sync.lua): no bound check, so the
// state holds what was admitted even past the limit, and the meters' debt
// then drains at the rule's rate before anything more is admitted.
// Charges of algorithms whose states do not add up (those local counting
// leaves to Redis: the sliding windows and log, concurrency, the leaky
// bucket, warm-up, calendar windows) are left out.
func (e *Engine) Charge(ctx context.Context, charges []limit.Charge) error {
	keys := make([]string, 0, len(charges))
	args := make([]any, 0, 2+4*len(charges))
	args = append(args, e.nowArg(), e.minTTL)
	for _, c := range charges {
		st := e.statics.get(c.Limiter)
		if st.family < 0 || c.Cost <= 0 {
			continue
		}
		win := c.At
		if st.family == familyFixed {
			win -= c.At % st.window
		}
		keys = append(keys, e.cfg.Prefix+c.Key)
		args = append(args, st.family, c.Cost, st.param, win)
	}
	if e.cluster != nil {
		for i, k := range keys { // each key's slot its own
			if _, err := e.eval(ctx, time.Time{}, syncScript, []string{k}, append([]any{args[0], args[1]}, args[2+4*i:6+4*i]...)); err != nil {
				return err
			}
		}
		return nil
	}
	for from := 0; from < len(keys); from += syncChunk {
		to := min(from+syncChunk, len(keys))
		chunk := append([]any{args[0], args[1]}, args[2+4*from:2+4*to]...)
		if _, err := e.eval(ctx, time.Time{}, syncScript, slices.Clip(keys[from:to]), chunk); err != nil {
			return err
		}
	}
	return nil
}

// RemoteCharge is what a decider run of another region admitted on a
// meter of scope global (regions.Applier): Count, only ever raised, of
// Interval µs a unit.
type RemoteCharge struct {
	Key, Run string
	Count    int64
	Interval float64
}

// ChargeRemote charges each meter with what the run of another region
// admitted on it beyond what was charged of that run before (remote.lua):
// whichever decider of the region sends a rise, it is charged once.
func (e *Engine) ChargeRemote(ctx context.Context, charges []RemoteCharge) error {
	for _, c := range charges {
		if _, err := e.eval(ctx, time.Time{}, remoteScript, []string{e.cfg.Prefix + c.Key},
			[]any{e.nowArg(), e.minTTL, c.Run, c.Count, c.Interval}); err != nil {
			return err
		}
	}
	return nil
}
