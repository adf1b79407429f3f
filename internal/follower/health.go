package follower

import (
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/events"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
)

// Health is what a decider reports of itself with each pull
// (Config.HealthFunc is Report), gathered from its parts as they are
// made: the config sync starts before them. Safe for concurrent use; the
// zero value reports nothing.
type Health struct {
	decider atomic.Pointer[decide.Decider]
	redis   atomic.Bool
	events  atomic.Pointer[events.Publisher]
	region  atomic.Pointer[regionHealth]
}

// regionHealth is the decider's region, and the regions it has not heard
// from.
type regionHealth struct {
	name   string
	silent func() []string
}

// SetRegion names the decider's region, and what says which regions it
// has not heard from (nil: none).
func (h *Health) SetRegion(name string, silent func() []string) {
	h.region.Store(&regionHealth{name, silent})
}

// SetDecider names the decider, and whether it decides on Redis (its
// breaker is then reported).
func (h *Health) SetDecider(d *decide.Decider, redis bool) {
	h.redis.Store(redis)
	h.decider.Store(d)
}

// SetEvents names the event publisher.
func (h *Health) SetEvents(p *events.Publisher) { h.events.Store(p) }

// Report is the health as it stands.
func (h *Health) Report() *sluicev1.DeciderHealth {
	out := &sluicev1.DeciderHealth{}
	if d := h.decider.Load(); d != nil {
		if h.redis.Load() {
			out.Breaker = d.BreakerState()
		}
		out.EngineErrors = d.EngineErrors()
	}
	if r := h.region.Load(); r != nil {
		out.Region = r.name
		if r.silent != nil {
			out.SilentRegions = r.silent()
		}
	}
	if p := h.events.Load(); p != nil {
		st := p.Stats()
		out.EventsSpooled, out.EventsQueued, out.EventsDropped = st.Spooled, int64(st.Queued), st.Dropped
	}
	return out
}
