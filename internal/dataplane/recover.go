package dataplane

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A bug that one request makes panic must cost that request, not the
// decider: fasthttp and grpc-go, unlike net/http, let a handler's panic end
// the process, and a client retrying the same request on each decider in
// turn would end them all. The recoveries below answer an internal error,
// log the panic with its stack and count it (sluice_panics_total).

// recovered logs and counts the panic r of a request of api.
func (cfg *HTTPConfig) recovered(ctx context.Context, api string, r any) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.ErrorContext(ctx, "dataplane: a request's handling panicked; answered with an internal error",
		"api", api, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	if m := cfg.Metrics; m != nil {
		m.panics.WithLabelValues(api).Inc()
	}
}

// recoverFast wraps a fasthttp handler: a panic is answered 500 with a
// problem+json body.
func (cfg *HTTPConfig) recoverFast(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		defer func() {
			if r := recover(); r != nil {
				cfg.recovered(context.Background(), "http", r)
				ctx.Response.Reset()
				replyProblem(&fastExchange{ctx}, http.StatusInternalServerError, "Internal error", "the decider failed on this request", nil)
			}
		}()
		next(ctx)
	}
}

// recoverUnary is a grpc-go interceptor: a panic is answered Internal.
func (cfg *HTTPConfig) recoverUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			cfg.recovered(ctx, "grpc", r)
			res, err = nil, status.Error(codes.Internal, "the decider failed on this request")
		}
	}()
	return next(ctx, req)
}

// recoverStream is recoverUnary for streaming calls (health watches).
func (cfg *HTTPConfig) recoverStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			cfg.recovered(ss.Context(), "grpc", r)
			err = status.Error(codes.Internal, "the decider failed on this request")
		}
	}()
	return next(srv, ss)
}
