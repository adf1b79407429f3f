// Package kongimport converts the rate limiting of a Kong declarative
// configuration (a decK file) into a Sluice tenant's rules, for Sluice's
// proxy (or its check APIs) to enforce in place of Kong's plugins.
//
// Each instance of the rate-limiting and rate-limiting-advanced plugins
// becomes a rule per limit (rate-limiting's second to year, each
// rate-limiting-advanced window) in the tenant's default tier:
//
//   - Scope. A global plugin's rules apply to every request; a service's
//     to the routes that have no plugin of their own; a route's to its
//     paths ("/orders" matching what starts with it, as Kong's prefix
//     paths do), methods, hosts (the proxy's host descriptor; wildcards
//     as Kong's, *.example.com and example.*) and headers (descriptors
//     of their own), one rule over all of them, so that, as in Kong, they
//     share one counter.
//     Kong runs one instance of a plugin per request, that of the route
//     its router picks; so do the rules: each scoped rule replaces
//     (policy.Rule.Replaces) the global ones of its plugin, and those of
//     the routes Kong's router ranks below its own that may meet the same
//     request (matching on fewer of paths, methods, hosts and headers; on
//     as many without plain hosts, or on fewer headers; or a shorter
//     path).
//   - Counting. rate-limiting counts fixed windows, its day, month and
//     year the calendar's, in UTC, as Kong's; rate-limiting-advanced
//     sliding windows (the weighted previous window, its algorithm) or
//     fixed ones. A positive sync_rate becomes the rule's sync.
//   - Identity. limit_by (identifier) consumer and credential key by
//     client_id, which the proxy takes from -identity-header and, without
//     it, from the client's address, as Kong falls back to; ip by ip;
//     header by a descriptor named after the header (the proxy's
//     -descriptor-headers); service by nothing, one counter for the scope;
//     path by the path given, other paths by ip, as Kong.
//   - The rest. fault_tolerant: false fails closed; error_message is the
//     rule's message; a disabled plugin makes disabled rules.
//
// What Sluice cannot express is refused with the path of each problem
// (plugins[2].config.limit_by): plugins of consumers and consumer
// groups (make them overrides and tiers), regex paths and header values,
// routes with neither paths nor hosts. What it expresses differently is told in Plan.Notes: a route's
// methods, hosts and headers are not matched when a rule's routes differ
// in them, nor a host's port, nor a longer path of a route without a
// plugin; and the proxy flags that identities, hosts and headers need.
package kongimport

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/days"
	"github.com/sluicehq/sluice/internal/envoyimport"
	"github.com/sluicehq/sluice/internal/policy"
	reqroute "github.com/sluicehq/sluice/internal/route"
	"github.com/sluicehq/sluice/internal/tenantfile"
)

// MaxBytes bounds the configuration read.
const MaxBytes = 4 << 20

// maxRoutes bounds the routes of a configuration and their paths, and so
// the work of relating them.
const maxRoutes = 10000

// The plugins imported.
const (
	rateLimiting         = "rate-limiting"
	rateLimitingAdvanced = "rate-limiting-advanced"
)

// otherLimiters are Kong's other limiting plugins, whose limits count
// what Sluice's proxy does not measure (responses' own counts, GraphQL
// query costs, AI tokens): a note names each met.
var otherLimiters = map[string]string{
	"response-ratelimiting":          "counts what the upstream's responses report",
	"graphql-rate-limiting-advanced": "counts GraphQL query costs",
	"ai-rate-limiting-advanced":      "counts AI tokens",
}

type file struct {
	Workspace      string     `yaml:"_workspace"`
	Services       []service  `yaml:"services"`
	Routes         []route    `yaml:"routes"`
	Plugins        []plugin   `yaml:"plugins"`
	Consumers      []consumer `yaml:"consumers"`
	ConsumerGroups []consumer `yaml:"consumer_groups"`
}

type service struct {
	ID      string   `yaml:"id"`
	Name    string   `yaml:"name"`
	Routes  []route  `yaml:"routes"`
	Plugins []plugin `yaml:"plugins"`
}

type route struct {
	ID      string   `yaml:"id"`
	Name    string   `yaml:"name"`
	Paths   []string `yaml:"paths"`
	Hosts   []string `yaml:"hosts"`
	Methods []string `yaml:"methods"`
	// Headers are the request headers the route matches: any of each
	// name's values.
	Headers map[string]tenantfile.Values `yaml:"headers"`
	Service ref                          `yaml:"service"`
	Plugins []plugin                     `yaml:"plugins"`
}

type consumer struct {
	Plugins []plugin `yaml:"plugins"`
}

type plugin struct {
	Name          string `yaml:"name"`
	InstanceName  string `yaml:"instance_name"`
	Enabled       *bool  `yaml:"enabled"`
	Config        config `yaml:"config"`
	Service       ref    `yaml:"service"`
	Route         ref    `yaml:"route"`
	Consumer      ref    `yaml:"consumer"`
	ConsumerGroup ref    `yaml:"consumer_group"`
}

