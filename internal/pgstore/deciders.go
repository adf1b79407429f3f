package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicehq/sluice/internal/policy"
)

// MaxDeciderName bounds a decider's name.
const MaxDeciderName = 200

// RecordDecider notes that the decider name synced to versions. Deciders
// not seen for a week are forgotten.
func (s *Store) RecordDecider(ctx context.Context, name string, versions map[string]int64, health policy.DeciderHealth) error {
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
func (s *Store) ListDeciders(ctx context.Context) ([]policy.DeciderStatus, error) {
	rows, err := s.db.Query(ctx, `SELECT name, last_synced_at, versions, health FROM deciders
		WHERE last_synced_at > now() - interval '24 hours' ORDER BY last_synced_at DESC, name`)
	if err != nil {
		return nil, translate(err, "decider")
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (d policy.DeciderStatus, err error) {
		err = row.Scan(&d.Name, &d.LastSyncedAt, &d.Versions, &d.Health)
		return d, err
	})
}

// LiveDeciders counts the deciders that synced within the last window:
// those enforcing now, for each one's share of a limit it enforces alone.
func (s *Store) LiveDeciders(ctx context.Context, window time.Duration) (int, error) {
	var n int
	err := s.db.QueryRow(ctx, `SELECT count(*) FROM deciders WHERE last_synced_at > now() - $1::interval`, window).Scan(&n)
	if err != nil {
		return 0, translate(err, "decider")
	}
	return n, nil
}
