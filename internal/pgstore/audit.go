package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/policy"
)

// ListAudit returns the tenant's audit log, newest first, at most limit
// entries with ids below before (0: from the newest), only those of the
// resource resourceID unless it is "".
func (s *Store) ListAudit(ctx context.Context, tenantID string, before int64, limit int, resourceID string) ([]policy.AuditEntry, error) {
	if err := checkID(tenantID, "tenant"); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	// Actors that are keys ("key:<id>") are named by the key's name and
	// prefix, revoked or not.
	rows, err := s.db.Query(ctx, `SELECT a.id, a.actor, coalesce(nullif(k.name, '') || ' (' || k.prefix || '…)', k.prefix || '…', ''),
		a.action, a.resource, a.resource_id, a.old_value, a.new_value, coalesce(a.version, 0), a.at
		FROM audit_log a LEFT JOIN api_keys k ON k.id = CASE WHEN a.actor LIKE 'key:%' THEN substr(a.actor, 5)::uuid END
		WHERE a.tenant_id = $1 AND ($2 = 0 OR a.id < $2) AND ($4 = '' OR a.resource_id = $4)
		ORDER BY a.id DESC LIMIT $3`, tenantID, before, limit, resourceID)
	if err != nil {
		return nil, translate(err, "audit")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (policy.AuditEntry, error) {
		var a policy.AuditEntry
		return a, r.Scan(&a.ID, &a.Actor, &a.ActorName, &a.Action, &a.Resource, &a.ResourceID, &a.Old, &a.New, &a.Version, &a.At)
	})
	return out, translate(err, "audit")
}

// pruneBatch is how many rows one statement of PruneAudit or
// PruneOverrides deletes, so that pruning a long backlog never holds one
// long transaction.
const pruneBatch = 5000

// PruneAudit deletes the audit rows of every tenant written before before,
// oldest first, and returns how many went.
func (s *Store) PruneAudit(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		tag, err := s.db.Exec(ctx, `DELETE FROM audit_log WHERE id IN
			(SELECT id FROM audit_log WHERE at < $1 ORDER BY at LIMIT $2)`, before, pruneBatch)
		if err != nil {
			return total, fmt.Errorf("pgstore: prune audit: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneBatch {
			return total, nil
		}
	}
}

// DefaultOverrideRetention is how long an override is kept once it has
// expired, unless the control plane is told otherwise: long enough to be
// seen as expired in the console, short enough that a tenant's temporary
// blocks do not pile up.
const DefaultOverrideRetention = 7 * 24 * time.Hour

// PruneOverrides deletes the overrides of every tenant that expired before
// before, and returns how many went. Each tenant's go in one config
// version, at most pruneBatch a transaction, with an audit row each whose
// actor is policy.ActorRetention.
func (s *Store) PruneOverrides(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		var tenantID string
		err := s.db.QueryRow(ctx, `SELECT tenant_id::text FROM overrides WHERE expires_at < $1 LIMIT 1`, before).Scan(&tenantID)
		if errors.Is(err, pgx.ErrNoRows) {
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("pgstore: prune overrides: %w", err)
		}
		var n int
		err = s.Atomically(ctx, true, func(in *Store) error {
			return in.inTx(ctx, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, `DELETE FROM overrides WHERE id IN (SELECT id FROM overrides
					WHERE tenant_id = $1 AND expires_at < $2 LIMIT $3) RETURNING `+overrideColumns, tenantID, before, pruneBatch)
				if err != nil {
					return err
				}
				gone, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (policy.Override, error) { return scanOverride(r) })
				if err != nil {
					return err
				}
				for _, o := range gone {
					if _, err := in.bump(ctx, tx, policy.ActorRetention, change{tenantID: tenantID, action: "delete", resource: "override", resourceID: o.ID, old: o}); err != nil {
						return err
					}
				}
				n = len(gone)
				return nil
			})
		})
		total += int64(n)
		if err != nil {
			return total, fmt.Errorf("pgstore: prune overrides: %w", err)
		}
	}
}
