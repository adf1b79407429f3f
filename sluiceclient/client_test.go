package sluiceclient

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/checkapi"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/follower"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// decider serves a real decider (in-process engine, the shared clock) for
// a tenant allowing 3 per minute per client, token bucket, and counts the
// calls that reach it.
func decider(t *testing.T, clk *clock) (url, key string, calls *atomic.Int64) {
	t.Helper()
	return deciderWith(t, clk, func() {})
}

// deciderWith is decider calling hold before it answers each call.
func deciderWith(t *testing.T, clk *clock, hold func()) (url, key string, calls *atomic.Int64) {
	t.Helper()
	return deciderOf(t, clk, []policy.Rule{{ID: "r1", Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.TokenBucket, Limit: 3, Window: time.Minute}, Message: "Free plans make 3 calls a minute"}}, hold)
}

// deciderOf is deciderWith for a tenant of rules.
func deciderOf(t *testing.T, clk *clock, rules []policy.Rule, hold func()) (url, key string, calls *atomic.Int64) {
	t.Helper()
	cfg, err := decide.Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t1", Slug: "acme", Name: "Acme", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: rules}}})
	if err != nil {
		t.Fatal(err)
	}
	keys := follower.NewKeys()
	key, _ = policy.NewKeySecret(policy.KeyCheck)
	keys.Set(policy.HashKey(key), cfg)
	path, h := checkapi.NewDecisionService(decision.Service{Authenticate: keys.Authenticate,
		Decider: decide.New(decide.InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: clk.now}, clk.now)})
	calls = new(atomic.Int64)
	mux := http.NewServeMux()
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		hold()
		h.ServeHTTP(w, r)
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL, key, calls
}

func alice() Request { return Request{Descriptors: map[string]string{"client_id": "alice"}} }

func TestCheckAndTheDenyCache(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	url, key, calls := decider(t, clk)
	c := New(Config{URL: url, Key: key, Now: clk.now})
	ctx := context.Background()
	for i := range 3 {
		d, err := c.Check(ctx, alice())
		if err != nil || !d.Allowed || d.Rules[0].Remaining != int64(2-i) || d.Rules[0].Window != time.Minute {
			t.Fatalf("check %d: %+v %v", i, d, err)
		}
	}
	d, err := c.Check(ctx, alice())
	if err != nil || d.Allowed || d.Cached || d.RetryAfter() != 20*time.Second {
		t.Fatalf("fourth check: %+v %v; want rejected for 20s", d, err)
	}
	if calls.Load() != 4 {
		t.Fatalf("%d calls", calls.Load())
	}
	// Known rejected: answered locally, with the time left, no call.
	clk.add(5 * time.Second)
	d, _ = c.Check(ctx, alice())
	if d.Allowed || !d.Cached || d.RetryAfter() != 15*time.Second || calls.Load() != 4 {
		t.Fatalf("cached: %+v after %d calls", d, calls.Load())
	}
	// Another client is not affected; alice is asked again once the time passed.
	if d, _ := c.Check(ctx, Request{Descriptors: map[string]string{"client_id": "bob"}}); !d.Allowed || d.Cached {
		t.Fatalf("bob: %+v", d)
	}
	clk.add(15 * time.Second)
	if d, _ := c.Check(ctx, alice()); !d.Allowed || d.Cached || calls.Load() != 6 {
		t.Fatalf("after retry-after: %+v, %d calls", d, calls.Load())
	}
	// A peek is its own request: asked of the decider, it consumes nothing.
	dana := Request{Descriptors: map[string]string{"client_id": "dana"}}
	peek := dana
	peek.Peek = true
	for range 2 {
		if d, err := c.Check(ctx, peek); err != nil || !d.Allowed || d.Cached || d.Rules[0].Remaining != 3 {
			t.Fatalf("peek: %+v %v", d, err)
		}
	}
	if d, _ := c.Check(ctx, dana); d.Rules[0].Remaining != 2 || calls.Load() != 9 {
		t.Fatalf("check after peeks: %+v, %d calls", d, calls.Load())
	}
	// A peek's rejection says "at the latest": it is asked again each time.
	peek.Cost = 3
	for i := range 2 {
		if d, err := c.Check(ctx, peek); err != nil || d.Allowed || d.Cached || calls.Load() != int64(10+i) {
			t.Fatalf("peek of 3 with 2 left: %+v %v, %d calls", d, err, calls.Load())
		}
	}
}

