package proxy

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/pires/go-proxyproto"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/decision/decisiontest"
	"github.com/sluicehq/sluice/internal/httpport"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/logtest"
	"github.com/sluicehq/sluice/internal/testkit/tlstest"
)

// upstream is a real server: /echo streams the request body back chunk by
// chunk, /ws accepts a websocket-style upgrade and echoes bytes, anything
// else answers who asked.
func upstream(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/echo":
			_ = http.NewResponseController(w).EnableFullDuplex()
			w.WriteHeader(200)
			buf := make([]byte, 64)
			for {
				n, err := r.Body.Read(buf)
				if n > 0 {
					_, _ = w.Write(buf[:n])
					w.(http.Flusher).Flush()
				}
				if err != nil {
					return
				}
			}
		case "/ws":
			if r.Header.Get("Upgrade") != "websocket" {
				http.Error(w, "upgrade required", http.StatusUpgradeRequired)
				return
			}
			conn, rw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			_ = rw.Flush()
			_, _ = io.Copy(conn, rw) // echo until the client closes
		default:
			fmt.Fprintf(w, "hello %s via %s", r.Header.Get("X-Client-Id"), r.Header.Get("X-Forwarded-For"))
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// statusOf sends GET url with c (http.DefaultClient when nil), its
// request first given to mod when not nil, and returns the answer's status.
func statusOf(t *testing.T, c *http.Client, url string, mod func(*http.Request)) int {
	t.Helper()
	if c == nil {
		c = http.DefaultClient
	}
	req, _ := http.NewRequest("GET", url, nil)
	if mod != nil {
		mod(req)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// bodyOf GETs url, changed by mod, and returns the answer's body.
func bodyOf(t *testing.T, url string, mod func(*http.Request)) string {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	mod(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// countedApart checks that one client gets the three requests testAPI's
// rule allows it and is then refused, while another still gets through.
func countedApart(t *testing.T, one, another func() int) {
	t.Helper()
	var got []int
	for range 4 {
		got = append(got, one())
	}
	if want := []int{200, 200, 200, 429}; !slices.Equal(got, want) {
		t.Fatalf("one client: %v, want %v", got, want)
	}
	if another() != 200 {
		t.Fatal("another client shares its budget")
	}
}

func proxyFor(t *testing.T, cfg decision.Service, key string, up *httptest.Server, mod func(*Config)) *httptest.Server {
	t.Helper()
	var u *url.URL
	if up != nil { // nil: no upstream (forward-auth)
		u, _ = url.Parse(up.URL)
	}
	pc := Config{API: cfg, Upstream: u, IdentityHeader: "X-Client-Id", Tenant: func() (*decide.Compiled, error) {
		return cfg.Authenticate("Bearer " + key)
	}}
	if mod != nil {
		mod(&pc)
	}
	srv := httptest.NewServer(New(pc))
	t.Cleanup(srv.Close)
	return srv
}

func TestProxyForwardsUntilRejected(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.Default(t)
	up, hits := upstream(t)
	px := proxyFor(t, cfg, key, up, nil)
	get := func(client string) *http.Response {
		req, _ := http.NewRequest("GET", px.URL+"/things", nil)
		req.Header.Set("X-Client-Id", client)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i := range 3 {
		resp := get("alice")
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "hello alice via 127.0.0.1") || resp.Header.Get("X-RateLimit-Remaining") != fmt.Sprint(2-i) {
			t.Fatalf("request %d: %d %q %v", i, resp.StatusCode, body, resp.Header)
		}
	}
	resp := get("alice")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), `"violated_policies":["per-client"]`) || hits.Load() != 3 {
		t.Fatalf("fourth: %d %s %v, upstream hit %d times", resp.StatusCode, body, resp.Header, hits.Load())
	}
	if resp := get("bob"); resp.StatusCode != 200 {
		t.Fatalf("bob: %d", resp.StatusCode)
	}
}

// TestProxyReusesUpstreamConnections: concurrent requests through the
// proxy share kept-alive connections to the upstream: a connection is
// dialled only when none is idle, so at most one per request in flight
// and one more per dial a freed connection overtook (net/http's default
// transport keeps two idle and opened 101 connections for these 192
// requests).
func TestProxyReusesUpstreamConnections(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.Default(t)
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	px := proxyFor(t, cfg, key, up, nil)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	const clients, each = 16, 12
	errs := make(chan error, clients)
	for g := range clients {
		go func() {
			for i := range each {
				req, _ := http.NewRequest("GET", px.URL+"/", nil)
				req.Header.Set("X-Client-Id", fmt.Sprintf("c%d-%d", g, i)) // a fresh id: always admitted
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					errs <- fmt.Errorf("status %d", resp.StatusCode)
					return
				}
			}
			errs <- nil
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n > 2*clients {
		t.Errorf("%d requests, %d at a time, opened %d upstream connections", clients*each, clients, n)
	}
}

func TestProxyStreamsBodies(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.Default(t)
	up, _ := upstream(t)
	px := proxyFor(t, cfg, key, up, nil)
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", px.URL+"/echo", pr)
	req.Header.Set("X-Client-Id", "streamer")
	respc := make(chan *http.Response, 1)
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			errc <- err
			return
		}
		respc <- resp
	}()
	// The first chunk comes back while the request body is still open: both
	// directions stream through the proxy.
	if _, err := pw.Write([]byte("first ")); err != nil {
		t.Fatal(err)
	}
	var resp *http.Response
	select {
	case resp = <-respc:
	case err := <-errc:
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first " {
		t.Fatalf("first chunk %q, %v", buf, err)
	}
	_, _ = pw.Write([]byte("second"))
	pw.Close()
	rest, _ := io.ReadAll(resp.Body)
	if string(rest) != "second" {
		t.Fatalf("rest %q", rest)
	}
}

func TestProxyPassesWebsocketUpgrades(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.Default(t)
	up, _ := upstream(t)
	px := proxyFor(t, cfg, key, up, nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(px.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nX-Client-Id: ws\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("X-RateLimit-Limit") == "" {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	for _, msg := range []string{"ping", "pong!"} {
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Fatalf("echo %q, %v", got, err)
		}
	}
}

func TestProxyDelaysLeakyBucketRequests(t *testing.T) {
	t.Parallel()
	// One request per 200ms drains; up to 1s of queue.
	cfg, key := decisiontest.With(t, []policy.Rule{{ID: "q", Name: "queue", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.LeakyBucket, Limit: 1, Window: 200 * time.Millisecond, MaxDelay: time.Second}}})
	up, hits := upstream(t)
	px := proxyFor(t, cfg, key, up, nil)
	get := func() (int, time.Duration) {
		req, _ := http.NewRequest("GET", px.URL+"/", nil)
		req.Header.Set("X-Client-Id", "q")
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	if code, _ := get(); code != 200 {
		t.Fatalf("first: %d", code)
	}
	// The decider's clock stands still: the second waits one drain
	// interval instead of being rejected.
	code, took := get()
	if code != 200 || took < 200*time.Millisecond || hits.Load() != 2 {
		t.Fatalf("second: %d after %v (upstream hits %d), want 200 after ≥ 200ms", code, took, hits.Load())
	}
}

func TestProxyIdentityFromCookieAndIP(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.Default(t)
	up, _ := upstream(t)
	px := proxyFor(t, cfg, key, up, func(pc *Config) { pc.IdentityHeader, pc.IdentityCookie = "", "session" })
	status := func(cookie string) int {
		return statusOf(t, nil, px.URL+"/", func(req *http.Request) {
			if cookie != "" {
				req.AddCookie(&http.Cookie{Name: "session", Value: cookie})
			}
		})
	}
	for range 3 {
		status("s1")
	}
	if status("s1") != 429 || status("s2") != 200 || status("") != 200 {
		t.Fatal("cookie identities are not counted apart")
	}
}

// Behind a load balancer speaking the PROXY protocol, the client is the
// address the header names (v1 and v2): clients through one balancer are
// counted apart, and the upstream sees each in X-Forwarded-For; the
// balancer's connection without a header is refused. A peer that is no
// balancer is served as it comes, and cannot pose as another client with
// a header of its own.
func TestProxyIdentityFromProxyProtocol(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.Default(t)
	up, _ := upstream(t)
	serve := func(balancers string) string {
		prefixes, err := clientip.ParsePrefixes(balancers)
		if err != nil {
			t.Fatal(err)
		}
		px := proxyFor(t, cfg, key, up, func(pc *Config) { pc.IdentityHeader = "" })
		srv := httptest.NewUnstartedServer(px.Config.Handler)
		srv.Listener = clientip.ProxyProtocol(srv.Listener, prefixes)
		srv.Start()
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().String()
	}
	// get sends GET / on a new connection opened with header, and returns
	// the answer's status and body (0 when the connection was closed).
	get := func(addr string, header []byte) (int, string) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(append(header, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"...)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	v1 := func(client string) []byte { return []byte("PROXY TCP4 " + client + " 192.0.2.1 40000 80\r\n") }
	v2 := func(client string) []byte {
		h := proxyproto.HeaderProxyFromAddrs(2, &net.TCPAddr{IP: net.ParseIP(client), Port: 40000}, &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 80})
		b, err := h.Format()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	behind := serve("127.0.0.1")
	for i := range 3 {
		header := v1("203.0.113.7")
		if i%2 == 1 {
			header = v2("203.0.113.7")
		}
		if code, body := get(behind, header); code != 200 || !strings.HasSuffix(body, "via 203.0.113.7") {
			t.Fatalf("request %d of 203.0.113.7: %d %q", i, code, body)
		}
	}
	if code, _ := get(behind, v2("203.0.113.7")); code != 429 {
		t.Fatalf("fourth request of 203.0.113.7: %d, want 429", code)
	}
	if code, body := get(behind, v1("203.0.113.8")); code != 200 || !strings.HasSuffix(body, "via 203.0.113.8") {
		t.Fatalf("another client through the balancer: %d %q", code, body)
	}
	if code, _ := get(behind, nil); code != 0 {
		t.Fatalf("the balancer's connection without a header: %d, want it closed", code)
	}

	direct := serve("192.0.2.0/24")
	if code, body := get(direct, nil); code != 200 || !strings.HasSuffix(body, "via 127.0.0.1") {
		t.Fatalf("a peer that is no balancer: %d %q", code, body)
	}
	if code, _ := get(direct, v1("203.0.113.9")); code != 400 {
		t.Fatalf("a PROXY header from a peer that is no balancer: %d, want 400", code)
	}
}

// A client that claims a new identity with each request gets past a rule
// keyed by client_id, not past one keyed by ip: the proxy checks every
// request with its address too. Addresses are counted apart (here behind a
// trusted proxy, by X-Forwarded-For).
func TestProxyIPRuleBoundsClaimedIdentities(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.With(t, []policy.Rule{
		{ID: "r1", Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 1, Window: time.Minute}},
		{ID: "r2", Name: "per-address", KeyBy: []string{IPDescriptor}, Enabled: true,
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 4, Window: time.Minute}},
	})
	up, hits := upstream(t)
	px := proxyFor(t, cfg, key, up, func(pc *Config) { pc.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")} })
	status := func(client, addr string) int {
		return statusOf(t, nil, px.URL+"/", func(req *http.Request) {
			req.Header.Set("X-Client-Id", client)
			req.Header.Set("X-Forwarded-For", addr)
		})
	}
	var got []int
	for i := range 6 {
		got = append(got, status(fmt.Sprint("claimed-", i), "198.51.100.1"))
	}
	if want := []int{200, 200, 200, 200, 429, 429}; !slices.Equal(got, want) {
		t.Fatalf("one address claiming six identities: %v, want %v", got, want)
	}
	if status("claimed-0", "198.51.100.2") != 429 || status("another", "198.51.100.2") != 200 {
		t.Fatal("another address: its own budget, each identity still limited by its own rule")
	}
	if n := hits.Load(); n != 5 {
		t.Fatalf("the upstream got %d requests, want the 5 admitted", n)
	}
}

// An IPv6 client is its /64 network: the addresses a host picks within it
// share one budget, as its ip and as its identity when nothing else names
// it; another network has its own. With -ipv6-prefix 128 each address is a
// client.
func TestProxyCountsAnIPv6NetworkAsOneClient(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		prefix int
		want   []int
	}{
		{0, []int{200, 200, 429, 429}},   // the default, a /64
		{128, []int{200, 200, 200, 200}}, // each address its own
		{48, []int{200, 200, 429, 429}},  // wider still
	} {
		for _, keyBy := range []string{policy.DefaultIdentifierKey, IPDescriptor} {
			cfg, key := decisiontest.With(t, []policy.Rule{{ID: "r", Name: "per-" + keyBy, KeyBy: []string{keyBy}, Enabled: true,
				Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 2, Window: time.Minute}}})
			up, _ := upstream(t)
			px := proxyFor(t, cfg, key, up, func(pc *Config) {
				pc.IdentityHeader, pc.IPv6Prefix = "", c.prefix
				pc.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
			})
			status := func(addr string) int {
				return statusOf(t, nil, px.URL+"/", func(req *http.Request) { req.Header.Set("X-Forwarded-For", addr) })
			}
			var got []int
			for i := range 4 {
				got = append(got, status(fmt.Sprintf("2001:db8:1:2:%x::%x", i, i+1)))
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("prefix %d, keyed by %s: addresses of one /64: %v, want %v", c.prefix, keyBy, got, c.want)
			}
			if code := status("2001:db8:2:2::1"); code != 200 {
				t.Errorf("prefix %d, keyed by %s: another network: %d, want 200", c.prefix, keyBy, code)
			}
		}
	}
}

// With a JWT identity, the client is the claim of the bearer token, once
// it verifies against the provider's JWKS (served here): each user has its own budget whatever address it
// comes from; a token signed by another key, expired, or for another
// audience names nobody, and the request falls back to the identity
// header, here absent, and so to its address.
func TestProxyIdentityFromAVerifiedJWT(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.Default(t) // three requests per client
	reg := prometheus.NewRegistry()
	cfg.Metrics = decision.NewMetrics(reg, cfg.Decider)
	up, _ := upstream(t)
	pub, priv, _ := ed25519.GenerateKey(nil)
	_, forger, _ := ed25519.GenerateKey(nil)
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","alg":"EdDSA","use":"sig","x":%q}]}`,
			base64.RawURLEncoding.EncodeToString(pub))
	}))
	t.Cleanup(jwks.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	id, err := NewJWKSIdentity(ctx, "sub", jwks.URL, "https://idp.example", "shop")
	if err != nil {
		t.Fatal(err)
	}
	px := proxyFor(t, cfg, key, up, func(pc *Config) { pc.JWT = id })
	token := func(signer ed25519.PrivateKey, sub string, exp time.Time, aud string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"sub": sub, "iss": "https://idp.example", "aud": aud, "exp": exp.Unix()})
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(signer)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	status := func(tok string) int {
		return statusOf(t, nil, px.URL+"/", func(req *http.Request) {
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
		})
	}
	later := time.Now().Add(time.Hour)
	alice, bob := token(priv, "alice", later, "shop"), token(priv, "bob", later, "shop")
	countedApart(t, func() int { return status(alice) }, func() int { return status(bob) })
	// Tokens that do not verify name nobody: the address's budget, one
	// for all of them.
	var got []int
	for _, tok := range []string{token(forger, "bob", later, "shop"), token(priv, "bob", time.Now().Add(-time.Hour), "shop"),
		token(priv, "bob", later, "other-app"), "not.a.token"} {
		got = append(got, status(tok))
	}
	if want := []int{200, 200, 200, 429}; !slices.Equal(got, want) {
		t.Fatalf("forged, expired, wrong-audience and malformed tokens: %v, want %v (counted as one address)", got, want)
	}
	if status(bob) != 200 {
		t.Fatal("bob's real token after the forged ones: they were counted as bob")
	}
	// What named the clients, for the operator: a provider whose keys
	// cannot be read shows as requests named by their address.
	for source, want := range map[string]float64{"jwt": 6, "ip": 4, "header": 0} {
		if got := decisiontest.Counted(reg, "sluice_proxy_identities_total", "source", source); got != want {
			t.Errorf("sluice_proxy_identities_total{source=%q} = %v, want %v", source, got, want)
		}
	}
}

