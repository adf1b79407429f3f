package redisengine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// The breaker opens after its count of consecutive failures, and not
// before, though successes pass it quietly; it refuses while open, and
// closes again on the first success once Redis is back.
func TestBreakerOpensOnFailuresAndClosesOnRecovery(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	const failures = 3
	e := New(c, Config{Prefix: redistest.Prefix(t), MinTTL: testTTL, Batch: true, BreakerFailures: failures, BreakerCooldown: 200 * time.Millisecond})
	t.Cleanup(e.Close)
	hourly := limit.MustCompile(policy.Params{Algorithm: policy.FixedWindow, Limit: 1000, Window: time.Hour})
	decide := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := e.AllowAll(ctx, []limit.Request{{Key: "client", Limiter: hourly, Cost: 1}}, make([]limit.Result, 1))
		return err
	}
	for range 20 { // quiet passes
		if err := decide(); err != nil {
			t.Fatal(err)
		}
	}
	srv.Stop(t)
	for i := range failures {
		if err := decide(); err == nil || errors.Is(err, ErrBreakerOpen) {
			t.Fatalf("failure %d: %v, want Redis's error", i+1, err)
		}
		if i < failures-1 && e.Breaker() != "closed" {
			t.Fatalf("the breaker is %s after %d failures of %d", e.Breaker(), i+1, failures)
		}
	}
	if err := decide(); !errors.Is(err, ErrBreakerOpen) {
		t.Fatalf("after %d failures: %v, want the breaker's refusal", failures, err)
	}
	srv.Start(t)
	for deadline := time.Now().Add(10 * time.Second); decide() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never decided again; the breaker is %s", e.Breaker())
		}
	}
	if got := e.Breaker(); got != "closed" {
		t.Fatalf("after a success the breaker is %s", got)
	}
	for range 20 {
		if err := decide(); err != nil {
			t.Fatal(err)
		}
	}
}
