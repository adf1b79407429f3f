package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Decider is a decider as it last synced.
type Decider struct {
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
}

// MaxDeciderName bounds a decider's name.
const MaxDeciderName = 200

// RecordDecider notes that the decider name synced to versions. Deciders
// not seen for a week are forgotten.
func (s *Store) RecordDecider(ctx context.Context, name string, versions map[string]int64, health DeciderHealth) error {
	if name == "" || len(name) > MaxDeciderName {
		return nil // unnamed (or absurd) deciders are not listed
	}
	batch := &pgx.Batch{}
	batch.Queue(`INSERT INTO deciders (name, last_synced_at, versions, health) VALUES ($1, now(), $2, $3)
		ON CONFLICT (name) DO UPDATE SET last_synced_at = now(), versions = excluded.versions, health = excluded.health`, name, versions, health)
	batch.Queue(`DELETE FROM deciders WHERE last_synced_at < now() - interval '7 days'`)
	if err := s.db.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("pgstore: record decider: %w", err)
	}
	return nil
}

// ListDeciders returns the deciders seen in the last 24 hours, most
// recently synced first.
func (s *Store) ListDeciders(ctx context.Context) ([]Decider, error) {
	rows, err := s.db.Query(ctx, `SELECT name, last_synced_at, versions, health FROM deciders
		WHERE last_synced_at > now() - interval '24 hours' ORDER BY last_synced_at DESC, name`)
	if err != nil {
		return nil, translate(err, "decider")
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (d Decider, err error) {
		err = row.Scan(&d.Name, &d.LastSyncedAt, &d.Versions, &d.Health)
		return d, err
	})
}
