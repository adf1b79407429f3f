package redistest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestClientPrefixIsCleanedUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var prefix string
	t.Run("writer", func(t *testing.T) {
		c, p := Client(t)
		prefix = p
		for i := range 1200 { // more than one SCAN page and one UNLINK batch
			if err := c.Set(ctx, fmt.Sprintf("%skey-%d", p, i), i, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
	c, other := Client(t)
	if other == prefix {
		t.Fatal("two tests share a prefix")
	}
	keys, err := c.Keys(ctx, escapeGlob(prefix)+"*").Result()
	if err != nil || len(keys) != 0 {
		t.Fatalf("%d keys left under %s after the test (err %v)", len(keys), prefix, err)
	}
}

func TestServerStopAndStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.Stop(t)
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("a stopped server answered")
	}
	s.Start(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}

func TestClusterSpreadsSlotsOverThreeMasters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := StartCluster(t)
	cc := cl.Client(t)
	prefix := Prefix(t)
	for i := range 300 {
		if err := cc.Set(ctx, fmt.Sprintf("%s%d", prefix, i), i, 0).Err(); err != nil {
			t.Fatalf("set through the cluster: %v", err)
		}
	}
	var masters atomic.Int32 // ForEachMaster calls concurrently
	err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		size, err := n.DBSize(ctx).Result()
		if size == 0 {
			return errors.New(n.Options().Addr + " holds no key")
		}
		masters.Add(1)
		return err
	})
	if err != nil || masters.Load() != 3 {
		t.Fatalf("keys over %d masters: %v", masters.Load(), err)
	}
	// Keys sharing a hash tag share a slot, so one script may touch them all.
	tagged := []string{"{tenant-1|client}:a", "{tenant-1|client}:b"}
	n, err := redis.NewScript(`return redis.call('INCR', KEYS[1]) + redis.call('INCR', KEYS[2])`).Run(ctx, cc, tagged).Int()
	if err != nil || n != 2 {
		t.Fatalf("script over hash-tagged keys: %d, %v", n, err)
	}
	if err := DeleteKeys(ctx, cc, prefix); err != nil {
		t.Fatal(err)
	}
	if err := DeleteKeys(ctx, cc, "{tenant-1|client}"); err != nil {
		t.Fatal(err)
	}
	err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		if size := n.DBSize(ctx).Val(); size != 0 {
			return fmt.Errorf("%s still holds %d keys", n.Options().Addr, size)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