// With mutual TLS, the client is the certificate it presented: services
// (SPIFFE IDs here) each get their own budget through one address.
func TestProxyIdentityFromClientCertificate(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.Default(t) // three requests per client
	up, _ := upstream(t)
	ca := tlstest.NewCA(t)
	px := proxyFor(t, cfg, key, up, func(pc *Config) { pc.ClientCertIdentity = true })
	srv := httptest.NewUnstartedServer(px.Config.Handler)
	srv.TLS = &tls.Config{ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	clientOf := func(name string) *http.Client {
		tr := srv.Client().Transport.(*http.Transport).Clone()
		tr.TLSClientConfig.Certificates = []tls.Certificate{ca.ClientNamed(t, name)}
		return &http.Client{Transport: tr}
	}
	status := func(c *http.Client) int { return statusOf(t, c, srv.URL+"/", nil) }
	frontend, billing := clientOf("spiffe://cluster.local/ns/shop/sa/frontend"), clientOf("spiffe://cluster.local/ns/shop/sa/billing")
	countedApart(t, func() int { return status(frontend) }, func() int { return status(billing) })
	if got := CertName(ca.ClientNamed(t, "plain-name").Leaf); got != "plain-name" {
		t.Fatalf("a certificate without SANs is named %q, want its common name", got)
	}
}

// routeLimit is a check API whose one rule allows each client 3 requests
// a minute to the routes route matches.
func routeLimit(t *testing.T, route string) (decision.Service, string) {
	t.Helper()
	return decisiontest.With(t, []policy.Rule{{ID: "r1", Name: "route", KeyBy: []string{"client_id"}, Enabled: true,
		Match:  []policy.Match{{Key: RouteDescriptor, Value: route}},
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Minute}}})
}

