package policy

import "time"

// What the control plane keeps besides tenants' configuration: who made a
// change, and what deciders report of themselves.

// Actor says who makes a change, for the audit log: "operator",
// "key:<key id>", or ActorRetention.
type Actor string

// ActorRetention is the actor of what retention deletes: overrides pruned
// once expired.
const ActorRetention Actor = "retention"

// DeciderStatus is a decider as the control plane last heard from it:
// when it synced, the versions it enforces and its health.
type DeciderStatus struct {
	Name         string
	LastSyncedAt time.Time
	// Versions maps tenant ids to the config version it enforces.
	Versions map[string]int64
	// Health is what it reported of itself at that sync.
	Health DeciderHealth
}

// DeciderHealth is what a decider reports of itself: its Redis breaker
// ("closed", "half-open", "open"; "" deciding in memory), failed Redis
// calls, and the decision events waiting for Kafka (on disk, in memory)
// or dropped, since it started.
type DeciderHealth struct {
	Breaker       string `json:"breaker,omitempty"`
	EngineErrors  int64  `json:"engine_errors,omitempty"`
	EventsSpooled int64  `json:"events_spooled,omitempty"`
	EventsQueued  int64  `json:"events_queued,omitempty"`
	EventsDropped int64  `json:"events_dropped,omitempty"`
	// Region is the decider's; SilentRegions those it has not heard from
	// (global rules' counts) for its silence.
	Region        string   `json:"region,omitempty"`
	SilentRegions []string `json:"silent_regions,omitempty"`
}

// VersionedTenant is a tenant and its config version.
type VersionedTenant struct {
	Tenant
	Version int64
}