// config holds both plugins' settings; the others (policy, redis,
// strategy, namespace…) name Kong's own storage and are ignored.
type config struct {
	Second            *float64  `yaml:"second"`
	Minute            *float64  `yaml:"minute"`
	Hour              *float64  `yaml:"hour"`
	Day               *float64  `yaml:"day"`
	Month             *float64  `yaml:"month"`
	Year              *float64  `yaml:"year"`
	LimitBy           string    `yaml:"limit_by"`
	HeaderName        string    `yaml:"header_name"`
	Path              string    `yaml:"path"`
	FaultTolerant     *bool     `yaml:"fault_tolerant"`
	HideClientHeaders bool      `yaml:"hide_client_headers"`
	ErrorCode         *float64  `yaml:"error_code"`
	ErrorMessage      string    `yaml:"error_message"`
	SyncRate          *float64  `yaml:"sync_rate"`
	Limit             []float64 `yaml:"limit"`
	WindowSize        []float64 `yaml:"window_size"`
	WindowType        string    `yaml:"window_type"`
	Identifier        string    `yaml:"identifier"`
	// EnforceConsumerGroups gives consumer groups limits of their own,
	// which are not imported (see the notes).
	EnforceConsumerGroups bool `yaml:"enforce_consumer_groups"`
	// Policy (rate-limiting) and Strategy (advanced) say where Kong
	// counts: local (the default), on each node apart, is told in a note.
	Policy   string `yaml:"policy"`
	Strategy string `yaml:"strategy"`
}

// ref is a reference to another entity: its name or id, written as a
// string or as {name: …} or {id: …}.
type ref struct{ Name, ID string }

func (r *ref) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		r.Name, r.ID = n.Value, n.Value
		return nil
	}
	var m struct {
		ID   string `yaml:"id"`
		Name string `yaml:"name"`
	}
	if err := n.Decode(&m); err != nil {
		return err
	}
	r.Name, r.ID = m.Name, m.ID
	return nil
}

func (r ref) set() bool { return r.Name != "" || r.ID != "" }

// names reports whether r refers to the entity of this id and name.
func (r ref) names(id, name string) bool {
	return r.ID != "" && r.ID == id || r.Name != "" && r.Name == name
}

// instance is one plugin to import, with its scope.
type instance struct {
	plugin *plugin
	field  string
	svc    *service // service scope, or the route's service
	rt     *route   // route scope
}

func (in *instance) enabled() bool { return in.plugin.Enabled == nil || *in.plugin.Enabled }

// scope names the instance's rules: instance_name, else global,
// service-NAME or route-NAME.
func (in *instance) scope() string {
	switch {
	case in.plugin.InstanceName != "":
		return in.plugin.InstanceName
	case in.rt != nil:
		return "route-" + cmp.Or(in.rt.Name, in.rt.ID)
	case in.svc != nil:
		return "service-" + cmp.Or(in.svc.Name, in.svc.ID)
	}
	return "global"
}

// Parse reads a decK file (YAML or JSON) into the rules of tenant slug
// (the file's _workspace when slug is empty; with neither, the plan's
// tenant has none, for an admin key's own tenant). Every problem is a
// field error with its path.
func Parse(r io.Reader, slug string) (*envoyimport.Plan, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxBytes+1))
	if err != nil {
		return nil, err
	}
	return ParseFiles([][]byte{data}, slug)
}

