// Package proxy is the decider's reverse-proxy mode: in front of one
// upstream, for one tenant, it names each request's client (a JWT claim,
// a client certificate, a header, a cookie or the address), decides it,
// and forwards what is admitted, holding concurrency leases while the
// upstream answers. With forward auth it answers a gateway's question in
// place of forwarding.
package proxy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/internal/adaptive"
	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/httpport"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redact"
	"github.com/sluicehq/sluice/internal/route"
)

// Config configures the reverse-proxy mode: the decider in front of
// one upstream, for one tenant.
type Config struct {
	API      decision.Service
	Upstream *url.URL
	// Tenant returns the configuration of the tenant the proxy enforces
	// (the one whose check key it was given).
	Tenant func() (*decide.Compiled, error)
	// JWT, else the client certificate (with ClientCertIdentity), else
	// IdentityHeader, else IdentityCookie, names the client; with none (or
	// when the request lacks it) the client is its IP address.
	JWT *JWTIdentity
	// ClientCertIdentity names the client by the certificate it presented
	// and the server verified (mutual TLS): see CertName.
	ClientCertIdentity             bool
	IdentityHeader, IdentityCookie string
	// TrustedProxies are the peers whose X-Forwarded-For is believed: the
	// client IP is the rightmost address not among them.
	TrustedProxies []netip.Prefix
	// IPv6Prefix is how many leading bits of an IPv6 client's address name
	// it, as its ip descriptor and as its identity when nothing else names
	// it: a host picks addresses at will within its network. 0 means
	// clientip.IPv6Network (a /64); 128, the address alone.
	IPv6Prefix int
	// TierHeader, when set, names a header choosing the tier, believed
	// from TrustedProxies only (the gateway in front that sets it: a
	// client would pick the tier with the most room); else, and from
	// anyone else, overrides and the default apply.
	TierHeader string
	// HeaderDescriptors add a descriptor of each request's header, when
	// it has one (its first value): rules may match and key by what an
	// application or gateway says of a request (an organization, an API
	// key, a plan) beside the identity. See ParseHeaderDescriptors.
	HeaderDescriptors []HeaderDescriptor
	// MaxDelay bounds how long a request admitted with a delay (leaky
	// bucket as a queue) is held before it is forwarded; 0 means 5s.
	MaxDelay time.Duration
	// FoldRoutes makes the route descriptor route.Fold's, not
	// route.Normalize's: for an upstream that serves a path in any case and
	// with or without a trailing slash, whose rules name routes in lower
	// case without one.
	FoldRoutes bool
	// PreserveHost forwards a request's Host header as it came (Traefik's
	// passHostHeader, Envoy's default) for an upstream that serves several
	// names; otherwise the upstream is sent its own host, the client's in
	// X-Forwarded-Host (nginx's default).
	PreserveHost bool
	// UpstreamTimeout bounds the wait for the upstream's response headers
	// (its body may stream for as long as it takes), after which the
	// client gets 504; 0 means DefaultUpstreamTimeout, negative no bound.
	// It applies to the default transport only.
	UpstreamTimeout time.Duration
	// Transport carries requests to the upstream; nil means
	// UpstreamTransport() with UpstreamTimeout.
	Transport http.RoundTripper
	// ForwardAuth answers each request instead of forwarding it, as the
	// forward-auth service of a gateway in front (Traefik's forwardAuth,
	// Caddy's forward_auth): 200 with the rate limit headers when the
	// request the gateway asks about may go through, else 429 with them
	// and a problem+json body, which the gateway returns to its client.
	// That request's path and method come from X-Forwarded-Uri and
	// X-Forwarded-Method (else X-Original-Uri and X-Original-Method, else
	// the call's own); Upstream is not used.
	ForwardAuth bool
	// DenyStatus is the status of a forward-auth rejection; 0 means 429.
	// nginx's auth_request passes only 401 and 403 on (any other is its
	// 500), so behind nginx it is 403, mapped back to 429 there.
	DenyStatus int
	// ShedStatus is the status of a request an adaptive concurrency rule
	// sheds (it decided the rejection): 429, or 503 for clients and
	// balancers that retry a 503 elsewhere; 0 means 429.
	ShedStatus int

	// renewals, for tests, replaces the ticker renewing a long request's
	// leases every d (keepLeases): its ticks and its stop.
	renewals func(d time.Duration) (<-chan time.Time, func())
	// renewed, for tests, is told of each renewal done.
	renewed func()
}

