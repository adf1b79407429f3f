package dataplane

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/events"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/regions"
)

// The decider's metrics beyond its decisions (decision.NewMetrics): the
// config it enforces, its Redis engine's pipelines and local counting, and
// its event publisher. Each reads the component's own counters when
// scraped; none costs a decision anything.

var versionDesc = prometheus.NewDesc("sluice_config_version", "Config version enforced for a tenant.", []string{"tenant"}, nil)

// versionCollector exports versions(): the config version enforced for
// each tenant.
type versionCollector func() map[string]int64

func (versionCollector) Describe(ch chan<- *prometheus.Desc) { ch <- versionDesc }

func (c versionCollector) Collect(ch chan<- prometheus.Metric) {
	for tenant, v := range c() {
		ch <- prometheus.MustNewConstMetric(versionDesc, prometheus.GaugeValue, float64(v), tenant)
	}
}

// ConfigSync is what a decider's config syncer (follower.Follower) tells.
type ConfigSync interface {
	// Versions are the config versions enforced, by tenant.
	Versions() map[string]int64
	// Refused counts the snapshots that did not compile.
	Refused() int64
}

// configMetrics export s: sluice_config_version by tenant, and
// sluice_config_refused_total, the snapshots refused (to alert on: the
// decider keeps enforcing the tenant's previous config).
func configMetrics(s ConfigSync) []prometheus.Collector {
	return []prometheus.Collector{versionCollector(s.Versions),
		counter("sluice_config_refused_total", "Tenant config snapshots that did not compile; the previous config stays in force.", s.Refused)}
}

func counter(name, help string, v func() int64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v()) })
}

func gauge(name, help string, v func() int64) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(v()) })
}

// redisEngineMetrics are a Redis engine's counters: its pipelines, and its
// local counting (rules with a sync interval).
func redisEngineMetrics(e *redisengine.Engine) []prometheus.Collector {
	return []prometheus.Collector{
		counter("sluice_redis_pipelines_total", "Pipelines of decisions sent to Redis (with -redis-batch).",
			func() int64 { p, _ := e.Pipelines(); return p }),
		counter("sluice_redis_pipelined_calls_total", "Decisions' calls those pipelines carried; per pipeline, the mean batch.",
			func() int64 { _, c := e.Pipelines(); return c }),
		counter("sluice_local_decisions_total", "Decisions with a rule counted locally (a rule's sync interval).",
			func() int64 { return e.LocalStats().Decisions }),
		counter("sluice_local_syncs_total", "Reconciliations of local counts with Redis that succeeded.",
			func() int64 { return e.LocalStats().Syncs }),
		counter("sluice_local_sync_errors_total", "Reconciliations that failed; their counts are sent again.",
			func() int64 { return e.LocalStats().SyncErrors }),
		gauge("sluice_local_keys", "Keys counted locally now.", func() int64 { return int64(e.LocalStats().Keys) }),
		gauge("sluice_redis_evicting_nodes", "Redis nodes (masters) with a maxmemory and a policy that evicts keys when full, counters among them: their clients would start afresh. Checked every 5 minutes; 0 where Redis refuses CONFIG.",
			e.EvictingNodes),
		counter("sluice_redis_read_spins_total", "Reads of Redis's replies that polled for them at low load (-redis-spin) and got them.",
			func() int64 { s, _ := e.Spins(); return s }),
		counter("sluice_redis_read_spins_missed_total", "Reads that polled out their -redis-spin and then slept; spinning backs off after each.",
			func() int64 { _, m := e.Spins(); return m }),
	}
}

// replicationMetrics are a decider's part in several regions: the regions
// it is not hearing, and what it has published.
func replicationMetrics(r *regions.Replicator) []prometheus.Collector {
	return []prometheus.Collector{
		gauge("sluice_global_silent_regions", "Regions whose global counts this decider has not heard for -global-silence: a partition, as it sees it.",
			func() int64 { return int64(len(r.Table().Silent(time.Now()))) }),
		counter("sluice_global_published_bytes_total", "Bytes of global counts this decider has written to its region's Kafka.", r.SentBytes),
	}
}

// publisherMetrics are an event publisher's counters: what Kafka took,
// what waits for it (in memory and in the spool), what failed and what was
// dropped.
func publisherMetrics(p *events.Publisher) []prometheus.Collector {
	return []prometheus.Collector{
		counter("sluice_events_sent_total", "Messages (rejection events and counter deltas) Kafka took.",
			func() int64 { return p.Stats().Sent }),
		counter("sluice_events_dropped_total", "Rejection events dropped at the buffer's bound while Kafka was slow or down; reported to analytics in the next delta.",
			func() int64 { return p.Stats().Dropped }),
		counter("sluice_events_write_errors_total", "Writes to Kafka that failed; their events are kept and sent again.",
			func() int64 { return p.Stats().WriteErrors }),
		gauge("sluice_events_queued", "Rejection events waiting in the buffer.", func() int64 { return int64(p.Stats().Queued) }),
		gauge("sluice_events_spooled", "Events (rejections and deltas) waiting on disk for Kafka.", func() int64 { return p.Stats().Spooled }),
		gauge("sluice_events_spool_bytes", "Bytes of the events spool.", func() int64 { return p.Stats().SpoolBytes }),
		counter("sluice_events_spool_corrupt_total", "Spooled events that could not be read back and were skipped.",
			func() int64 { return p.Stats().SpoolCorrupt }),
	}
}
