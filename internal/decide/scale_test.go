package decide

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// What only shows at scale, in miniature (docs/scaling.md): a hot key on
// a Redis Cluster, and a cluster that grows under load.

// hotTenant is a tenant of one rule per client: a token bucket of 50 that
// refills one token in about 14 hours, so that a test's admissions are the
// burst alone, whatever the clock.
func hotTenant(t testing.TB, sync time.Duration) *Compiled {
	t.Helper()
	c, err := Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "T", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{{ID: "r", Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
			Params: policy.Params{Algorithm: policy.TokenBucket, Limit: 50, Window: 30 * 24 * time.Hour}, Sync: sync}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clusterEngine is an engine on cl under prefix, closed when the test ends.
func clusterEngine(t testing.TB, cl *redistest.Cluster, prefix string) *redisengine.Engine {
	t.Helper()
	url := "redis://" + cl.Addrs[0]
	for _, a := range cl.Addrs[1:] {
		url += "&addr=" + a
	}
	url = strings.Replace(url, "&", "?", 1)
	eng, err := redisengine.Open(url, redisengine.ClientOptions{Cluster: true}, redisengine.Config{Prefix: prefix, Batch: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	return eng
}

// infos is INFO section of each of addrs.
func infos(t testing.TB, addrs []string, section string) []string {
	t.Helper()
	out := make([]string, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		info, err := c.Info(context.Background(), section).Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = info
	}
	return out
}

// scriptCalls is the scripts each of addrs has run (INFO commandstats).
func scriptCalls(t *testing.T, addrs []string) []int64 {
	t.Helper()
	out := make([]int64, len(addrs))
	for i, info := range infos(t, addrs, "commandstats") {
		for _, line := range strings.Split(info, "\r\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
				out[i], _ = strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			}
		}
	}
	return out
}

func sum(xs []int64) (n int64) {
	for _, x := range xs {
		n += x
	}
	return n
}

// hotLoad runs decisions from 16 goroutines on two deciders, nine in ten
// for the client "hot" and the rest spread over 100 others, and returns
// the admissions of hot and the decisions made.
func hotLoad(t *testing.T, deciders []*Decider, c *Compiled) (hotAdmitted, decisions int64) {
	t.Helper()
	var wg sync.WaitGroup
	var hot, n atomic.Int64
	for g := range 16 {
		d := deciders[g%len(deciders)]
		wg.Go(func() {
			for i := range 100 {
				client := "hot"
				if i%10 == 9 {
					client = fmt.Sprint("cold-", (g*100+i)%100)
				}
				dec, err := d.Decide(context.Background(), c, check(client))
				if err != nil {
					t.Error(err)
					return
				}
				if dec.Degraded {
					t.Errorf("degraded decision: %+v", dec)
					return
				}
				n.Add(1)
				if client == "hot" && dec.Allowed {
					hot.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return hot.Load(), n.Load()
}

// A client with nine in ten of the traffic: under strict counting every
// one of its decisions is a script on the one master of its key, and it is
// admitted exactly its limit. The deny cache answers its rejections on the
// deciders, so that master runs little more than the admissions; local
// counting leaves Redis a reconciliation per interval, and admits at most
// (deciders − 1) × the limit more (docs/algorithms.md).
func TestHotKeyOnACluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	for _, tc := range []struct {
		name      string
		sync      time.Duration
		denyCache int
	}{{"strict", 0, 0}, {"strict with the deny cache", 0, 1000}, {"local counting", 100 * time.Millisecond, 0}} {
		prefix := redistest.Prefix(t) + strconv.Itoa(len(tc.name)) + ":"
		c := hotTenant(t, tc.sync)
		var ds []*Decider
		for range 2 {
			ds = append(ds, NewDecider(Options{Counters: clusterEngine(t, cl, prefix), Budget: 5 * time.Second, DenyCacheSize: tc.denyCache}))
		}
		before := scriptCalls(t, cl.Addrs)
		hot, n := hotLoad(t, ds, c)
		after := scriptCalls(t, cl.Addrs)
		calls := make([]int64, len(after))
		var hotMaster int64
		for i := range after {
			calls[i] = after[i] - before[i]
			hotMaster = max(hotMaster, calls[i])
		}
		t.Logf("%s: %d decisions, hot admitted %d, scripts per master %v", tc.name, n, hot, calls)
		switch {
		case tc.sync == 0 && hot != 50:
			t.Errorf("%s: hot admitted %d, want exactly 50", tc.name, hot)
		case tc.sync > 0 && (hot < 50 || hot > 100):
			t.Errorf("%s: hot admitted %d, want 50 to 100", tc.name, hot)
		case tc.sync == 0 && tc.denyCache == 0 && hotMaster < n*8/10:
			t.Errorf("%s: the busiest master ran %d scripts of %d decisions; the hot key's should run nine in ten", tc.name, hotMaster, n)
		case tc.denyCache > 0 && sum(calls) > n/10+50+2*16:
			t.Errorf("%s: %d scripts for %d decisions; the deny cache should leave the cold clients, the admissions and those in flight", tc.name, sum(calls), n)
		case tc.sync > 0 && sum(calls) > n/10:
			t.Errorf("%s: %d scripts for %d decisions; local counting should leave reconciliations alone", tc.name, sum(calls), n)
		}
	}
}

// dbSizes is the keys each of addrs holds.
func dbSizes(t *testing.T, addrs []string) []int64 {
	t.Helper()
	out := make([]int64, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		n, err := c.DBSize(context.Background()).Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = n
	}
	return out
}

// Six masters: a counter's key is hash-tagged by tenant, rule and
// descriptors, so 6,000 clients' counters spread evenly over the masters.
// A seventh master then joins and takes slots from two of them while two
// deciders keep deciding: keys move with MIGRATE, the clients follow the
// redirections, and no decision fails, is degraded or over-admits.
func TestSixMastersSpreadAndAMasterJoinsUnderLoad(t *testing.T) {
	t.Parallel()
	cl := redistest.StartClusterOf(t, 6)
	prefix := redistest.Prefix(t)
	c := hotTenant(t, 0)
	ds := []*Decider{
		NewDecider(Options{Counters: clusterEngine(t, cl, prefix), Budget: 5 * time.Second}),
		NewDecider(Options{Counters: clusterEngine(t, cl, prefix), Budget: 5 * time.Second}),
	}
	decide := func(d *Decider, client string) Decision {
		dec, err := d.Decide(context.Background(), c, check(client))
		if err != nil {
			t.Error(err)
		}
		if dec.Degraded {
			t.Errorf("%s: degraded decision %+v", client, dec)
		}
		return dec
	}
	const clients = 6000
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			for i := g; i < clients; i += 12 {
				decide(ds[g%2], fmt.Sprint("client-", i))
			}
		})
	}
	wg.Wait()
	sizes := dbSizes(t, cl.Addrs)
	for i, n := range sizes {
		if n < clients/6*8/10 || n > clients/6*12/10 {
			t.Errorf("master %d holds %d keys of %d; want %d ± 20%%", i, n, clients, clients/6)
		}
	}

	// Under load: every client decided again, and one client, "tight",
	// taken to its limit, while a seventh master takes 400 slots.
	var tight atomic.Int64
	stop := make(chan struct{})
	var load sync.WaitGroup
	for g := range 4 {
		load.Go(func() {
			for i := g; ; i += 4 {
				select {
				case <-stop:
					return
				default:
				}
				decide(ds[g%2], fmt.Sprint("client-", i%clients))
				if decide(ds[g%2], "tight").Allowed {
					tight.Add(1)
				}
			}
		})
	}
	added := cl.AddMaster(t)
	moved := cl.MoveSlots(t, cl.Servers[0], added, redistest.Slots(0, 199), nil)
	moved += cl.MoveSlots(t, cl.Servers[1], added, redistest.Slots(2731, 2930), nil)
	close(stop)
	load.Wait()
	if moved == 0 {
		t.Fatal("no key moved: the slots were empty")
	}
	if got := dbSizes(t, []string{added.Addr})[0]; got < int64(moved) {
		t.Errorf("the new master holds %d keys, %d were moved to it", got, moved)
	}
	if tight.Load() != 50 {
		t.Errorf("tight admitted %d while slots moved, want exactly 50", tight.Load())
	}
	// After the move, the new master's clients are decided there.
	before := scriptCalls(t, []string{added.Addr})[0]
	for i := range 600 {
		decide(ds[i%2], fmt.Sprint("client-", i))
	}
	if after := scriptCalls(t, []string{added.Addr})[0]; after == before {
		t.Error("no decision ran on the new master")
	}
}