// DefaultUpstreamTimeout is how long the proxy waits for an upstream's
// response headers by default: nginx's proxy_read_timeout.
const DefaultUpstreamTimeout = 60 * time.Second

// UpstreamTransport is the proxy's default transport: net/http's default
// but keeping up to 1,024 idle connections to the upstream where the
// default keeps 2, and so under more than two concurrent requests closes
// connections and opens new ones (a TCP handshake each) all the time.
func UpstreamTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 0, 1024
	return t
}

// Descriptors a proxied request is checked with.
const (
	RouteDescriptor  = "route"
	MethodDescriptor = "method"
	// HostDescriptor is the host the client asked for (Host, HTTP/2's
	// :authority; in forward auth X-Forwarded-Host), in lower case
	// without its port: rules for one site of several behind the proxy,
	// as Kong's and Envoy's routes by host.
	HostDescriptor = "host"
	// IPDescriptor is the client's IP address (an IPv6 client's network:
	// Config.IPv6Prefix) whatever identity the request claims: a rule
	// keyed by it bounds what one address sends when a header or cookie
	// names the client, since a client can claim a new name with each
	// request.
	IPDescriptor = "ip"
)

// New returns the reverse proxy: each request is checked as
// client_id (its identity), ip (its address), route (its path), method
// and host; allowed ones are forwarded, bodies streamed and upgrades (websockets) passed through,
// after waiting out a leaky bucket's delay; rejected ones get 429, the
// rate limit headers and a problem+json body. With cfg.ForwardAuth it
// answers 200 in place of forwarding (see Config.ForwardAuth).
func New(cfg Config) http.Handler {
	if cfg.API.Logger == nil {
		cfg.API.Logger = slog.Default()
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = 5 * time.Second
	}
	if cfg.Transport == nil {
		t := UpstreamTransport()
		switch {
		case cfg.UpstreamTimeout == 0:
			t.ResponseHeaderTimeout = DefaultUpstreamTimeout
		case cfg.UpstreamTimeout > 0:
			t.ResponseHeaderTimeout = cfg.UpstreamTimeout
		}
		cfg.Transport = t
	}
	if cfg.IPv6Prefix <= 0 {
		cfg.IPv6Prefix = clientip.IPv6Network
	}
	var rp *httputil.ReverseProxy
	if !cfg.ForwardAuth {
		rp = newReverseProxy(cfg)
	}
	deny := http.StatusTooManyRequests
	if cfg.ForwardAuth && cfg.DenyStatus != 0 {
		deny = cfg.DenyStatus
	}
	h := httpport.NewAPI(cfg.API)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ex := httpport.Std(w, r)
		c, err := cfg.Tenant()
		if err != nil {
			h.Fail(ex, err)
			return
		}
		ip := clientip.Name(clientip.Of(r.RemoteAddr, r.Header, cfg.TrustedProxies), cfg.IPv6Prefix)
		client, source := cfg.identity(r, ip)
		cfg.API.Metrics.ObserveIdentity(source)
		path, method, host := r.URL.Path, r.Method, r.Host
		if cfg.ForwardAuth {
			path, method, host = forwardedRequest(r)
		}
		req := decide.Request{Descriptors: policy.Descriptors{
			{Key: policy.DefaultIdentifierKey, Value: policy.FitValue(client, policy.MaxDescriptorVal)},
			{Key: IPDescriptor, Value: ip},
			{Key: RouteDescriptor, Value: policy.FitValue(cfg.route(path), policy.MaxDescriptorVal)},
			{Key: MethodDescriptor, Value: policy.FitValue(method, policy.MaxDescriptorVal)},
		}}
		if h := route.Host(host); h != "" {
			req.Descriptors = append(req.Descriptors, policy.Descriptor{Key: HostDescriptor, Value: policy.FitValue(h, policy.MaxDescriptorVal)})
		}
		for _, hd := range cfg.HeaderDescriptors {
			if v := hd.of(r); v != "" {
				req.Descriptors = append(req.Descriptors, policy.Descriptor{Key: hd.Key, Value: policy.FitValue(v, policy.MaxDescriptorVal)})
			}
		}
		if cfg.TierHeader != "" && clientip.Trusted(r.RemoteAddr, cfg.TrustedProxies) {
			req.Tier = r.Header.Get(cfg.TierHeader)
		}
		dec, err := cfg.API.Decide(cfg.API.TracedHeader(r.Context(), r.Header), c, req)
		if err != nil {
			h.Fail(ex, err)
			return
		}
		ex.RateHeaders(dec, cfg.API.Headers)
		if !dec.Allowed {
			status, prob := deny, httpport.RejectedProblem(dec)
			if cfg.ShedStatus == http.StatusServiceUnavailable && !cfg.ForwardAuth && dec.Deciding >= 0 &&
				dec.Rules[dec.Deciding].InForce().Algorithm == policy.AdaptiveConcurrency {
				status, prob.Status, prob.Title = cfg.ShedStatus, cfg.ShedStatus, "Service Unavailable"
			}
			ex.Reply(status, "application/problem+json", prob)
			return
		}
		if dec.Lease != 0 && !cfg.ForwardAuth {
			// The request holds a lease on its concurrency rules while it
			// is forwarded: until its response (or upgraded connection)
			// ends. A gateway asking for forward auth tells nothing of the
			// end: its leases end at their TTL.
			// How the upstream answered is the release's sample, for
			// adaptive concurrency rules.
			smp := &sample{start: time.Now()}
			r = r.WithContext(context.WithValue(r.Context(), sampleKey{}, smp))
			defer func() {
				req.Latency, req.Outcome = smp.latency, smp.outcome
				cfg.release(r.Context(), c, req, dec)
			}()
			defer cfg.keepLeases(r.Context(), c, req, dec)() // renewed while it lasts: a websocket may outlive a TTL
		}
		if delay := maxDelay(dec); delay > 0 {
			if delay > cfg.MaxDelay {
				httpport.ReplyProblem(ex, deny, "Too Many Requests", fmt.Sprintf("the queue's delay %v is over the proxy's bound", delay), nil)
				return
			}
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		if cfg.ForwardAuth {
			w.WriteHeader(http.StatusOK)
			return
		}
		// Answer while the request body still streams in (without this,
		// the server would drain the body before sending the headers).
		_ = http.NewResponseController(w).EnableFullDuplex()
		rp.ServeHTTP(w, r)
	})
}

