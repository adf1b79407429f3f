package httpport

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/decision"
)

// echoRoutes is one route that decodes its body and answers 200, or 400
// with the error.
var echoRoutes = []Route{{Method: http.MethodPost, Path: "/echo", Serve: func(ex Exchange) {
	var v map[string]any
	if err := ex.Decode(&v, 1<<10); err != nil {
		ReplyProblem(ex, http.StatusBadRequest, "Malformed request", err.Error(), nil)
		return
	}
	ex.Reply(http.StatusOK, "application/json", v)
}}}

// A body sent slowly to a route served by net/http (a browser's check,
// or every check with fasthttp switched off) is cut off once the read
// timeout passes, as fasthttp cuts it off: the request is answered and
// its goroutine freed. Not parallel: it shortens the timeout.
func TestSlowBodiesAreCutOffOnNetHTTP(t *testing.T) {
	defer func(d time.Duration) { readTimeout = d }(readTimeout)
	readTimeout = 200 * time.Millisecond
	for name, tc := range map[string]struct {
		newServer func(*API, []Route, http.Handler) *Server
		origin    string // to have fasthttp hand a connection over
	}{"fasthttp beside": {NewServer, "Origin: http://console\r\n"}, "net/http alone": {NewStdServer, ""}} {
		t.Run(name, func(t *testing.T) {
			a := NewAPI(decision.Service{})
			mux := http.NewServeMux()
			Mount(mux, echoRoutes, Handler(echoRoutes))
			srv := tc.newServer(a, echoRoutes, mux)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = srv.std.Close(); _ = srv.fast.Shutdown() })
			// A connection's first request is read whole by fasthttp,
			// within its own timeout; a browser's (with an Origin), or any
			// with fasthttp answering nothing, is then handed to net/http
			// with its connection, which serves the next.
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second)) // far past the read timeout
			r := bufio.NewReader(c)
			ask := func(body string) *http.Response {
				t.Helper()
				req := "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n" + tc.origin + "\r\n" + body
				if _, err := c.Write([]byte(req)); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(r, nil)
				if err != nil {
					t.Fatalf("%q: no answer: %v", body, err)
				}
				return resp
			}
			if resp := ask(`{"a":"12"}`); resp.StatusCode != http.StatusOK {
				t.Fatalf("a whole body: %d", resp.StatusCode)
			} else {
				_, _ = io.Copy(io.Discard, resp.Body)
			}
			// Two bytes of ten, then nothing: answered 400 at the timeout.
			start := time.Now()
			resp := ask(`{"`)
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusBadRequest || time.Since(start) > 3*time.Second || !strings.Contains(string(body), "timeout") {
				t.Fatalf("a slow body: %d after %v: %s", resp.StatusCode, time.Since(start), body)
			}
		})
	}
}
