// Package sluiceclient is the Go SDK of Sluice's deciders: Check and
// CheckBatch over Connect, a net/http middleware that answers 429 with the
// rate limit headers, a client-side deny cache (a client known to be
// rejected until some time costs no network call until then), and a
// failure mode for when the decider cannot answer.
//
//	c := sluiceclient.New(sluiceclient.Config{URL: "http://decider:8080", Key: os.Getenv("SLUICE_CHECK_KEY")})
//	http.Handle("/", c.Middleware(sluiceclient.ByHeader("X-Client-Id"), app))
package sluiceclient

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/sony/gobreaker/v2"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
)

// Failure modes.

// Config configures a Client.
type Config struct {
	// URL is the decider's base URL, such as http://127.0.0.1:8080.
	URL string
	// Key is the tenant's check key.
	Key string
	// HTTPClient makes the calls; nil means a client with pooled
	// connections.
	HTTPClient *http.Client
	// Timeout bounds one call; 0 means 250ms.
	Timeout time.Duration
	// FailureMode applies when the decider fails or times out.
	FailureMode FailureMode
	// DenyCacheSize is how many rejected requests are remembered until
	// their retry-after; 0 means 10,000, negative disables the cache.
	DenyCacheSize int
	// Now is the clock of the deny cache; nil means time.Now.
	Now func() time.Time
	// Coalesce gathers the Checks made at the same time into CheckBatch
	// calls: while Senders calls are in flight, the Checks that arrive
	// wait and leave together in the next (up to 100 a call). A decider
	// spends far less per decision on one call of many than on many calls
	// (docs/benchmarks.md); a Check may wait up to one call's round trip
	// longer. Call Close when done with such a Client.
	Coalesce bool
	// Senders bounds the coalesced calls in flight; 0 means 2.
	Senders int
	// Headers is the style of the rate limit headers Middleware answers
	// with; the zero value is HeadersIETF.
	Headers HeaderStyle
	// MaxDelay bounds how long Middleware holds a request that a leaky
	// bucket rule admitted with a delay (a queue: the request's turn
	// comes Delay from now) before it reaches the handler; a longer
	// delay is answered 429, as the proxy's -max-delay does. 0 means 5s.
	MaxDelay time.Duration
	// BreakerFailures is how many calls in a row must fail (time out, or
	// find the decider unreachable or failing) before the Client stops
	// calling it for BreakerCooldown and answers every Check by the
	// failure mode at once, where each would wait out its Timeout against
	// a decider that does not answer; then one call tries it, and an
	// answer closes the breaker. A refusal (a bad key, an invalid check)
	// is an answer. 0 means 5; negative, no breaker.
	BreakerFailures int
	// BreakerCooldown is how long an open breaker stops calls; 0 means 1s.
	BreakerCooldown time.Duration
}

// ErrBreakerOpen is the error of a call the Client did not make: its
// breaker is open after the decider failed BreakerFailures times in a
// row. The Check is answered by the failure mode.
var ErrBreakerOpen = errors.New("sluiceclient: the decider failed repeatedly; not calling it for the cooldown")

// The algorithms a request's own limit may name.

// Client checks requests against a decider. It is safe for concurrent use.
type Client struct {
	cfg     Config
	rpc     sluicev1connect.DecisionServiceClient
	deny    *lru.Cache[string, cachedDenial]
	breaker *gobreaker.CircuitBreaker[struct{}] // nil: none
	// queue carries coalesced Checks to the senders until stop closes.
	queue   chan *pending
	stop    chan struct{}
	senders sync.WaitGroup
	once    sync.Once
	// wait holds a delayed request for d, or until ctx ends (false).
	wait func(ctx context.Context, d time.Duration) bool
}

// pending is a coalesced Check waiting for its answer: res or err are
// set when done closes.
type pending struct {
	req  *sluicev1.CheckRequest
	res  *sluicev1.CheckResponse
	err  error
	done chan struct{}
}

type cachedDenial struct {
	until time.Time
	dec   Decision
}