// release ends the lease a proxied request held (dec's), after it ended;
// a lease that cannot be released now (Redis down: the decisions say so
// too) ends at its TTL.
func (cfg *Config) release(ctx context.Context, c *decide.Compiled, req decide.Request, dec decide.Decision) {
	if err := cfg.API.ReleaseHeld(context.WithoutCancel(ctx), c, req, dec); err != nil {
		cfg.API.Logger.DebugContext(ctx, "a proxied request's concurrency lease was not released: it ends at its TTL",
			"tenant", c.Tenant.Slug, "err", err)
	}
}

// keepLeases renews the leases of dec, a proxied request's decision, every
// half of its rules' shortest lease TTL until the returned stop is called,
// so that a request lasting longer (a websocket, a long download) still
// counts against its concurrency rules.
func (cfg *Config) keepLeases(ctx context.Context, c *decide.Compiled, req decide.Request, dec decide.Decision) (stop func()) {
	var ttl time.Duration
	for i := range dec.Rules {
		if p := dec.Rules[i].InForce(); p.Algorithm.Leases() && p.LeaseTTL > 0 && (ttl == 0 || p.LeaseTTL < ttl) {
			ttl = p.LeaseTTL
		}
	}
	if ttl <= 0 {
		return func() {}
	}
	ticks := cfg.renewals
	if ticks == nil {
		ticks = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	tick, stopTicks := ticks(ttl / 2)
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-tick:
				ok, err := cfg.API.Renew(context.WithoutCancel(ctx), c, req, dec)
				if err != nil || !ok {
					cfg.API.Logger.DebugContext(ctx, "a proxied request's concurrency lease was not renewed", "tenant", c.Tenant.Slug, "err", err)
				}
				if cfg.renewed != nil {
					cfg.renewed()
				}
			}
		}
	}()
	return func() {
		stopTicks()
		close(done)
		<-finished
	}
}

// route is the route descriptor of a request's path.
func (cfg *Config) route(path string) string {
	if cfg.FoldRoutes {
		return route.Fold(path)
	}
	return route.Normalize(path)
}

// forwardedRequest is the path, method and host of the request a gateway
// asks about (Config.ForwardAuth).
func forwardedRequest(r *http.Request) (path, method, host string) {
	path, method, host = r.URL.Path, r.Method, r.Host
	for _, h := range []string{"X-Forwarded-Uri", "X-Original-Uri"} {
		if v := r.Header.Get(h); v != "" {
			if u, err := url.ParseRequestURI(v); err == nil {
				path = u.Path
			} else {
				path, _, _ = strings.Cut(v, "?")
			}
			break
		}
	}
	for _, h := range []string{"X-Forwarded-Method", "X-Original-Method"} {
		if v := r.Header.Get(h); v != "" {
			method = v
			break
		}
	}
	if v := r.Header.Get("X-Forwarded-Host"); v != "" {
		host = v
	}
	return path, method, host
}