// ParseFiles reads the decK files of one configuration, as `deck gateway
// sync` takes several (a team's services in each, say): their entities
// together, a plugin of one able to name a route or service of another.
// Their _workspace, where given, must agree. With more than one file, a
// problem's path starts with its file's index (contents[1].plugins[0]).
func ParseFiles(contents [][]byte, slug string) (*envoyimport.Plan, error) {
	p := &envoyimport.Plan{Tenant: policy.Tenant{DefaultTier: "default"}}
	im := importer{plan: p, failed: map[policy.FieldError]bool{}}
	workspace, wsField, unread := "", "", false
	for i, data := range contents {
		pre := ""
		if len(contents) > 1 {
			pre = fmt.Sprintf("contents[%d].", i)
		}
		if len(data) > MaxBytes {
			im.fail(strings.TrimSuffix(pre, "."), "larger than %d bytes", MaxBytes)
			unread = true
			continue
		}
		f := &file{}
		if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(f); err != nil && !errors.Is(err, io.EOF) {
			im.fail(strings.TrimSuffix(pre, "."), "not a Kong declarative configuration: %v", err)
			unread = true
			continue
		}
		switch {
		case f.Workspace == "":
		case workspace == "":
			workspace, wsField = f.Workspace, pre+"_workspace"
		case f.Workspace != workspace && slug == "":
			im.fail(pre+"_workspace", "%q, not %q: one workspace an import", f.Workspace, workspace)
		}
		im.files, im.prefixes = append(im.files, f), append(im.prefixes, pre)
	}
	if unread {
		return nil, invalid(im.errs...)
	}
	field := "tenant"
	if slug == "" {
		slug, field = workspace, wsField
	}
	p.Tenant.Slug, p.Tenant.Name = slug, slug
	if slug != "" {
		if err := p.Tenant.Validate(); err != nil {
			im.fail(field, "%q cannot be a tenant slug (letters, digits, '-' and '_')", slug)
		}
	}
	im.collect()
	paths := 0
	for _, at := range im.routes {
		paths += len(at.rt.Paths)
	}
	switch {
	case len(im.routes) > maxRoutes || paths > maxRoutes:
		im.fail("routes", "more than %d routes or paths", maxRoutes)
		return nil, invalid(im.errs...)
	case len(im.instances) > policy.MaxRulesPerTier: // each makes a rule at least
		im.fail("plugins", "more than %d rate limiting plugins", policy.MaxRulesPerTier)
		return nil, invalid(im.errs...)
	}
	for _, kind := range []string{rateLimiting, rateLimitingAdvanced} {
		im.build(kind)
	}
	if len(im.errs) > 0 {
		return nil, invalid(im.errs...)
	}
	return p, nil
}

type importer struct {
	plan     *envoyimport.Plan
	files    []*file
	prefixes []string // of the files' field paths: "" or "contents[i]."
	services []*service
	// instances are the rate limiting plugins, global ones first, then
	// services', then routes'.
	instances []instance
	// routes are every route with its service and its field path.
	routes []routeAt
	errs   []policy.FieldError
	failed map[policy.FieldError]bool // errs, each once: a route's are met through each of its plugins
	noted  map[string]bool
}

type routeAt struct {
	rt    *route
	svc   *service
	field string
}

func (im *importer) fail(field, format string, args ...any) {
	fe := policy.FieldError{Field: field, Description: fmt.Sprintf(format, args...)}
	if !im.failed[fe] {
		im.failed[fe] = true
		im.errs = append(im.errs, fe)
	}
}

func (im *importer) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if im.noted == nil {
		im.noted = map[string]bool{}
	}
	if !im.noted[s] {
		im.noted[s] = true
		im.plan.Notes = append(im.plan.Notes, s)
	}
}

// collect finds every route and every rate limiting plugin with its scope.
func (im *importer) collect() {
	for fi, f := range im.files {
		for i := range f.Services {
			s := &f.Services[i]
			im.services = append(im.services, s)
			for j := range s.Routes {
				im.routes = append(im.routes, routeAt{&s.Routes[j], s, fmt.Sprintf("%sservices[%d].routes[%d]", im.prefixes[fi], i, j)})
			}
		}
	}
	for fi, f := range im.files {
		for i := range f.Routes {
			rt := &f.Routes[i]
			at := routeAt{rt: rt, field: fmt.Sprintf("%sroutes[%d]", im.prefixes[fi], i)}
			if rt.Service.set() {
				if at.svc = im.service(rt.Service); at.svc == nil {
					im.fail(at.field+".service", "no service %q in the configuration", cmp.Or(rt.Service.Name, rt.Service.ID))
				}
			}
			im.routes = append(im.routes, at)
		}
	}
	add := func(ps []plugin, field string, svc *service, rt *route) {
		for i := range ps {
			p := &ps[i]
			if what, ok := otherLimiters[p.Name]; ok {
				im.note("%splugins[%d]: %s is not imported: it %s, which Sluice's proxy does not measure", field, i, p.Name, what)
			}
			if p.Name != rateLimiting && p.Name != rateLimitingAdvanced {
				continue
			}
			in := instance{plugin: p, field: fmt.Sprintf("%splugins[%d]", field, i), svc: svc, rt: rt}
			if p.Service.set() && in.svc == nil {
				if in.svc = im.service(p.Service); in.svc == nil {
					im.fail(in.field+".service", "no service %q in the configuration", cmp.Or(p.Service.Name, p.Service.ID))
					continue
				}
			}
			if p.Route.set() && in.rt == nil {
				at := im.route(p.Route)
				if at == nil {
					im.fail(in.field+".route", "no route %q in the configuration", cmp.Or(p.Route.Name, p.Route.ID))
					continue
				}
				in.rt, in.svc = at.rt, at.svc
			}
			if p.Consumer.set() || p.ConsumerGroup.set() {
				im.fail(in.field, "a plugin of a consumer or consumer group is not imported: give the client its own limits with an override (sluice overrides create), a group with a tier")
				continue
			}
			im.instances = append(im.instances, in)
		}
	}
	for fi, f := range im.files {
		add(f.Plugins, im.prefixes[fi], nil, nil)
	}
	for fi, f := range im.files {
		for i := range f.Services {
			add(f.Services[i].Plugins, fmt.Sprintf("%sservices[%d].", im.prefixes[fi], i), &f.Services[i], nil)
		}
	}
	for _, at := range im.routes {
		add(at.rt.Plugins, at.field+".", at.svc, at.rt)
	}
	for fi, f := range im.files {
		for i := range f.Consumers {
			for j := range f.Consumers[i].Plugins {
				if n := f.Consumers[i].Plugins[j].Name; n == rateLimiting || n == rateLimitingAdvanced {
					im.fail(fmt.Sprintf("%sconsumers[%d].plugins[%d]", im.prefixes[fi], i, j), "a plugin of a consumer is not imported: give the client its own limits with an override (sluice overrides create)")
				}
			}
		}
		for i := range f.ConsumerGroups {
			for j := range f.ConsumerGroups[i].Plugins {
				if n := f.ConsumerGroups[i].Plugins[j].Name; n == rateLimiting || n == rateLimitingAdvanced {
					im.fail(fmt.Sprintf("%sconsumer_groups[%d].plugins[%d]", im.prefixes[fi], i, j), "a plugin of a consumer group is not imported: make the group a tier and move its clients to it with overrides")
				}
			}
		}
	}
}

