package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/policy"
)

var kindNames = map[policy.KeyKind]string{policy.KeyAdmin: "admin", policy.KeyCheck: "check", policy.KeyViewer: "viewer"}

const keyColumns = `id::text, tenant_id::text, kind, name, prefix, hash, created_at, last_used_at, revoked_at, expires_at`

func scanKey(row pgx.Row) (policy.APIKey, error) {
	var k policy.APIKey
	var kind string
	var used, revoked, expires *time.Time
	err := row.Scan(&k.ID, &k.TenantID, &kind, &k.Name, &k.Prefix, &k.Hash, &k.CreatedAt, &used, &revoked, &expires)
	for kk, name := range kindNames {
		if name == kind {
			k.Kind = kk
		}
	}
	if used != nil {
		k.LastUsedAt = *used
	}
	if revoked != nil {
		k.RevokedAt = *revoked
	}
	if expires != nil {
		k.ExpiresAt = *expires
	}
	return k, err
}

// CreateKey makes a new key of kind for the tenant and returns its secret,
// which is not stored and cannot be shown again, with the key's record.
// Check keys change what deciders accept, so they bump the config version.
func (s *Store) CreateKey(ctx context.Context, actor policy.Actor, tenantID string, kind policy.KeyKind, name string) (string, policy.APIKey, error) {
	return s.CreateExpiringKey(ctx, actor, tenantID, kind, name, time.Time{})
}

// CreateExpiringKey is CreateKey for a key that stops working at expires
// (which must be ahead; zero: never).
func (s *Store) CreateExpiringKey(ctx context.Context, actor policy.Actor, tenantID string, kind policy.KeyKind, name string, expires time.Time) (string, policy.APIKey, error) {
	if err := checkID(tenantID, "tenant"); err != nil {
		return "", policy.APIKey{}, err
	}
	var expiresAt *time.Time
	if !expires.IsZero() {
		if !time.Now().Before(expires) {
			return "", policy.APIKey{}, &policy.Error{Code: policy.CodeInvalid, Message: "invalid key",
				Fields: []policy.FieldError{{Field: "expires_at", Description: "must be in the future"}}}
		}
		expiresAt = &expires
	}
	if _, ok := kindNames[kind]; !ok || len(name) > policy.MaxNameLen {
		return "", policy.APIKey{}, &policy.Error{Code: policy.CodeInvalid, Message: "invalid key",
			Fields: []policy.FieldError{{Field: "kind", Description: "must be admin, viewer or check, with a name of at most 100 bytes"}}}
	}
	var secret string
	var k policy.APIKey
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if secret, k, err = insertKey(ctx, tx, tenantID, kind, name, expiresAt); err != nil {
			return err
		}
		_, err = s.bump(ctx, tx, actor, change{tenantID: tenantID, action: "create", resource: "key", resourceID: k.ID,
			new: map[string]any{"kind": kindNames[kind], "name": name, "prefix": k.Prefix, "expires_at": expiresAt}})
		return err
	})
	if err != nil {
		return "", policy.APIKey{}, err
	}
	return secret, k, nil
}

// insertKey makes a new key of kind in tx, below the tenant's bound on
// live keys, and returns its secret and its record.
func insertKey(ctx context.Context, tx pgx.Tx, tenantID string, kind policy.KeyKind, name string, expiresAt *time.Time) (string, policy.APIKey, error) {
	err := belowLimit(ctx, tx, `SELECT count(*) FROM api_keys WHERE tenant_id = $1 AND revoked_at IS NULL
		AND (expires_at IS NULL OR expires_at > now())`, tenantID, policy.MaxLiveKeys, "live keys")
	if err != nil {
		return "", policy.APIKey{}, err
	}
	secret, prefix := policy.NewKeySecret(kind)
	hash := policy.HashKey(secret)
	k, err := scanKey(tx.QueryRow(ctx, `INSERT INTO api_keys (tenant_id, kind, name, prefix, hash, expires_at) VALUES ($1, $2, $3, $4, $5, $6)
		RETURNING `+keyColumns, tenantID, kindNames[kind], name, prefix, hash[:], expiresAt))
	if err != nil {
		return "", policy.APIKey{}, translate(err, "key")
	}
	return secret, k, nil
}

// MaxKeyGrace bounds how long a rotated key keeps working (RotateKey).
const MaxKeyGrace = 30 * 24 * time.Hour