// A request whose path or identity no descriptor could hold (over 256
// bytes, or with a NUL) is decided on a fitted value, not refused: long
// paths of one client count together, and a prefix rule still meets them.
func TestProxyFitsLongAndNULValues(t *testing.T) {
	t.Parallel()
	cfg, key := routeLimit(t, "/files/*")
	up, hits := upstream(t)
	px := proxyFor(t, cfg, key, up, nil)
	long := "/files/" + strings.Repeat("é", 400)
	as := func(client, path string) func() int {
		return func() int {
			return statusOf(t, nil, px.URL+path, func(r *http.Request) { r.Header.Set("X-Client-Id", client) })
		}
	}
	countedApart(t, as("alice", long), as("bob", long))
	countedApart(t, as("carol"+strings.Repeat("x", 300), "/files/%00a"), as("carol"+strings.Repeat("y", 300), "/files/%00a"))
	if hits.Load() != 3+1+3+1 {
		t.Fatalf("upstream reached %d times, want 8", hits.Load())
	}
}

// An allowed request the upstream does not answer gets a problem+json
// body, not net/http's empty 502: 502 when the upstream refuses the
// connection, 504 when it takes longer than UpstreamTimeout to answer;
// a client gone first is counted as canceled. The rate limit headers
// still come, and no answer names the upstream's address.
func TestProxyAnswersUpstreamFailures(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.Default(t)
	reg := prometheus.NewRegistry()
	cfg.Metrics = decision.NewMetrics(reg, cfg.Decider)
	var logs logtest.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	refused := httptest.NewServer(http.NotFoundHandler())
	refused.Close() // its address now refuses connections
	arrived, release := make(chan struct{}, 4), make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	down := proxyFor(t, cfg, key, refused, nil)
	hung := proxyFor(t, cfg, key, slow, func(pc *Config) { pc.UpstreamTimeout = 50 * time.Millisecond })
	patient := proxyFor(t, cfg, key, slow, func(pc *Config) { pc.UpstreamTimeout = -1 })

	for _, c := range []struct {
		url    string
		status int
		host   string
	}{{down.URL, http.StatusBadGateway, refused.Listener.Addr().String()}, {hung.URL, http.StatusGatewayTimeout, slow.Listener.Addr().String()}} {
		req, _ := http.NewRequest("GET", c.url+"/things", nil)
		req.Header.Set("X-Client-Id", "alice-"+c.url)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p httpport.Problem
		if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(body, &p) != nil || p.Status != c.status || p.Detail == "" {
			t.Fatalf("%s: %d %q %s, want %d with a problem+json body", c.url, resp.StatusCode, resp.Header.Get("Content-Type"), body, c.status)
		}
		if strings.Contains(string(body), c.host) {
			t.Errorf("the answer names the upstream's address: %s", body)
		}
		if resp.Header.Get("X-RateLimit-Remaining") != "2" {
			t.Errorf("rate limit headers: %v", resp.Header)
		}
	}
	// An upstream down under load fails every request: each is counted,
	// not each logged.
	for i := range 20 {
		if code := statusOf(t, nil, down.URL+"/things", func(r *http.Request) { r.Header.Set("X-Client-Id", fmt.Sprint("carol-", i)) }); code != http.StatusBadGateway {
			t.Fatalf("a request to the refusing upstream: %d", code)
		}
	}
	if n := strings.Count(logs.String(), "proxy: the upstream failed"); n < 1 || n > 5 {
		t.Errorf("21 failed requests logged %d times, want once a second", n)
	}
	// Without a bound the proxy waits: the client gives up first.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", patient.URL+"/things", nil)
	req.Header.Set("X-Client-Id", "bob")
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-arrived // the timed-out request's
	<-arrived // bob's, held by the upstream
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a request the upstream never answered, without a bound, was answered")
	}
	deadline := time.Now().Add(5 * time.Second)
	for decisiontest.Counted(reg, "sluice_proxy_upstream_errors_total", "reason", "canceled") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the canceled request was not counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for reason, want := range map[string]float64{"unreachable": 21, "timeout": 1, "canceled": 1} {
		if got := decisiontest.Counted(reg, "sluice_proxy_upstream_errors_total", "reason", reason); got != want {
			t.Errorf("sluice_proxy_upstream_errors_total{reason=%q} = %v, want %v", reason, got, want)
		}
	}
}

