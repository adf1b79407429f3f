package grpcserve

import (
	"context"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
)

// A bug that one request makes panic must cost that request, not the
// decider: grpc-go, unlike net/http, lets a handler's panic end
// the process. The recoveries below answer an internal error; the service
// logs the panic with its stack and counts it (decision.Service.Recovered).

// recoverUnary is a grpc-go interceptor: a panic is answered Internal.
func recoverUnary(cfg *decision.Service) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (res any, err error) {
		defer func() {
			if r := recover(); r != nil {
				cfg.Recovered(ctx, "grpc", r)
				res, err = nil, protoconv.GRPCError(policy.CodeUnknown, "the decider failed on this request")
			}
		}()
		return next(ctx, req)
	}
}

// recoverStream is recoverUnary for streaming calls (health watches).
func recoverStream(cfg *decision.Service) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				cfg.Recovered(ss.Context(), "grpc", r)
				err = protoconv.GRPCError(policy.CodeUnknown, "the decider failed on this request")
			}
		}()
		return next(srv, ss)
	}
}