func (im *importer) service(r ref) *service {
	for _, s := range im.services {
		if r.names(s.ID, s.Name) {
			return s
		}
	}
	return nil
}

func (im *importer) route(r ref) *routeAt {
	for i := range im.routes {
		if at := &im.routes[i]; r.names(at.rt.ID, at.rt.Name) {
			return at
		}
	}
	return nil
}

// group is the rules one plugin instance makes, with the routes' paths,
// methods and hosts they apply to (each nil: any).
type group struct {
	in      *instance
	scoped  bool // a service's or route's: not global
	paths   []string
	methods []string // the routes' methods, when they all have the same
	hosts   []string // the routes' hosts, when they all have the same
	headers []string // the routes' headers, name=value, when they all have the same
	rules   []int    // indexes in plan.Rules
}

// build makes the rules of every instance of plugin kind, and what each
// replaces.
func (im *importer) build(kind string) {
	var groups []*group
	for i := range im.instances {
		in := &im.instances[i]
		if in.plugin.Name != kind {
			continue
		}
		g := &group{in: in, scoped: in.rt != nil || in.svc != nil}
		ok := im.scopePaths(g)
		im.limits(g) // its errors too
		if ok {
			groups = append(groups, g)
		}
	}
	// Kong runs the instance of the route it routes a request to, else
	// of that route's service, else the global one: a scoped instance
	// over the global, the route with more of paths, methods and hosts
	// over one with fewer, then the longest path over one it extends.
	for _, g := range groups {
		var replaces []string
		for _, o := range groups {
			if o == g || !outranks(g, o) {
				continue
			}
			if outranks(o, g) {
				im.note("%s and %s each have a path the other's extends (or the same path): a request to both meets both", g.in.scope(), o.in.scope())
				continue
			}
			for _, ri := range o.rules {
				replaces = append(replaces, im.plan.Rules[ri].Name)
			}
		}
		if len(replaces) > policy.MaxReplaces {
			im.fail(g.in.field, "replaces %d rules of less specific scopes, at most %d", len(replaces), policy.MaxReplaces)
			continue
		}
		for _, ri := range g.rules {
			r := &im.plan.Rules[ri]
			r.Replaces = append(slices.Clone(replaces), r.Replaces...)
			if err := r.Validate(); err != nil {
				im.fail(g.in.field, "rule %s: %v", r.Name, err)
			}
		}
	}
	im.noteShadowedRoutes(kind, groups)
}

// outranks reports whether a request both g and o apply to may exist,
// and Kong would run g's instance for it, not o's: o is global and g
// scoped; or both scoped, their hosts, methods and headers overlap, a
// path of each meets one of the other, and, as Kong's router ranks
// routes, g's routes match on more of paths, methods, hosts and headers;
// or on as many, with hosts and none a wildcard where o's have not; or
// else on more headers; or else with a path extending one of o's (the
// longest prefix).
func outranks(g, o *group) bool {
	switch {
	case !o.scoped:
		return g.scoped
	case !g.scoped, !overlap(g.hosts, o.hosts, hostsMeet), !overlap(g.methods, o.methods, func(a, b string) bool { return a == b }),
		!headersMeet(g.headers, o.headers):
		return false
	}
	gp, op := orAnyPath(g.paths), orAnyPath(o.paths)
	if !overlap(gp, op, func(p, q string) bool { return strings.HasPrefix(p, q) || strings.HasPrefix(q, p) }) {
		return false
	}
	if wg, wo := g.weight(), o.weight(); wg != wo {
		return wg > wo
	}
	if pg, po := g.plainHosts(), o.plainHosts(); pg != po {
		return pg
	}
	if hg, ho := len(headerNames(g.headers)), len(headerNames(o.headers)); hg != ho {
		return hg > ho
	}
	return overlap(gp, op, strings.HasPrefix)
}