// Behind a trusted load balancer the upstream sees what the proxy does:
// the client's address at the head of X-Forwarded-For (the balancer's
// appended) and the scheme and host the client asked for. From an
// untrusted peer the same headers are replaced, its Forwarded and
// X-Real-Ip dropped: nobody poses as another client, or as having come
// over TLS.
func TestProxyPassesOnTrustedForwardedHeaders(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.Default(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s|%s|%s|%s|%s", r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-Host"),
			r.Header.Get("Forwarded"), r.Header.Get("X-Real-Ip"))
	}))
	t.Cleanup(up.Close)
	seen := func(px *httptest.Server) string {
		return bodyOf(t, px.URL+"/", func(req *http.Request) {
			req.Header.Set("X-Client-Id", "alice-"+px.URL)
			req.Header.Set("X-Forwarded-For", "198.51.100.7")
			req.Header.Set("X-Forwarded-Proto", "https")
			req.Header.Set("X-Forwarded-Host", "shop.example")
			req.Header.Set("Forwarded", "for=198.51.100.7;proto=https")
			req.Header.Set("X-Real-Ip", "198.51.100.7")
		})
	}
	behind := proxyFor(t, cfg, key, up, func(pc *Config) { pc.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })
	if got, want := seen(behind), "198.51.100.7, 127.0.0.1|https|shop.example|for=198.51.100.7;proto=https|198.51.100.7"; got != want {
		t.Errorf("through a trusted balancer the upstream saw %q, want %q", got, want)
	}
	exposed := proxyFor(t, cfg, key, up, nil)
	if got, want := seen(exposed), "127.0.0.1|http|"+strings.TrimPrefix(exposed.URL, "http://")+"||"; got != want {
		t.Errorf("from an untrusted peer the upstream saw %q, want %q", got, want)
	}
}

