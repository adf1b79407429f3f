// Package decision is a decider's decision service: the one place every
// API (HTTP, Connect, gRPC, Envoy's RLS, gubernator's and Unkey's, the
// reverse proxy) goes through to authorize a check key, decide, reset,
// and record what it did in metrics, events and spans.
package decision

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/events"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/rlheaders"
	"github.com/sluicehq/sluice/internal/tracing"
)

// AuthenticateFunc returns the config of the tenant whose check key the
// request's Authorization header (gRPC: authorization metadata) carries,
// or a policy error with CodeUnauthenticated.
type AuthenticateFunc func(authorization string) (*decide.Compiled, error)

// DefaultMaxBodyBytes bounds a check request's body.
const DefaultMaxBodyBytes = 64 << 10

// Service is the decision service every API of a decider serves: it
// authorizes check keys (Authorize), decides (Decide) and resets (Reset),
// and records each decision in the metrics, the events and a span.
type Service struct {
	Decider      *decide.Decider
	Authenticate AuthenticateFunc
	MaxBodyBytes int64        // 0 means DefaultMaxBodyBytes
	Logger       *slog.Logger // nil means slog.Default()
	Metrics      *Metrics     // nil records nothing
	// Events receives rejections and counts; nil publishes nothing.
	Events *events.Publisher
	// Tracer, when set, puts a span around each decision, under the trace
	// context the request carries (tracing.Setup); nil traces nothing.
	Tracer trace.Tracer
	// Headers is the style of the rate limit headers of HTTP answers and
	// of Envoy's response_headers_to_add; the zero value is IETF's.
	Headers rlheaders.Style
	// KeyGuard throttles the addresses sending invalid check keys, on
	// every API; nil throttles none.
	KeyGuard *KeyGuard
	// QuotaMode makes every descriptor of Envoy's rate limit service a
	// quota (envoyproxy/ratelimit's QUOTA_MODE; policy.Rule.Quota): a call
	// is rejected only when all its descriptors with a limit are over.
	QuotaMode bool
}

// Reset resets the counters req meets (decide.Decider.Reset), counts it,
// and logs the tenant and the rules reset (not the descriptors: client ids).
func (cfg *Service) Reset(ctx context.Context, c *decide.Compiled, req decide.Request) ([]*policy.Rule, error) {
	rules, err := cfg.Decider.Reset(ctx, c, req)
	cfg.Metrics.observeReset(c.Tenant.Slug, err)
	if err == nil {
		names := make([]string, len(rules))
		for i, r := range rules {
			names[i] = r.Name
		}
		logger := cfg.Logger
		if logger == nil {
			logger = slog.Default()
		}
		logger.InfoContext(ctx, "counters reset", "tenant", c.Tenant.Slug, "rules", names)
	}
	return rules, err
}

// Door refuses a call of c's tenant to decide while the decider is full
// and the tenant has its share in flight (decide.Decider.Crowded), before
// the call's body is read: a tenant flooding beyond its share is refused
// for little CPU, and the others go on within theirs. The refusal is
// CodeResourceExhausted: 429 with Retry-After, or gRPC's
// RESOURCE_EXHAUSTED, never an admission. It is counted as shed.
func (cfg *Service) Door(c *decide.Compiled) error {
	if cfg.Decider == nil || !cfg.Decider.Crowded(c) {
		return nil
	}
	cfg.Metrics.refusedAtDoor(c.Tenant.Slug)
	return ErrCrowded
}

// ErrCrowded is Door's refusal.
var ErrCrowded = &policy.Error{Code: policy.CodeResourceExhausted,
	Message: "the decider is overloaded and this tenant has its share of it in flight: retry in a second"}

// DoorDecision is the decision an HTTP answer to ErrCrowded describes in
// its headers: rejected, degraded by overload.
var DoorDecision = decide.Decision{Deciding: -1, Degraded: true, Degradation: decide.Shed}

// Decide runs one decision and records it: in the metrics, the events,
// and a span when traced.
func (cfg *Service) Decide(ctx context.Context, c *decide.Compiled, req decide.Request) (decide.Decision, error) {
	start := time.Now()
	var span trace.Span
	if cfg.Tracer != nil {
		ctx, span = tracing.Start(ctx, cfg.Tracer, "sluice.decide", nil) // the parent: traced*'s
	}
	dec, err := cfg.Decider.Decide(ctx, c, req)
	cfg.record(span, start, c, req, dec, err)
	return dec, err
}

// DecideAll runs the independent decisions of one call (a CheckBatch, an
// Envoy request's descriptors) at once, as decide.Decider.DecideAll does,
// and records each as Decide does. errs[i] is reqs[i]'s refusal, if any.
func (cfg *Service) DecideAll(ctx context.Context, c *decide.Compiled, reqs []decide.Request) (decs []decide.Decision, errs []error) {
	if len(reqs) == 1 {
		one := &struct { // one allocation
			dec [1]decide.Decision
			err [1]error
		}{}
		one.dec[0], one.err[0] = cfg.Decide(ctx, c, reqs[0])
		return one.dec[:], one.err[:]
	}
	start := time.Now()
	var spans []trace.Span
	if cfg.Tracer != nil {
		spans = make([]trace.Span, len(reqs))
		for i := range reqs {
			_, spans[i] = tracing.Start(ctx, cfg.Tracer, "sluice.decide", nil)
		}
	}
	decs, errs = cfg.Decider.DecideAll(ctx, c, reqs)
	for i := range reqs {
		var span trace.Span
		if spans != nil {
			span = spans[i]
		}
		cfg.record(span, start, c, reqs[i], decs[i], errs[i])
	}
	return decs, errs
}