// headerNames returns the names of header conditions (name=value).
func headerNames(hs []string) map[string][]string {
	names := map[string][]string{}
	for _, h := range hs {
		k, v, _ := strings.Cut(h, "=")
		names[k] = append(names[k], v)
	}
	return names
}

// headersMeet reports whether a request may meet both header conditions
// gs and os: for each header both name, a value of both.
func headersMeet(gs, os []string) bool {
	on := headerNames(os)
	for k, vs := range headerNames(gs) {
		if ovs, ok := on[k]; ok && !slices.ContainsFunc(vs, func(v string) bool { return slices.Contains(ovs, v) }) {
			return false
		}
	}
	return true
}

// plainHosts reports whether g matches hosts, none of them a wildcard:
// Kong ranks such routes above others matching on as many fields.
func (g *group) plainHosts() bool {
	return g.hosts != nil && !slices.ContainsFunc(g.hosts, func(h string) bool { return strings.Contains(h, "*") })
}

// weight is how many of paths, methods, hosts and headers g's routes
// match on.
func (g *group) weight() int {
	w := 0
	for _, f := range [][]string{g.paths, g.methods, g.hosts, g.headers} {
		if f != nil {
			w++
		}
	}
	return w
}

// orAnyPath is paths, or the prefix of every path when nil.
func orAnyPath(paths []string) []string {
	if paths == nil {
		return []string{""}
	}
	return paths
}

// overlap reports whether a of as and b of bs meet, either list nil
// meeting anything.
func overlap(as, bs []string, meet func(a, b string) bool) bool {
	if as == nil || bs == nil {
		return true
	}
	for _, a := range as {
		for _, b := range bs {
			if meet(a, b) {
				return true
			}
		}
	}
	return false
}

// hostsMeet reports whether a request's host may match both a and b,
// Kong hosts as hostsOf gives them, plain or with a wildcard
// (*.example.com, example.*): equal, a pattern matching the other, or two
// patterns whose ends agree.
func hostsMeet(a, b string) bool {
	switch wa, wb := strings.Contains(a, "*"), strings.Contains(b, "*"); {
	case !wa && !wb:
		return a == b
	case !wa:
		return policy.Glob(b, a)
	case !wb:
		return policy.Glob(a, b)
	}
	pa, sa := a[:strings.IndexByte(a, '*')], a[strings.LastIndexByte(a, '*')+1:]
	pb, sb := b[:strings.IndexByte(b, '*')], b[strings.LastIndexByte(b, '*')+1:]
	return (strings.HasPrefix(pa, pb) || strings.HasPrefix(pb, pa)) && (strings.HasSuffix(sa, sb) || strings.HasSuffix(sb, sa))
}

// noteShadowedRoutes tells of routes without a plugin of their own whose
// path extends a scoped group's: Kong routes their requests to them, where
// those limits do not apply, and Sluice's rules, matching paths, apply.
func (im *importer) noteShadowedRoutes(kind string, groups []*group) {
	for _, at := range im.routes {
		if im.scoped(at, kind) {
			continue
		}
		for _, g := range groups {
			if !overlap(hostsOf(at.rt), g.hosts, hostsMeet) {
				continue
			}
			for _, q := range g.paths {
				for _, p := range at.rt.Paths {
					if len(p) > len(q) && strings.HasPrefix(p, q) && !slices.Contains(g.paths, p) {
						im.note("route %s's path %s extends %s of %s: Kong gives its requests its own plugins, Sluice %s's limits", cmp.Or(at.rt.Name, at.rt.ID), p, q, g.in.scope(), g.in.scope())
					}
				}
			}
		}
	}
}

// scoped reports whether at has an enabled instance of plugin kind of
// its own or of its service.
func (im *importer) scoped(at routeAt, kind string) bool {
	for _, in := range im.instances {
		if in.plugin.Name == kind && in.enabled() && (in.rt == at.rt || in.rt == nil && in.svc != nil && in.svc == at.svc) {
			return true
		}
	}
	return false
}

