package pgstore

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
)

// hubBuffer is how many versions a watcher of a Hub may fall behind by
// before it is dropped (its Watch returns policy.ErrWatchBehind): changes are
// rare, and each watcher's buffer is allocated whole.
const hubBuffer = 256

// Hub serves many config watchers from one Store.Watch: one LISTEN
// connection and one periodic re-check for all of them, where each Watch
// of its own holds a connection of the database's (a control plane serving
// hundreds of deciders would otherwise exhaust max_connections). The
// shared watch runs while the hub has watchers.
type Hub struct {
	store *Store
	cfg   WatchConfig // Since and Listening unused

	mu       sync.Mutex
	watchers map[*hubWatcher]struct{}
	gen      int                // the shared watch's run; bumped at each start
	stop     context.CancelFunc // of the shared watch; nil when none runs
	ready    chan struct{}      // closed once the shared watch listens
}

type hubWatcher struct {
	ch      chan policy.Version
	dropped bool // ch closed: it fell behind (guarded by Hub.mu)
}

// NewHub returns a hub of s's changes; cfg's Recheck, Channel and Logger
// configure its shared watch.
func (s *Store) NewHub(cfg WatchConfig) *Hub {
	return &Hub{store: s, cfg: cfg, watchers: map[*hubWatcher]struct{}{}}
}

// Watch is Store.Watch for one watcher, served by the hub: emit gets every
// version committed after since, in version order per tenant (and a
// tenant's version now, Back, when the database went back behind what
// the watcher had), until ctx
// ends (Watch then returns ctx's error), emit fails (its error), or the
// watcher falls hubBuffer versions behind (policy.ErrWatchBehind).
func (h *Hub) Watch(ctx context.Context, since map[string]int64, emit func(policy.Version) error) error {
	w := &hubWatcher{ch: make(chan policy.Version, hubBuffer)}
	ready := h.join(w)
	defer h.leave(w)
	// Once the shared watch listens, what is committed from then on comes
	// through w.ch; what came before is in the database.
	select {
	case <-ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	known := make(map[string]int64, len(since))
	for k, v := range since {
		known[k] = v
	}
	// The database may be out now: read again until it answers, while
	// what is committed meanwhile waits in w.ch.
	for {
		err := h.store.catchUp(ctx, "", known, emit)
		if err == nil {
			break
		}
		if ee, ok := errors.AsType[emitError](err); ok {
			return ee.err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		h.logger().WarnContext(ctx, "config hub: catching up again", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case v, ok := <-w.ch:
			if !ok {
				return policy.ErrWatchBehind
			}
			have, seen := known[v.TenantID]
			switch {
			case v.Deleted && !seen: // a tenant this watcher never had
				continue
			case v.Back && (!seen || v.Version >= have): // not ahead of the database
				continue
			case !v.Deleted && !v.Back && v.Version <= have: // caught up already
				continue
			}
			if err := emit(v); err != nil {
				return err
			}
			if v.Deleted {
				delete(known, v.TenantID)
			} else {
				known[v.TenantID] = v.Version
			}
		}
	}
}

// join adds w, starting the shared watch if none runs, and returns the
// channel closed once it listens.
func (h *Hub) join(w *hubWatcher) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.watchers[w] = struct{}{}
	if h.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		h.gen++
		h.stop, h.ready = cancel, make(chan struct{})
		go h.run(ctx, h.gen, h.ready)
	}
	return h.ready
}

// leave removes w, stopping the shared watch with the last watcher.
func (h *Hub) leave(w *hubWatcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.watchers, w)
	if len(h.watchers) == 0 && h.stop != nil {
		h.stop()
		h.stop = nil
	}
}

// run is the shared watch of generation gen: from the versions of now on,
// every version to every watcher.
func (h *Hub) run(ctx context.Context, gen int, ready chan struct{}) {
	cfg := h.cfg
	cfg.Logger = h.logger()
	var once sync.Once
	cfg.Listening = func() { once.Do(func() { close(ready) }) }
	for {
		// Watch reconnects by itself; only this read can fail here.
		since, _, err := h.store.TenantVersions(ctx)
		if err == nil {
			cfg.Since = since
			err = h.store.Watch(ctx, cfg, func(v policy.Version) error { h.fanOut(gen, v); return nil })
		}
		if ctx.Err() != nil {
			return
		}
		cfg.Logger.WarnContext(ctx, "config hub: watching again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// fanOut hands v to every watcher, dropping those whose buffer is full.
func (h *Hub) fanOut(gen int, v policy.Version) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if gen != h.gen {
		return // a stopped run's last version: its watchers are gone
	}
	for w := range h.watchers {
		if w.dropped {
			continue
		}
		select {
		case w.ch <- v:
		default:
			w.dropped = true
			close(w.ch)
		}
	}
}

// logger is the hub's configured logger, or slog's default.
func (h *Hub) logger() *slog.Logger {
	if h.cfg.Logger != nil {
		return h.cfg.Logger
	}
	return slog.Default()
}
