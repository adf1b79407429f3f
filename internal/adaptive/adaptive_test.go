package adaptive

import (
	"testing"
	"time"
)

const service = 10 * time.Millisecond

// reachedBy is the first time from which the limit stays within 10% of c
// for the rest of the recording, of windows of s.
func reachedBy(s *sim, c int) (time.Duration, bool) {
	at := -1
	for i, l := range s.limits {
		if l < 0.9*float64(c) || l > 1.1*float64(c) {
			at = -1
		} else if at < 0 {
			at = i
		}
	}
	return time.Duration(at+1) * s.window, at >= 0
}

// The gradient limit of a backend of 100 workers, loaded at 1.5 times what
// they serve, reaches 100 ± 10% within 10 s and holds it: its coefficient
// of variation at most 10%, goodput at least 95% of what the workers
// serve, and p99 at most 1.5 times the service time.
func TestGradientFindsTheCapacity(t *testing.T) {
	t.Parallel()
	const c = 100
	s := newSim(1, c, service, 1.5*c/service.Seconds(), &Gradient{}, 10)
	s.run(10*time.Second, 0)
	at, ok := reachedBy(s, c)
	t.Logf("from 10: within 10%% of %d after %v", c, at)
	if !ok || at > 10*time.Second {
		t.Fatalf("the limit was %.1f after 10 s (within 10%% of %d from %v: %v)", s.limit, c, at, ok)
	}
	s.reset()
	s.run(70*time.Second, 10*time.Second)
	mean, cv, p99 := s.stats()
	goodput := float64(s.answered) / 60
	t.Logf("steady: limit %.1f (cv %.3f), goodput %.0f/s of %.0f, p99 %v", mean, cv, goodput, c/service.Seconds(), p99)
	switch {
	case mean < 0.9*c || mean > 1.1*c:
		t.Errorf("mean limit %.1f, want %d ± 10%%", mean, c)
	case cv > 0.10:
		t.Errorf("limit's coefficient of variation %.3f, over 10%%", cv)
	case goodput < 0.95*c/service.Seconds():
		t.Errorf("goodput %.0f/s, under 95%% of %.0f", goodput, c/service.Seconds())
	case p99 > service*3/2:
		t.Errorf("p99 %v, over 1.5 × %v", p99, service)
	}
}

// When the backend's capacity halves or doubles, the limit follows within
// 15 s.
func TestGradientFollowsTheCapacity(t *testing.T) {
	t.Parallel()
	for _, to := range []int{50, 200} {
		s := newSim(2, 100, service, 3*100/service.Seconds(), &Gradient{}, 10)
		s.run(20*time.Second, 0)
		s.workers = to
		s.reset()
		s.run(50*time.Second, 20*time.Second)
		at, ok := reachedBy(s, to)
		t.Logf("100 → %d workers: within 10%% after %v", to, at)
		if !ok || at > 15*time.Second {
			t.Errorf("100 → %d workers: the limit is %.1f 30 s on (within 10%% from %v: %v)", to, s.limit, at, ok)
		}
	}
}

// Ten minutes at three times the capacity do not make the limit creep:
// it ends at most 1.2 times the capacity.
func TestGradientHoldsUnderLongOverload(t *testing.T) {
	t.Parallel()
	const c = 20 // 3.6 million requests in 10 minutes
	s := newSim(3, c, service, 3*c/service.Seconds(), &Gradient{}, 10)
	s.run(10*time.Minute, 9*time.Minute)
	mean, _, p99 := s.stats()
	t.Logf("after 10 min at 3×: limit %.1f, p99 %v", mean, p99)
	if mean > 1.2*c {
		t.Fatalf("the limit crept to %.1f, over 1.2 × %d", mean, c)
	}
}

// A backend whose every answer times out drives the limit to its floor.
func TestTimeoutsDriveTheLimitToTheFloor(t *testing.T) {
	t.Parallel()
	for _, alg := range []Algorithm{&Gradient{}, &AIMD{}} {
		s := newSim(4, 100, time.Second, 500, alg, 100) // a second of service, 100 ms of patience
		s.timeout = 100 * time.Millisecond
		s.run(30*time.Second, 25*time.Second)
		if s.limit != 1 {
			t.Errorf("%T: the limit is %.1f with every answer timing out, want the floor, 1", alg, s.limit)
		}
	}
}

// A backend of capacity 3 is protected: the limit settles at about 3,
// where a floor of 20 would have queued the rest.
func TestSmallBackendIsProtected(t *testing.T) {
	t.Parallel()
	const c = 3
	s := newSim(5, c, service, 3*c/service.Seconds(), &Gradient{}, 1)
	s.run(20*time.Second, 10*time.Second)
	mean, _, p99 := s.stats()
	t.Logf("capacity 3: limit %.2f, p99 %v", mean, p99)
	if mean < 2.5 || mean > 4.5 || p99 > 2*service {
		t.Fatalf("capacity 3: limit %.2f, p99 %v", mean, p99)
	}
}

// AIMD finds the capacity too, by its drops: the backend's clients time
// out past 1.5 service times.
func TestAIMDFindsTheCapacity(t *testing.T) {
	t.Parallel()
	const c = 100
	s := newSim(6, c, service, 1.5*c/service.Seconds(), &AIMD{Threshold: service * 13 / 10}, 10)
	s.run(60*time.Second, 30*time.Second)
	mean, cv, p99 := s.stats()
	t.Logf("AIMD: limit %.1f (cv %.3f), p99 %v", mean, cv, p99)
	if mean < 0.8*c || mean > 1.3*c {
		t.Fatalf("AIMD's limit %.1f, want about %d", mean, c)
	}
}