// newReverseProxy is the reverse proxy to cfg.Upstream.
func newReverseProxy(cfg Config) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(cfg.Upstream)
			if cfg.PreserveHost {
				pr.Out.Host = pr.In.Host
			}
			forwarded(pr, clientip.Trusted(pr.In.RemoteAddr, cfg.TrustedProxies))
		},
		Transport:     cfg.Transport,
		FlushInterval: -1, // stream responses as they come
		BufferPool:    &copyBuffers{},
		ModifyResponse: func(resp *http.Response) error {
			if smp, ok := resp.Request.Context().Value(sampleKey{}).(*sample); ok {
				smp.answered(resp.StatusCode)
			}
			return nil
		},
		ErrorHandler: upstreamFailed(cfg.API.Logger, cfg.API.Metrics, cfg.Upstream.String()),
		// What ErrorHandler does not see (an answer broken off while its
		// body streams) httputil logs here.
		ErrorLog: slog.NewLogLogger(cfg.API.Logger.Handler(), slog.LevelWarn),
	}
}

// forwarded sets the X-Forwarded-* headers of the request to the
// upstream. A trusted peer's (a load balancer's) are passed on, the
// peer's address appended to X-Forwarded-For, so that the upstream, like
// the proxy, sees the client and the scheme and host it asked for, not
// the balancer's, and so are its Forwarded (RFC 7239) and X-Real-Ip; an
// untrusted peer's X-Forwarded-* are replaced and the others dropped, as
// a client may not pose as another or claim to have come over TLS.
func forwarded(pr *httputil.ProxyRequest, trusted bool) {
	if trusted {
		pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
	} else {
		pr.Out.Header.Del("X-Real-Ip")
	}
	pr.SetXForwarded()
	if trusted {
		for _, h := range []string{"X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded"} {
			if v := pr.In.Header.Values(h); len(v) > 0 {
				pr.Out.Header[h] = v
			}
		}
	}
}

// upstreamFailed answers a request the upstream did not: 504 when it
// did not answer in time, else 502, each with a problem+json body that
// names no upstream address (the log does, at most once a second: an
// upstream down under load fails every request), and counts it by reason
// in sluice_proxy_upstream_errors_total. A client that went away first
// gets nothing and is counted as canceled, not logged: it is not the
// upstream's failure.
func upstreamFailed(log *slog.Logger, m *decision.Metrics, upstream string) func(http.ResponseWriter, *http.Request, error) {
	logs := &rate.Sometimes{Interval: time.Second}
	return func(w http.ResponseWriter, r *http.Request, err error) {
		ex := httpport.Std(w, r)
		var ne net.Error
		smp, _ := r.Context().Value(sampleKey{}).(*sample)
		switch {
		case smp == nil:
		case r.Context().Err() != nil:
			smp.outcome = adaptive.Ignored // the client left
		default:
			smp.latency, smp.outcome = time.Since(smp.start), adaptive.Dropped
		}
		switch {
		case r.Context().Err() != nil:
			m.UpstreamError("canceled")
		case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
			m.UpstreamError("timeout")
			logs.Do(func() {
				log.Warn("proxy: the upstream did not answer in time", "method", r.Method, "path", r.URL.Path, "err", redact.Error(err, upstream))
			})
			httpport.ReplyProblem(ex, http.StatusGatewayTimeout, "Gateway Timeout", "the upstream did not answer in time", nil)
		default:
			m.UpstreamError("unreachable")
			logs.Do(func() {
				log.Warn("proxy: the upstream failed", "method", r.Method, "path", r.URL.Path, "err", redact.Error(err, upstream))
			})
			httpport.ReplyProblem(ex, http.StatusBadGateway, "Bad Gateway", "the upstream could not be reached or broke off its answer", nil)
		}
	}
}

// HeaderDescriptor makes the value of a request's Header the descriptor
// Key. Header "Host" is the host the client asked for (with its port
// when it gave one), which net/http keeps apart from the other headers.
type HeaderDescriptor struct{ Key, Header string }

// of returns hd's value in r ("" when r has no such header).
func (hd HeaderDescriptor) of(r *http.Request) string {
	if hd.Header == "Host" {
		return r.Host
	}
	return r.Header.Get(hd.Header)
}

