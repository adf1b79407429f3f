package kongimport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/envoyimport"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

const shop = `
_format_version: "3.0"
_workspace: shop
services:
  - name: orders
    url: http://orders:8080
    routes:
      - name: orders-list
        paths: [/orders]
        methods: [GET]
      - name: orders-v2
        paths: [/v2/orders, /v2/carts]
    plugins:
      - name: rate-limiting
        config: {minute: 100, hour: 1000, policy: redis, redis: {host: redis}, limit_by: consumer}
  - name: search
    url: http://search
    routes:
      - name: search
        paths: [/search]
        plugins:
          - name: rate-limiting-advanced
            config: {limit: [10, 100], window_size: [60, 3600], identifier: ip, sync_rate: 0.5, strategy: redis, namespace: s,
              enforce_consumer_groups: true, consumer_groups: [gold]}
      - name: search-public
        paths: [/search/public]
      - name: search-admin
        paths: [/search/admin]
        plugins:
          - name: rate-limiting
            enabled: false
            config: {second: 1}
plugins:
  - name: rate-limiting
    config: {second: 5, day: 10000, limit_by: ip, fault_tolerant: false, error_message: "Slow down"}
  - name: rate-limiting
    route: login
    config: {minute: 3, limit_by: header, header_name: X-Api-Key}
  - name: key-auth
    config: {key_names: [apikey]}
  - name: response-ratelimiting
    config: {limits: {videos: {minute: 10}}}
routes:
  - name: login
    service: orders
    paths: [/login]
    methods: [post]
    hosts: [shop.example.com]
`