// scopePaths sets the paths g's rules apply to: a route's, or a service's
// routes' that have no instance of the plugin of their own.
func (im *importer) scopePaths(g *group) bool {
	in := g.in
	var ats []routeAt
	switch {
	case in.rt != nil:
		for _, at := range im.routes {
			if at.rt == in.rt {
				ats = append(ats, at)
			}
		}
	case in.svc != nil:
		for _, at := range im.routes {
			if at.svc == in.svc && !im.hasOwn(at.rt, in.plugin.Name) {
				ats = append(ats, at)
			}
		}
		if len(ats) == 0 {
			im.note("%s: its service has no route without a plugin of its own: nothing imported", in.scope())
			return false
		}
	default:
		return true
	}
	ok, anyPath := true, false
	for _, at := range ats {
		name := cmp.Or(at.rt.Name, at.rt.ID)
		if len(at.rt.Paths) == 0 {
			anyPath = true // a route of hosts: every path at them
			if len(at.rt.Hosts) == 0 {
				im.fail(at.field+".paths", "route %s has neither paths nor hosts: Sluice tells routes apart by path and host (a rule of methods or headers alone is not imported)", name)
				ok = false
			}
		}
		for i, p := range at.rt.Paths {
			switch {
			case strings.HasPrefix(p, "~"):
				im.fail(fmt.Sprintf("%s.paths[%d]", at.field, i), "a regex path is not imported: write its prefixes as paths")
				ok = false
				continue
			case strings.Contains(p, "*"):
				im.fail(fmt.Sprintf("%s.paths[%d]", at.field, i), "a '*' in a path is itself to Kong and a wildcard to Sluice: not imported")
				ok = false
				continue
			}
			g.paths = append(g.paths, p)
		}
		for i, h := range at.rt.Hosts {
			switch {
			case reqroute.Host(h) == "":
				im.fail(fmt.Sprintf("%s.hosts[%d]", at.field, i), "an empty host")
				ok = false
			case hasPort(h):
				im.note("route %s: its host %s is matched whatever the port (the proxy's host descriptor has none)", name, h)
			}
		}
		if len(at.rt.Hosts) > 0 {
			im.note("routes' hosts are matched as the descriptor host, which Sluice's proxy gives every request (the Host asked for, in lower case, without its port): run it with -preserve-host, so that the upstream serves the host counted; behind Envoy, add a request_headers action of :authority as host")
		}
		ok = im.checkHeaders(at) && ok
	}
	if anyPath {
		g.paths = nil
	}
	slices.Sort(g.paths)
	g.paths = slices.Compact(g.paths)
	var differ []string
	g.methods, differ = common(ats, methodsOf, "methods", differ)
	g.hosts, differ = common(ats, hostsOf, "hosts", differ)
	g.headers, differ = common(ats, headersOf, "headers", differ)
	if len(differ) > 0 {
		im.note("%s: its routes' %s differ, so they are not matched (one rule over its routes)", in.scope(), strings.Join(differ, " and "))
	}
	if n := len(g.paths) + len(g.methods) + len(g.hosts) + len(g.headers); n > policy.MaxMatchers {
		im.fail(in.field, "applies to %d paths, methods, hosts and header values, at most %d a rule", n, policy.MaxMatchers)
		ok = false
	}
	return ok
}

// common is what of returns for each of ats' routes when it is the same
// for all, else nil with what appended to differ.
func common(ats []routeAt, of func(*route) []string, what string, differ []string) ([]string, []string) {
	first := of(ats[0].rt)
	for _, at := range ats[1:] {
		if !slices.Equal(of(at.rt), first) {
			return nil, append(differ, what)
		}
	}
	return first, differ
}

// checkHeaders tells of at's headers what the import cannot match, and
// what the proxy needs to: each a descriptor of its own (-descriptor-headers).
func (im *importer) checkHeaders(at routeAt) bool {
	ok := true
	for _, name := range slices.Sorted(maps.Keys(at.rt.Headers)) {
		key, field := strings.ToLower(name), at.field+".headers."+name
		switch {
		case (policy.Descriptors{{Key: key}}).Validate() != nil:
			im.fail(field, "a header name that cannot be a descriptor: 1 to %d letters, digits, '_', '-' and '.'", policy.MaxDescriptorKey)
			ok = false
			continue
		case slices.Contains(proxyDescriptors, key):
			im.fail(field, "a header named as one of the proxy's own descriptors (%s)", strings.Join(proxyDescriptors, ", "))
			ok = false
			continue
		}
		for i, v := range at.rt.Headers[name] {
			switch {
			case strings.HasPrefix(v, "~*"):
				im.fail(fmt.Sprintf("%s[%d]", field, i), "a regex header value is not imported: list the values")
				ok = false
			case strings.Contains(v, "*"):
				im.fail(fmt.Sprintf("%s[%d]", field, i), "a '*' in a header value is itself to Kong and a wildcard to Sluice: not imported")
				ok = false
			}
		}
		im.note("routes match header %s: run the proxy with -descriptor-headers %s=%s (values are matched as sent; Kong ignores their case)", name, key, name)
	}
	return ok
}

// proxyDescriptors are the descriptors Sluice's proxy gives every request
// itself, which no header can stand for.
var proxyDescriptors = []string{policy.DefaultIdentifierKey, "ip", "route", "method", "host"}

