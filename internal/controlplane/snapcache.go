package controlplane

import (
	"context"
	"strconv"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
)

// snapshotCacheBytes bounds the snapshots a control plane keeps for its
// deciders, counted as they are sent (proto.Size; in memory they take a
// few times that): a tenant of 1,000 rules and 10,000 overrides is about
// a MiB, a common one a few KiB.
const snapshotCacheBytes = 64 << 20

// snapshotReadTimeout bounds a read that several deciders' pulls wait on:
// it outlives the pull that started it, whose caller may go away.
const snapshotReadTimeout = 30 * time.Second

// snapshotCache keeps the snapshot each tenant's deciders were last sent,
// at its config version and stamp, so that a change every decider pulls
// is read from PostgreSQL once, not once per decider (a tenant of 1,000
// rules and 10,000 overrides is a read of tens of milliseconds), and
// concurrent pulls of a version not yet kept share one read. A snapshot
// is a function of its version and stamp (every change bumps the version
// in its own transaction; a database gone back gets a new stamp), but for
// the keys and overrides that expired since it was read, which deciders
// refuse by their expiry themselves. It holds at most
// snapshotCacheBytes, dropping the tenants least recently sent first.
// Snapshots it returns are shared: never modify one.
type snapshotCache struct {
	mu    sync.Mutex
	byID  *lru.Cache[string, keptSnapshot]
	bytes int // the sum of the kept snapshots' sizes
	max   int
	reads singleflight.Group
}

// keptSnapshot is a snapshot and its size as sent.
type keptSnapshot struct {
	*sluicev1.Snapshot
	size int
}

func newSnapshotCache(maxBytes int) *snapshotCache {
	c := &snapshotCache{max: maxBytes}
	// Unbounded in number (the bytes bound it); the callback keeps the
	// count of bytes, under c.mu like every call on byID.
	c.byID, _ = lru.NewWithEvict(1<<30, func(_ string, k keptSnapshot) { c.bytes -= k.size })
	return c
}

// get returns tenant id's snapshot at version and stamp, kept or read by
// read (which may answer a later version: the one kept from then on).
func (c *snapshotCache) get(ctx context.Context, id string, version, stamp int64,
	read func(context.Context) (*sluicev1.Snapshot, error)) (*sluicev1.Snapshot, error) {
	c.mu.Lock()
	s, ok := c.byID.Get(id)
	c.mu.Unlock()
	if ok && s.GetVersion() == version && s.GetStamp() == stamp {
		return s.Snapshot, nil
	}
	v, err, _ := c.reads.Do(id+"@"+strconv.FormatInt(version, 10), func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotReadTimeout)
		defer cancel()
		s, err := read(ctx)
		if err == nil {
			c.keep(id, s)
		}
		return s, err
	})
	if err != nil {
		return nil, err
	}
	return v.(*sluicev1.Snapshot), nil
}

// keep puts s in place of what c held for tenant id, unless that is a
// later version of the same stamp (a read that finished after a later
// one's); a later version of another stamp is a configuration the
// database lost, and goes.
func (c *snapshotCache) keep(id string, s *sluicev1.Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.byID.Peek(id); ok {
		if old.GetVersion() > s.GetVersion() && old.GetStamp() == s.GetStamp() {
			return
		}
		c.byID.Remove(id)
	}
	k := keptSnapshot{s, proto.Size(s)}
	c.byID.Add(id, k)
	c.bytes += k.size
	for c.bytes > c.max && c.byID.Len() > 1 {
		c.byID.RemoveOldest()
	}
}

// forget drops tenant id's snapshot (a deleted tenant's).
func (c *snapshotCache) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byID.Remove(id)
}
