package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/policy"
)

// Snapshot returns the tenant's whole configuration at one version, read in
// one repeatable-read transaction, with its live check keys and overrides
// (those expired already left out: they apply to nothing, and a tenant's
// expired overrides are not bounded as its live ones are).
func (s *Store) Snapshot(ctx context.Context, tenantID string) (*policy.Snapshot, []policy.CheckKey, error) {
	if err := checkID(tenantID, "tenant"); err != nil {
		return nil, nil, err
	}
	var snap policy.Snapshot
	var keys []policy.CheckKey
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		row := tx.QueryRow(ctx, `SELECT `+tenantColumns+`, config_stamp FROM tenants WHERE id = $1`, tenantID)
		snap.Tenant, snap.Version, err = scanTenant(withStamp{row, &snap.Stamp})
		if err != nil {
			return translate(err, "tenant")
		}
		if snap.Tiers, err = listTiers(ctx, tx, tenantID); err != nil {
			return err
		}
		if snap.Overrides, err = listOverrides(ctx, tx, tenantID, true); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT hash, expires_at FROM api_keys WHERE tenant_id = $1 AND kind = 'check'
			AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`, tenantID)
		if err != nil {
			return translate(err, "key")
		}
		keys, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (policy.CheckKey, error) {
			var h []byte
			var expires *time.Time
			var out policy.CheckKey
			if err := r.Scan(&h, &expires); err != nil {
				return out, err
			}
			if len(h) != len(out.Hash) {
				return out, fmt.Errorf("key hash of %d bytes", len(h))
			}
			copy(out.Hash[:], h)
			if expires != nil {
				out.ExpiresAt = *expires
			}
			return out, nil
		})
		return translate(err, "key")
	})
	if err != nil {
		return nil, nil, err
	}
	return &snap, keys, nil
}

// withStamp is a row of tenantColumns and then config_stamp, which it
// scans into stamp.
type withStamp struct {
	pgx.Row
	stamp *int64
}

func (r withStamp) Scan(dest ...any) error { return r.Row.Scan(append(dest, r.stamp)...) }