// New returns a Client.
func New(cfg Config) *Client {
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 250 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = 5 * time.Second
	}
	c := &Client{cfg: cfg, rpc: sluicev1connect.NewDecisionServiceClient(cfg.HTTPClient, strings.TrimSuffix(cfg.URL, "/")), wait: wait}
	if cfg.BreakerFailures >= 0 {
		c.breaker = newBreaker(cfg.BreakerFailures, cfg.BreakerCooldown)
	}
	if cfg.DenyCacheSize >= 0 {
		size := cfg.DenyCacheSize
		if size == 0 {
			size = 10_000
		}
		c.deny, _ = lru.New[string, cachedDenial](size) // errors only for a size <= 0
	}
	if cfg.Coalesce {
		n := cfg.Senders
		if n <= 0 {
			n = 2
		}
		c.queue, c.stop = make(chan *pending, 4*maxBatch), make(chan struct{})
		for range n {
			c.senders.Go(c.sender)
		}
	}
	return c
}

// maxBatch is the decider's bound on the checks of one CheckBatch.
const maxBatch = 100

// ErrClosed is the error of a coalesced Check on a closed Client.
var ErrClosed = errors.New("sluiceclient: client closed")

// Close stops a coalescing Client's senders; Checks still waiting answer by
// the failure mode with ErrClosed. It does nothing on other Clients.
func (c *Client) Close() {
	if c.stop == nil {
		return
	}
	c.once.Do(func() { close(c.stop) })
	c.senders.Wait()
}

// ErrRefused wraps the decider's refusal of a request itself (a bad key,
// invalid descriptors): no failure mode applies to those.
var ErrRefused = errors.New("sluiceclient: request refused")

// Check asks for a decision. A request rejected earlier until a time not
// yet passed is answered from the deny cache. When the decider fails, the
// failure mode answers (Decision.Failed) and the error is returned too,
// for logging; a refused request returns an error wrapping ErrRefused and
// a rejecting decision.
func (c *Client) Check(ctx context.Context, r Request) (Decision, error) {
	key := cacheKey(r)
	if d, ok := c.cached(key); ok {
		return d, nil
	}
	res, err := c.check(ctx, toProto(r))
	if err != nil {
		return c.failed(err)
	}
	d := fromProto(res)
	if cacheable(r) {
		c.remember(key, d)
	}
	return d, nil
}

// check asks the decider for one decision, in a call of its own or, on a
// coalescing Client, in the next CheckBatch.
func (c *Client) check(ctx context.Context, m *sluicev1.CheckRequest) (*sluicev1.CheckResponse, error) {
	if c.queue == nil {
		res, err := withTimeout(c, ctx, func(ctx context.Context) (*connect.Response[sluicev1.CheckResponse], error) {
			return c.rpc.Check(ctx, authed(c, m))
		})
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	p := &pending{req: m, done: make(chan struct{})}
	select {
	case c.queue <- p:
	case <-ctx.Done():
		return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	case <-c.stop:
		return nil, ErrClosed
	}
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	case <-c.stop:
		return nil, ErrClosed
	}
}

// sender sends the queued Checks in CheckBatch calls: it takes one, then
// every other already waiting, up to maxBatch.
func (c *Client) sender() {
	batch := make([]*pending, 0, maxBatch)
	for {
		select {
		case p := <-c.queue:
			batch = append(batch[:0], p)
		case <-c.stop:
			return
		}
	more:
		for len(batch) < maxBatch {
			select {
			case p := <-c.queue:
				batch = append(batch, p)
			default:
				break more
			}
		}
		c.send(batch)
	}
}

// send asks for a batch's decisions in one CheckBatch call and hands each
// its answer. When the decider refuses the call as a whole because of one
// check (an invalid cost or descriptor) or its size, each check is asked
// alone so that only a bad one is refused.
func (c *Client) send(batch []*pending) {
	m := &sluicev1.CheckBatchRequest{Requests: make([]*sluicev1.CheckRequest, len(batch))}
	for i, p := range batch {
		m.Requests[i] = p.req
	}
	res, err := withTimeout(c, context.Background(), func(ctx context.Context) (*connect.Response[sluicev1.CheckBatchResponse], error) {
		return c.rpc.CheckBatch(ctx, authed(c, m))
	})
	switch {
	case err == nil && len(res.Msg.Responses) != len(batch):
		err = errWrongCount
	case (connect.CodeOf(err) == connect.CodeInvalidArgument || connect.CodeOf(err) == connect.CodeResourceExhausted) && len(batch) > 1:
		for _, p := range batch {
			c.send([]*pending{p})
		}
		return
	}
	for i, p := range batch {
		if err != nil {
			p.err = err
		} else {
			p.res = res.Msg.Responses[i]
		}
		close(p.done)
	}
}