// A header named in HeaderDescriptors is a descriptor of its own: a rule
// keyed by it counts each organization apart, whatever client sends, and
// a request without the header is not counted by it.
func TestProxyHeaderDescriptors(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.With(t, []policy.Rule{{ID: "r1", Name: "per-org", KeyBy: []string{"org"}, Enabled: true,
		Match:  []policy.Match{{Key: "org", Value: policy.AnyValue}},
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Minute}}})
	up, _ := upstream(t)
	hds, err := ParseHeaderDescriptors("org = x-org-id, plan=X-Plan")
	if err != nil {
		t.Fatal(err)
	}
	px := proxyFor(t, cfg, key, up, func(pc *Config) { pc.HeaderDescriptors = hds })
	as := func(org string) func() int {
		n := 0
		return func() int {
			n++
			return statusOf(t, nil, px.URL+"/", func(r *http.Request) {
				r.Header.Set("X-Client-Id", fmt.Sprint(org, "-user-", n)) // a new user each time: the org is what counts
				if org != "" {
					r.Header.Set("X-Org-Id", org)
				}
			})
		}
	}
	countedApart(t, as("acme"), as("globex"))
	none := as("")
	for range 5 {
		if got := none(); got != 200 {
			t.Fatalf("a request without the header: %d, want 200 (no org to count)", got)
		}
	}

	// Host is the host the client asked for, which net/http keeps out of
	// the request's headers: a rule per site behind one proxy.
	cfg, key = decisiontest.With(t, []policy.Rule{{ID: "r1", Name: "per-site", KeyBy: []string{"site"}, Enabled: true,
		Match:  []policy.Match{{Key: "site", Value: policy.AnyValue}},
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Minute}}})
	hds, err = ParseHeaderDescriptors("site=host")
	if err != nil {
		t.Fatal(err)
	}
	px = proxyFor(t, cfg, key, up, func(pc *Config) { pc.HeaderDescriptors = hds })
	site := func(host string) func() int {
		return func() int { return statusOf(t, nil, px.URL+"/", func(r *http.Request) { r.Host = host }) }
	}
	countedApart(t, site("shop.example"), site("blog.example"))
}

