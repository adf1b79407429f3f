package regions_test

import (
	"context"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/regions"
	"github.com/sluicehq/sluice/internal/testkit/cputest"
	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// latency is what the proxy between regions adds, each way.
const latency = 80 * time.Millisecond

// lag bounds the time from a region's admission to the other region's
// view of it: the publishing interval, at most a round trip waiting at the
// broker for the reader's next fetch, and the way across.
const lag = regions.DefaultInterval + 2*latency + latency

// region is one region of the test: its Redis, its Kafka, the proxy the
// other region reads its Kafka through, and its deciders.
type region struct {
	name     string
	redis    *redistest.Server
	kafka    *kafkatest.Broker
	proxy    *delayProxy
	deciders []*decide.Decider
	tables   []*regions.Table
}

// twoRegions starts east and west, two deciders each, on one tenant's
// config of a global rule ("global") and a regional one ("regional"),
// both fixed windows of limit per window, keyed by user.
//
// The tests time decisions and convergence against a few hundred
// milliseconds: they run alone (cputest.Alone).
func twoRegions(t *testing.T, limit int64, window time.Duration, assume regions.Assumption, share float64) (*decide.Compiled, []*region) {
	t.Helper()
	cputest.Alone(t)
	rules := []policy.Rule{
		{ID: "g", Name: "global", KeyBy: []string{"user"}, Match: []policy.Match{{Key: "scope", Value: "global"}}, Enabled: true,
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: limit, Window: window}, FailureMode: policy.FailClosed, Scope: policy.ScopeGlobal},
		{ID: "r", Name: "regional", KeyBy: []string{"user"}, Match: []policy.Match{{Key: "scope", Value: "region"}}, Enabled: true,
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: limit, Window: window}, FailureMode: policy.FailClosed},
		{ID: "b", Name: "bucket", KeyBy: []string{"user"}, Match: []policy.Match{{Key: "scope", Value: "bucket"}}, Enabled: true,
			Params: policy.Params{Algorithm: policy.TokenBucket, Limit: limit, Window: window, Burst: limit}, FailureMode: policy.FailClosed,
			Scope: policy.ScopeGlobal},
	}
	c, err := decide.Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t1", Slug: "acme", Name: "Acme", DefaultTier: "default"},
		Version: 1, Tiers: []policy.Tier{{Name: "default", Rules: rules}}})
	if err != nil {
		t.Fatal(err)
	}
	rs := []*region{{name: "east"}, {name: "west"}}
	brokers := map[string][]string{}
	proxied := map[string]string{} // a Kafka address → the proxy in front of it
	for _, r := range rs {
		r.redis = redistest.StartServer(t)
		r.kafka = kafkatest.Start(t, 1, []string{regions.DefaultTopic})
		brokers[r.name] = r.kafka.Addrs()
		r.proxy = startDelayProxy(t, r.kafka.Addrs()[0], latency)
		proxied[r.kafka.Addrs()[0]] = r.proxy.Addr()
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if p, ok := proxied[addr]; ok {
			addr = p
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	for _, r := range rs {
		for range 2 {
			rc := redis.NewClient(&redis.Options{Addr: r.redis.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
			t.Cleanup(func() { rc.Close() })
			eng := redisengine.New(rc, redisengine.Config{Batch: true, Timeout: 200 * time.Millisecond})
			t.Cleanup(eng.Close)
			apply := func(ctx context.Context, charges []regions.Charge) error {
				rcs := make([]redisengine.RemoteCharge, len(charges))
				for i, c := range charges {
					rcs[i] = redisengine.RemoteCharge{Key: c.Key, Run: c.Run, Count: c.Count, Interval: c.Interval}
				}
				return eng.ChargeRemote(ctx, rcs)
			}
			rep, err := regions.Start(regions.Config{Region: r.name, Brokers: brokers, Dial: dial, Apply: apply,
				Silence: time.Second, Assume: assume, Share: share}) // the default interval
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rep.Close() })
			r.deciders = append(r.deciders, decide.NewDecider(decide.Options{Counters: eng, Budget: time.Second, Global: rep.Table()}))
			r.tables = append(r.tables, rep.Table())
		}
	}
	// Each decider hears from the other region before the load: a decider
	// starting adds a region's counts once its reader has reached them.
	deadline := time.Now().Add(10 * time.Second)
	for _, r := range rs {
		for _, tb := range r.tables {
			for len(tb.Unheard()) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%s: never heard from %v", r.name, tb.Unheard())
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	return c, rs
}

// tally counts one load's admissions by window (the window's end, as the
// counters answered it) and its errors and latencies.
type tally struct {
	mu        sync.Mutex
	key       string // the global rule's counter
	window    time.Duration
	admitted  map[int64]int64 // window end (ms, rounded) → admissions
	errs      int
	latencies []time.Duration
}

func (tl *tally) add(dec decide.Decision, err error, took time.Duration) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.latencies = append(tl.latencies, took)
	if err != nil || dec.Degraded {
		tl.errs++
		return
	}
	if dec.Allowed && len(dec.Rules) == 1 {
		tl.key = dec.Rules[0].Key
		end := time.Now().Add(dec.Rules[0].Result.ResetAfter)
		w := tl.window.Milliseconds()
		tl.admitted[(end.UnixMilli()+w/2)/w*w]++
	}
}

func (tl *tally) quantile(q float64) time.Duration {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	l := slices.Clone(tl.latencies)
	slices.Sort(l)
	if len(l) == 0 {
		return 0
	}
	return l[int(q*float64(len(l)-1))]
}

// load sends rate checks a second of user u on scope to each decider of
// each region, until stop is closed.
func load(ctx context.Context, t *testing.T, c *decide.Compiled, rs []*region, scope string, rate int, tl *tally, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, r := range rs {
		for _, d := range r.deciders {
			wg.Go(func() {
				tick := time.NewTicker(time.Second / time.Duration(rate))
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					wg.Go(func() {
						start := time.Now()
						dec, err := d.Decide(ctx, c, decide.Request{Cost: 1, Descriptors: policy.Descriptors{{Key: "scope", Value: scope}, {Key: "user", Value: "u"}}})
						tl.add(dec, err, time.Since(start))
					})
				}
			})
		}
	}
	return &wg
}

// TestGlobalLimitAcrossTwoRegions: a global rule of L per window, loaded
// from both regions at once, admits at most L plus what each region
// admits while the other has not yet heard of it; a regional rule's
// decisions take as long as a global rule's.
func TestGlobalLimitAcrossTwoRegions(t *testing.T) {
	const limit, window = 400, 2 * time.Second
	c, rs := twoRegions(t, limit, window, regions.AssumeLastRate, 0)
	ctx := context.Background()
	// Each decider 250 checks a second: 1,000 a second a region, 500 a
	// window of each region alone, above the limit.
	const rate = 250
	global := &tally{window: window, admitted: map[int64]int64{}}
	regional := &tally{window: window, admitted: map[int64]int64{}}
	stop := make(chan struct{})
	wg := load(ctx, t, c, rs, "global", rate, global, stop)
	wg2 := load(ctx, t, c, rs, "region", rate, regional, stop)
	time.Sleep(3 * window)
	close(stop)
	wg.Wait()
	wg2.Wait()

	// What a region admits before the other hears of it, each way.
	perRegion := int64(2 * rate)
	bound := limit + int64(float64(perRegion)*lag.Seconds()) // the other region's unseen admissions, each way
	bound = limit + 2*(bound-limit)
	full := 0
	for end, n := range global.admitted {
		t.Logf("global window ending %s: %d admitted across regions (limit %d, bound %d)", time.UnixMilli(end).Format("15:04:05.000"), n, limit, bound)
		if n > bound {
			t.Errorf("window ending %d: %d admitted, over the bound %d", end, n, bound)
		}
		if n >= limit {
			full++
		}
	}
	for end, n := range regional.admitted {
		if n > 2*limit {
			t.Errorf("regional window ending %d: %d admitted, over twice the limit", end, n)
		}
	}
	if full < 2 {
		t.Fatalf("%d windows reached the limit: the load did not test it (%v)", full, global.admitted)
	}
	if global.errs+regional.errs > 0 {
		t.Fatalf("%d and %d errors or degraded decisions", global.errs, regional.errs)
	}
	t.Logf("latency, global: p50 %v p99 %v; regional: p50 %v p99 %v", global.quantile(0.5), global.quantile(0.99), regional.quantile(0.5), regional.quantile(0.99))
	if g, r := global.quantile(0.99), regional.quantile(0.99); g > 2*r+10*time.Millisecond {
		t.Fatalf("a global decision's p99 %v against a regional one's %v: it waits on something", g, r)
	}
}

// TestGlobalTokenBucketAcrossTwoRegions: a token bucket of scope global
// (burst B, a rate r) loaded from both regions at once admits, over T, at
// most B + r × T plus what each region admits before the other's
// admissions are charged into its Redis; each region alone would admit
// B + r × T.
func TestGlobalTokenBucketAcrossTwoRegions(t *testing.T) {
	const limit, window, rate = 400, 2 * time.Second, 250
	c, rs := twoRegions(t, limit, window, regions.AssumeLastRate, 0)
	ctx := context.Background()
	tl := &tally{window: window, admitted: map[int64]int64{}}
	stop := make(chan struct{})
	start := time.Now()
	wg := load(ctx, t, c, rs, "bucket", rate, tl, stop)
	time.Sleep(6 * time.Second)
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	var total int64
	for _, n := range tl.admitted {
		total += n
	}
	one := limit + int64(float64(limit)/window.Seconds()*elapsed.Seconds())         // B + r × T
	bound := one + int64(float64(2*2*rate)*(lag+regions.DefaultInterval).Seconds()) // and the charge's interval
	t.Logf("token bucket over %v: %d admitted across regions (one region's bucket %d, bound %d)", elapsed.Round(time.Millisecond), total, one, bound)
	if tl.errs > 0 {
		t.Fatalf("%d errors or degraded decisions", tl.errs)
	}
	if total > bound || total < one*9/10 {
		t.Fatalf("%d admitted, want from %d to the bound %d", total, one*9/10, bound)
	}
}

// TestPartitionUnderLoad: replication cut for 30 s under load. Each
// region goes on answering, without errors; every window of the cut
// admits within the partition bound, each region taking the other to go
// on as in the last windows it heard of once it is silent, and the one
// in which it falls silent within the bound of the silence; a token bucket's two regions,
// each charging the other's last rate into its own Redis, admit about
// the bucket's rate between them, not twice it; once the link is back,
// each region's view of the other's count converges.
func TestPartitionUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a partition of 30 s")
	}
	const limit, window, rate = 400, 2 * time.Second, 250
	const interval = regions.DefaultInterval
	c, rs := twoRegions(t, limit, window, regions.AssumeLastRate, 0)
	ctx := context.Background()
	east := &tally{window: window, admitted: map[int64]int64{}}
	west := &tally{window: window, admitted: map[int64]int64{}}
	stop := make(chan struct{})
	bucket := &tally{window: window, admitted: map[int64]int64{}}
	wgE := load(ctx, t, c, rs[:1], "global", rate, east, stop)
	wgW := load(ctx, t, c, rs[1:], "global", rate, west, stop)
	wgB := load(ctx, t, c, rs, "bucket", rate, bucket, stop)
	time.Sleep(3 * window) // each region learns the other's rate; the bucket pays for its first burst
	for _, r := range rs {
		r.proxy.Cut()
	}
	cutFrom := time.Now()
	time.Sleep(30 * time.Second)
	close(stop)
	wgE.Wait()
	wgW.Wait()
	wgB.Wait()
	stopped := time.Now()
	cutTo := stopped
	for _, r := range rs {
		r.proxy.Restore()
	}
	restored := time.Now()
	if east.errs+west.errs+bucket.errs > 0 {
		t.Fatalf("%d, %d and %d errors or degraded decisions during the partition", east.errs, west.errs, bucket.errs)
	}
	// Once a region is silent, its last windows stand in for it; until
	// then (the silence, 1 s) a window may count nothing of it.
	const silence = time.Second
	bound := int64(limit + 2*(2*rate)*lag.Seconds())
	onset := int64(limit + 2*(2*rate)*(silence+lag).Seconds())
	w := window.Milliseconds()
	silent := cutFrom.Add(silence).UnixMilli()
	inCut := 0
	for end := (cutFrom.UnixMilli()/w + 2) * w; end <= cutTo.UnixMilli()/w*w; end += w {
		inCut++
		n := east.admitted[end] + west.admitted[end]
		b := bound
		if end-w < silent {
			b = onset
		}
		t.Logf("window ending %s, in the partition: %d + %d admitted (limit %d, bound %d)", time.UnixMilli(end).Format("15:04:05"), east.admitted[end], west.admitted[end], limit, b)
		if n > b {
			t.Errorf("window ending %d: %d admitted during the partition, over the bound %d", end, n, b)
		}
	}
	if inCut < 10 {
		t.Fatalf("%d windows wholly in the partition", inCut)
	}
	var bucketInCut int64
	for end := (cutFrom.UnixMilli()/w + 2) * w; end <= cutTo.UnixMilli()/w*w; end += w {
		bucketInCut += bucket.admitted[end]
	}
	tokens := float64(limit) / window.Seconds() * float64(inCut) * window.Seconds() // the bucket's rate over those windows
	t.Logf("token bucket in the partition: %d admitted across regions over %d windows (its rate allows %.0f; each region alone %.0f)", bucketInCut, inCut, tokens, 2*tokens)
	if float64(bucketInCut) > 1.25*tokens || float64(bucketInCut) < tokens/2 {
		t.Errorf("token bucket: %d admitted during the partition, want from half to 1.25 times the %.0f its rate allows", bucketInCut, tokens)
	}
	// Convergence: within two intervals of the link's return, each
	// region's view of the other's count of the last window equals what
	// the other admitted in it: a reader reconnects and reads on in one
	// round trip.
	last := (stopped.UnixMilli()/w + 1) * w
	start := (last - w) * 1000
	for {
		eastSees := rs[0].tables[0].Spent(west.key, start, 0, 0, limit, time.Now())
		westSees := rs[1].tables[0].Spent(east.key, start, 0, 0, limit, time.Now())
		if eastSees == west.admitted[last] && westSees == east.admitted[last] {
			t.Logf("converged %v after the link returned: east sees %d, west %d", time.Since(restored), eastSees, westSees)
			break
		}
		if time.Since(restored) > 2*interval {
			t.Fatalf("no convergence %v after the link returned: east sees %d of west's %d, west %d of east's %d",
				time.Since(restored), eastSees, west.admitted[last], westSees, east.admitted[last])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRegionLossLeavesTheOtherDeciding: one region's Redis gone, the
// other's decisions go on, without errors, as fast.
func TestRegionLossLeavesTheOtherDeciding(t *testing.T) {
	const limit, window = 1_000_000, 2 * time.Second
	c, rs := twoRegions(t, limit, window, regions.AssumeLastRate, 0)
	ctx := context.Background()
	measure := func() *tally {
		tl := &tally{window: window, admitted: map[int64]int64{}}
		stop := make(chan struct{})
		wg := load(ctx, t, c, rs[1:], "global", 200, tl, stop)
		time.Sleep(time.Second)
		close(stop)
		wg.Wait()
		return tl
	}
	before := measure()
	rs[0].redis.Stop(t)
	after := measure()
	if after.errs > 0 {
		t.Fatalf("west: %d errors with east's Redis gone", after.errs)
	}
	t.Logf("west's p99: %v before, %v after east's Redis went", before.quantile(0.99), after.quantile(0.99))
	if b, a := before.quantile(0.99), after.quantile(0.99); a > 2*b+10*time.Millisecond {
		t.Fatalf("west's p99 %v after, %v before", a, b)
	}
}

// delayProxy forwards TCP to a target, delivering what each side sends
// delay later, in order; Cut closes every connection and refuses new ones
// until Restore.
type delayProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration
	cut    atomic.Bool
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

func startDelayProxy(t testing.TB, target string, delay time.Duration) *delayProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{ln: ln, target: target, delay: delay, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() { ln.Close(); p.Cut() })
	go p.serve()
	return p
}

func (p *delayProxy) Addr() string { return p.ln.Addr().String() }

func (p *delayProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.cut.Load() {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

// pipe copies from src to dst, each chunk delay after it was read.
func (p *delayProxy) pipe(src, dst net.Conn) {
	type chunk struct {
		due time.Time
		b   []byte
	}
	q := make(chan chunk, 1024)
	go func() {
		defer dst.Close()
		for c := range q {
			time.Sleep(time.Until(c.due))
			if _, err := dst.Write(c.b); err != nil {
				return
			}
		}
	}()
	defer close(q)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{time.Now().Add(p.delay), append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			if err != io.EOF {
				src.Close()
			}
			return
		}
	}
}

// Cut closes every connection through the proxy and refuses new ones.
func (p *delayProxy) Cut() {
	p.cut.Store(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Restore lets connections through again.
func (p *delayProxy) Restore() { p.cut.Store(false) }