// RotateKey replaces the live key keyID with a new one of its kind, name
// and expiry, and returns the new one's secret and record, and the old
// one's record: the old key keeps working for grace (0: revoked at once;
// never past its own expiry), so that its users can move to the new
// secret without a refused call. One transaction, one audit entry and,
// as with every key, one config version. A revoked or expired key is not
// rotated (FailedPrecondition): create a new one.
func (s *Store) RotateKey(ctx context.Context, actor policy.Actor, tenantID, keyID string, grace time.Duration) (string, policy.APIKey, policy.APIKey, error) {
	if err := checkIDs(tenantID, "tenant", keyID, "key"); err != nil {
		return "", policy.APIKey{}, policy.APIKey{}, err
	}
	if grace < 0 || grace > MaxKeyGrace {
		return "", policy.APIKey{}, policy.APIKey{}, &policy.Error{Code: policy.CodeInvalid, Message: "invalid rotation",
			Fields: []policy.FieldError{{Field: "grace", Description: fmt.Sprintf("must be between 0 (revoke at once) and %v", MaxKeyGrace)}}}
	}
	var secret string
	var old, k policy.APIKey
	_, err := s.mutate(ctx, actor, func(tx pgx.Tx) (change, error) {
		var err error
		old, err = scanKey(tx.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE id = $1 AND tenant_id = $2 FOR UPDATE`, keyID, tenantID))
		if err != nil {
			return change{}, translate(err, "key")
		}
		if !old.RevokedAt.IsZero() || !old.ExpiresAt.IsZero() && !old.ExpiresAt.After(time.Now()) {
			return change{}, policy.Errorf(policy.CodeFailedPrecondition, "key %s is revoked or expired: create a new one", old.Prefix)
		}
		var expiresAt *time.Time
		if !old.ExpiresAt.IsZero() {
			expiresAt = &old.ExpiresAt
		}
		if secret, k, err = insertKey(ctx, tx, tenantID, old.Kind, old.Name, expiresAt); err != nil {
			return change{}, err
		}
		if grace == 0 {
			old, err = scanKey(tx.QueryRow(ctx, `UPDATE api_keys SET revoked_at = now() WHERE id = $1 RETURNING `+keyColumns, keyID))
		} else {
			old, err = scanKey(tx.QueryRow(ctx, `UPDATE api_keys SET expires_at = least(coalesce(expires_at, 'infinity'), now() + $2 * interval '1 microsecond')
				WHERE id = $1 RETURNING `+keyColumns, keyID, grace.Microseconds()))
		}
		if err != nil {
			return change{}, translate(err, "key")
		}
		return change{tenantID: tenantID, action: "rotate", resource: "key", resourceID: keyID,
			new: map[string]any{"replaced_by": k.ID, "prefix": k.Prefix, "grace": grace.String()}}, nil
	})
	if err != nil {
		return "", policy.APIKey{}, policy.APIKey{}, err
	}
	return secret, k, old, nil
}

// ListKeys returns all the tenant's keys (never their secrets), revoked
// ones too, oldest first: PageKeys over every page.
func (s *Store) ListKeys(ctx context.Context, tenantID string) ([]policy.APIKey, error) {
	return allPages(func(after *policy.KeyCursor) ([]policy.APIKey, *policy.KeyCursor, error) {
		return s.PageKeys(ctx, tenantID, true, after, 1000)
	})
}

// PageKeys returns up to limit (0: 100; more than 1000: 1000) of the
// tenant's keys (never their secrets), oldest first, revoked ones only
// with revoked, from just after the cursor (nil: the first), and the
// cursor of the page's end when more follow (nil on the last page).
func (s *Store) PageKeys(ctx context.Context, tenantID string, revoked bool, after *policy.KeyCursor, limit int) ([]policy.APIKey, *policy.KeyCursor, error) {
	if err := checkID(tenantID, "tenant"); err != nil {
		return nil, nil, err
	}
	limit = pageLimit(limit)
	var afterAt *time.Time
	var afterID *string
	if after != nil {
		if !uuidRE.MatchString(after.ID) {
			return nil, nil, policy.ErrPageToken
		}
		afterAt, afterID = &after.CreatedAt, &after.ID
	}
	rows, err := s.db.Query(ctx, `SELECT `+keyColumns+` FROM api_keys
		WHERE tenant_id = $1 AND ($2 OR revoked_at IS NULL)
		AND ($3::timestamptz IS NULL OR (created_at, id) > ($3, $4::uuid))
		ORDER BY created_at, id LIMIT $5`, tenantID, revoked, afterAt, afterID, limit+1)
	if err != nil {
		return nil, nil, translate(err, "key")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (policy.APIKey, error) { return scanKey(r) })
	out, more := cutPage(out, limit)
	if err != nil || !more {
		return out, nil, translate(err, "key")
	}
	last := out[len(out)-1]
	return out, &policy.KeyCursor{CreatedAt: last.CreatedAt, ID: last.ID}, nil
}

// RevokeKey revokes a key at once. Revoking it again keeps the first
// revocation time.
func (s *Store) RevokeKey(ctx context.Context, actor policy.Actor, tenantID, keyID string) (int64, error) {
	if err := checkIDs(tenantID, "tenant", keyID, "key"); err != nil {
		return 0, err
	}
	version, err := s.mutate(ctx, actor, func(tx pgx.Tx) (change, error) {
		k, err := scanKey(tx.QueryRow(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
			WHERE id = $1 AND tenant_id = $2 RETURNING `+keyColumns, keyID, tenantID))
		if err != nil {
			return change{}, translate(err, "key")
		}
		return change{tenantID: tenantID, action: "revoke", resource: "key", resourceID: keyID,
			new: map[string]string{"prefix": k.Prefix}}, nil
	})
	return version, err
}

