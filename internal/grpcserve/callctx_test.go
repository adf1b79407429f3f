package grpcserve

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A call's context ends at its deadline or when cancelled, and its next
// call starts afresh: a channel closed is never handed out again, and the
// timer of an earlier call's deadline does not end a later call.
func TestCallContextIsEveryCallsOwn(t *testing.T) {
	t.Parallel()
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, "metadata")
	c := &callCtx{}

	c.start(parent, time.Now().Add(20*time.Millisecond))
	if c.Value(key{}) != "metadata" {
		t.Fatal("the call's context lost its parent's values")
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the deadline passed and the context did not end")
	}
	if !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Fatalf("err %v at the deadline", c.Err())
	}
	c.finish()

	// The next call, without a deadline, while the first one's timer
	// might still fire: it stays live until cancelled.
	c.start(parent, time.Now().Add(time.Millisecond))
	c.finish() // ends before its deadline: the timer is stopped, or fires late
	c.start(parent, time.Time{})
	done := c.Done()
	select {
	case <-done:
		t.Fatal("a new call's context was born ended")
	default:
	}
	c.expire() // the earlier call's timer, firing late
	if err := c.Err(); err != nil {
		t.Fatalf("an earlier call's deadline ended a later call: %v", err)
	}
	c.cancel()
	<-done
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("err %v after cancel", c.Err())
	}
	c.finish()

	// A call that ended well leaves its channel to the next.
	c.start(parent, time.Time{})
	kept := c.Done()
	c.finish()
	c.start(parent, time.Time{})
	if c.Done() != kept {
		t.Fatal("a channel never closed was not kept")
	}
	c.finish()
}
