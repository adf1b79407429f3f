package decision

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/tracing"
)

// The service is the one door: what a protocol asks of the decider beyond
// a decision (a lease's release or renewal, a request's validation, the
// clock its answers state times by) goes through these methods too, so
// that each is counted and traced where decisions are.

// Now is the decider's clock: the time answers state resets from.
func (cfg *Service) Now() time.Time { return cfg.Decider.Now() }

// Validate refuses req, of c's tenant, when no decision can take it
// (decide.Decider.Validate): a field error to answer before deciding.
func (cfg *Service) Validate(c *decide.Compiled, req decide.Request) error {
	return cfg.Decider.Validate(c, req)
}

// ReplacedBy gives each of a call's requests the names of the rules the
// others' rules replace, as envoyproxy/ratelimit drops a replaced limit
// from every descriptor of the call (decide.Decider.Replacing). It does
// nothing unless c has a rule that replaces others.
func (cfg *Service) ReplacedBy(c *decide.Compiled, reqs []decide.Request) {
	if len(reqs) < 2 || !c.HasReplaces() {
		return
	}
	var replaced map[string]bool
	for i := range reqs {
		for _, n := range cfg.Decider.Replacing(c, reqs[i]) {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[n] = true
		}
	}
	for i := range reqs {
		reqs[i].Replaced = replaced
	}
}

// Release ends the lease req names (decide.Decider.Release).
func (cfg *Service) Release(ctx context.Context, c *decide.Compiled, req decide.Request) error {
	span, ctx := cfg.leaseSpan(ctx, "sluice.release")
	err := cfg.Decider.Release(ctx, c, req)
	cfg.endLease(span, c, "release", err)
	return err
}

// ReleaseHeld ends the lease dec holds, if any (decide.Decider.ReleaseHeld).
func (cfg *Service) ReleaseHeld(ctx context.Context, c *decide.Compiled, req decide.Request, dec decide.Decision) error {
	if dec.Lease == 0 {
		return nil
	}
	span, ctx := cfg.leaseSpan(ctx, "sluice.release")
	err := cfg.Decider.ReleaseHeld(ctx, c, req, dec)
	cfg.endLease(span, c, "release", err)
	return err
}

// Renew extends the lease dec holds (decide.Decider.Renew), reporting
// whether it is still held.
func (cfg *Service) Renew(ctx context.Context, c *decide.Compiled, req decide.Request, dec decide.Decision) (bool, error) {
	span, ctx := cfg.leaseSpan(ctx, "sluice.renew")
	ok, err := cfg.Decider.Renew(ctx, c, req, dec)
	cfg.endLease(span, c, "renew", err)
	return ok, err
}

// Full reports whether the decider has its bound of decisions in flight
// (decide.Decider.Full): only then does the door look at a call's tenant.
func (cfg *Service) Full() bool { return cfg.Decider != nil && cfg.Decider.Full() }

func (cfg *Service) leaseSpan(ctx context.Context, name string) (trace.Span, context.Context) {
	if cfg.Tracer == nil {
		return nil, ctx
	}
	ctx, span := tracing.Start(ctx, cfg.Tracer, name, nil)
	return span, ctx
}

// endLease records a lease's release or renewal: its span, and
// sluice_lease_operations_total.
func (cfg *Service) endLease(span trace.Span, c *decide.Compiled, op string, err error) {
	if span != nil {
		endLeaseSpan(span, c, err)
	}
	cfg.Metrics.observeLease(c.Tenant.Slug, op, err)
}

// Drain spends what remains of limits that decisions found over, for the
// protocols that ask it (gubernator's DRAIN_OVER_LIMIT): decisions of
// those costs, traced but not counted as requests of their own. errs[i]
// is reqs[i]'s failure, if any.
func (cfg *Service) Drain(ctx context.Context, c *decide.Compiled, reqs []decide.Request) []error {
	span, ctx := cfg.leaseSpan(ctx, "sluice.drain")
	_, errs := cfg.Decider.DecideAll(ctx, c, reqs)
	if span != nil {
		endLeaseSpan(span, c, First(errs))
	}
	return errs
}