// Every request carries the host it asked for as host, in lower case
// without its port (in forward auth, the gateway's X-Forwarded-Host): a
// rule for one site of several leaves the others alone.
func TestProxyHostDescriptor(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.With(t, []policy.Rule{{ID: "r1", Name: "shop", KeyBy: []string{"client_id"}, Enabled: true,
		Match:  []policy.Match{{Key: HostDescriptor, Value: "shop.example"}, {Key: HostDescriptor, Value: "::1"}},
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Minute}}})
	up, _ := upstream(t)
	for _, fa := range []bool{false, true} {
		px := proxyFor(t, cfg, key, up, func(pc *Config) {
			if pc.ForwardAuth = fa; fa {
				pc.Upstream = nil
			}
		})
		at := func(client, host string) int {
			return statusOf(t, nil, px.URL+"/", func(r *http.Request) {
				r.Header.Set("X-Client-Id", client)
				if fa {
					r.Header.Set("X-Forwarded-Host", host) // the gateway's; its call's own Host is the decider's
				} else {
					r.Host = host
				}
			})
		}
		client := fmt.Sprint("alice-", fa)
		var got []int
		for _, h := range []string{"shop.example", "blog.example", "Shop.Example:8443", "blog.example", "shop.example.", "shop.example", "blog.example"} {
			got = append(got, at(client, h))
		}
		if want := []int{200, 200, 200, 200, 200, 429, 200}; !slices.Equal(got, want) {
			t.Errorf("forward auth %v: %v, want %v (the shop's fourth rejected, the blog never)", fa, got, want)
		}
		got = got[:0]
		for _, h := range []string{"[::1]:8080", "[::1]", "[::1]:8080", "[::1]"} {
			got = append(got, at(client+"-v6", h))
		}
		if want := []int{200, 200, 200, 429}; !slices.Equal(got, want) {
			t.Errorf("forward auth %v, an IPv6 host: %v, want %v", fa, got, want)
		}
	}
}

func TestParseHeaderDescriptors(t *testing.T) {
	t.Parallel()
	got, err := ParseHeaderDescriptors(" org=X-Org-Id ,api_key=x-api-key,")
	if want := []HeaderDescriptor{{"org", "X-Org-Id"}, {"api_key", "X-Api-Key"}}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %v, %v; want %v", got, err, want)
	}
	if got, err := ParseHeaderDescriptors(""); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v, %v", got, err)
	}
	for _, bad := range []string{"org", "org=", "=X-Org", "o rg=X-Org", "org=X Org", "ip=X-Ip", "client_id=X-Client", "host=X-Host",
		"org=X-A,org=X-B", strings.Repeat("k", 65) + "=X-K", manyHeaderDescriptors(MaxHeaderDescriptors + 1)} {
		if _, err := ParseHeaderDescriptors(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
	if _, err := ParseHeaderDescriptors(manyHeaderDescriptors(MaxHeaderDescriptors)); err != nil {
		t.Errorf("%d header descriptors: %v", MaxHeaderDescriptors, err)
	}
}

func manyHeaderDescriptors(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, fmt.Sprintf("d%d=X-D%d", i, i))
	}
	return strings.Join(parts, ",")
}

// The upstream is sent its own host unless PreserveHost, when it gets
// the one the client asked for (an upstream serving several names).
func TestProxyPreservesHostWhenAsked(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.Default(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.Host) }))
	t.Cleanup(up.Close)
	hostSeen := func(px *httptest.Server) string {
		return bodyOf(t, px.URL+"/", func(req *http.Request) {
			req.Host = "shop.example"
			req.Header.Set("X-Client-Id", "alice")
		})
	}
	if got, want := hostSeen(proxyFor(t, cfg, key, up, nil)), strings.TrimPrefix(up.URL, "http://"); got != want {
		t.Errorf("by default the upstream saw Host %q, want its own %q", got, want)
	}
	if got := hostSeen(proxyFor(t, cfg, key, up, func(pc *Config) { pc.PreserveHost = true })); got != "shop.example" {
		t.Errorf("with PreserveHost the upstream saw Host %q, want the client's", got)
	}
}

