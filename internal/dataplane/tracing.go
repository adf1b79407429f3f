package dataplane

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/tracing"
)

// Decisions are traced when HTTPConfig.Tracer is set: each transport puts
// the caller's trace context in the decision's ctx (traced*), and
// HTTPConfig.decide wraps the decision in a span (endSpan describes it).

// tracedHeader returns ctx with the trace context of a request of header h
// when decisions are traced (else ctx: the untraced path builds nothing).
func (cfg *HTTPConfig) tracedHeader(ctx context.Context, h http.Header) context.Context {
	if cfg.Tracer == nil {
		return ctx
	}
	return tracing.Extract(ctx, h.Get)
}

// tracedMetadata is tracedHeader for a gRPC call's metadata.
func (cfg *HTTPConfig) tracedMetadata(ctx context.Context) context.Context {
	if cfg.Tracer == nil {
		return ctx
	}
	return tracing.Extract(ctx, incomingMetadata(ctx))
}

// tracedExchange is tracedHeader for an exchange.
func (cfg *HTTPConfig) tracedExchange(ex exchange) context.Context {
	if cfg.Tracer == nil {
		return ex.context()
	}
	return tracing.Extract(ex.context(), ex.header)
}

// endSpan describes a decision on its span and ends it: the tenant, tier,
// outcome and deciding rule, never the descriptors (client ids).
func endSpan(span trace.Span, c *decide.Config, req decide.Request, dec decide.Decision, err error) {
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
