package dataplane

import "sync"

// together runs f(0) … f(n-1) at the same time and returns the error of the
// lowest index that failed. The decisions of one call (a CheckBatch, an
// Envoy request's descriptors) are independent, and deciding them at once
// lets the Redis engine's batcher put them in one pipeline: one round trip
// for the call instead of one per decision.
func together(n int, f func(i int) error) error {
	if n == 1 {
		return f(0)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