// Reset resets the client's counters on the decider and drops the
// client's own cached rejection, so the next check is asked and admitted.
func TestReset(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	url, key, calls := decider(t, clk)
	c := New(Config{URL: url, Key: key, Now: clk.now})
	ctx := context.Background()
	for range 4 {
		_, _ = c.Check(ctx, alice())
	}
	if d, _ := c.Check(ctx, alice()); d.Allowed || !d.Cached {
		t.Fatalf("alice past her limit: %+v, want a cached rejection", d)
	}
	rules, err := c.Reset(ctx, alice())
	if err != nil || len(rules) != 1 || rules[0] != "per-client" {
		t.Fatalf("reset: %v, %v", rules, err)
	}
	n := calls.Load()
	if d, err := c.Check(ctx, alice()); err != nil || !d.Allowed || d.Cached || d.Rules[0].Remaining != 2 || calls.Load() != n+1 {
		t.Fatalf("alice after her reset: %+v %v", d, err)
	}
	if _, err := New(Config{URL: url, Key: "sk_check_nope"}).Reset(ctx, alice()); err == nil {
		t.Fatal("a reset with a bad key succeeded")
	}
}

func TestCheckBatch(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	url, key, calls := decider(t, clk)
	c := New(Config{URL: url, Key: key, Now: clk.now})
	reqs := []Request{alice(), alice(), alice(), alice(), {Descriptors: map[string]string{"client_id": "bob"}}}
	ds, err := c.CheckBatch(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	// A batch's checks are decided at once: three of alice's four are
	// allowed, whichever they are.
	allowed := 0
	for _, d := range ds[:4] {
		if d.Allowed {
			allowed++
		}
	}
	if allowed != 3 || !ds[4].Allowed {
		t.Fatalf("batch %+v", ds)
	}
	// alice is cached as rejected: a batch of her alone makes no call.
	if ds, _ := c.CheckBatch(context.Background(), []Request{alice()}); ds[0].Allowed || !ds[0].Cached || calls.Load() != 1 {
		t.Fatalf("cached batch %+v, %d calls", ds, calls.Load())
	}
}

func TestMiddleware(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	url, key, _ := decider(t, clk)
	var served atomic.Int64
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1); _, _ = w.Write([]byte("hello")) })
	h := New(Config{URL: url, Key: key, Now: clk.now}).Middleware(ByHeader("X-Client-Id"), app)
	do := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/things", nil)
		req.Header.Set("X-Client-Id", "alice")
		h.ServeHTTP(rec, req)
		return rec
	}
	for i := range 3 {
		rec := do()
		if rec.Code != 200 || rec.Body.String() != "hello" || rec.Header().Get("X-RateLimit-Remaining") != []string{"2", "1", "0"}[i] ||
			rec.Header().Get("RateLimit-Policy") != `"per-client";q=3;w=60` {
			t.Fatalf("request %d: %d %q %v", i, rec.Code, rec.Body, rec.Header())
		}
	}
	rec := do()
	var body map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "20" || rec.Header().Get("Content-Type") != "application/problem+json" ||
		body["detail"] != "Free plans make 3 calls a minute" || served.Load() != 3 { // the rule's message
		t.Fatalf("fourth: %d %v %s (served %d)", rec.Code, rec.Header(), rec.Body, served.Load())
	}
}

