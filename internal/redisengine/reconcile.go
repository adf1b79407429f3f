package redisengine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
)

// Local counting's reconciliation with Redis: the loop, the sync calls,
// and what they settle.

// loop reconciles the entries decided on since their last reconciliation
// once their interval has passed, every SyncTick, and forgets entries idle
// for two intervals, one shard per tick.
func (l *localCounts) loop() {
	t := time.NewTicker(l.e.cfg.SyncTick)
	defer t.Stop()
	sweep := 0
	for {
		select {
		case <-l.e.stop:
			return
		case <-t.C:
		}
		l.reconcileDue(context.Background(), false)
		l.sweep(sweep, l.e.now())
		sweep = (sweep + 1) % localShards
	}
}

// reconcileDue sends what was counted locally on keys decided on since
// their last reconciliation, once their interval has passed (or at once,
// with all), and refreshes their views.
func (l *localCounts) reconcileDue(ctx context.Context, all bool) {
	cur := l.e.now() / l.tick
	var due []*entry
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		var ready [][]*entry
		if all || cur-sh.next >= int64(len(sh.due)) { // look at every list
			for t, list := range sh.due {
				if all || t <= cur {
					ready = append(ready, list)
					delete(sh.due, t)
				}
			}
		} else { // take the ticks since the last time
			for t := sh.next; t <= cur; t++ {
				if list, ok := sh.due[t]; ok {
					ready = append(ready, list)
					delete(sh.due, t)
				}
			}
		}
		sh.next = max(sh.next, cur+1)
		for _, list := range ready {
			for _, en := range list {
				en.dirty = false
				if en.loading != nil { // a first fetch under way: next time
					l.markDirty(en)
					continue
				}
				en.loading = &fetch{done: make(chan struct{})}
				due = append(due, en)
			}
		}
		sh.mu.Unlock()
	}
	if len(due) > 0 {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		l.reconcile(ctx, due)
	}
}

// sweep forgets shard n's entries idle for two intervals.
func (l *localCounts) sweep(n int, now int64) {
	sh := &l.shards[n]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for k, en := range sh.m {
		if !en.dirty && en.loading == nil && en.pending == 0 && now >= en.synced+2*en.every {
			delete(sh.m, k)
			l.keys.Add(-1)
		}
	}
}

// reconcile sends the pending counts of ents (each with a fetch under
// way, en.loading) to Redis, sets their views from the answers and ends
// their fetches.
func (l *localCounts) reconcile(ctx context.Context, ents []*entry) {
	type item struct {
		en        *entry
		cost, win int64
		resets    uint32
	}
	items := make([]item, len(ents))
	for k, en := range ents {
		sh := &l.shards[l.shardOf(en.key)]
		sh.mu.Lock()
		items[k] = item{en: en, cost: en.pending, win: en.win, resets: en.resets}
		en.pending = 0
		sh.mu.Unlock()
	}
	// One call per chunk of keys, and per slot on a cluster.
	groups := [][]item{}
	if l.e.cluster != nil {
		bySlot := map[int]int{}
		for _, it := range items {
			s := Slot(l.e.cfg.Prefix + it.en.key)
			g, ok := bySlot[s]
			if !ok || len(groups[g]) >= syncChunk {
				g = len(groups)
				bySlot[s] = g
				groups = append(groups, nil)
			}
			groups[g] = append(groups[g], it)
		}
	} else {
		for c := range slices.Chunk(items, syncChunk) {
			groups = append(groups, c)
		}
	}
	now := l.e.nowArg()
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Go(func() {
			keys := make([]string, len(g))
			args := make([]any, 0, 2+4*len(g))
			args = append(args, now, l.e.minTTL)
			for k, it := range g {
				keys[k] = l.e.cfg.Prefix + it.en.key
				args = append(args, it.en.args.family, it.cost, it.en.args.param, it.win)
			}
			reply, err := l.e.eval(ctx, time.Time{}, syncScript, keys, args)
			if err == nil && len(reply) != 2*len(g) {
				err = fmt.Errorf("redisengine: sync reply of %d values for %d keys", len(reply), len(g))
			}
			if err != nil {
				l.syncErrors.Add(1)
				err = fmt.Errorf("redisengine: sync: %w", err)
			} else {
				l.syncs.Add(1)
			}
			local := l.e.now()
			for k, it := range g {
				var t, v int64
				if err == nil {
					t, v = reply[2*k], reply[2*k+1]
				}
				l.settle(it.en, it.cost, it.win, t, v, local, it.resets, err)
			}
		})
	}
	wg.Wait()
}

// settle applies one key's reconciliation answer: the shared state (t, v)
// plus what was admitted here since the cost sent (of window win) went
// out; or, after err, keeps that cost to send it again. An answer of
// before a reset of the key (resets, as the reconciliation began, behind
// the entry's) is dropped: the next decision fetches the state again.
func (l *localCounts) settle(en *entry, sent, win, t, v, now int64, resets uint32, err error) {
	sh := &l.shards[l.shardOf(en.key)]
	sh.mu.Lock()
	f := en.loading
	en.loading = nil
	if resets != en.resets {
		sh.mu.Unlock()
		close(f.done) // its waiters fetch again, or decide on the reset view
		return
	}
	if err != nil {
		if en.counts(win) {
			en.pending += sent
		}
		if en.pending != 0 {
			l.markDirty(en)
		}
	} else {
		en.view = limit.State{T: t, X: float64(v)}
		if en.counts(t) {
			en.credit(en.pending)
		}
		en.synced = now
	}
	sh.mu.Unlock()
	f.err = err
	close(f.done)
}