// DecideAllInto is DecideAll answering a single request in decs[:1] and
// errs[:1], when they have room: a caller with storage of its own (a
// pooled Envoy call) saves the answer an allocation.
func (cfg *Service) DecideAllInto(ctx context.Context, c *decide.Compiled, reqs []decide.Request, decs []decide.Decision, errs []error) ([]decide.Decision, []error) {
	if len(reqs) != 1 || cap(decs) == 0 || cap(errs) == 0 {
		return cfg.DecideAll(ctx, c, reqs)
	}
	decs, errs = decs[:1], errs[:1]
	decs[0], errs[0] = cfg.Decide(ctx, c, reqs[0])
	return decs, errs
}

// record records a decision of req begun at start: it ends its span (nil:
// untraced), observes it in the metrics and publishes its events.
func (cfg *Service) record(span trace.Span, start time.Time, c *decide.Compiled, req decide.Request, dec decide.Decision, err error) {
	if span != nil {
		endSpan(span, c, req, dec, err)
	}
	cfg.Metrics.observe(c, req.Peek, dec, err, time.Since(start))
	if cfg.Events != nil && err == nil && !req.Peek { // a peek is no request: nothing to count
		cost := max(req.Cost, 1)
		for _, r := range dec.Rules {
			cfg.Events.Count(c.Tenant.ID, dec.Tier, r.Rule.ID, r.Allowed, r.Rule.Shadow)
			if !r.Allowed {
				cfg.Events.Rejected(c.Tenant.ID, dec.Tier, r.Rule.ID, policy.ClientKey(r.Rule, req.Descriptors), cost, start, r.Rule.Shadow)
			}
		}
	}
}

// Decisions are traced when Service.Tracer is set: each transport puts
// the caller's trace context in the decision's ctx (Traced*), and Decide
// wraps the decision in a span (endSpan describes it).

// TracedHeader returns ctx with the trace context of a request of header h
// when decisions are traced (else ctx: the untraced path builds nothing).
func (cfg *Service) TracedHeader(ctx context.Context, h http.Header) context.Context {
	if cfg.Tracer == nil {
		return ctx
	}
	return tracing.Extract(ctx, h.Get)
}

// TracedMetadata is TracedHeader for a gRPC call's metadata.
func (cfg *Service) TracedMetadata(ctx context.Context) context.Context {
	if cfg.Tracer == nil {
		return ctx
	}
	return tracing.Extract(ctx, Metadata(ctx))
}

// TracedGetter is TracedHeader for a request whose headers get reads.
func (cfg *Service) TracedGetter(ctx context.Context, get tracing.Getter) context.Context {
	if cfg.Tracer == nil {
		return ctx
	}
	return tracing.Extract(ctx, get)
}

// Metadata reads the first value of a key of ctx's incoming gRPC metadata.
func Metadata(ctx context.Context) tracing.Getter {
	return func(key string) string {
		if md, ok := ctx.Value(metadataKey{}).(metadata.MD); ok {
			if v := md[strings.ToLower(key)]; len(v) > 0 {
				return v[0]
			}
			return ""
		}
		if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
			return v[0]
		}
		return ""
	}
}

type metadataKey struct{}

// WithMetadata returns ctx with md, the incoming gRPC metadata it already
// carries (metadata.NewIncomingContext), for Metadata to read in place:
// grpc's own reads copy the values on every call.
func WithMetadata(ctx context.Context, md metadata.MD) context.Context {
	return context.WithValue(ctx, metadataKey{}, md)
}

// endSpan describes a decision on its span and ends it: the tenant, tier,
// outcome and deciding rule, never the descriptors (client ids).
func endSpan(span trace.Span, c *decide.Compiled, req decide.Request, dec decide.Decision, err error) {
	defer span.End()
	if !span.IsRecording() { // not sampled: nothing to describe
		return
	}
	span.SetAttributes(attribute.String("sluice.tenant", c.Tenant.Slug), attribute.Int64("sluice.config_version", c.Version),
		attribute.Int64("sluice.cost", max(req.Cost, 1)), attribute.Bool("sluice.peek", req.Peek))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "decision failed")
		return
	}
	span.SetAttributes(attribute.String("sluice.tier", dec.Tier), attribute.Bool("sluice.allowed", dec.Allowed),
		attribute.Int("sluice.rules", len(dec.Rules)), attribute.Bool("sluice.degraded", dec.Degraded), attribute.Bool("sluice.deny_cache", dec.Cached))
	if dec.Deciding >= 0 && dec.Deciding < len(dec.Rules) {
		span.SetAttributes(attribute.String("sluice.rule", dec.Rules[dec.Deciding].Rule.Name))
	}
}

// endLeaseSpan describes a lease's release or renewal on its span, and
// ends it.
func endLeaseSpan(span trace.Span, c *decide.Compiled, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("sluice.tenant", c.Tenant.Slug), attribute.Int64("sluice.config_version", c.Version))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "lease operation failed")
	}
}

// A bug that one request makes panic must cost that request, not the
// decider: fasthttp and grpc-go, unlike net/http, let a handler's panic end
// the process, and a client retrying the same request on each decider in
// turn would end them all. Each transport recovers, answers an internal
// error, and calls Recovered.

// Recovered logs the panic r of a request of api, with its stack, and
// counts it (sluice_panics_total).
func (cfg *Service) Recovered(ctx context.Context, api string, r any) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.ErrorContext(ctx, "decider: a request's handling panicked; answered with an internal error",
		"api", api, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	if m := cfg.Metrics; m != nil {
		m.panics.WithLabelValues(api).Inc()
	}
}
