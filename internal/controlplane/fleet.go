package controlplane

import (
	"context"
	"sync"
	"time"
)

// LiveWindow is how recently a decider must have synced to count as live.
// A decider pulls every 30 s by default: one that missed two pulls is
// counted out. A decider that left is counted until then, so each of the
// others enforces a smaller share than it might: the safe side.
const LiveWindow = 75 * time.Second

// fleetEvery is how often each config watch looks for a change in the
// number of live deciders, to send it: a decider that joins is counted in
// the others' shares within about this long.
const fleetEvery = time.Second

// fleet counts the live deciders for every config watch of this control
// plane, reading the database at most once per fleetEvery whatever the
// number of watches.
type fleet struct {
	count func(ctx context.Context, window time.Duration) (int, error)

	mu   sync.Mutex
	n    int
	read time.Time
}

// live returns the number of live deciders, as read at most fleetEvery
// ago; 0 when the database cannot say.
func (f *fleet) live(ctx context.Context) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Since(f.read) < fleetEvery {
		return f.n
	}
	n, err := f.count(ctx, LiveWindow)
	if err != nil {
		return f.n // the last known: the database is away, the fleet likely not
	}
	f.n, f.read = n, time.Now()
	return n
}

// forget makes the next live read the database: a decider just synced.
func (f *fleet) forget() {
	f.mu.Lock()
	f.read = time.Time{}
	f.mu.Unlock()
}
