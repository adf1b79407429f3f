package redisengine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

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
	byName sync.Map // master address ("": one Redis) → *breaker
}

// breaker is a master's circuit breaker. While it is closed and was last
// told of a success (clean), a call passes it quietly: it is told of the
// outcome only when that is a failure. A gobreaker pass costs a call an
// allocation, a clock read and two locks, for an answer known in advance.
// The cost: a success that passed quietly does not reset the count of
// consecutive failures of calls that end before it, so a breaker may trip
// a call or two sooner than its count when failures and successes mix.
type breaker struct {
	cb    *gobreaker.TwoStepCircuitBreaker[struct{}]
	clean atomic.Bool
}

// allow passes a call: done reports its outcome, nil when it passed
// quietly (report with quiet).
func (b *breaker) allow() (done func(error), err error) {
	if b.clean.Load() {
		return nil, nil
	}
	return b.cb.Allow()
}

// report tells b of the outcome err of a call that done passed.
func (b *breaker) report(done func(error), err error) {
	if done == nil { // passed quietly
		if !breakerFailure(err) {
			return
		}
		b.clean.Store(false)
		if done, refused := b.cb.Allow(); refused == nil {
			done(err)
		}
		return
	}
	done(err)
	if err == nil && b.cb.State() == gobreaker.StateClosed && b.cb.Counts().ConsecutiveFailures == 0 {
		b.clean.Store(true)
	}
}

// breaker returns the breaker of the master name ("": one Redis's).
func (e *Engine) breaker(name string) *breaker {
	if b, ok := e.breakers.byName.Load(name); ok {
		return b.(*breaker)
	}
	label := "redis"
	if name != "" {
		label = "redis " + name
	}
	b := &breaker{}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        label,
		Timeout:     e.cfg.BreakerCooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= e.cfg.BreakerFailures },
		IsExcluded:  func(err error) bool { return err != nil && !breakerFailure(err) },
		OnStateChange: func(name string, from, to gobreaker.State) {
			b.clean.Store(to == gobreaker.StateClosed) // counts start again
			level := slog.LevelWarn
			if to == gobreaker.StateClosed {
				level = slog.LevelInfo
			}
			e.cfg.Logger.LogAttrs(context.Background(), level, "breaker "+to.String(),
				slog.String("breaker", name), slog.String("from", from.String()))
		},
	})
	b.clean.Store(true)
	got, _ := e.breakers.byName.LoadOrStore(name, b)
	return got.(*breaker)
}

// breakerFailure reports whether err, a call's outcome, is a failure of
// the master's. A caller hanging up says nothing about Redis, nor another
// master's failure about this one, nor the decider's own backlog.
func breakerFailure(err error) bool {
	return err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, errElsewhere) && !errors.Is(err, limit.ErrOverloaded) && !errors.Is(err, ErrStalled)
}

// pass is a call's way through the breakers of the masters its keys are
// on (see enter): each one's name and report of the outcome (nil: passed
// quietly); first the master of the call's first key ("" on one Redis),
// then the others.
type pass struct {
	on     bool // the engine has breakers
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
	p := pass{on: true}
	p.first, p.others = e.Shards(ctx, reqs)
	done, err := e.breaker(p.first).allow()
	if err != nil {
		return pass{}, e.refusal(p.first, err)
	}
	p.done = done
	for _, name := range p.others {
		done, err := e.breaker(name).allow()
		if err != nil {
			e.breaker(p.first).report(p.done, errElsewhere)
			for j, d := range p.dones {
				e.breaker(p.others[j]).report(d, errElsewhere)
			}
			return pass{}, e.refusal(name, err)
		}
		p.dones = append(p.dones, done)
	}
	return p, nil
}

// refusal is the error of a call the breaker of master name refused.
func (e *Engine) refusal(name string, err error) error {
	return fmt.Errorf("%w (%s): %w", ErrBreakerOpen, e.breaker(name).cb.Name(), err)
}

// leave reports the outcome err of a call that passed p, and counts it
// when it failed (Failures). A failure naming one master (shardError)
// counts against that master's breaker alone; any other, against each
// master the call went to.
func (e *Engine) leave(p pass, err error) {
	e.failed(err)
	if !p.on {
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
			e.breaker(name).report(done, err)
		} else {
			e.breaker(name).report(done, errElsewhere)
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
		if b := e.breaker(name); b.cb.State() == gobreaker.StateOpen {
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
		st := b.(*breaker).cb.State()
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
