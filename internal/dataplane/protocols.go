package dataplane

import (
	"net/http"
	"slices"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/internal/checkapi"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/envoyrls"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gubernator"
	"github.com/sluicehq/sluice/internal/httpport"
	"github.com/sluicehq/sluice/internal/unkey"
)

// The protocols a decider speaks are assembled here, and only here: each
// protocol's package knows its own routes and services, none another's.
// A new protocol adds its routes to HTTPRoutes or its service to
// RegisterGRPC (and GRPCServices).

// HTTPRoutes are every protocol's HTTP check routes over a: Sluice's check
// API, Unkey's and gubernator's gateway.
func HTTPRoutes(a *httpport.API) []httpport.Route {
	return slices.Concat(checkapi.Routes(a), unkey.Routes(a), gubernator.Routes(a))
}

// HTTPHandler is the net/http handler of HTTPRoutes.
func HTTPHandler(svc decision.Service) http.Handler {
	return httpport.Handler(HTTPRoutes(httpport.NewAPI(svc)))
}

// RegisterGRPC registers every protocol's gRPC service of svc on s:
// sluice.v1.DecisionService, Envoy's rate limit service and gubernator's
// V1.
func RegisterGRPC(s grpc.ServiceRegistrar, svc decision.Service) {
	checkapi.RegisterGRPC(s, svc)
	envoyrls.Register(s, svc)
	gubernator.Register(s, svc)
}

// GRPCServices are the names of RegisterGRPC's services that the health
// service answers for.
var GRPCServices = []string{rlsv3.RateLimitService_ServiceDesc.ServiceName, sluicev1.DecisionService_ServiceDesc.ServiceName}
