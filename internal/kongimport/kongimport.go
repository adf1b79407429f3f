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
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/envoyimport"
	"github.com/sluicehq/sluice/internal/policy"
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

func invalid(fields ...policy.FieldError) error {
	return &policy.Error{Code: policy.CodeInvalid, Message: "invalid Kong configuration", Fields: fields}
}