// Each plugin instance becomes a rule per limit, scoped to its paths,
// keyed as its limit_by, the scoped ones replacing the global ones.
func TestParse(t *testing.T) {
	t.Parallel()
	p, err := Parse(strings.NewReader(shop), "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Tenant.Slug != "shop" || p.Tenant.DefaultTier != "default" {
		t.Fatalf("tenant %+v", p.Tenant)
	}
	byName := map[string]policy.Rule{}
	var names []string
	for _, r := range p.Rules {
		byName[r.Name] = r
		names = append(names, r.Name)
	}
	want := []string{"global-second", "global-day", "route-login-minute", "service-orders-minute", "service-orders-hour",
		"route-search-admin-second", "route-search-1m", "route-search-1h"}
	if !slices.Equal(names, want) {
		t.Fatalf("rules %v, want %v", names, want)
	}
	g := byName["global-second"]
	if g.Match != nil || !slices.Equal(g.KeyBy, []string{"ip"}) || g.FailureMode != policy.FailClosed || g.Message != "Slow down" ||
		g.Algorithm != policy.FixedWindow || g.Limit != 5 || g.Window != time.Second || len(g.Replaces) != 0 {
		t.Errorf("global-second %+v", g)
	}
	if d := byName["global-day"]; d.Calendar != policy.CalendarDay || d.Window != 0 || d.Limit != 10000 {
		t.Errorf("global-day %+v", d)
	}
	o := byName["service-orders-minute"]
	if !slices.Equal(o.Match, []policy.Match{{Key: "route", Value: "/orders*"}, {Key: "route", Value: "/v2/carts*"}, {Key: "route", Value: "/v2/orders*"}}) ||
		!slices.Equal(o.KeyBy, []string{"client_id"}) || o.Sync != 0 || !slices.Equal(o.Replaces, []string{"global-second", "global-day"}) {
		t.Errorf("service-orders-minute %+v: the service's routes but login, which has its own plugin", o)
	}
	if l := byName["route-login-minute"]; !slices.Equal(l.KeyBy, []string{"x-api-key"}) ||
		!slices.Equal(l.Match, []policy.Match{{Key: "route", Value: "/login*"}, {Key: "method", Value: "POST"}, {Key: "host", Value: "shop.example.com"}}) {
		t.Errorf("route-login-minute %+v", l)
	}
	if s := byName["route-search-1h"]; s.Algorithm != policy.SlidingWindow || s.Window != time.Hour || s.Limit != 100 || len(s.Replaces) != 0 {
		t.Errorf("route-search-1h %+v: rate-limiting-advanced replaces no rate-limiting rule", s)
	}
	if a := byName["route-search-admin-second"]; a.Enabled {
		t.Errorf("a disabled plugin made an enabled rule: %+v", a)
	}
	for _, want := range []string{"service-orders: its routes' methods differ", "routes' hosts are matched as the descriptor host", "-descriptor-headers x-api-key=X-Api-Key",
		"route search-public's path /search/public extends /search of route-search",
		"route search-admin's path /search/admin extends /search of route-search", "sync_rate applies to fixed windows",
		"route-search enforces consumer groups' own limits", "global counted on each Kong node apart",
		"plugins[3]: response-ratelimiting is not imported"} {
		if !slices.ContainsFunc(p.Notes, func(n string) bool { return strings.Contains(n, want) }) {
			t.Errorf("no note of %q in %q", want, p.Notes)
		}
	}

	if slices.ContainsFunc(p.Notes, func(n string) bool { return strings.HasPrefix(n, "service-orders counted on each") }) {
		t.Errorf("a note of local counting for a plugin counting in Redis: %q", p.Notes)
	}

	// Decided as Kong would: the most specific instance of each plugin.
	meets := rulesMet(t, p)
	for _, tc := range []struct {
		route string
		want  []string
	}{
		{"/v2/orders/7", []string{"service-orders-minute", "service-orders-hour"}},
		{"POST /login", []string{"route-login-minute"}},
		{"/login", []string{"global-second", "global-day"}},                      // a GET: not the route's
		{"POST blog.example.com/login", []string{"global-second", "global-day"}}, // another host: not the route's
		{"/search?q=x", []string{"global-second", "global-day", "route-search-1m", "route-search-1h"}},
		// Its own rate-limiting disabled, the global one; route-search's
		// advanced one, as noted (Kong's router would take search-admin).
		{"/search/admin", []string{"global-second", "global-day", "route-search-1m", "route-search-1h"}},
		{"/elsewhere", []string{"global-second", "global-day"}},
	} {
		method, route, ok := strings.Cut(tc.route, " ")
		if !ok {
			method, route = "GET", tc.route
		}
		host := "shop.example.com"
		if i := strings.IndexByte(route, '/'); i > 0 {
			host, route = route[:i], route[i:]
		}
		// Every descriptor a rule may be keyed by: a request without one
		// is not counted by the rules keyed by it.
		got := meets(policy.Descriptors{{Key: "client_id", Value: "alice"}, {Key: "ip", Value: "192.0.2.1"},
			{Key: "route", Value: route}, {Key: "method", Value: method}, {Key: "host", Value: host}, {Key: "x-api-key", Value: "k1"}})
		slices.Sort(got)
		slices.Sort(tc.want)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s meets %v, want %v", tc.route, got, tc.want)
		}
	}
}

// A longer path's instance replaces the one whose path it extends; a
// limit by path counts that path as one client and the scope's other
// paths by address.
func TestLongestPathAndLimitByPath(t *testing.T) {
	t.Parallel()
	p, err := Parse(strings.NewReader(`
services:
  - name: api
    routes:
      - {name: all, paths: [/api], plugins: [{name: rate-limiting, config: {minute: 100, limit_by: path, path: /api/export}}]}
      - {name: users, paths: [/api/users], plugins: [{name: rate-limiting, config: {minute: 10, limit_by: ip}}]}
`), "acme")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, r := range p.Rules {
		got[r.Name] = r.Replaces
	}
	want := map[string][]string{
		"route-all-path-minute": {"route-all-minute"},
		"route-all-minute":      nil,
		"route-users-minute":    {"route-all-path-minute", "route-all-minute"},
	}
	if len(got) != len(want) {
		t.Fatalf("rules %v, want %v", got, want)
	}
	for name, w := range want {
		if !slices.Equal(got[name], w) {
			t.Errorf("%s replaces %v, want %v", name, got[name], w)
		}
	}
	if p.Tenant.Slug != "acme" {
		t.Errorf("tenant %q, want the one given", p.Tenant.Slug)
	}
}

