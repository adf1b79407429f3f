package httpport

import (
	"net/http"
	"strings"
)

// Route is one HTTP check route of a protocol. Each protocol's package
// returns its routes; the decider mounts them all on one server, and no
// protocol names another's paths.
type Route struct {
	Method string // http.MethodPost or http.MethodGet
	Path   string
	// Serve answers the route, on fasthttp or on net/http.
	Serve func(Exchange)
	// Envelope, when set, wraps the exchange of the server's own refusals
	// on Path (a body too large, a timeout) so that they are answered in
	// the protocol's error envelope.
	Envelope func(Exchange) Exchange
	// Browsers lets browsers call the route: its preflights (OPTIONS) are
	// routed to the handler, which CORS wraps.
	Browsers bool
}

// Handler returns the net/http handler of routes.
func Handler(routes []Route) http.Handler {
	mux := http.NewServeMux()
	for _, rt := range routes {
		mux.HandleFunc(rt.Method+" "+rt.Path, func(w http.ResponseWriter, r *http.Request) { rt.Serve(Std(w, r)) })
	}
	return mux
}

// Mount routes the paths of routes on mux to h (Handler's, wrapped in
// CORS or not), browsers' preflights of them included.
func Mount(mux *http.ServeMux, routes []Route, h http.Handler) {
	allow := map[string][]string{}
	var paths []string
	for _, rt := range routes {
		mux.Handle(rt.Method+" "+rt.Path, h)
		if allow[rt.Path] == nil {
			paths = append(paths, rt.Path)
		}
		allow[rt.Path] = append(allow[rt.Path], rt.Method)
		if rt.Browsers {
			mux.Handle("OPTIONS "+rt.Path, h)
			allow[rt.Path] = append(allow[rt.Path], http.MethodOptions)
		}
	}
	// Another method on these paths is 405 with Allow, even where mux has a
	// catch-all (sluice dev's control plane) that would answer 404.
	for _, path := range paths {
		allow := strings.Join(allow[path], ", ")
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			ReplyProblem(Std(w, r), http.StatusMethodNotAllowed, "Method Not Allowed", r.Method+" "+path+": use "+allow, nil)
		})
	}
}