// headersOf returns rt's header conditions as name=value, the name in
// lower case, sorted, each once.
func headersOf(rt *route) []string {
	var hs []string
	for name, vs := range rt.Headers {
		for _, v := range vs {
			hs = append(hs, strings.ToLower(name)+"="+v)
		}
	}
	slices.Sort(hs)
	return slices.Compact(hs)
}

// hasPort reports whether Kong host h names a port (example.com:8000).
func hasPort(h string) bool {
	_, _, err := net.SplitHostPort(h)
	return err == nil
}

// hostsOf returns rt's hosts as the proxy's host descriptor names a
// request's: lower case, without a port or a trailing dot; sorted, each
// once. A wildcard (*.example.com, example.*) stays one.
func hostsOf(rt *route) []string {
	var hs []string
	for _, h := range rt.Hosts {
		hs = append(hs, reqroute.Host(h))
	}
	slices.Sort(hs)
	return slices.Compact(hs)
}

// methodsOf returns rt's methods, upper case, sorted, each once.
func methodsOf(rt *route) []string {
	var ms []string
	for _, m := range rt.Methods {
		ms = append(ms, strings.ToUpper(m))
	}
	slices.Sort(ms)
	return slices.Compact(ms)
}

// hasOwn reports whether rt has an enabled instance of plugin kind of its
// own (Kong passes over a disabled one to the service's).
func (im *importer) hasOwn(rt *route, kind string) bool {
	for _, in := range im.instances {
		if in.rt == rt && in.plugin.Name == kind && in.enabled() {
			return true
		}
	}
	return false
}

// A limit of a plugin: so many requests a window or calendar period.
type limitOf struct {
	name     string
	field    string
	limit    float64
	window   time.Duration
	calendar policy.Calendar
	algo     policy.Algorithm
}

// limits makes g's rules, one per limit of its plugin.
func (im *importer) limits(g *group) {
	in, c := g.in, &g.in.plugin.Config
	cf := in.field + ".config"
	var ls []limitOf
	by := c.LimitBy
	if in.plugin.Name == rateLimiting {
		for _, p := range []struct {
			name string
			v    *float64
			w    time.Duration
			cal  policy.Calendar
		}{{"second", c.Second, time.Second, 0}, {"minute", c.Minute, time.Minute, 0}, {"hour", c.Hour, time.Hour, 0},
			{"day", c.Day, 0, policy.CalendarDay}, {"month", c.Month, 0, policy.CalendarMonth}, {"year", c.Year, 0, policy.CalendarYear}} {
			if p.v != nil {
				ls = append(ls, limitOf{name: p.name, field: cf + "." + p.name, limit: *p.v, window: p.w, calendar: p.cal, algo: policy.FixedWindow})
			}
		}
		if len(ls) == 0 {
			im.fail(cf, "at least one of second, minute, hour, day, month or year")
		}
	} else {
		by = c.Identifier
		algo := policy.SlidingWindow
		switch c.WindowType {
		case "", "sliding":
		case "fixed":
			algo = policy.FixedWindow
		default:
			im.fail(cf+".window_type", "must be sliding or fixed")
		}
		if len(c.Limit) == 0 || len(c.Limit) != len(c.WindowSize) {
			im.fail(cf+".limit", "one limit per window_size, at least one")
		}
		for i := range min(len(c.Limit), len(c.WindowSize)) {
			w := c.WindowSize[i]
			if w <= 0 || w != math.Trunc(w) || w > policy.MaxWindow.Seconds() {
				im.fail(fmt.Sprintf("%s.window_size[%d]", cf, i), "must be a whole number of seconds, 1 to %.0f", policy.MaxWindow.Seconds())
				continue
			}
			win := time.Duration(w) * time.Second
			ls = append(ls, limitOf{name: days.Format(win), field: fmt.Sprintf("%s.limit[%d]", cf, i), limit: c.Limit[i], window: win, algo: algo})
		}
	}
	// Kong's fault_tolerant (true unless set false) lets requests through
	// while its counters' store is away: open.
	base := policy.Rule{Enabled: in.enabled(), Message: c.ErrorMessage}
	if c.FaultTolerant != nil && !*c.FaultTolerant {
		base.FailureMode = policy.FailClosed
	}
	if c.ErrorMessage == "API rate limit exceeded" { // Kong's default: Sluice's says more
		base.Message = ""
	}
	if c.ErrorCode != nil && *c.ErrorCode != 429 {
		im.note("%s: rejections are answered 429, not %.0f", in.scope(), *c.ErrorCode)
	}
	if where := cmp.Or(c.Policy, c.Strategy, "local"); where == "local" && in.enabled() {
		im.note("%s counted on each Kong node apart (policy local): behind several nodes a client could make up to that many times its limits; Sluice's deciders count together, the limits exactly", in.scope())
	}
	if c.EnforceConsumerGroups {
		im.note("%s enforces consumer groups' own limits: make each group a tier and move its members to it with overrides", in.scope())
	}
	if c.HideClientHeaders {
		im.note("%s hides its headers: run the deciders with -rate-limit-headers none to tell clients no limits", in.scope())
	}
	var sync time.Duration
	if c.SyncRate != nil && *c.SyncRate > 0 {
		sync = min(max(time.Duration(*c.SyncRate*float64(time.Second)), policy.MinSync), policy.MaxSync)
	}
	byPath := false
	switch by {
	case "", "consumer", "credential":
		base.KeyBy = []string{policy.DefaultIdentifierKey}
		im.note("limit_by %s: clients are told apart by -identity-header (the credential's header, key-auth's apikey say) on the proxy, else by address, as Kong falls back to", cmp.Or(by, "consumer"))
	case "ip":
		base.KeyBy = []string{"ip"}
	case "header":
		key := strings.ToLower(c.HeaderName)
		if key == "" {
			im.fail(cf+".header_name", "required with limit_by header")
			return
		}
		base.KeyBy = []string{key}
		im.note("limit_by header %s: run the proxy with -descriptor-headers %s=%s; requests without it share one counter (Kong counts them by address)", c.HeaderName, key, c.HeaderName)
	case "service":
		if in.svc == nil {
			im.fail(cf+".limit_by", "limit_by service on a global plugin: give each service a plugin of its own")
			return
		}
	case "path":
		if c.Path == "" || strings.HasPrefix(c.Path, "~") || strings.Contains(c.Path, "*") {
			im.fail(cf+".path", "a path (not a regex, and without '*', a wildcard to Sluice), required with limit_by path")
			return
		}
		byPath = true
	default:
		im.fail(cf+".limit_by", "%q is not imported: consumer, credential, ip, header, service or path", by)
		return
	}
	if byPath {
		// The path counts as one client; every other request in scope by
		// its address, as Kong falls back to.
		im.rules(g, ls, base, sync, "-path", []policy.Match{{Key: "route", Value: c.Path}}, nil)
		pathRules := slices.Clone(g.rules)
		base.KeyBy = []string{"ip"}
		im.rules(g, ls, base, sync, "", nil, pathRules)
		return
	}
	im.rules(g, ls, base, sync, "", nil, nil)
}

