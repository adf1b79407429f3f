package kongimport

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/days"
	"github.com/sluicehq/sluice/internal/policy"
)

// A plugin's limits, and the rules made of them.

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