// RateLimit-Policy states each rule's rate (its limit per window), while
// X-RateLimit-Limit is the most a request can find: a token bucket's burst
// above its rate, a leaky bucket's queue (here of one) below it.
func TestMiddlewarePolicyIsTheRate(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	url, key, _ := deciderOf(t, clk, []policy.Rule{
		{ID: "r1", Name: "bursty", KeyBy: []string{"client_id"}, Enabled: true,
			Params: policy.Params{Algorithm: policy.TokenBucket, Limit: 10, Burst: 20, Window: time.Minute}},
		{ID: "r2", Name: "queue", KeyBy: []string{"client_id"}, Enabled: true,
			Params: policy.Params{Algorithm: policy.LeakyBucket, Limit: 5, Window: time.Second}}}, func() {})
	h := New(Config{URL: url, Key: key, Now: clk.now}).Middleware(ByHeader("X-Client-Id"), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/things", nil)
	req.Header.Set("X-Client-Id", "carol")
	h.ServeHTTP(rec, req)
	if got := rec.Header(); rec.Code != 200 || got.Get("RateLimit-Policy") != `"bursty";q=10;w=60, "queue";q=5;w=1` ||
		got.Get("RateLimit") != `"bursty";r=19;t=6, "queue";r=0;t=1` || got.Get("X-RateLimit-Limit") != "1" {
		t.Fatalf("%d %v", rec.Code, got)
	}
}

// FoldRoutes: "/Login/" is the route "/login"; without it, a route apart.
func TestMiddlewareFoldRoutes(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	url, key, _ := deciderOf(t, clk, []policy.Rule{{ID: "r1", Name: "login", KeyBy: []string{"client_id"}, Enabled: true,
		Match: []policy.Match{{Key: "route", Value: "/login"}}, Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 1, Window: time.Minute}}}, func() {})
	c := New(Config{URL: url, Key: key, Now: clk.now, DenyCacheSize: -1})
	app := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, tc := range []struct {
		client   string
		describe DescribeFunc
		want     []int
	}{
		{"dana", FoldRoutes(ByHeader("X-Client-Id")), []int{200, 429}},
		{"eli", ByHeader("X-Client-Id"), []int{200, 200}}, // "/Login/" meets no rule
	} {
		h := c.Middleware(tc.describe, app)
		var got []int
		for _, p := range []string{"/login", "/Login/"} {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("GET", p, nil)
			req.Header.Set("X-Client-Id", tc.client)
			h.ServeHTTP(rec, req)
			got = append(got, rec.Code)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%v, want %v", got, tc.want)
		}
	}
}

// The middleware answers the headers of its style: draft 6's here.
func TestMiddlewareHeaderStyle(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	url, key, _ := decider(t, clk)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	h := New(Config{URL: url, Key: key, Now: clk.now, Headers: HeadersDraft6}).Middleware(ByHeader("X-Client-Id"), app)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/things", nil)
	req.Header.Set("X-Client-Id", "bob")
	h.ServeHTTP(rec, req)
	if got := rec.Header(); got.Get("RateLimit-Limit") != "3" || got.Get("RateLimit-Remaining") != "2" || got.Get("RateLimit-Policy") != "3;w=60" || got.Get("RateLimit") != "" {
		t.Fatalf("headers %v", got)
	}
}

func TestFailureModes(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(hang); slow.Close() })
	for _, tc := range []struct {
		name string
		mode FailureMode
		url  string
	}{
		{"open, refused connection", FailOpen, "http://127.0.0.1:1"},
		{"closed, refused connection", FailClosed, "http://127.0.0.1:1"},
		{"open, decider hangs", FailOpen, slow.URL},
		{"closed, decider hangs", FailClosed, slow.URL},
	} {
		c := New(Config{URL: tc.url, Key: "k", FailureMode: tc.mode, Timeout: 50 * time.Millisecond})
		start := time.Now()
		d, err := c.Check(context.Background(), alice())
		if err == nil || !d.Failed || d.Allowed != (tc.mode == FailOpen) {
			t.Errorf("%s: %+v %v", tc.name, d, err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: took %v, past the timeout", tc.name, took)
		}
	}
}

func TestARefusedRequestIsNotAFailure(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Now()}
	url, _, _ := decider(t, clk)
	c := New(Config{URL: url, Key: "sk_check_wrong"})
	d, err := c.Check(context.Background(), alice())
	if !errors.Is(err, ErrRefused) || d.Allowed || d.Failed {
		t.Fatalf("%+v %v", d, err)
	}
	rec := httptest.NewRecorder()
	c.Middleware(ByRemoteIP(), http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 500 {
		t.Fatalf("middleware with a bad key: %d", rec.Code)
	}
}