// In forward-auth mode the proxy answers the gateway's call instead of
// forwarding: 200 with the headers, or 429 with them and a problem body,
// for the request the gateway names in X-Forwarded-Uri and
// X-Forwarded-Method (Traefik, Caddy; nginx's X-Original-*), the client
// by the usual identity and its address by X-Forwarded-For from the
// trusted gateway.
func TestProxyForwardAuth(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.Default(t)
	px := proxyFor(t, cfg, key, nil, func(pc *Config) {
		pc.ForwardAuth = true
		pc.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	ask := func(client, uri string, original bool) *http.Response {
		req, _ := http.NewRequest("GET", px.URL+"/auth", nil)
		req.Header.Set("X-Client-Id", client)
		req.Header.Set("X-Forwarded-For", "198.51.100.9")
		if original {
			req.Header.Set("X-Original-Uri", uri)
			req.Header.Set("X-Original-Method", "POST")
		} else {
			req.Header.Set("X-Forwarded-Uri", uri)
			req.Header.Set("X-Forwarded-Method", "POST")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	// The login rule allows 2 a minute: the path comes from the header,
	// its query left out, not from the call's own /auth.
	var got []int
	for _, original := range []bool{false, true, false} {
		got = append(got, ask("alice", "/login?next=%2Fhome", original).StatusCode)
	}
	if want := []int{200, 200, 429}; !slices.Equal(got, want) {
		t.Fatalf("three logins: %v, want %v", got, want)
	}
	rejected := ask("alice", "/login", false)
	body, _ := io.ReadAll(rejected.Body)
	if rejected.Header.Get("Retry-After") == "" || rejected.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(body), "login") {
		t.Fatalf("a rejection: %v %s", rejected.Header, body)
	}
	if ok := ask("bob", "/login", false); ok.StatusCode != 200 || ok.Header.Get("X-RateLimit-Remaining") != "1" {
		t.Fatalf("another client: %d %v", ok.StatusCode, ok.Header)
	}
	// Behind nginx, whose auth_request passes only 401 and 403 on, a
	// rejection is 403, with its headers.
	px = proxyFor(t, cfg, key, nil, func(pc *Config) { pc.ForwardAuth, pc.DenyStatus = true, http.StatusForbidden })
	if denied := ask("alice", "/login", true); denied.StatusCode != http.StatusForbidden || denied.Header.Get("Retry-After") == "" {
		t.Fatalf("a rejection for nginx: %d %v", denied.StatusCode, denied.Header)
	}
}

// A path that names the same route in another spelling — repeated
// slashes, dot segments, escaped letters — meets that route's rules: a
// client cannot step around a login limit by asking for "//login".
func TestProxyNormalisesTheRoute(t *testing.T) {
	t.Parallel()
	cfg, key := routeLimit(t, "/login")
	up, _ := upstream(t)
	for _, fa := range []bool{false, true} {
		px := proxyFor(t, cfg, key, up, func(pc *Config) {
			if pc.ForwardAuth = fa; fa {
				pc.Upstream = nil
			}
		})
		client := fmt.Sprint("alice-", fa)
		var got []int
		for _, p := range []string{"/login", "//login", "/./login", "/static/../login", "/%6Cogin", "/api/..//login"} {
			got = append(got, statusOf(t, nil, px.URL+p, func(r *http.Request) {
				r.Header.Set("X-Client-Id", client)
				if fa { // the gateway's request names the path in a header
					r.URL.Path, r.URL.RawPath = "/auth", ""
					r.Header.Set("X-Forwarded-Uri", p)
				}
			}))
		}
		if want := []int{200, 200, 200, 429, 429, 429}; !slices.Equal(got, want) {
			t.Fatalf("forward auth %v: %v, want %v", fa, got, want)
		}
		if s := statusOf(t, nil, px.URL+"/login/x", func(r *http.Request) { r.Header.Set("X-Client-Id", client) }); s != 200 {
			t.Fatalf("another route: %d", s)
		}
	}
}

// With FoldRoutes, case and a trailing slash are no other route either:
// "/Login/" meets the rules of "/login", as an upstream that ignores both
// serves it. Without, it is a route of its own.
func TestProxyFoldsTheRoute(t *testing.T) {
	t.Parallel()
	cfg, key := routeLimit(t, "/login")
	up, _ := upstream(t)
	for _, fold := range []bool{true, false} {
		px := proxyFor(t, cfg, key, up, func(pc *Config) { pc.FoldRoutes = fold })
		client := fmt.Sprint("bob-", fold)
		var got []int
		for _, p := range []string{"/login", "/Login/", "/LOGIN", "/login/"} {
			got = append(got, statusOf(t, nil, px.URL+p, func(r *http.Request) { r.Header.Set("X-Client-Id", client) }))
		}
		want := []int{200, 200, 200, 429}
		if !fold {
			want = []int{200, 200, 200, 200} // one of them counted by /login's rule
		}
		if !slices.Equal(got, want) {
			t.Fatalf("fold %v: %v, want %v", fold, got, want)
		}
	}
}

// The tier header is the gateway's word: believed from a trusted proxy,
// ignored from anyone else, who would pick the tier with the most room.
func TestProxyTierHeaderOnlyFromTrustedProxies(t *testing.T) {
	t.Parallel()
	rule := func(limit int64) []policy.Rule {
		return []policy.Rule{{ID: fmt.Sprint("r", limit), Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: limit, Window: time.Minute}}}
	}
	cfg, key := decisiontest.WithTiers(t, []policy.Tier{{Name: "free", Rules: rule(1)}, {Name: "pro", Rules: rule(3)}})
	up, _ := upstream(t)
	for _, c := range []struct {
		trusted string
		want    []int
	}{
		{"127.0.0.1/32", []int{200, 200, 200, 429}}, // the gateway's pro
		{"10.0.0.0/8", []int{200, 429, 429, 429}},   // a client's claim: free
	} {
		px := proxyFor(t, cfg, key, up, func(pc *Config) {
			pc.TierHeader = "X-Tier"
			pc.TrustedProxies = []netip.Prefix{netip.MustParsePrefix(c.trusted)}
		})
		var got []int
		for range 4 {
			got = append(got, statusOf(t, nil, px.URL+"/", func(r *http.Request) {
				r.Header.Set("X-Client-Id", "alice-"+c.trusted)
				r.Header.Set("X-Tier", "pro")
			}))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("trusting %s: %v, want %v", c.trusted, got, c.want)
		}
	}
}

// A proxied request holds a concurrency rule's lease until its answer
// ends: another of the client's meets the rule full meanwhile, and once
// it ends (whatever the upstream said) the next gets through. A
// forward-auth check cannot tell when its request ends: its lease lasts
// its TTL.
func TestProxyHoldsALeaseWhileForwarding(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.With(t, []policy.Rule{{ID: "c", Name: "in-flight", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.Concurrency, Limit: 1, LeaseTTL: time.Hour}}})
	entered, finish, end := heldUpstream()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			close(entered)
			<-finish
		case "/fail":
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	t.Cleanup(up.Close)
	p := proxyFor(t, cfg, key, up, nil)
	t.Cleanup(end)
	as := func(client string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("X-Client-Id", client) }
	}
	first := make(chan int)
	go func() { first <- statusOf(t, nil, p.URL+"/slow", as("alice")) }()
	<-entered
	if s := statusOf(t, nil, p.URL+"/fast", as("alice")); s != http.StatusTooManyRequests {
		t.Fatalf("a second request while the first is forwarded: %d", s)
	}
	if s := statusOf(t, nil, p.URL+"/fast", as("bob")); s != 200 {
		t.Fatalf("another client: %d", s)
	}
	end()
	if s := <-first; s != 200 {
		t.Fatalf("the first: %d", s)
	}
	for _, path := range []string{"/fast", "/fail", "/fast"} {
		if s := statusOf(t, nil, p.URL+path, as("alice")); s == http.StatusTooManyRequests {
			t.Fatalf("%s after the first ended: %d", path, s)
		}
	}

	auth := proxyFor(t, cfg, key, nil, func(pc *Config) { pc.ForwardAuth = true })
	got := []int{statusOf(t, nil, auth.URL+"/x", as("carol")), statusOf(t, nil, auth.URL+"/x", as("carol"))}
	if !slices.Equal(got, []int{200, http.StatusTooManyRequests}) {
		t.Fatalf("forward auth: %v, want the lease held after the first", got)
	}
}

