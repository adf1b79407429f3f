package decision

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/policy"
)

// series keeps the counters every decision increments, by what names
// them: CounterVec.WithLabelValues checks, hashes and looks up its labels
// on each call, which costs a decision more than the increment. A key is
// a configuration, a rule and a tier, never a client, so series is bounded
// by the configurations in use; forget empties it at each change.
type series struct {
	mu  sync.RWMutex
	m   map[seriesKey]prometheus.Counter
	gen uint64 // forgets so far
}

// maxKept bounds series: past it, it starts again.
const maxKept = 1 << 16

// seriesKey names one counter: kind's, of configuration c, and of rule
// in tier for the per-rule kinds (rule nil: the callers' own limits).
type seriesKey struct {
	c    *decide.Compiled
	rule *policy.Rule
	tier string
	kind seriesKind
}

// seriesKind is a counter vector and an outcome.
type seriesKind uint8

const (
	decisionsAllowed seriesKind = iota
	decisionsRejected
	decisionsPeek
	decisionsError
	ruleAllowed
	ruleRejected
	ruleShadowRejected
	ruleNearLimit
)

var kindOutcomes = [...]string{decisionsAllowed: "allowed", decisionsRejected: "rejected", decisionsPeek: "peek", decisionsError: "error",
	ruleAllowed: "allowed", ruleRejected: "rejected", ruleShadowRejected: "shadow_rejected"}

// counter returns k's counter of m.
func (s *series) counter(m *Metrics, k seriesKey) prometheus.Counter {
	s.mu.RLock()
	c, ok := s.m[k]
	gen := s.gen
	s.mu.RUnlock()
	if ok {
		return c
	}
	return s.add(m, k, gen)
}

// add makes k's series and keeps it, unless a forget came since gen: the
// series made may be one that forget dropped.
func (s *series) add(m *Metrics, k seriesKey, gen uint64) prometheus.Counter {
	tenant := k.c.Tenant.Slug
	name := "(request limit)" // one series for all callers' own limits, however they vary
	if k.rule != nil {
		name = k.rule.Name
	}
	var c prometheus.Counter
	switch {
	case k.kind <= decisionsError:
		c = m.decisions.WithLabelValues(tenant, kindOutcomes[k.kind])
	case k.kind == ruleNearLimit:
		c = m.nearLimit.WithLabelValues(tenant, k.tier, name)
	default:
		c = m.rules.WithLabelValues(tenant, k.tier, name, kindOutcomes[k.kind])
	}
	s.mu.Lock()
	if s.m == nil {
		s.m = map[seriesKey]prometheus.Counter{}
	}
	if s.gen == gen {
		if len(s.m) >= maxKept { // rules made per call, say: never grow for good
			clear(s.m)
		}
		s.m[k] = c
	}
	s.mu.Unlock()
	return c
}

// forget drops every kept counter. Call it after the vectors dropped
// series: a kept counter of one would count in vain.
func (s *series) forget() {
	s.mu.Lock()
	clear(s.m)
	s.gen++
	s.mu.Unlock()
}
