package kongimport

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/policy"
	reqroute "github.com/sluicehq/sluice/internal/route"
)

// Which routes meet which, as Kong's router ranks them: paths, methods,
// hosts and headers.

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
