package dataplane

import (
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/internal/checkapi"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/httpport"
	"github.com/sluicehq/sluice/internal/httpport/httpporttest"
	"net/http/httptest"
)

// served is the decider's HTTP port served for a test (httpporttest).
type served = httpporttest.Served

// serve serves every protocol's HTTP routes of cfg the given way until
// the test ends, with next the handler of net/http.
func serve(t testing.TB, kind string, cfg decision.Service, next http.Handler) served {
	return httpporttest.Serve(t.(*testing.T), kind, cfg, HTTPRoutes, next)
}

// handler is the net/http handler of every protocol's HTTP routes of cfg.
func handler(cfg decision.Service) http.Handler { return HTTPHandler(cfg) }

// newServer is the decider's HTTP server of cfg's routes and next.
func newServer(cfg decision.Service, next http.Handler) *httpport.Server {
	a := httpport.NewAPI(cfg)
	return httpport.NewServer(a, HTTPRoutes(a), next)
}

var post = httpporttest.Post

// eachServer runs f against every protocol's HTTP routes of mk's config
// on each kind of server, with its check key.
func eachServer(t *testing.T, mk func(testing.TB) (decision.Service, string), f func(t *testing.T, srv served, key string)) {
	httpporttest.Each(t, mk, HTTPRoutes, f)
}

// serveConnect serves cfg's DecisionService over Connect until the test
// ends and returns a client of it.
func serveConnect(t *testing.T, cfg decision.Service) sluicev1connect.DecisionServiceClient {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(checkapi.NewDecisionService(cfg))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return sluicev1connect.NewDecisionServiceClient(srv.Client(), srv.URL)
}