// MaxHeaderDescriptors bounds the proxy's header descriptors: with its own
// five, within a request's policy.MaxDescriptors.
const MaxHeaderDescriptors = 16

// ParseHeaderDescriptors reads "key=Header,key=Header" (the dataplane's
// -descriptor-headers): each key a descriptor name, none twice and none
// of the proxy's own (client_id, ip, route, method, host), each header a valid
// header name.
func ParseHeaderDescriptors(s string) ([]HeaderDescriptor, error) {
	var out []HeaderDescriptor
	seen := map[string]bool{policy.DefaultIdentifierKey: true, IPDescriptor: true, RouteDescriptor: true, MethodDescriptor: true, HostDescriptor: true}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, header, ok := strings.Cut(item, "=")
		key, header = strings.TrimSpace(key), strings.TrimSpace(header)
		switch {
		case !ok || header == "":
			return nil, fmt.Errorf("%q: want descriptor=Header-Name", item)
		case (policy.Descriptors{{Key: key}}).Validate() != nil:
			return nil, fmt.Errorf("%q: descriptor %q may be 1 to %d letters, digits, '_', '-' and '.'", item, key, policy.MaxDescriptorKey)
		case seen[key]:
			return nil, fmt.Errorf("%q: descriptor %q is the proxy's own or given twice", item, key)
		case !httpguts.ValidHeaderFieldName(header):
			return nil, fmt.Errorf("%q: %q is not a header name", item, header)
		}
		seen[key] = true
		out = append(out, HeaderDescriptor{Key: key, Header: http.CanonicalHeaderKey(header)})
	}
	if len(out) > MaxHeaderDescriptors {
		return nil, fmt.Errorf("%d header descriptors: at most %d", len(out), MaxHeaderDescriptors)
	}
	return out, nil
}

// copyBuffers lends the proxy its buffers for copying answers: without
// a pool httputil allocates 32 KiB for each.
type copyBuffers struct{ p sync.Pool }

func (b *copyBuffers) Get() []byte {
	if buf, ok := b.p.Get().(*[]byte); ok {
		return *buf
	}
	return make([]byte, 32<<10)
}

func (b *copyBuffers) Put(buf []byte) { b.p.Put(&buf) }

func maxDelay(dec decide.Decision) time.Duration {
	var d time.Duration
	for _, r := range dec.Rules {
		d = max(d, r.Delay)
	}
	return d
}

// identity names the client of r, and says what named it: its verified
// token's claim ("jwt"), else its verified client certificate's name
// ("client_cert"), else the identity header ("header"), else the cookie
// ("cookie"), else its IP address ip ("ip"; see clientip.Of and Name).
func (cfg *Config) identity(r *http.Request, ip string) (client, source string) {
	if cfg.JWT != nil {
		if v := cfg.JWT.client(r); v != "" {
			return v, "jwt"
		}
	}
	if cfg.ClientCertIdentity && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		if v := CertName(r.TLS.VerifiedChains[0][0]); v != "" {
			return v, "client_cert"
		}
	}
	if cfg.IdentityHeader != "" {
		if v := r.Header.Get(cfg.IdentityHeader); v != "" {
			return v, "header"
		}
	}
	if cfg.IdentityCookie != "" {
		if c, err := r.Cookie(cfg.IdentityCookie); err == nil && c.Value != "" {
			return c.Value, "cookie"
		}
	}
	return ip, "ip"
}

// CertName names the holder of a client certificate: its first URI
// subject alternative name (a SPIFFE ID, as service meshes issue), else
// its first DNS name, else its first e-mail address, else its subject's
// common name.
func CertName(c *x509.Certificate) string {
	switch {
	case len(c.URIs) > 0:
		return c.URIs[0].String()
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	case len(c.EmailAddresses) > 0:
		return c.EmailAddresses[0]
	}
	return c.Subject.CommonName
}

// sample is how the upstream answered a request holding a lease: what
// its release tells adaptive concurrency rules.
type sample struct {
	start   time.Time
	latency time.Duration
	outcome adaptive.Outcome
}

type sampleKey struct{}

// answered takes the upstream's answer of status, its headers in: the
// latency to them; a 429, 503 or 504 is the upstream refusing for
// overload, or timing out behind it, a request dropped.
func (s *sample) answered(status int) {
	s.latency = time.Since(s.start)
	switch status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		s.outcome = adaptive.Dropped
	}
}
