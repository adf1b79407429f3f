package decision

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/policy"
)

// Together runs f(0) … f(n-1) at the same time and returns the error of the
// lowest index that failed. The decisions of one call (a CheckBatch, an
// Envoy request's descriptors) are independent, and deciding them at once,
// under a context from Decider.Gather, lets the Redis engine's batcher put
// them in one pipeline: one round trip for the call instead of one per
// decision.
func Together(n int, f func(i int) error) error {
	if n == 1 {
		return f(0)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		work(func() {
			defer wg.Done()
			defer func() { // off the caller's goroutine, a panic would end the process
				if r := recover(); r != nil {
					errs[i] = fmt.Errorf("decision: decision %d panicked: %v", i, r)
				}
			}()
			errs[i] = f(i)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Kept workers run Together's decisions. A decision's calls run deep
// enough to grow a new goroutine's stack, and copying stacks took an
// eighth of the decider's CPU on coalesced batches; a kept worker's stack
// has grown once. Up to maxIdleWorkers wait for work between calls.
var (
	workQueue   = make(chan func())
	idleWorkers atomic.Int64
)

const maxIdleWorkers = 256

// work runs f on an idle worker, or a new one when none is idle.
func work(f func()) {
	select {
	case workQueue <- f:
	default:
		go worker(f)
	}
}

func worker(f func()) {
	for {
		f()
		if idleWorkers.Add(1) > maxIdleWorkers {
			idleWorkers.Add(-1)
			return
		}
		f = <-workQueue
		idleWorkers.Add(-1)
	}
}

// RefuseAny refuses a call of n decisions when any would be refused,
// before any is decided or counted: a call is refused whole or decided
// whole. refusal(i) is the i-th decision's refusal, if any; the fields of
// invalid ones are named by index, as in requests[2].cost.
func RefuseAny(field string, n int, refusal func(i int) error) error {
	var fields []policy.FieldError
	for i := range n {
		err := refusal(i)
		if err == nil {
			continue
		}
		var pe *policy.Error
		if !errors.As(err, &pe) || pe.Code != policy.CodeInvalid {
			return err
		}
		if len(pe.Fields) == 0 {
			fields = append(fields, policy.FieldError{Field: fmt.Sprintf("%s[%d]", field, i), Description: pe.Message})
		}
		for _, f := range pe.Fields {
			fields = append(fields, policy.FieldError{Field: fmt.Sprintf("%s[%d].%s", field, i, f.Field), Description: f.Description})
		}
	}
	if len(fields) > 0 {
		return &policy.Error{Code: policy.CodeInvalid, Message: "invalid " + field, Fields: fields}
	}
	return nil
}