// rulesMet returns what tells the names of the rules of p a request of
// the descriptors given meets, in p's default tier.
func rulesMet(t *testing.T, p *envoyimport.Plan) func(policy.Descriptors) []string {
	t.Helper()
	for i := range p.Rules {
		p.Rules[i].ID = p.Rules[i].Name
	}
	c, err := decide.Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "t", DefaultTier: "default"}, Version: 1,
		Tiers: []policy.Tier{{Name: "default", Rules: p.Rules}}})
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC) }
	d := decide.New(decide.InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: now}, now)
	return func(ds policy.Descriptors) []string {
		dec, err := d.Decide(context.Background(), c, decide.Request{Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range dec.Rules {
			names = append(names, r.Rule.Name)
		}
		return names
	}
}

// Routes' hosts are matched as the host descriptor, and rank routes as
// Kong's router does: a route matching on more of paths, methods and
// hosts before one matching on fewer, then plain hosts before paths.
func TestHosts(t *testing.T) {
	t.Parallel()
	p, err := Parse(strings.NewReader(`
services:
  - name: api
    routes:
      - {name: shop, hosts: ["Shop.Example.com:8443", "api.*"], paths: [/orders], plugins: [{name: rate-limiting, config: {minute: 10, limit_by: ip}}]}
      - {name: orders, paths: [/orders/export], plugins: [{name: rate-limiting, config: {minute: 2, limit_by: ip}}]}
      - {name: blog, hosts: [blog.example.com], plugins: [{name: rate-limiting, config: {minute: 5, limit_by: ip}}]}
      - {name: tenants, hosts: ["*.Example.org"], paths: [/app], plugins: [{name: rate-limiting, config: {minute: 7, limit_by: ip}}]}
plugins:
  - {name: rate-limiting, config: {minute: 100, limit_by: ip}}
`), "acme")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]policy.Rule{}
	for _, r := range p.Rules {
		byName[r.Name] = r
	}
	if m := byName["route-shop-minute"].Match; !slices.Equal(m, []policy.Match{{Key: "route", Value: "/orders*"}, {Key: "host", Value: "api.*"}, {Key: "host", Value: "shop.example.com"}}) {
		t.Errorf("route-shop-minute matches %v", m)
	}
	if m := byName["route-blog-minute"].Match; !slices.Equal(m, []policy.Match{{Key: "host", Value: "blog.example.com"}}) {
		t.Errorf("route-blog-minute matches %v: a route of hosts, every path at them", m)
	}
	for _, want := range []string{"host Shop.Example.com:8443 is matched whatever the port", "-preserve-host"} {
		if !slices.ContainsFunc(p.Notes, func(n string) bool { return strings.Contains(n, want) }) {
			t.Errorf("no note of %q in %q", want, p.Notes)
		}
	}
	meets := rulesMet(t, p)
	for _, tc := range []struct{ host, route, want string }{
		{"shop.example.com", "/orders/7", "route-shop-minute"},
		{"api.example.net", "/orders/export", "route-shop-minute"}, // hosts and a path over a path alone
		{"www.example.com", "/orders/export", "route-orders-minute"},
		{"blog.example.com", "/orders/export", "route-blog-minute"}, // a plain host over a path
		{"blog.example.com", "/", "route-blog-minute"},
		{"www.example.com", "/orders", "global-minute"},
		{"acme.example.org", "/app/x", "route-tenants-minute"}, // a leftmost wildcard host
		{"example.org", "/app/x", "global-minute"},
	} {
		got := meets(policy.Descriptors{{Key: "ip", Value: "192.0.2.1"}, {Key: "route", Value: tc.route}, {Key: "host", Value: tc.host}})
		if !slices.Equal(got, []string{tc.want}) {
			t.Errorf("%s%s meets %v, want %s alone", tc.host, tc.route, got, tc.want)
		}
	}
}