// KeyByHash returns the unrevoked key whose secret hashes to hash, and
// records the use of an admin or viewer key, unless recorded in the last 10
// seconds: a console makes several calls a refresh, and a row version each
// would only bloat the table. (A check key is used where a decider
// accepts it: TouchCheckKeys.) An unknown or revoked key is
// Unauthenticated.
func (s *Store) KeyByHash(ctx context.Context, hash [32]byte) (policy.APIKey, error) {
	// The statement's snapshot cannot see its own update: the last use
	// returned is now() when it touched the row.
	k, err := scanKey(s.db.QueryRow(ctx, `WITH k AS (
			SELECT id FROM api_keys WHERE hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
		), touched AS (
			UPDATE api_keys a SET last_used_at = now() FROM k WHERE a.id = k.id AND a.kind IN ('admin', 'viewer')
				AND (a.last_used_at IS NULL OR a.last_used_at < now() - interval '10 seconds')
			RETURNING a.id
		)
		SELECT id::text, tenant_id::text, kind, name, prefix, hash, created_at,
			CASE WHEN EXISTS (SELECT FROM touched) THEN now() ELSE last_used_at END, revoked_at, expires_at
		FROM api_keys WHERE id = (SELECT id FROM k)`, hash[:]))
	if err != nil {
		if policy.ErrorCode(translate(err, "key")) == policy.CodeNotFound {
			return k, policy.Errorf(policy.CodeUnauthenticated, "invalid, revoked or expired key")
		}
		return k, translate(err, "key")
	}
	return k, nil
}

// MaxTouchedKeys bounds the hashes of one TouchCheckKeys call.
const MaxTouchedKeys = 10_000

// TouchCheckKeys records the use now of the live check keys whose secrets
// hash to hashes (what deciders accepted since they last reported);
// unknown, revoked and admin keys are left alone, and so are keys recorded
// in the last 10 seconds: every decider reports a busy key each pull, and
// one row update for all of them spares the table. Hashes past
// MaxTouchedKeys, and any not 32 bytes long, are ignored.
func (s *Store) TouchCheckKeys(ctx context.Context, hashes [][]byte) error {
	valid := make([][]byte, 0, min(len(hashes), MaxTouchedKeys))
	for _, h := range hashes[:min(len(hashes), MaxTouchedKeys)] {
		if len(h) == 32 {
			valid = append(valid, h)
		}
	}
	if len(valid) == 0 {
		return nil
	}
	_, err := s.db.Exec(ctx, `UPDATE api_keys SET last_used_at = now()
		WHERE hash = ANY($1) AND kind = 'check' AND revoked_at IS NULL
			AND (last_used_at IS NULL OR last_used_at < now() - interval '10 seconds')`, valid)
	if err != nil {
		return fmt.Errorf("pgstore: touch check keys: %w", err)
	}
	return nil
}