func TestLeases(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	cfg, err := decide.Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t1", Slug: "acme", Name: "Acme", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{{ID: "c", Name: "in-flight", KeyBy: []string{"client_id"}, Enabled: true,
			Params: policy.Params{Algorithm: policy.Concurrency, Limit: 1, LeaseTTL: time.Hour}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	keys := follower.NewKeys()
	key, _ := policy.NewKeySecret(policy.KeyCheck)
	keys.Set(policy.HashKey(key), cfg)
	path, h := checkapi.NewDecisionService(decision.Service{Authenticate: keys.Authenticate,
		Decider: decide.New(decide.InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: clk.now}, clk.now)})
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := New(Config{URL: srv.URL, Key: key, Now: clk.now}) // with the deny cache: leases must bypass it
	ctx := context.Background()
	job := func(name string) Request {
		return Request{Descriptors: map[string]string{"client_id": "w"}, Lease: name}
	}
	if d, err := c.Check(ctx, job("a")); err != nil || !d.Allowed {
		t.Fatalf("first lease: %+v %v", d, err)
	}
	if d, _ := c.Check(ctx, job("b")); d.Allowed {
		t.Fatal("a second lease fit a limit of one")
	}
	if err := c.Release(ctx, job("a")); err != nil {
		t.Fatal(err)
	}
	if d, err := c.Check(ctx, job("b")); err != nil || !d.Allowed {
		t.Fatalf("after the release: %+v %v", d, err)
	}
	if err := c.Release(ctx, Request{}); err == nil {
		t.Fatal("a release without a lease was sent")
	}
	// A check naming no lease takes one of its own, for Release. Its
	// rejection is not cached: a release can end it before its retry-after.
	anon := Request{Descriptors: map[string]string{"client_id": "v"}}
	d, err := c.Check(ctx, anon)
	if err != nil || !d.Allowed || d.Lease == "" {
		t.Fatalf("a check naming no lease: %+v %v", d, err)
	}
	if d2, _ := c.Check(ctx, anon); d2.Allowed || d2.Lease != "" {
		t.Fatalf("a second check naming no lease while the first holds it: %+v", d2)
	}
	if err := c.Release(ctx, Request{Descriptors: anon.Descriptors, Lease: d.Lease}); err != nil {
		t.Fatal(err)
	}
	if d3, err := c.Check(ctx, anon); err != nil || !d3.Allowed || d3.Cached {
		t.Fatalf("after the release: %+v %v", d3, err)
	}
}

// coalescing serves a decider whose first call waits until release is
// called, and a coalescing Client of it with one sender whose first Check
// (for "first") is in that call when coalescing returns: the Checks made
// next queue up behind it. queued reports how many are waiting.
func coalescing(t *testing.T) (c *Client, calls *atomic.Int64, queued func() int, release func()) {
	t.Helper()
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	arrived, gate := make(chan struct{}), make(chan struct{})
	var first sync.Once
	url, key, calls := deciderWith(t, clk, func() {
		first.Do(func() { close(arrived); <-gate })
	})
	c = New(Config{URL: url, Key: key, Now: clk.now, Coalesce: true, Senders: 1, Timeout: 10 * time.Second})
	t.Cleanup(c.Close)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if d, err := c.Check(context.Background(), Request{Descriptors: map[string]string{"client_id": "first"}}); err != nil || !d.Allowed {
			t.Errorf("first check: %+v %v", d, err)
		}
	}()
	<-arrived
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(func() { release(); <-done })
	return c, calls, func() int { return len(c.queue) }, release
}

// waitFor polls cond until it holds, failing the test after a deadline.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		runtime.Gosched()
	}
}