// Routes' headers are matched as descriptors of their own (the proxy's
// -descriptor-headers), and a route matching on them ranks above one
// matching on its path alone, as in Kong.
func TestHeaders(t *testing.T) {
	t.Parallel()
	p, err := Parse(strings.NewReader(`
services:
  - name: api
    routes:
      - {name: v2, paths: [/api], headers: {X-Version: [v2, v3]}, plugins: [{name: rate-limiting, config: {minute: 10, limit_by: ip}}]}
      - {name: users, paths: [/api/users], plugins: [{name: rate-limiting, config: {minute: 5, limit_by: ip}}]}
`), "acme")
	if err != nil {
		t.Fatal(err)
	}
	if m := p.Rules[0].Match; !slices.Equal(m, []policy.Match{{Key: "route", Value: "/api*"}, {Key: "x-version", Value: "v2"}, {Key: "x-version", Value: "v3"}}) {
		t.Errorf("route-v2-minute matches %v", m)
	}
	if !slices.ContainsFunc(p.Notes, func(n string) bool { return strings.Contains(n, "-descriptor-headers x-version=X-Version") }) {
		t.Errorf("no note of the proxy's flag: %q", p.Notes)
	}
	meets := rulesMet(t, p)
	for _, tc := range []struct {
		route, version string
		want           []string
	}{
		{"/api/users/7", "v3", []string{"route-v2-minute"}}, // a header and a path over a longer path alone
		{"/api/users/7", "", []string{"route-users-minute"}},
		{"/api/users/7", "v1", []string{"route-users-minute"}},
		{"/api/orders", "", nil},
	} {
		ds := policy.Descriptors{{Key: "ip", Value: "192.0.2.1"}, {Key: "route", Value: tc.route}}
		if tc.version != "" {
			ds = append(ds, policy.Descriptor{Key: "x-version", Value: tc.version})
		}
		if got := meets(ds); !slices.Equal(got, tc.want) {
			t.Errorf("%s, version %q, meets %v, want %v", tc.route, tc.version, got, tc.want)
		}
	}

	_, err = Parse(strings.NewReader(`
routes:
  - {name: r, paths: [/r], headers: {ip: [x], "x y": [z], X-V: ["~*v\\d"]}, plugins: [{name: rate-limiting, config: {minute: 1}}]}
`), "acme")
	for _, want := range []string{"{routes[0].headers.ip ", "{routes[0].headers.x y ", "{routes[0].headers.X-V[0] "} {
		if !strings.Contains(fields(err), want) {
			t.Errorf("no error at %s: %s", want, fields(err))
		}
	}
}