var errWrongCount = errors.New("sluiceclient: the decider answered a different number of checks")

// Release ends r.Lease early on the concurrency rules r matches (a lease
// otherwise ends at its rule's TTL): a Decision's Lease, with the
// Request's Tier and Descriptors.
func (c *Client) Release(ctx context.Context, r Request) error {
	if r.Lease == "" {
		return errors.New("sluiceclient: Release needs the Request's Lease")
	}
	m := toProto(r)
	m.Release = true
	_, err := withTimeout(c, ctx, func(ctx context.Context) (*connect.Response[sluicev1.CheckResponse], error) {
		return c.rpc.Check(ctx, authed(c, m))
	})
	return err
}

// Reset resets the counters of the rules r meets (its Tier and
// Descriptors; the rest is ignored), on every decider sharing the
// decider's Redis, so that the next such request meets fresh limits: a
// login attempts limit once a login succeeds, say. It returns the names of
// the rules reset. The client's own cached rejections are dropped, all of
// them: which of them the reset ends cannot be told.
func (c *Client) Reset(ctx context.Context, r Request) ([]string, error) {
	m := toProto(r)
	res, err := withTimeout(c, ctx, func(ctx context.Context) (*connect.Response[sluicev1.ResetResponse], error) {
		return c.rpc.Reset(ctx, authed(c, &sluicev1.ResetRequest{Tier: m.Tier, Descriptors: m.Descriptors}))
	})
	if c.deny != nil {
		c.deny.Purge()
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, len(res.Msg.Rules))
	for i, rr := range res.Msg.Rules {
		names[i] = rr.RuleName
	}
	return names, nil
}

// CheckBatch asks for up to 100 independent decisions in one call; cached
// rejections are answered without asking.
func (c *Client) CheckBatch(ctx context.Context, rs []Request) ([]Decision, error) {
	out := make([]Decision, len(rs))
	keys := make([]string, len(rs))
	var ask []int
	batch := &sluicev1.CheckBatchRequest{}
	for i, r := range rs {
		keys[i] = cacheKey(r)
		if d, ok := c.cached(keys[i]); ok {
			out[i] = d
			continue
		}
		ask = append(ask, i)
		batch.Requests = append(batch.Requests, toProto(r))
	}
	if len(ask) == 0 {
		return out, nil
	}
	res, err := withTimeout(c, ctx, func(ctx context.Context) (*connect.Response[sluicev1.CheckBatchResponse], error) {
		return c.rpc.CheckBatch(ctx, authed(c, batch))
	})
	if err != nil {
		d, err := c.failed(err)
		for _, i := range ask {
			out[i] = d
		}
		return out, err
	}
	if len(res.Msg.Responses) != len(ask) {
		return out, errWrongCount
	}
	for j, i := range ask {
		out[i] = fromProto(res.Msg.Responses[j])
		if cacheable(rs[i]) {
			c.remember(keys[i], out[i])
		}
	}
	return out, nil
}

// authed wraps msg in a request carrying the check key.
func authed[T any](c *Client, msg *T) *connect.Request[T] {
	r := connect.NewRequest(msg)
	r.Header().Set("Authorization", "Bearer "+c.cfg.Key)
	return r
}

// withTimeout runs f under the client's timeout.
func withTimeout[T any](c *Client, ctx context.Context, f func(context.Context) (*connect.Response[T], error)) (*connect.Response[T], error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	if c.breaker == nil {
		return f(ctx)
	}
	var res *connect.Response[T]
	_, err := c.breaker.Execute(func() (struct{}, error) {
		var err error
		res, err = f(ctx)
		return struct{}{}, err
	})
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return nil, connect.NewError(connect.CodeUnavailable, ErrBreakerOpen)
	}
	return res, err
}