// rules adds a rule per limit to g: named scope[suffix]-limit, matching
// match, else g's paths, and replaced by the rules of replacedBy.
func (im *importer) rules(g *group, ls []limitOf, base policy.Rule, sync time.Duration, suffix string, match []policy.Match, replacedBy []int) {
	if match == nil {
		for _, p := range g.paths {
			match = append(match, policy.Match{Key: "route", Value: p + "*"})
		}
	}
	for _, m := range g.methods {
		match = append(match, policy.Match{Key: "method", Value: m})
	}
	for _, h := range g.hosts {
		match = append(match, policy.Match{Key: "host", Value: h})
	}
	for _, h := range g.headers {
		k, v, _ := strings.Cut(h, "=")
		match = append(match, policy.Match{Key: k, Value: v})
	}
	for _, l := range ls {
		if len(im.plan.Rules) == policy.MaxRulesPerTier {
			im.fail("plugins", "more than %d limits", policy.MaxRulesPerTier)
			return
		}
		r := base
		r.Name = g.in.scope() + suffix + "-" + l.name
		r.Match = match
		r.Params = policy.Params{Algorithm: l.algo, Limit: int64(l.limit), Window: l.window, Calendar: l.calendar}
		if l.limit != math.Trunc(l.limit) || l.limit < 1 {
			im.fail(l.field, "must be a whole number of requests, at least 1")
			continue
		}
		if sync > 0 {
			if l.algo == policy.FixedWindow {
				r.Sync = sync
			} else {
				im.note("%s: sync_rate applies to fixed windows; its sliding windows are counted in Redis on every request", g.in.scope())
			}
		}
		for _, o := range replacedBy {
			if strings.HasSuffix(im.plan.Rules[o].Name, "-"+l.name) {
				// the path's rule of the same window replaces this one
				im.plan.Rules[o].Replaces = append(im.plan.Rules[o].Replaces, r.Name)
			}
		}
		var pe *policy.Error
		if err := r.Validate(); errors.As(err, &pe) {
			for _, fe := range pe.Fields {
				im.fail(l.field, "%s: %s", fe.Field, fe.Description)
			}
			continue
		}
		for _, o := range im.plan.Rules {
			if o.Name == r.Name {
				im.fail(g.in.field, "makes rule %s twice: give the plugin an instance_name", r.Name)
			}
		}
		g.rules = append(g.rules, len(im.plan.Rules))
		im.plan.Rules = append(im.plan.Rules, r)
	}
}

func invalid(fields ...policy.FieldError) error {
	return &policy.Error{Code: policy.CodeInvalid, Message: "invalid Kong configuration", Fields: fields}
}