// Several decK files make one configuration, as deck gateway sync takes
// them: a plugin in one may name another's route, and each problem's
// path names its file.
func TestParseFiles(t *testing.T) {
	t.Parallel()
	orders := []byte("_workspace: shop\nservices: [{name: orders, routes: [{name: list, paths: [/orders]}]}]\n")
	limits := []byte(`{"_workspace": "shop", "plugins": [{"name": "rate-limiting", "route": "list", "config": {"minute": 5}},
		{"name": "rate-limiting", "config": {"hour": 100}}]}`)
	p, err := ParseFiles([][]byte{orders, limits}, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range p.Rules {
		names = append(names, r.Name)
	}
	if p.Tenant.Slug != "shop" || !slices.Equal(names, []string{"route-list-minute", "global-hour"}) {
		t.Fatalf("tenant %s, rules %v", p.Tenant.Slug, names)
	}
	if r := p.Rules[0]; !slices.Equal(r.Match, []policy.Match{{Key: "route", Value: "/orders*"}}) || !slices.Equal(r.Replaces, []string{"global-hour"}) {
		t.Errorf("route-list-minute %+v", r)
	}

	_, err = ParseFiles([][]byte{orders, []byte("_workspace: blog\nplugins: [{name: rate-limiting, route: gone, config: {minute: 5}}]"), []byte("{")}, "")
	if got, want := fields(err), "{contents[2] "; !strings.Contains(got, want) {
		t.Fatalf("an unreadable third file: %s, want %s", got, want)
	}
	_, err = ParseFiles([][]byte{orders, []byte("_workspace: blog\nplugins: [{name: rate-limiting, route: gone, config: {minute: 5}}]")}, "")
	for _, want := range []string{"{contents[1]._workspace ", "{contents[1].plugins[0].route "} {
		if !strings.Contains(fields(err), want) {
			t.Errorf("no error at %s: %s", want, fields(err))
		}
	}
	if _, err := ParseFiles([][]byte{orders, []byte("_workspace: blog")}, "mine"); err != nil {
		t.Errorf("workspaces differ but the tenant is given: %v", err)
	}
}

// What Sluice cannot express is refused, each problem with its path.
func TestRefused(t *testing.T) {
	t.Parallel()
	_, err := Parse(strings.NewReader(`
_workspace: "no spaces allowed"
services:
  - name: s
    routes:
      - {name: methodonly, methods: [GET]}
      - {name: regex, paths: ["~/items/\\d+$", "/files/*"], hosts: [example.com, "*.example.com", ""], headers: {x-v: ["a*"]}}
    plugins:
      - {name: rate-limiting, config: {minute: 1.5}}
plugins:
  - {name: rate-limiting, config: {}}
  - {name: rate-limiting, consumer: alice, config: {minute: 5}}
  - {name: rate-limiting-advanced, route: nowhere, config: {limit: [5], window_size: [60]}}
  - {name: rate-limiting-advanced, config: {limit: [5, 6], window_size: [60], window_type: rolling, identifier: consumer-group}}
  - {name: rate-limiting, service: s, config: {hour: 5, limit_by: service}}
routes:
  - {name: r, service: ghost, paths: [/r]}
consumers:
  - username: bob
    plugins: [{name: rate-limiting, config: {minute: 50}}]
consumer_groups:
  - name: gold
    plugins: [{name: rate-limiting-advanced, config: {limit: [5], window_size: [60]}}]
`), "")
	var pe *policy.Error
	if !errors.As(err, &pe) {
		t.Fatalf("got %v, want field errors", err)
	}
	have := map[string]bool{}
	for _, f := range pe.Fields {
		have[f.Field] = true
	}
	for _, want := range []string{"_workspace", "services[0].routes[0].paths", "services[0].routes[1].paths[0]", "services[0].routes[1].hosts[2]", "services[0].routes[1].paths[1]", "services[0].routes[1].headers.x-v[0]",
		"services[0].plugins[0].config.minute", "plugins[0].config", "plugins[1]", "plugins[2].route", "plugins[3].config.window_type",
		"plugins[3].config.limit", "plugins[3].config.limit_by", "routes[0].service", "consumers[0].plugins[0]", "consumer_groups[0].plugins[0]"} {
		if !have[want] {
			t.Errorf("no error at %s; got %v", want, pe.Fields)
		}
	}
	if _, err := Parse(strings.NewReader("_workspace: fine"), "not a slug!"); !strings.Contains(fields(err), "{tenant ") {
		t.Errorf("an invalid tenant given: %v", err)
	}
	for _, bad := range []string{"services: 5", "{", "plugins: [{name: rate-limiting, config: {minute: lots}}]"} {
		if _, err := Parse(strings.NewReader(bad), "x"); policy.ErrorCode(err) != policy.CodeInvalid {
			t.Errorf("%q: %v, want invalid", bad, err)
		}
	}
	if _, err := Parse(strings.NewReader(strings.Repeat(" ", MaxBytes+1)), "x"); policy.ErrorCode(err) != policy.CodeInvalid {
		t.Errorf("an oversized file: %v", err)
	}
}

// Whatever the input, Parse returns valid rules or a field error, never
// a panic or an invalid rule.
func FuzzParse(f *testing.F) {
	f.Add(shop)
	f.Add("plugins: [{name: rate-limiting, config: {minute: 5, limit_by: header, header_name: X-A}}]")
	f.Add("services: [{name: s, routes: [{name: r, paths: [/a, /b]}], plugins: [{name: rate-limiting-advanced, config: {limit: [1], window_size: [1]}}]}]")
	f.Add("services: [{name: s, routes: [{name: r, hosts: [a.example, 'b.*:80'], methods: [get]}, {name: q, paths: [/q], hosts: ['']}], plugins: [{name: rate-limiting, config: {minute: 1}}]}]")
	f.Add("routes: [{name: r, paths: [/a], headers: {X-A: [b, c], x-b: d}, plugins: [{name: rate-limiting, config: {hour: 3}}]}]")
	f.Fuzz(func(t *testing.T, in string) {
		p, err := Parse(strings.NewReader(in), "t")
		if err != nil {
			if policy.ErrorCode(err) != policy.CodeInvalid {
				t.Fatalf("error %v is not a field error", err)
			}
			return
		}
		for _, r := range p.Rules {
			if err := r.Validate(); err != nil {
				t.Fatalf("invalid rule %+v: %v", r, err)
			}
		}
	})
}

// What `deck gateway dump` writes, every setting present and most of them
// null, in YAML or JSON, imports as the settings given.
func TestDump(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]string{
		"yaml": `
_format_version: "3.0"
plugins:
- config:
    day: null
    error_code: 429
    error_message: API rate limit exceeded
    fault_tolerant: true
    header_name: null
    hide_client_headers: false
    hour: null
    limit_by: consumer
    minute: 5
    month: null
    path: null
    policy: local
    redis:
      database: 0
      host: null
      password: null
    second: null
    sync_rate: -1
    year: null
  enabled: true
  name: rate-limiting
  protocols: [grpc, grpcs, http, https]
services:
- connect_timeout: 60000
  enabled: true
  host: httpbin.konghq.com
  name: example_service
  port: 80
  protocol: http
  routes:
  - https_redirect_status_code: 426
    name: example_route
    paths: [/mock]
    preserve_host: false
    protocols: [http, https]
    strip_path: true
`,
		"json": `{"_format_version":"3.0","plugins":[{"name":"rate-limiting","enabled":true,"config":{"day":null,"minute":5,"limit_by":"consumer",
"policy":"local","error_message":"API rate limit exceeded","sync_rate":-1,"header_name":null,"path":null}}],
"services":[{"name":"example_service","routes":[{"name":"example_route","paths":["/mock"]}]}]}`,
	} {
		p, err := Parse(strings.NewReader(in), "t")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(p.Rules) != 1 {
			t.Fatalf("%s: rules %+v", name, p.Rules)
		}
		r := p.Rules[0]
		if r.Name != "global-minute" || r.Limit != 5 || r.Window != time.Minute || r.Message != "" || r.Sync != 0 ||
			r.FailureMode != policy.FailOpen || !r.Enabled || !slices.Equal(r.KeyBy, []string{"client_id"}) {
			t.Errorf("%s: %+v", name, r)
		}
	}
}