// A proxied request that outlasts its concurrency rule's lease TTL (a
// websocket, a long download) keeps its lease, renewed every half TTL:
// another request of the client still finds the rule full past the first
// TTL, and gets through once the first ends.
func TestProxyRenewsALongRequestsLease(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	cfg, key := decisiontest.OnClock(t, clock, []policy.Tier{{Name: "free", Rules: []policy.Rule{{ID: "c", Name: "in-flight", KeyBy: []string{"client_id"},
		Enabled: true, Params: policy.Params{Algorithm: policy.Concurrency, Limit: 1, LeaseTTL: 10 * time.Second}}}}})
	entered, finish, end := heldUpstream()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/long" {
			close(entered)
			<-finish
		}
	}))
	t.Cleanup(up.Close)
	ticks, renewed := make(chan time.Time), make(chan struct{})
	var every atomic.Int64
	p := proxyFor(t, cfg, key, up, func(pc *Config) {
		pc.renewals = func(d time.Duration) (<-chan time.Time, func()) { every.Store(int64(d)); return ticks, func() {} }
		pc.renewed = func() { renewed <- struct{}{} }
	})
	t.Cleanup(end)
	alice := func(r *http.Request) { r.Header.Set("X-Client-Id", "alice") }
	first := make(chan int)
	go func() { first <- statusOf(t, nil, p.URL+"/long", alice) }()
	<-entered
	if every.Load() != int64(5*time.Second) {
		t.Fatalf("renewed every %v, want half the TTL", time.Duration(every.Load()))
	}
	advance(8 * time.Second)
	ticks <- now
	<-renewed
	advance(8 * time.Second) // 16 s: past the first TTL, within the renewed one
	if s := statusOf(t, nil, p.URL+"/short", alice); s != http.StatusTooManyRequests {
		t.Fatalf("another request 16 s into a 10 s lease, renewed at 8 s: %d", s)
	}
	end()
	if s := <-first; s != 200 {
		t.Fatalf("the long request: %d", s)
	}
	if s := statusOf(t, nil, p.URL+"/short", alice); s != 200 {
		t.Fatalf("after the long request ended: %d", s)
	}
}

// heldUpstream is what an upstream handler holding a request uses:
// entered, for it to close as the request arrives; finish, closed by end
// to let it answer. A test registers end as its last cleanup (run first),
// so that failing it does not leave the servers' Close waiting for ever.
func heldUpstream() (entered, finish chan struct{}, end func()) {
	entered, finish = make(chan struct{}), make(chan struct{})
	var once sync.Once
	return entered, finish, func() { once.Do(func() { close(finish) }) }
}
