package checkapi

import (
	"context"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/internal/decision"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/protoconv"
)

// RegisterGRPC serves sluice.v1.DecisionService of svc on s.
func RegisterGRPC(s grpc.ServiceRegistrar, svc decision.Service) {
	sluicev1.RegisterDecisionServiceServer(s, grpcDecisions{s: decisionServer{svc}})
}

// grpcDecisions serves DecisionService on grpc-go, sharing decisionServer's
// logic.
type grpcDecisions struct {
	sluicev1.UnimplementedDecisionServiceServer
	s decisionServer
}

func (g grpcDecisions) Check(ctx context.Context, m *sluicev1.CheckRequest) (*sluicev1.CheckResponse, error) {
	res, err := g.s.checkOne(g.s.cfg.TracedMetadata(ctx), incomingAuth(ctx), m)
	return res, protoconv.GRPCStatus(err)
}

func (g grpcDecisions) CheckBatch(ctx context.Context, m *sluicev1.CheckBatchRequest) (*sluicev1.CheckBatchResponse, error) {
	res, err := g.s.checkBatch(g.s.cfg.TracedMetadata(ctx), incomingAuth(ctx), m)
	return res, protoconv.GRPCStatus(err)
}

func (g grpcDecisions) Reset(ctx context.Context, m *sluicev1.ResetRequest) (*sluicev1.ResetResponse, error) {
	res, err := g.s.reset(ctx, incomingAuth(ctx), m)
	return res, protoconv.GRPCStatus(err)
}

// incomingAuth is a gRPC call's authorization metadata, as an HTTP
// request's Authorization header: the first value.
func incomingAuth(ctx context.Context) string { return decision.Metadata(ctx)("authorization") }
