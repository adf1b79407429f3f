package decide

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
)

// What the overload policy admits with the in-process engine is charged
// to the counters (Counters.Charge) once they answer in time, so that
// Redis's count and the in-process one do not simply add up: Redis admits
// that much less after. A charger gathers the charges for chargeEvery,
// sends them in one call, and keeps those it could not send (at most
// maxCharges, the oldest dropped and counted) for the next.

// chargeEvery is how long charges gather before they are sent.
const chargeEvery = 20 * time.Millisecond

// chargeBudget bounds one call sending charges; chargeRetry is the pause
// after one failed.
const (
	chargeBudget = time.Second
	chargeRetry  = 200 * time.Millisecond
)

// maxCharges bounds the charges waiting to be sent.
const maxCharges = 1 << 16

// charger sends charges to the counters in the background, from a
// goroutine that runs while it has any.
type charger struct {
	counters Counters
	mu       sync.Mutex
	pending  []limit.Charge
	running  bool
	sent     atomic.Int64 // charges the counters took
	dropped  atomic.Int64 // charges over maxCharges, never sent
}

// add queues the charges of reqs, admitted at (µs).
func (c *charger) add(reqs []limit.Request, at int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range reqs {
		if r.Shadow || r.Cost <= 0 {
			continue
		}
		if len(c.pending) >= maxCharges {
			c.dropped.Add(1)
			continue
		}
		c.pending = append(c.pending, limit.Charge{Key: r.Key, Limiter: r.Limiter, Cost: r.Cost, At: at})
	}
	if !c.running && len(c.pending) > 0 {
		c.running = true
		go c.run()
	}
}

// run sends what is pending every chargeEvery until nothing is.
func (c *charger) run() {
	for {
		time.Sleep(chargeEvery)
		c.mu.Lock()
		batch := c.pending
		c.pending = nil
		if len(batch) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), chargeBudget)
		err := c.counters.Charge(ctx, batch)
		cancel()
		if err == nil {
			c.sent.Add(int64(len(batch)))
			continue
		}
		c.mu.Lock()
		keep := min(len(batch), maxCharges-len(c.pending))
		c.dropped.Add(int64(len(batch) - keep))
		c.pending = append(batch[len(batch)-keep:], c.pending...)
		c.mu.Unlock()
		time.Sleep(chargeRetry)
	}
}
