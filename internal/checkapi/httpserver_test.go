package checkapi

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/testkit/logtest"
)

// One port, every protocol of cmd/dataplane's: the check routes on
// fasthttp, Connect over HTTP/1.1 handed to net/http, gRPC over HTTP/2
// without TLS through net/http, and net/http's own answers for what no
// route takes — all deciding on the same counters.
func TestHTTPServerSharesItsPortAcrossProtocols(t *testing.T) {
	t.Parallel()
	cfg, key := testAPI(t) // 3 per minute per client
	mux := http.NewServeMux()
	mux.Handle("POST /v1/check", handler(cfg))
	mux.Handle(NewDecisionService(cfg))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	srv := serve(t, "fasthttp", cfg, mux)

	h2c := &http.Client{Transport: &http.Transport{Protocols: new(http.Protocols)}}
	h2c.Transport.(*http.Transport).Protocols.SetUnencryptedHTTP2(true)
	defer h2c.CloseIdleConnections()
	clients := map[string]sluicev1connect.DecisionServiceClient{
		"Connect over HTTP/1.1": sluicev1connect.NewDecisionServiceClient(srv.Client, srv.URL, connect.WithProtoJSON()),
		"gRPC over HTTP/2":      sluicev1connect.NewDecisionServiceClient(h2c, srv.URL, connect.WithGRPC()),
	}
	for name, client := range clients {
		req := connect.NewRequest(&sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "carol"}}})
		req.Header().Set("Authorization", "Bearer "+key)
		res, err := client.Check(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !res.Msg.Allowed || res.Msg.ConfigVersion != 3 {
			t.Fatalf("%s: %v", name, res.Msg)
		}
	}
	// The third of carol's three, then one over the limit: the counts above
	// were the same counters.
	for i, want := range []int{200, 429} {
		resp, _ := post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"carol"}}`)
		if resp.StatusCode != want {
			t.Fatalf("check %d over HTTP/1.1: %d, want %d", i+3, resp.StatusCode, want)
		}
	}

	for _, tt := range []struct {
		method, path string
		status       int
		body         string
	}{
		{http.MethodGet, "/healthz", 200, "ok"},
		{http.MethodGet, "/v1/check", http.StatusMethodNotAllowed, ""},
		{http.MethodPost, "/nowhere", http.StatusNotFound, ""},
	} {
		req, _ := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader("{}"))
		resp, err := srv.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || (tt.body != "" && string(b) != tt.body) {
			t.Errorf("%s %s: %d %q, want %d %q", tt.method, tt.path, resp.StatusCode, b, tt.status, tt.body)
		}
	}
}

// Requests fasthttp cannot take are refused with a problem, as the check
// API refuses bad bodies, and the connection is closed.
func TestHTTPServerRefusesUnreadableRequests(t *testing.T) {
	t.Parallel()
	cfg, key := testAPI(t)
	var logs logtest.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := serve(t, "fasthttp", cfg, handler(cfg))
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, tt := range []struct {
		name, request string
		status        int
	}{
		{"headers over the bound", "POST /v1/check HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 20<<10) + "\r\n\r\n", 431},
		{"body over the bound", "POST /v1/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + "\r\nContent-Length: 5000\r\n\r\n" + strings.Repeat("a", 5000), 413},
		{"not HTTP", "POST /v1/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + "\r\nContent-Length: nope\r\n\r\n", 400},
		{"garbage", "POST /v1/check HTTP/1.1\r\nAuthorization: Bearer " + key + "\r\n\x00\x01 nonsense\r\n\r\n", 400},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, tt.request); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		c.Close()
		if resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != "application/problem+json" || !json.Valid(b) || !resp.Close {
			t.Errorf("%s: %d %s close=%v %q, want %d problem+json and the connection closed", tt.name, resp.StatusCode,
				resp.Header.Get("Content-Type"), resp.Close, b, tt.status)
		}
	}
	if strings.Contains(logs.String(), key) {
		t.Errorf("the check key is in the logs:\n%s", logs.String())
	}
}

// A connection whose request is not a check moves to net/http whole: the
// request arrives as sent (its URI, headers, a chunked body after a
// 100-continue), later requests on the connection are net/http's too, and
// answers stream as net/http streams them.
func TestHTTPServerHandsOtherRequestsToNetHTTP(t *testing.T) {
	t.Parallel()
	cfg, key := testAPI(t)
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.Handle("POST /v1/check", handler(cfg))
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Uri", r.RequestURI)
		w.Header().Set("X-Note", r.Header.Get("X-Note"))
		_, _ = w.Write(b)
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-release
		_, _ = io.WriteString(w, "second\n")
	})
	srv := serve(t, "fasthttp", cfg, mux)
	addr := strings.TrimPrefix(srv.URL, "http://")

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	_, _ = io.WriteString(c, "POST /echo?a=1&b=%20 HTTP/1.1\r\nHost: x\r\nX-Note: kept\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n")
	interim, err := http.ReadResponse(br, nil)
	if err != nil || interim.StatusCode != http.StatusContinue {
		t.Fatalf("want 100 Continue, got %v %v", interim, err)
	}
	_, _ = io.WriteString(c, "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "hello world" || resp.Header.Get("X-Uri") != "/echo?a=1&b=%20" ||
		resp.Header.Get("X-Note") != "kept" {
		t.Fatalf("echo: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	// The same connection, now net/http's, still takes checks.
	_, _ = io.WriteString(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+key+"\r\nContent-Length: 36\r\n\r\n"+
		`{"descriptors":{"client_id":"dave"}}`)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"allowed":true`) || resp.Header.Get("RateLimit") == "" {
		t.Fatalf("check after the hand-off: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	// Streaming: the first part arrives while the handler still runs.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(sctx, http.MethodGet, srv.URL+"/stream", nil)
	resp, err = srv.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first part: %q %v", line, err)
	}
	close(release)
}