// newBreaker returns the breaker of calls to the decider (see
// Config.BreakerFailures).
func newBreaker(failures int, cooldown time.Duration) *gobreaker.CircuitBreaker[struct{}] {
	if failures == 0 {
		failures = 5
	}
	if cooldown <= 0 {
		cooldown = time.Second
	}
	return gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "sluice decider",
		Timeout:     cooldown,
		ReadyToTrip: func(n gobreaker.Counts) bool { return n.ConsecutiveFailures >= uint32(failures) },
		// The decider answered: a refusal says it is up.
		IsSuccessful: func(err error) bool {
			if err == nil {
				return true
			}
			switch connect.CodeOf(err) {
			case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeUnknown, connect.CodeInternal, connect.CodeDataLoss:
				return false
			}
			return true
		},
		// A caller that gave up says nothing of the decider.
		IsExcluded: func(err error) bool { return connect.CodeOf(err) == connect.CodeCanceled },
	})
}

// BreakerOpen reports whether the Client has stopped calling the decider
// after it failed repeatedly (Config.BreakerFailures), or is trying it
// again with one call: Checks are answered by the failure mode meanwhile.
func (c *Client) BreakerOpen() bool {
	return c.breaker != nil && c.breaker.State() != gobreaker.StateClosed
}

// failed answers by the failure mode, or refuses.
func (c *Client) failed(err error) (Decision, error) {
	switch connect.CodeOf(err) {
	case connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeInvalidArgument, connect.CodeResourceExhausted:
		return Decision{Deciding: -1}, errors.Join(ErrRefused, err)
	}
	return Decision{Allowed: c.cfg.FailureMode == FailOpen, Deciding: -1, Failed: true}, err
}

func (c *Client) cached(key string) (Decision, bool) {
	if c.deny == nil {
		return Decision{}, false
	}
	e, ok := c.deny.Get(key)
	if !ok {
		return Decision{}, false
	}
	now := c.cfg.Now()
	if !now.Before(e.until) {
		c.deny.Remove(key)
		return Decision{}, false
	}
	d := e.dec
	d.Cached = true
	d.Rules = slices.Clone(d.Rules)
	d.Rules[d.Deciding].RetryAfter = e.until.Sub(now)
	return d, true
}

// cacheable reports whether r's rejections may be cached until their
// retry-after: not a lease's, which may be released any time, nor a
// peek's, whose retry-after is only the latest it can take.
func cacheable(r Request) bool { return r.Lease == "" && !r.Peek }

// remember caches a rejection until its retry-after, but a concurrency
// rule's (the one rule with no window): its leases may be released
// before then.
func (c *Client) remember(key string, d Decision) {
	if c.deny == nil || d.Allowed || d.Deciding < 0 || d.RetryAfter() <= 0 || d.Rules[d.Deciding].Window == 0 {
		return
	}
	c.deny.Add(key, cachedDenial{until: c.cfg.Now().Add(d.RetryAfter()), dec: d})
}

// cacheKey identifies a request: its tier, cost and sorted descriptors,
// each length-prefixed so no two requests share a key.
func cacheKey(r Request) string {
	keys := make([]string, 0, len(r.Descriptors))
	for k := range r.Descriptors {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	add := func(s string) { b.WriteString(strconv.Itoa(len(s))); b.WriteByte(':'); b.WriteString(s) }
	add(r.Tier)
	add(strconv.FormatInt(r.Cost, 10))
	add(r.Lease)
	add(strconv.FormatBool(r.Peek))
	if r.Limit != nil { // its counter: requests, window and algorithm (unnamed: the fixed window)
		alg := cmp.Or(r.Limit.Algorithm, FixedWindow)
		add(strconv.FormatInt(r.Limit.Requests, 10) + "/" + r.Limit.Window.String() + "/" + strconv.Itoa(int(alg)))
	}
	for _, k := range keys {
		add(k)
		add(r.Descriptors[k])
	}
	return b.String()
}

// wait is Client.wait on a real timer.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