func TestCoalescedChecksShareCalls(t *testing.T) {
	t.Parallel()
	c, calls, queued, release := coalescing(t)
	// 90 Checks at once, 9 for each of 10 clients allowed 3 a minute.
	const clients, each = 10, 9
	var allowed [clients]atomic.Int64
	var wg sync.WaitGroup
	for i := range clients * each {
		wg.Go(func() {
			d, err := c.Check(context.Background(), Request{Descriptors: map[string]string{"client_id": strconv.Itoa(i % clients)}})
			if err != nil {
				t.Errorf("check %d: %v", i, err)
			}
			if d.Allowed {
				allowed[i%clients].Add(1)
			}
		})
	}
	waitFor(t, func() bool { return queued() == clients*each })
	release()
	wg.Wait()
	for i := range allowed {
		if n := allowed[i].Load(); n != 3 {
			t.Errorf("client %d: %d allowed, want 3", i, n)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d calls for %d checks, want 2: the first, then all the others together", n, clients*each+1)
	}
}

func TestCoalescedChecksAreRefusedAlone(t *testing.T) {
	t.Parallel()
	c, _, queued, release := coalescing(t)
	costs := []int64{1, -1, 2}
	errs := make([]error, len(costs))
	decs := make([]Decision, len(costs))
	var wg sync.WaitGroup
	for i, cost := range costs {
		wg.Go(func() {
			decs[i], errs[i] = c.Check(context.Background(), Request{Cost: cost, Descriptors: map[string]string{"client_id": "x" + strconv.Itoa(i)}})
		})
	}
	waitFor(t, func() bool { return queued() == len(costs) })
	release()
	wg.Wait()
	if !errors.Is(errs[1], ErrRefused) || decs[1].Allowed {
		t.Errorf("negative cost: %+v %v, want refused", decs[1], errs[1])
	}
	for _, i := range []int{0, 2} {
		if errs[i] != nil || !decs[i].Allowed {
			t.Errorf("check %d: %+v %v, want allowed", i, decs[i], errs[i])
		}
	}
}

func TestCheckOnAClosedClient(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	url, key, calls := decider(t, clk)
	for _, mode := range []FailureMode{FailOpen, FailClosed} {
		c := New(Config{URL: url, Key: key, Coalesce: true, FailureMode: mode})
		if d, err := c.Check(context.Background(), alice()); err != nil || !d.Allowed {
			t.Fatalf("open client: %+v %v", d, err)
		}
		c.Close()
		c.Close() // twice is fine
		d, err := c.Check(context.Background(), alice())
		if !errors.Is(err, ErrClosed) || !d.Failed || d.Allowed != (mode == FailOpen) {
			t.Errorf("mode %d, closed client: %+v %v", mode, d, err)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d calls, want 2", n)
	}
}

// A request's own limit decides it in place of the tier's rules (3 a
// minute here), counted apart from them, and its rejection is cached
// apart from the same client's under the rules.
func TestRequestLimit(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	url, key, _ := decider(t, clk)
	c := New(Config{URL: url, Key: key, Now: clk.now})
	ctx := context.Background()
	own := alice()
	own.Limit = &Limit{Requests: 5, Window: time.Hour}
	for i := range 6 {
		d, err := c.Check(ctx, own)
		if err != nil || d.Allowed != (i < 5) || len(d.Rules) != 1 || d.Rules[0].Limit != 5 || d.Rules[0].Window != time.Hour {
			t.Fatalf("check %d with its own limit: %+v %v", i, d, err)
		}
	}
	if d, err := c.Check(ctx, alice()); err != nil || !d.Allowed || d.Cached || d.Rules[0].Limit != 3 {
		t.Fatalf("the same client under the tier's rules: %+v %v", d, err)
	}
	bad := alice()
	bad.Limit = &Limit{Requests: 5, Window: 1500 * time.Millisecond}
	if _, err := c.Check(ctx, bad); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "invalid_argument") {
		t.Fatalf("a window of 1.5 s: %v", err)
	}
	// A token bucket of its own refills as time passes: 2 an hour, one
	// back in half an hour, where the hour's fixed window gives none.
	bucket := Request{Descriptors: map[string]string{"client_id": "bo"}, Limit: &Limit{Requests: 2, Window: time.Hour, Algorithm: TokenBucket}}
	window := Request{Descriptors: map[string]string{"client_id": "bo"}, Limit: &Limit{Requests: 2, Window: time.Hour}}
	var got []bool
	for _, r := range []Request{bucket, bucket, bucket, window, window, window} {
		d, err := c.Check(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Allowed)
	}
	clk.add(30 * time.Minute)
	for _, r := range []Request{bucket, window} {
		d, _ := c.Check(ctx, r)
		got = append(got, d.Allowed)
	}
	if want := []bool{true, true, false, true, true, false, true, false}; !slices.Equal(got, want) {
		t.Fatalf("token bucket ×3, fixed window ×3, both half an hour on: %v, want %v", got, want)
	}
}

// A decider that stops answering costs each Check its Timeout only until
// the breaker opens: then Checks are answered by the failure mode without
// a call, until the cooldown lets one through and the decider's answer
// closes it. Refusals are answers and never open it.
func TestBreakerStopsCallingAHungDecider(t *testing.T) {
	t.Parallel()
	var hung atomic.Bool
	release := make(chan struct{})
	url, key, calls := deciderWith(t, &clock{t: time.Now()}, func() {
		if hung.Load() {
			<-release
		}
	})
	t.Cleanup(func() { close(release) }) // before the server's Close, which waits for its calls
	c := New(Config{URL: url, Key: key, Timeout: 50 * time.Millisecond, BreakerFailures: 3, BreakerCooldown: 100 * time.Millisecond})
	hung.Store(true)
	for i := range 3 {
		if d, err := c.Check(context.Background(), alice()); err == nil || !d.Failed || !d.Allowed {
			t.Fatalf("check %d against a hung decider: %+v %v, want failed open", i, d, err)
		}
	}
	if !c.BreakerOpen() || calls.Load() != 3 {
		t.Fatalf("after 3 failures: breaker open %v, %d calls", c.BreakerOpen(), calls.Load())
	}
	d, err := c.Check(context.Background(), alice())
	if !errors.Is(err, ErrBreakerOpen) || !d.Failed || !d.Allowed || calls.Load() != 3 {
		t.Fatalf("with the breaker open: %+v %v, %d calls; want the failure mode without a call", d, err, calls.Load())
	}
	hung.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for d.Failed {
		if time.Now().After(deadline) {
			t.Fatal("the breaker never let a call through once the decider answered")
		}
		time.Sleep(10 * time.Millisecond)
		d, err = c.Check(context.Background(), alice())
	}
	if err != nil || !d.Allowed || c.BreakerOpen() {
		t.Fatalf("the decider back: %+v %v, breaker open %v", d, err, c.BreakerOpen())
	}

	wrong := New(Config{URL: url, Key: "sk_check_wrong", BreakerFailures: 2})
	before := calls.Load()
	for range 5 {
		if _, err := wrong.Check(context.Background(), alice()); !errors.Is(err, ErrRefused) {
			t.Fatalf("a bad key: %v, want refused", err)
		}
	}
	if wrong.BreakerOpen() || calls.Load()-before != 5 {
		t.Fatalf("refusals opened the breaker (%v) or were not all asked (%d calls)", wrong.BreakerOpen(), calls.Load()-before)
	}
}

// ByClientIP believes X-Forwarded-For from a trusted balancer only, and
// names an IPv6 client by its /64.
func TestByClientIP(t *testing.T) {
	t.Parallel()
	describe := ByClientIP(netip.MustParsePrefix("10.0.0.0/8"))
	for _, c := range []struct{ remote, xff, want string }{
		{"10.1.2.3:4000", "198.51.100.7", "198.51.100.7"},           // through the balancer
		{"203.0.113.5:4000", "198.51.100.7", "203.0.113.5"},         // a client posing as another
		{"10.1.2.3:4000", "", "10.1.2.3"},                           // the balancer's own call
		{"10.1.2.3:4000", "2001:db8:1:2::99", "2001:db8:1:2::/64"},  // an IPv6 client
		{"10.1.2.3:4000", "198.51.100.7, 10.9.9.9", "198.51.100.7"}, // two balancers
	} {
		r := httptest.NewRequest("GET", "/things", nil)
		r.RemoteAddr = c.remote
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		req, ok := describe(r)
		if d := req.Descriptors; !ok || d["client_id"] != c.want || d["ip"] != c.want || d["route"] != "/things" {
			t.Errorf("from %s, X-Forwarded-For %q: %v, want client %s", c.remote, c.xff, d, c.want)
		}
	}
}

// Every DescribeFunc names the route in one spelling, so that "//login"
// meets the rules of "/login", the method and the host, as the proxy
// does: a rule for POST /login at shop.example works behind either.
func TestDescribeNormalisesTheRoute(t *testing.T) {
	t.Parallel()
	for name, describe := range map[string]DescribeFunc{"ByHeader": ByHeader("X-Client-Id"), "ByRemoteIP": ByRemoteIP(), "ByClientIP": ByClientIP()} {
		for _, p := range []string{"/login", "//login", "/./login", "/static/../login"} {
			r := httptest.NewRequest("POST", "http://Shop.Example:8443"+p, nil)
			if req, _ := describe(r); req.Descriptors["route"] != "/login" || req.Descriptors["method"] != "POST" || req.Descriptors["host"] != "shop.example" {
				t.Errorf("%s of POST %s: %v; want route /login, method POST and host shop.example", name, p, req.Descriptors)
			}
		}
	}
}

// A request a leaky bucket admits for a later turn waits for it before
// the handler, up to MaxDelay; past that it is answered 429, and a client
// that goes away while it waits never reaches the handler.
func TestMiddlewareHoldsAQueuedRequest(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	url, key, _ := deciderOf(t, clk, []policy.Rule{{ID: "r1", Name: "queue", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.LeakyBucket, Limit: 1, Window: time.Second, MaxDelay: time.Minute}}}, func() {})
	var served atomic.Int64
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) })
	c := New(Config{URL: url, Key: key, Now: clk.now, MaxDelay: 2500 * time.Millisecond})
	var waited []time.Duration
	goOn := true
	c.wait = func(_ context.Context, d time.Duration) bool { waited = append(waited, d); return goOn }
	h := c.Middleware(ByHeader("X-Client-Id"), app)
	do := func() int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/jobs", nil)
		req.Header.Set("X-Client-Id", "alice")
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	// One a second: the first goes at once, the next wait their turns.
	var codes []int
	for range 3 {
		codes = append(codes, do())
	}
	if !slices.Equal(codes, []int{200, 200, 200}) || !slices.Equal(waited, []time.Duration{time.Second, 2 * time.Second}) || served.Load() != 3 {
		t.Fatalf("codes %v, waits %v, served %d; want 200s, waits of 1s and 2s, 3 served", codes, waited, served.Load())
	}
	if code := do(); code != http.StatusTooManyRequests || len(waited) != 2 || served.Load() != 3 {
		t.Fatalf("a turn 3s away, over MaxDelay: %d (waits %v, served %d)", code, waited, served.Load())
	}
	clk.add(time.Minute) // the queue empties
	do()
	goOn = false // the client goes away while it waits its turn
	if do(); served.Load() != 4 || len(waited) != 3 {
		t.Fatalf("served %d, waits %v: want the request whose client left not served", served.Load(), waited)
	}
}

// A request the middleware admits holds a concurrency rule's lease while
// its handler runs: another meets the rule full, and once the first
// answers, the next gets through.
func TestMiddlewareHoldsALeaseWhileServing(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	url, key, _ := deciderOf(t, clk, []policy.Rule{{ID: "c", Name: "in-flight", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.Concurrency, Limit: 1, LeaseTTL: time.Hour}}}, func() {})
	entered, finish := make(chan struct{}), make(chan struct{})
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-finish
		}
	})
	h := New(Config{URL: url, Key: key, Now: clk.now}).Middleware(ByHeader("X-Client-Id"), app)
	do := func(path string) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("X-Client-Id", "alice")
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	first := make(chan int)
	go func() { first <- do("/slow") }()
	<-entered
	if code := do("/fast"); code != http.StatusTooManyRequests {
		t.Fatalf("a second request while the first is served: %d", code)
	}
	close(finish)
	if code := <-first; code != 200 {
		t.Fatalf("the first: %d", code)
	}
	for i := range 3 { // each releases its lease as it ends
		if code := do("/fast"); code != 200 {
			t.Fatalf("request %d after the first ended: %d", i, code)
		}
	}
}
