package redisengine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/sony/gobreaker/v2"

	"github.com/sluicehq/sluice/internal/limit"
)

// ErrBreakerOpen is the error of a call that a circuit breaker refused
// (wrapped with the breaker's name): Redis, or the master it would go to,
// failed of late, and is not asked (Config.BreakerFailures).
var ErrBreakerOpen = errors.New("redisengine: circuit breaker open")

// errElsewhere is what a master's breaker is told of a decision spanning
// masters that failed on another, or that another's breaker refused: not
// a failure of its own, nor a success (see newBreaker).
var errElsewhere = errors.New("redisengine: failed on another master")

// breakers are the engine's circuit breakers: one for one Redis, one per
// master of a cluster, made as their masters are first met.
type breakers struct {
	byName sync.Map // master address ("": one Redis) → *gobreaker.TwoStepCircuitBreaker[struct{}]
}

// breaker returns the breaker of the master name ("": one Redis's).
func (e *Engine) breaker(name string) *gobreaker.TwoStepCircuitBreaker[struct{}] {
	if b, ok := e.breakers.byName.Load(name); ok {
		return b.(*gobreaker.TwoStepCircuitBreaker[struct{}])
	}
	label := "redis"
	if name != "" {
		label = "redis " + name
	}
	b, _ := e.breakers.byName.LoadOrStore(name, gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        label,
		Timeout:     e.cfg.BreakerCooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= e.cfg.BreakerFailures },
		// A caller hanging up says nothing about Redis, nor another
		// master's failure about this one, nor the decider's own backlog.
		IsExcluded: func(err error) bool {
			return errors.Is(err, context.Canceled) || errors.Is(err, errElsewhere) || errors.Is(err, limit.ErrOverloaded) || errors.Is(err, ErrStalled)
		},
		OnStateChange: func(name string, from, to gobreaker.State) {
			level := slog.LevelWarn
			if to == gobreaker.StateClosed {
				level = slog.LevelInfo
			}
			e.cfg.Logger.LogAttrs(context.Background(), level, "breaker "+to.String(),
				slog.String("breaker", name), slog.String("from", from.String()))
		},
	}))
	return b.(*gobreaker.TwoStepCircuitBreaker[struct{}])
}

// pass is a call's way through the breakers of the masters its keys are
// on (see enter): each one's name and report of the outcome; first the
// master of the call's first key ("" on one Redis), then the others.
type pass struct {
	first  string
	done   func(error)
	others []string
	dones  []func(error)
}

// enter passes reqs' call through the breakers of the masters its keys are
// on, or returns the refusal (ErrBreakerOpen) of the first that is open.
// Without breakers it passes every call.
func (e *Engine) enter(ctx context.Context, reqs []limit.Request) (pass, error) {
	if e.cfg.BreakerFailures == 0 {
		return pass{}, nil
	}
	var p pass
	p.first, p.others = e.Shards(ctx, reqs)
	done, err := e.breaker(p.first).Allow()
	if err != nil {
		return pass{}, e.refusal(p.first, err)
	}
	p.done = done
	for _, name := range p.others {
		done, err := e.breaker(name).Allow()
		if err != nil {
			p.done(errElsewhere)
			for _, d := range p.dones {
				d(errElsewhere)
			}
			return pass{}, e.refusal(name, err)
		}
		p.dones = append(p.dones, done)
	}
	return p, nil
}

// refusal is the error of a call the breaker of master name refused.
func (e *Engine) refusal(name string, err error) error {
	return fmt.Errorf("%w (%s): %w", ErrBreakerOpen, e.breaker(name).Name(), err)
}

// leave reports the outcome err of a call that passed p, and counts it
// when it failed (Failures). A failure naming one master (shardError)
// counts against that master's breaker alone; any other, against each
// master the call went to.
func (e *Engine) leave(p pass, err error) {
	e.failed(err)
	if p.done == nil {
		return
	}
	blamed := ""
	if err != nil {
		if on := (*shardError)(nil); errors.As(err, &on) && (on.shard == p.first || slices.Contains(p.others, on.shard)) {
			blamed = on.shard
		}
	}
	report := func(name string, done func(error)) {
		if err == nil || blamed == "" || blamed == name {
			done(err)
		} else {
			done(errElsewhere)
		}
	}
	report(p.first, p.done)
	for i, done := range p.dones {
		report(p.others[i], done)
	}
}

// failed counts err, a call's outcome, among Failures when it is one:
// not overload, nor a cancelled caller, nor a call stalled behind a
// pipeline that failed (that pipeline's calls count).
func (e *Engine) failed(err error) {
	if err != nil && !errors.Is(err, limit.ErrOverloaded) && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrBreakerOpen) && !errors.Is(err, ErrStalled) {
		e.failures.Add(1)
	}
}

// breakerOpen returns the refusal of an open breaker of a master reqs' keys
// are on, or nil: Redis is not to be asked now.
func (e *Engine) breakerOpen(ctx context.Context, reqs []limit.Request) error {
	if e.cfg.BreakerFailures == 0 {
		return nil
	}
	first, others := e.Shards(ctx, reqs)
	for _, name := range append([]string{first}, others...) {
		if b := e.breaker(name); b.State() == gobreaker.StateOpen {
			return e.refusal(name, gobreaker.ErrOpenState)
		}
	}
	return nil
}

// Breaker returns the state of the engine's breakers, "closed",
// "half-open" or "open": the worst of them, "open" when any master's is;
// "closed" without breakers. It implements decide.Counters.
func (e *Engine) Breaker() string {
	worst := gobreaker.StateClosed
	e.breakers.byName.Range(func(_, b any) bool {
		st := b.(*gobreaker.TwoStepCircuitBreaker[struct{}]).State()
		if st == gobreaker.StateOpen || (st == gobreaker.StateHalfOpen && worst == gobreaker.StateClosed) {
			worst = st
		}
		return worst != gobreaker.StateOpen
	})
	return worst.String()
}

// Failures returns how many calls to Redis have failed (errors and
// timeouts; not overload, nor calls a breaker refused). It implements
// decide.Counters.
func (e *Engine) Failures() int64 { return e.failures.Load() }