// A configuration too large to relate its routes, or with more limits
// than a tier holds, is refused at once.
func TestBounds(t *testing.T) {
	t.Parallel()
	routes := "routes: [" + strings.Repeat("{paths: [/a]},", maxRoutes+1) + "]"
	plugins := "plugins: [" + strings.Repeat("{name: rate-limiting, config: {second: 1}},", policy.MaxRulesPerTier+1) + "]"
	limits := "plugins: [{name: rate-limiting-advanced, config: {limit: [" + strings.Repeat("1,", 5000) + "1], window_size: [" + strings.Repeat("1,", 5000) + "1]}}]"
	for name, in := range map[string]string{"routes": routes, "plugins": plugins, "limits": limits} {
		if _, err := Parse(strings.NewReader(in), "t"); policy.ErrorCode(err) != policy.CodeInvalid || !strings.Contains(err.Error()+fields(err), "more than") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func fields(err error) string {
	var pe *policy.Error
	if !errors.As(err, &pe) {
		return ""
	}
	return fmt.Sprint(pe.Fields)
}

func TestHostsMeet(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"a.example.com", "a.example.com", true}, {"a.example.com", "b.example.com", false},
		{"*.example.com", "a.example.com", true}, {"a.example.com", "*.example.com", true}, {"*.example.com", "a.example.org", false},
		{"api.*", "api.example.com", true}, {"api.*", "*.example.com", true}, {"api.*", "*.example.org", true},
		{"*.example.com", "*.example.org", false}, {"www.*", "api.*", false}, {"*.b.com", "*.a.b.com", true},
	} {
		if got := hostsMeet(tc.a, tc.b); got != tc.want {
			t.Errorf("hostsMeet(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
