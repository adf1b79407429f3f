package sluiceclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/internal/rlheaders"
	"github.com/sluicehq/sluice/internal/route"
)

// DescribeFunc turns an incoming request into the check to make; ok false
// skips the check (the request goes through unchecked).
type DescribeFunc func(r *http.Request) (req Request, ok bool)

// ByHeader describes a request by the client id in header (as client_id),
// its path (as route), its method (as method) and its host (as host), as
// the proxy names them; requests without the header are checked under the
// client id "".
func ByHeader(header string) DescribeFunc {
	return func(r *http.Request) (Request, bool) {
		return described(r, r.Header.Get(header), ""), true
	}
}

// described is r's check as the proxy describes it: client as client_id,
// ip (when given) as ip, and its route, method and host.
func described(r *http.Request, client, ip string) Request {
	d := map[string]string{"client_id": client, "route": route.Normalize(r.URL.Path), "method": r.Method}
	if ip != "" {
		d["ip"] = ip
	}
	if h := route.Host(r.Host); h != "" {
		d["host"] = h
	}
	return Request{Descriptors: d}
}

// ByRemoteIP describes a request by its connection's IP address (as
// client_id), its path (as route), its method (as method) and its host
// (as host).
// Behind a load balancer or proxy, use ByClientIP, or every client is the
// balancer.
func ByRemoteIP() DescribeFunc {
	return func(r *http.Request) (Request, bool) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		return described(r, host, ""), true
	}
}

// ByClientIP describes a request by its client's address, as client_id
// and ip, its path, as route, its method, as method, and its host, as
// host: the connection's address, unless it is
// one of trusted (a load balancer's), in which case X-Forwarded-For is
// believed as far as the trusted proxies go, as Sluice's own proxy does
// with -trusted-proxies. An IPv6 client is its /64 network, within which
// a host picks addresses at will.
func ByClientIP(trusted ...netip.Prefix) DescribeFunc {
	return func(r *http.Request) (Request, bool) {
		ip := clientip.Name(clientip.Of(r.RemoteAddr, r.Header, trusted), clientip.IPv6Network)
		return described(r, ip, ip), true
	}
}

// FoldRoutes describes a request as describe does, its route in lower
// case and without a trailing slash (the proxy's -fold-routes): for a
// handler that serves a path in any case and with or without a trailing
// slash, so that "/Login/" meets the rules of "/login" rather than step
// around them. The tenant's rules then name routes so.
func FoldRoutes(describe DescribeFunc) DescribeFunc {
	return func(r *http.Request) (Request, bool) {
		req, ok := describe(r)
		if v, has := req.Descriptors["route"]; ok && has {
			req.Descriptors["route"] = route.Fold(v)
		}
		return req, ok
	}
}

// Middleware checks each request before next: the rate limit headers are
// set on every answer, and a rejected request gets 429 with Retry-After
// and a problem+json body naming the rules that rejected it, without
// reaching next. An admitted request holds the lease of the concurrency
// rules it meets until next returns. When the decider fails, the failure
// mode decides.
func (c *Client) Middleware(describe DescribeFunc, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, ok := describe(r)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		d, err := c.Check(r.Context(), req)
		if err != nil && !d.Failed {
			// Refused (bad key, invalid descriptors): a misconfiguration of
			// this service, not the caller's fault.
			http.Error(w, "rate limiter misconfigured", http.StatusInternalServerError)
			return
		}
		setHeaders(w.Header(), c.cfg.Headers, d)
		if d.Lease != "" {
			// Not released (the decider unreachable): it ends at its TTL.
			defer func() {
				_ = c.Release(context.WithoutCancel(r.Context()), Request{Tier: req.Tier, Descriptors: req.Descriptors, Lease: d.Lease})
			}()
		}
		if d.Allowed {
			// A leaky bucket's queue: the request's turn is later.
			if delay := d.Delay(); delay > c.cfg.MaxDelay {
				problem(w, fmt.Sprintf("the queue's delay %v is over the bound %v", delay, c.cfg.MaxDelay), nil)
				return
			} else if delay > 0 && !c.wait(r.Context(), delay) {
				return // the client went away while it waited
			}
			next.ServeHTTP(w, r)
			return
		}
		var violated []string
		for _, rule := range d.Rules {
			if !rule.Allowed && !rule.Shadow {
				violated = append(violated, rule.Name)
			}
		}
		detail := "rejected by " + strings.Join(violated, ", ")
		if d.Deciding >= 0 && d.Rules[d.Deciding].Message != "" {
			detail = d.Rules[d.Deciding].Message // the tenant's words
		}
		problem(w, detail, violated)
	})
}

// problem answers 429 with a problem+json body of detail, naming the
// violated rules when there are some.
func problem(w http.ResponseWriter, detail string, violated []string) {
	body := map[string]any{"type": "https://sluice.dev/problems/rate-limited", "title": "Too Many Requests",
		"status": http.StatusTooManyRequests, "detail": detail}
	if len(violated) > 0 {
		body["violated_policies"] = violated
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusTooManyRequests)
	_ = json.NewEncoder(w).Encode(body)
}

// HeaderStyle is a set of rate limit headers to answer with (the
// decider's -rate-limit-headers).
type HeaderStyle = rlheaders.Style

// Header styles. Each sends Retry-After on a rejection that can be
// admitted later.
const (
	// HeadersIETF: RateLimit-Policy and RateLimit, one named item per
	// rule, and X-RateLimit-Limit, -Remaining and -Reset of the deciding
	// rule. The default.
	HeadersIETF = rlheaders.IETF
	// HeadersDraft6: RateLimit-Policy with an unnamed item per rule
	// (10;w=60), RateLimit-Limit, -Remaining and -Reset of the deciding
	// rule (the draft's sixth version, as envoyproxy/ratelimit sends
	// them), and the X-RateLimit-* headers.
	HeadersDraft6 = rlheaders.Draft6
	// HeadersX: X-RateLimit-Limit, -Remaining and -Reset alone.
	HeadersX = rlheaders.X
	// HeadersNone: no rate limit header but Retry-After.
	HeadersNone = rlheaders.None
	// HeadersKong: Kong's rate limiting plugins' headers,
	// X-RateLimit-Limit-Minute and X-RateLimit-Remaining-Minute per
	// window, and RateLimit-Limit, -Remaining and -Reset of the deciding
	// rule.
	HeadersKong = rlheaders.Kong
)

// SetHeaders sets d's rate limit headers on h in the HeadersIETF style:
// RateLimit-Policy and RateLimit for every rule, X-RateLimit-* of the
// deciding one, and Retry-After on a rejection.
func SetHeaders(h http.Header, d Decision) { setHeaders(h, HeadersIETF, d) }

func setHeaders(h http.Header, style HeaderStyle, d Decision) {
	rules := make([]rlheaders.Rule, len(d.Rules))
	for i, r := range d.Rules {
		rules[i] = rlheaders.Rule{Name: r.Name, Limit: r.Limit, Remaining: r.Remaining, Quota: r.Quota, Window: r.Window,
			ResetAfter: r.ResetAfter, RetryAfter: r.RetryAfter}
	}
	rlheaders.Set(h, style, rules, d.Deciding, d.Allowed)
}
