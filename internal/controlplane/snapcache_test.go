package controlplane

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
)

func snapAt(id string, version, stamp int64, name string) *sluicev1.Snapshot {
	return &sluicev1.Snapshot{Tenant: &sluicev1.Tenant{Id: id, Name: name}, Version: version, Stamp: stamp}
}

// Pulls of one version share one read, whatever their number and however
// they overlap; a new version or stamp is read again, once; a failed read
// is not kept.
func TestSnapshotCacheReadsAVersionOnce(t *testing.T) {
	t.Parallel()
	c := newSnapshotCache(1 << 20)
	ctx := context.Background()
	var reads atomic.Int32
	read := func(version, stamp int64, release <-chan struct{}) func(context.Context) (*sluicev1.Snapshot, error) {
		return func(context.Context) (*sluicev1.Snapshot, error) {
			reads.Add(1)
			<-release
			return snapAt("t1", version, stamp, "acme"), nil
		}
	}
	synctest.Test(t, func(t *testing.T) {
		// Twenty pulls at once, all of them in get before the read ends.
		release := make(chan struct{})
		const n = 20
		var wg sync.WaitGroup
		got := make([]*sluicev1.Snapshot, n)
		for i := range n {
			wg.Go(func() {
				s, err := c.get(ctx, "t1", 3, 7, read(3, 7, release))
				if err != nil {
					t.Error(err)
				}
				got[i] = s
			})
		}
		synctest.Wait() // every pull blocked: in the read, or waiting on it
		close(release)
		wg.Wait()
		if r := reads.Load(); r != 1 {
			t.Fatalf("%d reads of one version, want 1", r)
		}
		for i, s := range got {
			if s.GetVersion() != 3 {
				t.Fatalf("pull %d got %v", i, s)
			}
		}
	})
	released := make(chan struct{})
	close(released)
	for _, tc := range []struct {
		version, stamp int64
		reads          int32
	}{{3, 7, 1}, {4, 7, 2}, {4, 7, 2}, {4, 9, 3}, {4, 9, 3}} {
		if s, err := c.get(ctx, "t1", tc.version, tc.stamp, read(tc.version, tc.stamp, released)); err != nil || s.GetVersion() != tc.version || s.GetStamp() != tc.stamp {
			t.Fatalf("version %d stamp %d: %v, %v", tc.version, tc.stamp, s, err)
		}
		if r := reads.Load(); r != tc.reads {
			t.Fatalf("version %d stamp %d: %d reads in all, want %d", tc.version, tc.stamp, r, tc.reads)
		}
	}
	failed := errors.New("database unavailable")
	if _, err := c.get(ctx, "t2", 1, 1, func(context.Context) (*sluicev1.Snapshot, error) { return nil, failed }); !errors.Is(err, failed) {
		t.Fatalf("a failed read answered %v", err)
	}
	if s, err := c.get(ctx, "t2", 1, 1, func(context.Context) (*sluicev1.Snapshot, error) { return snapAt("t2", 1, 1, "b"), nil }); err != nil || s.GetVersion() != 1 {
		t.Fatalf("after a failed read: %v, %v", s, err)
	}
	c.forget("t1")
	before := reads.Load()
	if _, err := c.get(ctx, "t1", 4, 9, read(4, 9, released)); err != nil || reads.Load() != before+1 {
		t.Fatalf("a forgotten tenant was not read again: %v", err)
	}
}

// A read that ends after a later version's does not put the earlier one
// back, unless it is of another stamp (the database went back); the
// bytes kept stay under the bound, the least recently sent tenant going
// first.
func TestSnapshotCacheKeepsTheLatestWithinItsBound(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 1000)
	size := proto.Size(snapAt("t1", 1, 1, big))
	c := newSnapshotCache(3*size + size/2)
	c.keep("t1", snapAt("t1", 5, 1, big))
	c.keep("t1", snapAt("t1", 4, 1, big))
	if s, _ := c.byID.Peek("t1"); s.GetVersion() != 5 {
		t.Fatalf("an earlier read replaced version 5: %v", s.GetVersion())
	}
	c.keep("t1", snapAt("t1", 4, 2, big))
	if s, _ := c.byID.Peek("t1"); s.GetVersion() != 4 || s.GetStamp() != 2 {
		t.Fatalf("the database's version of another stamp did not replace a lost one: %v", s)
	}
	for _, id := range []string{"t2", "t3", "t4"} {
		c.keep(id, snapAt(id, 1, 1, big))
	}
	if _, ok := c.byID.Peek("t1"); ok || c.byID.Len() != 3 || c.bytes > c.max {
		t.Fatalf("%d tenants, %d bytes of %d, t1 kept: %v", c.byID.Len(), c.bytes, c.max, ok)
	}
	c.forget("t2")
	if c.bytes != 2*size {
		t.Fatalf("%d bytes counted after a forget, want %d", c.bytes, 2*size)
	}
}
