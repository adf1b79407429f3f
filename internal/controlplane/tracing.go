package controlplane

import (
	"context"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/tracing"
)

// tracer puts a span around each unary call, named for its procedure,
// under the trace context the caller sent; outside the authentication, so
// that refusals show too. Streams (config watches, open for hours) have
// none.
type tracer struct{ tr trace.Tracer }

func (t tracer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, span := tracing.Start(ctx, t.tr, req.Spec().Procedure, req.Header().Get)
		defer span.End()
		res, err := next(ctx, req)
		span.SetAttributes(attribute.String("rpc.system", "connect_rpc"), attribute.String("rpc.connect_rpc.code", codeLabel(err)))
		if err != nil {
			span.SetStatus(codes.Error, connect.CodeOf(err).String())
		}
		return res, err
	}
}

func (t tracer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (t tracer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
